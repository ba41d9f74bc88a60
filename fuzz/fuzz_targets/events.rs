//! The Events payload decoder over arbitrary bytes: it must return errors, never panic or
//! overflow, and what it decodes must encode back to the same records.

#![no_main]

use libfuzzer_sys::fuzz_target;
use trace_file::record::Comm;
use trace_file::{Event, EventChunkDecoder, EventChunkEncoder, Record};

/// A name as the encoder writes it: up to its first NUL.
fn norm(c: Comm) -> Comm {
    let mut out = [0u8; 16];
    let n = c.0.iter().position(|&b| b == 0).unwrap_or(16);
    out[..n].copy_from_slice(&c.0[..n]);
    Comm(out)
}

fn normalize(e: Event) -> Event {
    match e {
        Event::NewTask {
            child_tid,
            child_tgid,
            comm,
        } => Event::NewTask {
            child_tid,
            child_tgid,
            comm: norm(comm),
        },
        Event::Rename { comm } => Event::Rename { comm: norm(comm) },
        Event::Exec { comm } => Event::Exec { comm: norm(comm) },
        e => e,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(d) = EventChunkDecoder::new(data, 0) else {
        return;
    };
    assert!(d.remaining() as usize <= data.len() / 4);
    let cpu = d.cpu();
    let mut records: Vec<Record> = Vec::new();
    for r in d {
        match r {
            Ok(r) => {
                assert!(r.event.kind_index() < Event::KINDS);
                records.push(r);
            }
            Err(e) => {
                assert!(!e.to_string().contains('\n'));
                return;
            }
        }
    }
    let mut enc = EventChunkEncoder::new(cpu);
    for r in &records {
        enc.push(r.ts, r.tid, &r.event);
    }
    let payload = enc.finish();
    let back: Vec<Record> = EventChunkDecoder::new(&payload, 0)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(back.len(), records.len());
    for (a, b) in back.iter().zip(&records) {
        assert_eq!((a.ts, a.tid, a.cpu), (b.ts, b.tid, b.cpu));
        assert_eq!(a.event, normalize(b.event));
    }
});
