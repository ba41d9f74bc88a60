use super::*;
use crate::Result;

fn all_kinds() -> Vec<Event> {
    vec![
        Event::FuncEntry { func: 7 },
        Event::FuncExit {
            func: 7,
            ret: u64::MAX,
        },
        Event::SysEnter {
            nr: 0,
            arg0: 5,
            arg2: 4096,
        },
        Event::SysExit { nr: 0, ret: -11 },
        Event::Switch {
            next_tid: 0,
            prev_state: 0x100,
        },
        Event::Wakeup {
            wakee: 42,
            target_cpu: 1,
            new: true,
        },
        Event::Wakeup {
            wakee: 42,
            target_cpu: 0,
            new: false,
        },
        Event::NewTask {
            child_tid: 43,
            child_tgid: 41,
            comm: Comm::from_str_lossy("worker-1"),
        },
        Event::Exit {
            tgid: 41,
            group_dead: true,
        },
        Event::Rename {
            comm: Comm::from_str_lossy("exactly15chars!"),
        },
        Event::Exec {
            comm: Comm::from_str_lossy(""),
        },
        Event::Usdt {
            probe: 3,
            nargs: 3,
            args: [u64::MAX, 0, 42, 0, 0, 0],
        },
        Event::GoEntry {
            func: 9,
            g: 0xc000_0012_3400,
            height: 0x7f8,
        },
        Event::GoStatus {
            g: 0xc000_0012_3400,
            old: 4,
            new: 0x1001,
        },
        Event::GoExit {
            func: 9,
            ret: 7,
            g: 0xc000_0012_3400,
            height: 0x7f8,
        },
        Event::FrameEntry {
            func: 4,
            sp: 0x7ffd_1234_5678,
            switching: true,
        },
        Event::FrameExit {
            func: 4,
            sp: 0x7ffd_1234_5678,
            ret: Some(u64::MAX),
        },
        Event::FrameExit {
            func: 4,
            sp: 0x7ffd_1234_5678,
            ret: None,
        },
    ]
}

