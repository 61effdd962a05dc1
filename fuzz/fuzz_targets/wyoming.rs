//! A WyomingSession driven by fuzzer-chosen events, garbage bytes, engine events and timer ticks,
//! with every invariant checked after each step.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(violation) = speechstream_core::wyoming::check::drive(data) {
        panic!("invariant broken: {violation}");
    }
});
