//! Fuzz checks for gorge-webhook (docs/fuzzing.md). Each target is a
//! function from the fuzzer's raw bytes to a verdict: it returns when every
//! property holds and panics when one fails. The libFuzzer binaries in
//! `fuzz/fuzz_targets/` call these functions, and so does this crate's
//! replay test (`tests/it`), which runs the committed corpus and
//! regression inputs plus pseudo-random inputs under plain `cargo test`.
//!
//! The daemon's diagnostics handler and configuration live in a binary
//! crate; their source files are compiled in here by path (`daemon_api`,
//! `daemon_config`), unchanged, so the fuzzer runs the daemon's own code.
//! Their unit tests belong to the daemon: this library's own test build
//! (which `cargo clippy --all-targets` makes despite `test = false`) is
//! empty, so they are not compiled here a second time.

#![cfg(not(test))]

// The daemon's modules, compiled from its source files. The ones `api`
// and `config` reach through `crate::` (`handoff`, `live`, `metrics_text`)
// sit at the root under their own names; when one of these files starts
// using another daemon module, add it here (the build error names the
// missing `crate::` path). Items the checks do not use are expected.
#[allow(dead_code)]
#[path = "../../bins/webhook-daemon/src/api.rs"]
mod daemon_api;
#[allow(dead_code)]
#[path = "../../bins/webhook-daemon/src/config.rs"]
mod daemon_config;
#[allow(dead_code)]
#[path = "../../bins/webhook-daemon/src/handoff.rs"]
mod handoff;
#[allow(dead_code)]
#[path = "../../bins/webhook-daemon/src/live.rs"]
mod live;
#[allow(dead_code)]
#[path = "../../bins/webhook-daemon/src/metrics_text.rs"]
mod metrics_text;

pub mod api;
pub mod config;
mod gen;
pub mod payload;
pub mod properties;
pub mod reference;

/// A target: the fuzzer's bytes in, a panic when a property fails.
pub type Check = fn(&[u8]);

/// Every target by name, as `fuzz/fuzz_targets/<name>.rs` and
/// `fuzz/corpus/<name>/` name it.
pub const TARGETS: &[(&str, Check)] = &[
    ("properties", properties::run),
    ("payload", payload::run),
    ("config", config::run),
    ("api", api::run),
];
