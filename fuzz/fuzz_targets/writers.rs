//! The Paraver, Trace Event Format, folded-stack and Parquet writers over arbitrary traces. The body is `fuzz_bodies::writers`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_bodies::writers(data));
