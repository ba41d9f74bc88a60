//! The merge and the timeline over arbitrary traces. The body is `fuzz_bodies::timeline`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_bodies::timeline(data));
