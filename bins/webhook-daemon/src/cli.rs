//! The daemon's command line as clap defines it: no arguments runs the
//! daemon, `demo` runs the demonstration, `completions` and `man` print
//! what shells and `man` read. Parsing only; the settings themselves come
//! from the environment (`webhook_daemon::config`), whose registry the
//! help text lists.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use clap_complete::Shell;

/// Delivers Phorge's queued Herald webhook requests, as Phorge's own
/// worker would: configured from the environment (listed below), with no
/// arguments.
#[derive(Debug, Parser)]
#[command(name = "webhook-daemon", version)]
pub struct Cli {
    /// Something other than delivering.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands; without one the daemon delivers.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// A self-contained demonstration on an in-memory queue (no
    /// database): deliveries, retries, a hook error and the circuit
    /// breaker against a built-in receiver; exits within a minute.
    Demo {
        /// Serve the diagnostics API and its live event stream here (a
        /// loopback address; default a free port), and wait up to 20 s
        /// for a watcher.
        #[arg(long, value_name = "ADDR", value_parser = loopback_addr)]
        listen: Option<SocketAddr>,
    },
    /// Print a completion script for SHELL to standard output.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: Shell,
    },
    /// Print the manual page (roff) to standard output, or with --dir
    /// write webhook-daemon.1 and its subcommands' pages there.
    Man {
        /// Where to write the pages.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// The demo serves its API without a token, so on loopback only.
fn loopback_addr(value: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = value
        .parse()
        .map_err(|_| format!("{value:?} is not an address such as 127.0.0.1:8170"))?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "{addr}: the demo serves its API without a token, so on loopback only"
        ));
    }
    Ok(addr)
}

/// The whole definition: the derived one with the environment's settings,
/// `NO_COLOR` and the exit codes after the options.
pub fn definition() -> clap::Command {
    Cli::command().after_help(webhook_daemon::config::environment_help())
}

/// Parses `args`; a clap error (which is also how `--help` and
/// `--version` arrive) carries what to print and the exit code.
pub fn parse<T: Into<std::ffi::OsString> + Clone>(
    args: impl IntoIterator<Item = T>,
) -> Result<Cli, clap::Error> {
    let matches = definition().try_get_matches_from(args)?;
    Cli::from_arg_matches(&matches)
}

/// Writes the completion script for `shell`.
pub fn completions(shell: Shell, out: &mut dyn std::io::Write) {
    clap_complete::generate(shell, &mut definition(), "webhook-daemon", out);
}

/// Writes the manual page to `out`, or every page into `dir`.
pub fn man(dir: Option<&std::path::Path>, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    match dir {
        Some(dir) => clap_mangen::generate_to(definition(), dir),
        None => clap_mangen::Man::new(definition()).render(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(args: &[&str]) -> Result<Cli, clap::Error> {
        parse(
            std::iter::once("webhook-daemon")
                .chain(args.iter().copied())
                .map(str::to_owned),
        )
    }

    #[test]
    fn the_definition_is_consistent() {
        definition().debug_assert();
    }

    #[test]
    fn demo_listens_on_loopback_only() {
        assert!(matches!(
            parsed(&["demo", "--listen", "127.0.0.1:8170"]).map(|cli| cli.command),
            Ok(Some(Command::Demo { listen: Some(_) }))
        ));
        let err = parsed(&["demo", "--listen", "0.0.0.0:8170"]).expect_err("not loopback");
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("loopback only"), "{err}");
    }

    #[test]
    fn help_and_version_are_not_failures() {
        for (args, kind) in [
            (&["--help"][..], clap::error::ErrorKind::DisplayHelp),
            (&["help"][..], clap::error::ErrorKind::DisplayHelp),
            (&["--version"][..], clap::error::ErrorKind::DisplayVersion),
        ] {
            let err = parsed(args).expect_err("prints");
            assert_eq!((err.kind(), err.exit_code()), (kind, 0), "{args:?}");
        }
        assert_eq!(
            parsed(&["--no-such-flag"])
                .map(|_| ())
                .map_err(|e| e.exit_code()),
            Err(2)
        );
    }

    #[test]
    fn help_ends_with_the_settings_and_exit_codes() {
        let help = definition().render_help().to_string();
        for needle in [
            "GORGE_WEBHOOK_MYSQL_HOST",
            "NO_COLOR",
            "Exit status:",
            "demo",
            "completions",
        ] {
            assert!(help.contains(needle), "{needle} missing:\n{help}");
        }
    }

    #[test]
    fn completions_and_man_page_name_the_subcommands() {
        let mut script = Vec::new();
        completions(Shell::Bash, &mut script);
        let script = String::from_utf8(script).expect("UTF-8");
        assert!(
            script.contains("demo") && script.contains("--listen"),
            "{script}"
        );
        let mut page = Vec::new();
        man(None, &mut page).expect("render");
        let page = String::from_utf8(page).expect("UTF-8");
        assert!(page.contains(".TH webhook-daemon") && page.contains("GORGE_WEBHOOK_NAMESPACE"));
    }
}