/// Every kind of the programs' table has an event, decoded from its ring record, whose
/// code is the kind's number and whose name is the table's: the three places that
/// know the kinds (programs, recorder, file) agree.
#[test]
fn ring_records_decode_to_events_of_the_same_kind() {
    use abi::*;
    fn bytes<T>(r: &T) -> Vec<u8> {
        // SAFETY: plain #[repr(C)] records without padding (checked by tracer-abi).
        unsafe { std::slice::from_raw_parts((r as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
    }
    let h = |kind| Header {
        ts: 77,
        tid: 5,
        kind,
        _pad: 0,
    };
    let comm = [b'x'; 16];
    let records = [
        bytes(&FuncEntry {
            h: h(kind::FUNC_ENTRY),
            func: 1,
            _pad: 0,
        }),
        bytes(&FuncExit {
            h: h(kind::FUNC_EXIT),
            func: 1,
            _pad: 0,
            ret: 2,
        }),
        bytes(&SysEnter {
            h: h(kind::SYS_ENTER),
            nr: 0,
            _pad: 0,
            arg0: 3,
            arg2: 4,
        }),
        bytes(&SysExit {
            h: h(kind::SYS_EXIT),
            nr: 0,
            _pad: 0,
            ret: -1,
        }),
        bytes(&Switch {
            h: h(kind::SWITCH),
            next_tid: 6,
            prev_state: 1,
        }),
        bytes(&Wakeup {
            h: h(kind::WAKEUP),
            wakee: 6,
            target_cpu: 1,
        }),
        bytes(&Wakeup {
            h: h(kind::WAKEUP_NEW),
            wakee: 6,
            target_cpu: 1,
        }),
        bytes(&NewTask {
            h: h(kind::NEW_TASK),
            child_tid: 8,
            child_tgid: 8,
            comm,
        }),
        bytes(&Exit {
            h: h(kind::EXIT),
            tgid: 5,
            group_dead: 1,
        }),
        bytes(&Rename {
            h: h(kind::RENAME),
            comm,
        }),
        bytes(&Rename {
            h: h(kind::EXEC),
            comm,
        }),
        bytes(&Usdt {
            h: h(kind::USDT),
            probe: 2,
            nargs: 2,
            args: [1, 2, 0, 0, 0, 0],
        }),
        bytes(&GoEntry {
            h: h(kind::GO_ENTRY),
            func: 1,
            height: 64,
            g: 9,
        }),
        bytes(&GoExit {
            h: h(kind::GO_EXIT),
            func: 1,
            height: 64,
            ret: 0,
            g: 9,
        }),
        bytes(&Sample {
            h: h(kind::SAMPLE),
            stack: 3,
            _pad: 0,
            period: 10_101_010,
        }),
        bytes(&Sample {
            h: h(kind::BLOCK_STACK),
            stack: 4,
            _pad: 0,
            period: 0,
        }),
        bytes(&FrameEntry {
            h: h(kind::FRAME_ENTRY),
            func: 2,
            switching: 0,
            sp: 0x7ffd_0000_0008,
        }),
        bytes(&FrameExit {
            h: h(kind::FRAME_EXIT),
            func: 2,
            tail: 1,
            sp: 0x7ffd_0000_0008,
            ret: 0,
        }),
        bytes(&GoStatus {
            h: h(kind::GO_STATUS),
            old: 4,
            new: 0x1001,
            g: 0xc000_0012_3400,
        }),
    ];
    assert_eq!(records.len(), kind::COUNT);
    let mut enc = EventChunkEncoder::new(0);
    for (i, r) in records.iter().enumerate() {
        let (ts, tid, e) = Event::from_ring(r).unwrap();
        assert_eq!((ts, tid), (77, 5));
        assert_eq!(e.kind_index(), i, "{e:?}");
        assert_eq!(e.name(), kind::NAMES[i]);
        enc.push(ts, tid, &e);
        // A record cut short is no record.
        assert!(Event::from_ring(&r[..r.len() - 1]).is_none());
    }
    let payload = enc.finish();
    let back: Vec<Record> = EventChunkDecoder::new(&payload, 0)
        .unwrap()
        .collect::<Result<_>>()
        .unwrap();
    assert_eq!(back.len(), kind::COUNT);
}

#[test]
fn round_trip_including_backward_time() {
    let mut enc = EventChunkEncoder::new(3);
    let events = all_kinds();
    let times: Vec<u64> = (0..events.len() as u64)
        .map(|i| 1_000_000_000_000 + i * 1000 - (i % 3) * 1500)
        .collect();
    for (e, &ts) in events.iter().zip(&times) {
        enc.push(ts, 41, e);
    }
    let payload = enc.finish();
    assert!(enc.is_empty());
    let back: Vec<Record> = EventChunkDecoder::new(&payload, 0)
        .unwrap()
        .collect::<Result<_>>()
        .unwrap();
    assert_eq!(back.len(), events.len());
    for ((r, e), ts) in back.iter().zip(&events).zip(&times) {
        assert_eq!(r.event, *e);
        assert_eq!(r.ts, *ts);
        assert_eq!((r.tid, r.cpu), (41, 3));
    }
}

#[test]
fn compact() {
    let mut enc = EventChunkEncoder::new(0);
    for i in 0..1000u64 {
        enc.push(
            5_000_000_000 + i * 900,
            123_456,
            &Event::SysExit { nr: 1, ret: 512 },
        );
    }
    let n = enc.finish().len();
    assert!(n <= 1000 * 10, "{n} bytes for 1000 records");
}

#[test]
fn a_count_the_payload_cannot_hold_is_an_error() {
    let mut enc = EventChunkEncoder::new(2);
    enc.push(10, 1, &Event::FuncEntry { func: 1 });
    let good = enc.finish();
    assert_eq!(EventChunkDecoder::new(&good, 0).unwrap().remaining(), 1);
    // cpu 2, count u32::MAX, base_ts: nothing after it.
    let mut bad = vec![2, 0xff, 0xff, 0xff, 0xff, 0x0f];
    bad.extend_from_slice(&10u64.to_le_bytes());
    bad.extend_from_slice(&good[10..]);
    let e = EventChunkDecoder::new(&bad, 77).err().unwrap();
    assert_eq!(
        e.to_string(),
        "corrupt chunk at byte 77: event record: 4294967295 records announced, room for at most 1"
    );
    assert_eq!(peek_prefix(&bad), Some((2, 10)));
    assert_eq!(peek_prefix(&bad[..13]), None);
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    let mut enc = EventChunkEncoder::new(0);
    for e in all_kinds() {
        enc.push(10, 1, &e);
    }
    let good = enc.finish();
    for cut in 0..good.len() {
        let mut bad = good.clone();
        bad[cut] = bad[cut].wrapping_add(0x81);
        if let Ok(d) = EventChunkDecoder::new(&bad, 0) {
            for _ in d {}
        }
        if let Ok(mut d) = EventChunkDecoder::new(&good[..cut], 0) {
            assert!(d.any(|r| r.is_err()), "truncated at {cut} decoded cleanly");
        }
    }
}
