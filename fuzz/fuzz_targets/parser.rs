//! Client text frames (any bytes) through the frame checks, JSON and config validation.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| speechstream_core::check::parse_any(data));
