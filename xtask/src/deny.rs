//! `cargo xtask deny`: the supply-chain checks of `deny.toml` (banned
//! crates, licenses, sources) with cargo-deny, without network access for
//! the check itself. cargo-deny is installed with `cargo install --locked`
//! when the right version is missing, so a fresh machine needs nothing
//! beforehand; the advisories check is not run (it downloads a database).

use std::process::Command;

use crate::run;

/// The cargo-deny releases `deny.toml` is written for (its format changes
/// between minor versions).
const VERSION_PREFIX: &str = "cargo-deny 0.20.";
/// What `cargo install --version` gets: the newest 0.20.x.
const VERSION_REQ: &str = "~0.20";

/// Installs cargo-deny if needed, fetches the crates the graph names (the
/// only step that may touch the network), then checks offline.
pub(crate) fn check() -> Result<(), String> {
    ensure_installed()?;
    run("cargo", &["fetch"])?;
    run(
        "cargo",
        &["deny", "--offline", "check", "bans", "licenses", "sources"],
    )
}

fn installed_version() -> Option<String> {
    let output = Command::new("cargo")
        .args(["deny", "--version"])
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

fn ensure_installed() -> Result<(), String> {
    match installed_version() {
        Some(version) if version.starts_with(VERSION_PREFIX) => Ok(()),
        found => {
            eprintln!(
                "xtask: cargo-deny {VERSION_REQ} is not installed (found {}); installing it \
                 (a few minutes, once per machine)",
                found.as_deref().unwrap_or("none")
            );
            run(
                "cargo",
                &[
                    "install",
                    "cargo-deny",
                    "--locked",
                    "--version",
                    VERSION_REQ,
                ],
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_version_matches_the_required_one() {
        // `~0.20` installs 0.20.x, which is what the prefix accepts.
        let minor = VERSION_REQ.trim_start_matches('~');
        assert_eq!(VERSION_PREFIX, format!("cargo-deny {minor}."));
    }
}
