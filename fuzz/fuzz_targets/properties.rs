//! libFuzzer target `properties`: the bytes are a stored `properties`
//! column; parse, round trip and `set_error` (`webhook_fuzz::properties`
//! states the properties).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| webhook_fuzz::properties::run(data));
