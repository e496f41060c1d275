//! `cargo xtask prometheus`: the deployment's Prometheus files checked by
//! Prometheus' own `promtool`: the alert rules (`deploy/alerts.yml`), their
//! unit tests (`deploy/alerts.test.yml`) and the scrape job
//! (`deploy/prometheus.yml`). promtool and the server come from Debian's
//! `prometheus` package, installed with apt-get when promtool is missing
//! (as `deny` installs cargo-deny), so a fresh machine needs nothing
//! beforehand; `ci` runs this before the tests, one of which runs the
//! server against the daemon (bins/webhook-daemon/tests/it/prometheus.rs).

use crate::{apt_install, command_found, root, run};

/// The files promtool checks, relative to the workspace root.
const RULES: &str = "deploy/alerts.yml";
const RULE_TESTS: &str = "deploy/alerts.test.yml";
const SCRAPE_CONFIG: &str = "deploy/prometheus.yml";

/// Installs promtool if needed, then runs each check.
pub(crate) fn check() -> Result<(), String> {
    ensure_promtool()?;
    let root = root();
    let path = |file: &str| root.join(file).display().to_string();
    run("promtool", &["check", "rules", &path(RULES)])?;
    run("promtool", &["test", "rules", &path(RULE_TESTS)])?;
    run("promtool", &["check", "config", &path(SCRAPE_CONFIG)])
}

fn ensure_promtool() -> Result<(), String> {
    if command_found("promtool") {
        return Ok(());
    }
    eprintln!(
        "xtask: promtool is not installed; installing Debian's prometheus package (once per machine)"
    );
    apt_install(&["prometheus"])
        .map_err(|err| format!("{err}; install Prometheus (Debian: apt-get install prometheus)"))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn the_checked_files_exist() {
        for file in [RULES, RULE_TESTS, SCRAPE_CONFIG] {
            assert!(root().join(file).is_file(), "{file}");
        }
    }

    #[test]
    fn the_rule_tests_load_the_rules_beside_them() {
        let tests = std::fs::read_to_string(root().join(RULE_TESTS)).expect("readable");
        let rules = Path::new(RULES)
            .file_name()
            .and_then(|name| name.to_str())
            .expect("a file name");
        assert!(tests.contains(&format!("  - {rules}\n")), "{tests}");
    }
}
