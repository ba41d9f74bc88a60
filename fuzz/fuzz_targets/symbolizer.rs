//! The symbolizer over arbitrary binaries, pclntabs and USDT argument specifications. The body is `fuzz_bodies::symbolizer`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_bodies::symbolizer(data));
