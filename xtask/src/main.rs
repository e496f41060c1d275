//! `cargo xtask`: project chores that would otherwise be shell scripts.
//!
//! - `ci`: everything a submission must pass (fmt, clippy, promtool's
//!   checks, the whole test suite with MariaDB started when it is not
//!   running and Prometheus, libfaketime and tinyproxy installed when they are
//!   missing, the supply-chain checks and a short fuzz round).
//! - `layers`: the crate layering rules of docs/ARCHITECTURE.md, checked on
//!   the real dependency graph.
//! - `contract-test`: the diagnostics API's fixtures (`contracts/`) against
//!   the real daemon binary; `cargo test --workspace` (and so `ci`) runs
//!   them as well.
//! - `bench`: the backlog benchmark (`bins/webhook-daemon/benches/backlog/main.rs`)
//!   against the local MariaDB; its last stdout line is one JSON object.
//! - `deny`: cargo-deny's bans, licenses and sources checks (`deny.toml`),
//!   installing cargo-deny when it is missing.
//! - `fuzz`: the libFuzzer targets of `fuzz/` on the stable toolchain
//!   (docs/fuzzing.md).
//! - `prometheus`: promtool's checks of the alert rules, their unit tests
//!   and the scrape job in `deploy/`, installing promtool when it is
//!   missing.
//! - `image`: builds the container image (Docker, or podman from local
//!   bases when no engine or registry answers) and smoke-tests it against
//!   the local MariaDB (docs/operations/deploy.md, "Building the image
//!   without Docker").

