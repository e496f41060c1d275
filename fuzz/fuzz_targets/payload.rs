//! libFuzzer target `payload`: a generated row's payload bytes against the
//! independent reference encoder (`webhook_fuzz::payload`).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| webhook_fuzz::payload::run(data));
