//! The Events payload decoder over arbitrary bytes. The body is `fuzz_bodies::events`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_bodies::events(data));