mod deny;
mod dist;
#[cfg(test)]
mod doc_paths;
mod fuzz;
mod image;
mod layers;
mod mariadb;
mod prometheus;
#[cfg(test)]
mod shape;
mod test_packages;
#[cfg(test)]
mod tidy;

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("layers") => layers::check().map(|()| println!("layering rules hold")),
        Some("mariadb") => mariadb::ensure_running(),
        Some("contract-test") => contract_test(&args[1..]),
        Some("bench") => bench(&args[1..]),
        Some("deny") => deny::check(),
        Some("fuzz") => fuzz::fuzz(&args[1..]),
        Some("prometheus") => prometheus::check(),
        Some("image") => image::image(),
        Some("dist") => dist::dist(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n\
                 commands:\n  \
                 ci       fmt, clippy, promtool and the whole test suite (starts MariaDB and\n           \
                 installs Prometheus, libfaketime and tinyproxy if needed)\n  \
                 layers   check the crate layering rules\n  \
                 mariadb  start the local MariaDB if it is not running\n  \
                 contract-test  run contracts/api/*.json against the real daemon and check\n           \
                 contracts/openapi.json (needs MariaDB; extra args go to the test binary)\n  \
                 bench    drain a seeded backlog through the release daemon and\n           \
                 compare with the claim protocol's floor (docs/performance.md);\n           \
                 options after `bench` go to the harness (`bench --help`)\n  \
                 deny     cargo-deny: banned crates, licenses, sources (installs cargo-deny)\n  \
                 fuzz     run the fuzz targets: [--seconds N] [--target NAME]... [--merge]\n           \
                 [-- LIBFUZZER_FLAGS] (docs/fuzzing.md)\n  \
                 prometheus  promtool: deploy/alerts.yml, its unit tests deploy/alerts.test.yml\n           \
                 and deploy/prometheus.yml (installs Debian's prometheus package)\n  \
                 image    build the container image and smoke-test it against MariaDB\n           \
                 (docker, else podman from local bases; installs podman, runc, debootstrap)\n  \
                 dist     the release tarball in target/dist (binaries, unit, settings file,\n           \
                 completions, man pages, install.sh); --check installs it on a clean\n           \
                 Debian root and runs the unit's command there (installs debootstrap)"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The whole check, in the order that fails fastest.
fn ci() -> Result<(), String> {
    run("cargo", &["fmt", "--all", "--", "--check"])?;
    layers::check()?;
    run(
        "cargo",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    mariadb::ensure_running()?;
    // Installs Prometheus when it is missing: the daemon's tests run a real
    // one against it.
    prometheus::check()?;
    test_packages::ensure_installed()?;
    run("cargo", &["test", "--workspace"])?;
    deny::check()?;
    // The short round: every target for its default time, from the
    // committed corpus (docs/fuzzing.md).
    fuzz::fuzz(&[])?;
    Ok(())
}

/// The backlog benchmark: a release build of the daemon and the harness,
/// run against the local MariaDB (started when it is not running).
fn bench(forwarded: &[String]) -> Result<(), String> {
    mariadb::ensure_running()?;
    let mut args = vec!["bench", "-p", "webhook-daemon", "--bench", "backlog", "--"];
    args.extend(forwarded.iter().map(String::as_str));
    run("cargo", &args)
}

/// The API contract (bins/webhook-daemon/tests/it/contracts.rs): every
/// fixture against the real binary, started per database setup.
fn contract_test(extra: &[String]) -> Result<(), String> {
    mariadb::ensure_running()?;
    let mut args = vec!["test", "-p", "webhook-daemon", "--test", "it", "contracts"];
    args.extend(extra.iter().map(String::as_str));
    run("cargo", &args)
}

/// The workspace root (xtask's parent directory).
pub(crate) fn root() -> std::path::PathBuf {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default()
}

/// Whether `command --version` starts and succeeds.
pub(crate) fn command_found(command: &str) -> bool {
    Command::new(command)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Installs Debian's `packages` with apt-get; a machine whose package
/// lists were never fetched knows no candidate, so a failed install is
/// tried once more after `apt-get update`. The tools are what the tests
/// need, not services: a unit a package installed here (Debian enables
/// and starts `prometheus.service`) is disabled and stopped again, so a
/// developer's machine runs no new server after the test command.
pub(crate) fn apt_install(packages: &[&str]) -> Result<(), String> {
    let new: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|package| !dpkg_installed(package))
        .collect();
    let mut install = vec!["install", "-y", "-q", "--no-install-recommends"];
    install.extend(packages);
    run("apt-get", &install)
        .or_else(|_| run("apt-get", &["update", "-q"]).and_then(|()| run("apt-get", &install)))?;
    for unit in new.iter().flat_map(|package| service_units(package)) {
        // Two steps: `disable` edits the unit links whether or not systemd
        // runs (a container, a chroot), where `disable --now` would fail
        // as a whole for want of a manager to stop the unit.
        let _ = run("systemctl", &["disable", "--quiet", &unit]);
        let _ = run("systemctl", &["stop", "--quiet", &unit]);
    }
    Ok(())
}

/// Whether dpkg lists `package` as installed.
pub(crate) fn dpkg_installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${db:Status-Status}", package])
        .output()
        .is_ok_and(|out| out.status.success() && out.stdout == b"installed")
}

/// The systemd service units `package` ships, by file name.
fn service_units(package: &str) -> Vec<String> {
    let Ok(listed) = Command::new("dpkg-query").args(["-L", package]).output() else {
        return Vec::new();
    };
    service_unit_names(&String::from_utf8_lossy(&listed.stdout))
}

/// The `*.service` files under a systemd unit directory in a package's
/// file list.
fn service_unit_names(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter(|path| path.contains("/systemd/system/") && path.ends_with(".service"))
        .filter_map(|path| path.rsplit('/').next())
        .map(str::to_owned)
        .collect()
}

/// Where cargo builds: `CARGO_TARGET_DIR`, else `target` under `root`.
pub(crate) fn cargo_target_dir(root: &std::path::Path) -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

/// The daemon's ignored integration tests in `module` of its test binary
/// (`image`, `install`), one at a time with their output shown, with
/// `env` added: what they test is named there.
pub(crate) fn ignored_daemon_tests(module: &str, env: &[(String, String)]) -> Result<(), String> {
    eprintln!(
        "xtask: running the {module} tests (cargo test -p webhook-daemon --test it {module})"
    );
    let mut cargo = Command::new("cargo");
    cargo
        .args([
            "test",
            "-p",
            "webhook-daemon",
            "--test",
            "it",
            &format!("{module}::"),
            "--",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(env.iter().map(|(k, v)| (k, v)));
    succeeds(&mut cargo, &format!("the {module} tests"))
}

/// Runs a command inheriting stdio; an error names the command.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<(), String> {
    eprintln!("xtask: running {program} {}", args.join(" "));
    succeeds(
        Command::new(program).args(args),
        &format!("{program} {}", args.join(" ")),
    )
}

/// Runs `command` inheriting stdio; an error says `what` failed, or that
/// it could not start.
pub(crate) fn succeeds(command: &mut Command, what: &str) -> Result<(), String> {
    let status = command
        .status()
        .map_err(|e| format!("could not start {what}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({status})"))
    }
}

#[cfg(test)]
mod tests {
    use super::service_unit_names;

    #[test]
    fn the_units_a_package_ships_are_read_from_its_file_list() {
        let listing = "/.\n/lib\n/lib/systemd/system/prometheus.service\n\
                       /usr/lib/systemd/system/other.service\n/etc/default/prometheus\n\
                       /usr/share/doc/prometheus/examples/x.service.txt\n";
        assert_eq!(
            service_unit_names(listing),
            ["prometheus.service", "other.service"]
        );
    }
}
