//! Every JSON metadata chunk type over arbitrary bytes: decoding returns errors, never
//! panics, and what decodes encodes back to the same value.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde::{de::DeserializeOwned, Serialize};
use trace_file::{
    Chunk, ChunkKind, LostCounts, Probe, ProcessInfo, StatWindow, ThreadInfo, TraceHeader, Trailer,
};

fn check<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(c: &Chunk) {
    match c.meta::<T>() {
        Ok(v) => {
            let json = serde_json::to_vec(&v).unwrap();
            let again = Chunk {
                kind: c.kind,
                offset: c.offset,
                payload: json,
            };
            assert_eq!(again.meta::<T>().unwrap(), v);
        }
        Err(e) => assert!(!e.to_string().contains('\n')),
    }
}

fuzz_target!(|data: &[u8]| {
    let c = Chunk {
        kind: ChunkKind::Header,
        offset: 12,
        payload: data.to_vec(),
    };
    check::<TraceHeader>(&c);
    check::<ProcessInfo>(&c);
    check::<Vec<ThreadInfo>>(&c);
    check::<Vec<Probe>>(&c);
    check::<LostCounts>(&c);
    check::<Trailer>(&c);
    check::<StatWindow>(&c);
});
