//! libFuzzer target `config`: a map of `GORGE_*` variables through every
//! parser the daemon runs at startup (`webhook_fuzz::config`).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| webhook_fuzz::config::run(data));
