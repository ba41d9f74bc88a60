//! The chunk reader over arbitrary bytes, strict and salvaging. The body is `fuzz_bodies::container`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_bodies::container(data));
