//! Summaries, their rendering and comparison over arbitrary traces. The body is `fuzz_bodies::summary`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_bodies::summary(data));
