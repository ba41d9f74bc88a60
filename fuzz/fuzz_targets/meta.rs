//! Every JSON metadata chunk type over arbitrary bytes. The body is `fuzz_bodies::meta`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_bodies::meta(data));
