//! The daemon binary allocates with jemalloc under the settings
//! `.cargo/config.toml` builds in (`JEMALLOC_SYS_WITH_MALLOC_CONF`). A build
//! outside the workspace's cargo configuration would silently get
//! jemalloc's defaults, which measured worse than glibc at 512 calls in
//! flight (docs/performance.md, "The allocator"), so the settings are
//! checked on the real binary here and on the image by `image`.

use std::process::Command;

use crate::support::workspace;

/// The variable in `.cargo/config.toml` that carries the settings.
const SETTINGS_VARIABLE: &str = "JEMALLOC_SYS_WITH_MALLOC_CONF";

/// What jemalloc prints of its options at exit when asked to (stderr).
pub(crate) const PRINT_STATS: (&str, &str) = ("_RJEM_MALLOC_CONF", "stats_print:true");

/// The `name:value` settings `.cargo/config.toml` builds in.
fn built_in_settings() -> Vec<(String, String)> {
    let path = workspace().join(".cargo/config.toml");
    let config =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let value = config
        .lines()
        .find_map(|line| line.strip_prefix(SETTINGS_VARIABLE))
        .and_then(|rest| rest.split('"').nth(1))
        .unwrap_or_else(|| panic!("{} sets no {SETTINGS_VARIABLE}", path.display()));
    value
        .split(',')
        .map(|setting| {
            let (name, value) = setting
                .split_once(':')
                .unwrap_or_else(|| panic!("{setting:?} is not name:value"));
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

/// Checks jemalloc's printed statistics for every built-in setting, as
/// `opt.<name>: <value>`; what it saw, for the record.
pub(crate) fn assert_built_in_settings(stats: &str) -> String {
    let mut seen = Vec::new();
    for (name, value) in built_in_settings() {
        let option = format!("opt.{name}: {value}");
        assert!(
            stats
                .lines()
                .any(|line| line.trim_start().starts_with(&option)),
            "jemalloc does not run with {option}; its statistics:\n{stats}"
        );
        seen.push(option);
    }
    seen.join(", ")
}

#[test]
fn the_daemon_binary_allocates_with_the_built_in_settings() {
    let output = Command::new(env!("CARGO_BIN_EXE_webhook-daemon"))
        .arg("--version")
        .env(PRINT_STATS.0, PRINT_STATS.1)
        .output()
        .expect("run webhook-daemon --version");
    assert!(output.status.success(), "{output:?}");
    assert_built_in_settings(&String::from_utf8_lossy(&output.stderr));
}
