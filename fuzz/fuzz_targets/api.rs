//! libFuzzer target `api`: requests to the daemon's diagnostics handler
//! over an in-memory store (`webhook_fuzz::api`).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| webhook_fuzz::api::run(data));
