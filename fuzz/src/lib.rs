//! Fuzz checks for gorge-webhook (docs/fuzzing.md). Each target is a
//! function from the fuzzer's raw bytes to a verdict: it returns when every
//! property holds and panics when one fails. The libFuzzer binaries in
//! `fuzz/fuzz_targets/` call these functions, and so does this crate's
//! replay test (`tests/it`), which runs the committed corpus and
//! regression inputs plus pseudo-random inputs under plain `cargo test`.
//!
//! The daemon's diagnostics handler and configuration come from the
//! daemon's library (`webhook_daemon`), so the fuzzer runs the daemon's own
//! code.

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
