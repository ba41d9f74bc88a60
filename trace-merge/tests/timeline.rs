//! The merge and the state machine: ordering, invariants, and the meaning of records.

use std::path::PathBuf;

use trace_file::Event;
use trace_merge::merge::{MergeOptions, Merger};
use trace_merge::timeline::{Item, LinkKind, SpanEnd, ThreadState, Timeline};
use trace_testkit::builder::*;
use trace_testkit::invariants::{check_timeline, Checker};

fn open(dir: &tempfile::TempDir, traces: &[&TraceBuilder], opts: MergeOptions) -> Timeline {
    let paths: Vec<PathBuf> = (traces.iter().enumerate())
        .map(|(i, t)| {
            let p = dir.path().join(format!("{i}.trace"));
            t.write(&p);
            p
        })
        .collect();
    Timeline::new(Merger::open(&paths, opts).unwrap())
}

fn items(mut tl: Timeline) -> (Vec<Item>, Timeline) {
    let mut v = vec![];
    while let Some(i) = tl.next_item().unwrap() {
        v.push(i);
    }
    (v, tl)
}

/// Thread `tid`'s state intervals: state, begin, end (ns) and CPU.
fn states_of(items: &[Item], tid: u32) -> Vec<(ThreadState, u64, u64, Option<u32>)> {
    (items.iter())
        .filter_map(|i| match i {
            Item::State(s) if s.tid == tid => Some((s.state, s.begin, s.end, s.cpu)),
            _ => None,
        })
        .collect()
}

#[test]
fn merge_is_sorted_complete_and_bounded() {
    for seed in 1..=20u64 {
        let b = random_scenario(seed, 1 + (seed % 5) as u32, 3 + (seed % 7) as u32, 800);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        b.write(&p);
        let mut m = Merger::open(&[p], MergeOptions::default()).unwrap();
        let mut last = 0;
        let mut n = 0u64;
        while let Some(r) = m.next_record().unwrap() {
            assert!(r.time >= last, "seed {seed}: time went back");
            last = r.time;
            n += 1;
        }
        let total: usize = b.cpus.values().map(Vec::len).sum();
        assert_eq!(n, total as u64, "seed {seed}: records lost");
        assert_eq!(
            m.stats().late,
            0,
            "seed {seed}: jitter within allowance is not late"
        );
        // Read-ahead is bounded by chunks, not the trace.
        assert!(m.stats().peak_buffered <= total);
    }
}

#[test]
fn random_timelines_keep_their_invariants() {
    for seed in 1..=30u64 {
        let b = random_scenario(
            seed * 31,
            1 + (seed % 4) as u32,
            2 + (seed % 11) as u32,
            1000,
        );
        let dir = tempfile::tempdir().unwrap();
        let tl = open(&dir, &[&b], MergeOptions::default());
        match check_timeline(tl).unwrap() {
            Ok(r) => assert!(r.states > 0 && r.threads > 0),
            Err(e) => panic!("seed {seed}: {}", e.join("\n")),
        }
    }
}

#[test]
fn server_scenario_items() {
    let dir = tempfile::tempdir().unwrap();
    let b = server_scenario();
    let (items, tl) = items(open(&dir, &[&b], MergeOptions::default()));
    let mut c = Checker::new();
    items.iter().for_each(|i| c.item(i));
    let r = c.finish(tl.end().unwrap()).unwrap();
    assert_eq!((r.threads, r.wakeups, r.handoffs), (3, 1, 1));

    let links: Vec<_> = (items.iter())
        .filter_map(|i| match i {
            Item::Link(l) => Some(*l),
            _ => None,
        })
        .collect();
    let h = links
        .iter()
        .find(|l| l.kind == LinkKind::Handoff { conn: 1 })
        .unwrap();
    assert_eq!((h.send, h.recv, h.bytes), (1_100_000, 1_400_000, 120));
    assert_eq!((tl.thread(h.from).tid, tl.thread(h.to).tid), (100, 101));

    let states = |tid| -> Vec<(ThreadState, u64, u64)> {
        (items.iter())
            .filter_map(|i| match i {
                Item::State(s) if s.tid == tid => Some((s.state, s.begin, s.end)),
                _ => None,
            })
            .collect()
    };
    use ThreadState::*;
    assert_eq!(
        states(102),
        vec![
            (NotCreated, 0, 1_900_000),
            (Ready, 1_900_000, 2_200_000),
            (Running, 2_200_000, 2_350_000),
            (Exited, 2_350_000, 3_000_000)
        ]
    );
    let syscalls: Vec<_> = (items.iter())
        .filter_map(|i| match i {
            Item::Syscall(s) => Some(*s),
            _ => None,
        })
        .collect();
    let accept = syscalls.iter().find(|s| s.new_conn == Some(1)).unwrap();
    assert!(!accept.entered);
    let open_accept = syscalls
        .iter()
        .find(|s| s.end_kind == SpanEnd::TraceEnded)
        .unwrap();
    assert_eq!((open_accept.nr, open_accept.ret), (288, None));
    assert_eq!(tl.thread(2).name, "helper-1");
}

#[test]
fn prev_state_mapping() {
    use ThreadState::*;
    for (ps, want) in [
        (0, Ready),
        (0x100, Ready),
        (0x1, Blocked),
        (0x2, Io),
        (0x402, Io),
        (0x80, Blocked),
        (0x10, Exited),
        (0x20, Exited),
        (0x4, Blocked),
        (0x8, Blocked),
    ] {
        assert_eq!(ThreadState::from_prev_state(ps), want, "{ps:#x}");
    }
}

#[test]
fn acceptor_serving_its_own_connection_is_no_handoff() {
    let mut b = TraceBuilder::new("h", 1);
    b.process(1, "/s")
        .thread(1, 1, "s", 'R')
        .thread(1, 2, "w", 'S');
    b.at(10, 0, 1, enter(43, 3, 0))
        .at(11, 0, 1, exit(43, 9))
        .at(12, 0, 1, enter(0, 9, 10))
        .at(13, 0, 1, exit(0, 10))
        .at(14, 0, 1, enter(3, 9, 0))
        .at(15, 0, 1, exit(3, 0))
        // fd 9 is reused for a file: not connection 1 any more.
        .at(16, 0, 1, enter(257, 0, 0))
        .at(17, 0, 1, exit(257, 9))
        .at(18, 0, 1, sw(2, 1))
        .at(19, 0, 2, enter(0, 9, 10))
        .at(20, 0, 2, exit(0, 10))
        .stop(30);
    let dir = tempfile::tempdir().unwrap();
    let (items, _) = items(open(&dir, &[&b], MergeOptions::default()));
    assert!(!items
        .iter()
        .any(|i| matches!(i, Item::Link(l) if matches!(l.kind, LinkKind::Handoff { .. }))));
    let last_read = (items.iter())
        .filter_map(|i| match i {
            Item::Syscall(s) if s.nr == 0 => Some(*s),
            _ => None,
        })
        .next_back()
        .unwrap();
    assert_eq!(last_read.conn, None);
    assert_eq!(last_read.sock_op, None);
}

#[test]
fn unknown_thread_appears_on_first_sight_and_tids_are_reused() {
    let mut b = TraceBuilder::new("h", 1);
    b.process(1, "/s").thread(1, 1, "s", 'R');
    b.at(10, 0, 7, Event::FuncEntry { func: 1 }) // never listed: first sight
        .at(
            20,
            0,
            7,
            Event::Exit {
                tgid: 1,
                group_dead: false,
            },
        )
        .at(21, 0, 7, sw(1, 0x10))
        .at(
            30,
            0,
            1,
            Event::NewTask {
                child_tid: 7,
                child_tgid: 1,
                comm: comm("again"),
            },
        )
        .at(40, 0, 1, sw(7, 0x100))
        .stop(50);
    let dir = tempfile::tempdir().unwrap();
    let (items, tl) = items(open(&dir, &[&b], MergeOptions::default()));
    assert_eq!(tl.threads().len(), 3, "tid 7 twice: two threads");
    assert_eq!(tl.thread(1).tgid, 1, "one-process trace: its process");
    let first: Vec<_> = (items.iter())
        .filter_map(|i| match i {
            Item::State(s) if s.thread == 1 => Some((s.state, s.begin, s.end)),
            _ => None,
        })
        .collect();
    use ThreadState::*;
    assert_eq!(
        first,
        vec![
            (Unknown, 0, 10_000),
            (Running, 10_000, 21_000),
            (Exited, 21_000, 50_000)
        ]
    );
    let span = items.iter().find_map(|i| match i {
        Item::Func(s) => Some(*s),
        _ => None,
    });
    assert_eq!(span.unwrap().end_kind, SpanEnd::Exited);
    let mut c = Checker::new();
    items.iter().for_each(|i| c.item(i));
    c.finish(50_000).unwrap();
}

#[test]
fn unwinding_and_orphan_exits() {
    let mut b = TraceBuilder::new("h", 1);
    b.process(1, "/s").thread(1, 1, "s", 'R');
    b.at(1, 0, 1, Event::FuncEntry { func: 1 })
        .at(2, 0, 1, Event::FuncEntry { func: 2 })
        .at(3, 0, 1, Event::FuncEntry { func: 3 })
        .at(4, 0, 1, Event::FuncExit { func: 1, ret: 5 }) // longjmp past 3 and 2
        .at(5, 0, 1, Event::FuncExit { func: 9, ret: 0 }) // never entered
        .stop(6);
    let dir = tempfile::tempdir().unwrap();
    let (items, tl) = items(open(&dir, &[&b], MergeOptions::default()));
    let spans: Vec<_> = (items.iter())
        .filter_map(|i| match i {
            Item::Func(s) => Some((s.func, s.depth, s.end_kind)),
            _ => None,
        })
        .collect();
    assert_eq!(
        spans,
        vec![
            (3, 2, SpanEnd::Unwound),
            (2, 1, SpanEnd::Unwound),
            (1, 0, SpanEnd::Returned)
        ]
    );
    assert_eq!(tl.stats().orphan_func_exits, 1);
}

/// Native calls paired by frame (a program that throws): an exception out of 3 and 2 is
/// seen at the next entry at their frame's height, which ends them, unwound, there; a
/// tail call's exit returns without a result; an exit from a frame nothing entered at is
/// an orphan, and one above open frames ends them.
#[test]
fn calls_paired_by_frame_end_where_the_stack_shows_them_gone() {
    const SP: u64 = 0x7ffd_0000_1000;
    let entry = |func, depth: u64| Event::FrameEntry {
        func,
        sp: SP - 0x40 * depth,
        switching: false,
    };
    let exit = |func, depth: u64, ret| Event::FrameExit {
        func,
        sp: SP - 0x40 * depth,
        ret,
    };
    let mut b = TraceBuilder::new("h", 1);
    b.process(1, "/s").thread(1, 1, "s", 'R');
    b.at(1, 0, 1, entry(1, 0))
        .at(2, 0, 1, entry(2, 1))
        .at(3, 0, 1, entry(3, 2)) // throws, caught in 1
        .at(4, 0, 1, entry(4, 1)) // 1 calls 4: 3 and 2 are gone
        .at(5, 0, 1, exit(4, 1, None)) // by a tail call
        .at(6, 0, 1, exit(5, 3, Some(0))) // never entered
        .at(7, 0, 1, entry(2, 1))
        .at(8, 0, 1, exit(1, 0, Some(9))) // 1 returns: 2 is gone
        .stop(9);
    let dir = tempfile::tempdir().unwrap();
    let (items, tl) = items(open(&dir, &[&b], MergeOptions::default()));
    let spans: Vec<_> = (items.iter())
        .filter_map(|i| match i {
            Item::Func(s) => Some((s.func, s.end, s.depth, s.ret, s.end_kind)),
            _ => None,
        })
        .collect();
    let us = |u: u64| u * 1000;
    assert_eq!(
        spans,
        vec![
            (3, us(4), 2, None, SpanEnd::Unwound),
            (2, us(4), 1, None, SpanEnd::Unwound),
            (4, us(5), 1, None, SpanEnd::Returned),
            (2, us(8), 1, None, SpanEnd::Unwound),
            (1, us(8), 0, Some(9), SpanEnd::Returned),
        ]
    );
    assert_eq!(tl.stats().orphan_func_exits, 1);
}

/// In a program that switches stacks, a thread's calls alternate between stacks: each
/// pairs with its return by its exact frame wherever it is among the open calls, and no
/// frame of another stack ends it.
#[test]
fn calls_of_a_program_that_switches_stacks_pair_by_exact_frame() {
    const A: u64 = 0x5555_0001_0000; // one coroutine's stack
    const B: u64 = 0x5555_0002_0000; // another's, above it
    let entry = |func, sp| Event::FrameEntry {
        func,
        sp,
        switching: true,
    };
    let exit = |func, sp, ret| Event::FrameExit {
        func,
        sp,
        ret: Some(ret),
    };
    let mut b = TraceBuilder::new("h", 1);
    b.process(1, "/s").thread(1, 1, "s", 'R');
    b.at(1, 0, 1, entry(1, A)) // step on A, which switches to B
        .at(2, 0, 1, entry(1, B)) // step on B: above A's, and A's goes on
        .at(3, 0, 1, exit(1, A, 5)) // back on A: its step returns
        .at(4, 0, 1, exit(1, B, 6))
        .stop(5);
    let dir = tempfile::tempdir().unwrap();
    let (items, tl) = items(open(&dir, &[&b], MergeOptions::default()));
    let spans: Vec<_> = (items.iter())
        .filter_map(|i| match i {
            Item::Func(s) => Some((s.begin, s.end, s.ret, s.end_kind)),
            _ => None,
        })
        .collect();
    let us = |u: u64| u * 1000;
    assert_eq!(
        spans,
        vec![
            (us(1), us(3), Some(5), SpanEnd::Returned),
            (us(2), us(4), Some(6), SpanEnd::Returned),
        ]
    );
    assert_eq!(tl.stats().orphan_func_exits, 0);
}

/// The files of one rotating run are one recording: a thread is the same thread in all of
/// them, and a call that straddles two files is one call. Files of different runs stay
/// apart.
#[test]
fn the_files_of_one_run_are_one_recording() {
    let parts = |run: &str| {
        let mut a = TraceBuilder::new("h", 1);
        a.header.run = run.into();
        a.header.part = 1;
        a.process(1, "/s").thread(1, 1, "s", 'R');
        a.at(10, 0, 0, sw(1, 0))
            .at(20, 0, 1, Event::FuncEntry { func: 1 })
            .stop(100);
        let mut b = TraceBuilder::new("h", 1);
        b.header.run = run.into();
        b.header.part = 2;
        b.header.start_ns = START + 100_000;
        b.process(1, "/s").thread(1, 1, "s", 'R');
        b.at(150, 0, 1, Event::FuncExit { func: 1, ret: 7 })
            .at(160, 0, 1, sw(0, 1))
            .stop(200);
        // Given newest first: the order of the files does not matter.
        (b, a)
    };
    let dir = tempfile::tempdir().unwrap();
    let (b, a) = parts("web1-42-1000");
    let (got, tl) = items(open(&dir, &[&b, &a], MergeOptions::default()));
    assert_eq!((tl.threads().len(), tl.processes().len()), (1, 1));
    let spans: Vec<_> = (got.iter())
        .filter_map(|i| match i {
            Item::Func(s) => Some((s.begin, s.end, s.ret, s.end_kind)),
            _ => None,
        })
        .collect();
    assert_eq!(spans, vec![(20_000, 150_000, Some(7), SpanEnd::Returned)]);
    assert_eq!(tl.stats().orphan_func_exits, 0);

    // Without a run id, two recordings: the call is cut, its exit an orphan.
    let (b, a) = parts("");
    let (_, tl) = items(open(&dir, &[&b, &a], MergeOptions::default()));
    assert_eq!(tl.threads().len(), 2);
    assert_eq!(tl.stats().orphan_func_exits, 1);
}

/// A thread found runnable at attach ('R') is either on a CPU or waiting for one. Switched
/// out before any switch-in, it was running all along; switched in first, it was waiting.
#[test]
fn a_thread_runnable_at_attach_is_placed_by_its_first_switch() {
    let mut b = TraceBuilder::new("h", 2);
    b.process(7, "/bin/x")
        .thread(7, 7, "on-cpu", 'R')
        .thread(7, 8, "queued", 'R');
    b.at(50, 1, 7, sw(0, 1))
        .at(60, 0, 0, sw(8, 0))
        .at(90, 0, 8, sw(0, 1));
    b.stop(100);
    let dir = tempfile::tempdir().unwrap();
    let (items, tl) = items(open(&dir, &[&b], MergeOptions::default()));
    assert_eq!(tl.stats().unseen_switch_ins, 0);
    let states = |tid: u32| states_of(&items, tid);
    use ThreadState::*;
    let us = |u: u64| u * 1000;
    assert_eq!(
        states(7),
        [
            (Running, 0, us(50), Some(1)),
            (Blocked, us(50), us(100), None)
        ]
    );
    assert_eq!(
        states(8),
        [
            (Ready, 0, us(60), None),
            (Running, us(60), us(90), Some(0)),
            (Blocked, us(90), us(100), None)
        ]
    );
}

/// The same when the first sign of a thread runnable at attach is a record of its own (a
/// system call): it was running on that CPU since attach.
#[test]
fn a_thread_runnable_at_attach_that_acts_first_was_running() {
    let mut b = TraceBuilder::new("h", 2);
    b.process(7, "/bin/x").thread(7, 7, "busy", 'R');
    b.at(40, 1, 7, enter(0, 3, 10))
        .at(45, 1, 7, exit(0, 10))
        .at(50, 1, 7, sw(0, 1));
    b.stop(100);
    let dir = tempfile::tempdir().unwrap();
    let (items, _) = items(open(&dir, &[&b], MergeOptions::default()));
    let states = states_of(&items, 7);
    use ThreadState::*;
    assert_eq!(
        states,
        [
            (Running, 0, 50_000, Some(1)),
            (Blocked, 50_000, 100_000, None)
        ]
    );
    assert!(items.contains(&Item::OnCpu {
        thread: 0,
        time: 0,
        cpu: 1
    }));
}

/// A thread switched out while held ready ran without a reported switch-in (some
/// kernels run tasks whose switches out no program sees): its ready time ends there, and
/// the switch is counted, not taken for an error.
#[test]
fn a_switch_out_with_no_switch_in_before_is_counted() {
    let mut b = TraceBuilder::new("h", 1);
    b.process(7, "/bin/x").thread(7, 8, "worker", 'S');
    b.at(10, 0, 0, sw(8, 0))
        .at(20, 0, 8, sw(0, 0)) // preempted
        .at(40, 0, 8, sw(0, 1)) // out again, never switched in
        .at(50, 0, 0, sw(8, 0))
        .at(60, 0, 8, sw(0, 1));
    b.stop(100);
    let dir = tempfile::tempdir().unwrap();
    let (items, tl) = items(open(&dir, &[&b], MergeOptions::default()));
    use ThreadState::*;
    let us = |u: u64| u * 1000;
    assert_eq!(
        states_of(&items, 8),
        [
            (Blocked, 0, us(10), None),
            (Running, us(10), us(20), Some(0)),
            (Ready, us(20), us(40), None),
            (Blocked, us(40), us(50), None),
            (Running, us(50), us(60), Some(0)),
            (Blocked, us(60), us(100), None)
        ]
    );
    assert_eq!(tl.stats().unseen_switch_ins, 1);
    assert!(trace_merge::report::InputReport::of(&tl)
        .to_string()
        .contains("switch-ins the kernel did not report (those runs start at the thread's first own record): 1"));
}

/// Go calls pair by goroutine: a call that began on one thread and returned on another is
/// one span, shown on the thread that entered it; calls of another goroutine on that
/// thread in between are their own spans; USDT probes are marks with their arguments.
#[test]
fn go_calls_pair_by_goroutine_and_usdt_probes_are_marks() {
    let dir = tempfile::tempdir().unwrap();
    let b = go_scenario();
    let tl = open(&dir, &[&b], MergeOptions::default());
    let inv = check_timeline(tl)
        .unwrap()
        .unwrap_or_else(|e| panic!("{}", e.join("\n")));
    assert_eq!(inv.spans, 3);
    let (items, tl) = items(open(&dir, &[&b], MergeOptions::default()));
    let spans: Vec<_> = (items.iter())
        .filter_map(|i| match i {
            Item::Func(s) => Some((
                tl.thread(s.thread).tid,
                s.func,
                s.begin,
                s.end,
                s.ret,
                s.goroutine,
                s.depth,
            )),
            _ => None,
        })
        .collect();
    let us = |u: u64| u * 1000;
    assert_eq!(
        spans,
        [
            (201, 2, us(1250), us(1300), Some(5), Some(0xb), 1),
            (201, 1, us(1200), us(1400), Some(7), Some(0xb), 0),
            (201, 1, us(1100), us(1800), Some(9), Some(0xa), 0),
        ]
    );
    let marks: Vec<_> = (items.iter())
        .filter_map(|i| match i {
            Item::Mark(m) => Some((
                tl.thread(m.thread).tid,
                m.probe,
                m.nargs,
                m.args[0] as i64,
                m.args[1],
            )),
            _ => None,
        })
        .collect();
    assert_eq!(marks, [(201, 3, 2, -7, 42), (202, 3, 2, 1, 2)]);
}

/// A damaged Events chunk: an error naming it without salvage; with salvage, every other
/// chunk's records, and the damage said with its CPU and the missing records' time range.
#[test]
fn salvage_steps_over_a_damaged_events_chunk_and_says_what_it_held() {
    let mut b = random_scenario(7, 2, 4, 400);
    b.chunk_records = 20;
    let bytes = b.bytes();
    // The third Events chunk, found with the reader.
    let mut r = trace_file::Reader::new(&bytes[..]).unwrap();
    let mut events = vec![];
    while let Some(c) = r.next_chunk().unwrap() {
        if c.kind == trace_file::ChunkKind::Events {
            let dec = trace_file::EventChunkDecoder::new(&c.payload, c.offset).unwrap();
            let cpu = dec.cpu();
            let ts: Vec<u64> = dec.map(|r| r.unwrap().ts).collect();
            events.push((c.offset, cpu, ts));
        }
    }
    let (offset, cpu, ts) = events[2].clone();
    let next_of_cpu = events[3..].iter().find(|e| e.1 == cpu).map(|e| e.2[0]);
    let mut damaged = bytes.clone();
    // Past the payload's prefix (cpu, count, first time), which the damage report reads.
    damaged[offset as usize + trace_file::CHUNK_HEADER_LEN + 40] ^= 0x40;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("damaged.trace");
    std::fs::write(&p, &damaged).unwrap();

    let strict = Merger::open(std::slice::from_ref(&p), MergeOptions::default());
    let e = match strict {
        Ok(mut m) => loop {
            match m.next_record() {
                Err(e) => break e.to_string(),
                Ok(Some(_)) => {}
                Ok(None) => panic!("the damage was not noticed"),
            }
        },
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains(&format!("corrupt chunk at byte {offset}")),
        "{e}"
    );

    let opts = MergeOptions {
        salvage: true,
        ..Default::default()
    };
    let mut m = Merger::open(std::slice::from_ref(&p), opts).unwrap();
    let mut n = 0u64;
    while m.next_record().unwrap().is_some() {
        n += 1;
    }
    let all: usize = events.iter().map(|e| e.2.len()).sum();
    assert_eq!(n as usize, all - ts.len());
    let s = &m.sources()[0];
    assert_eq!(s.damage.len(), 1, "{:?}", s.damage);
    let d = &s.damage[0];
    assert_eq!((d.offset, d.chunks, d.cpu), (offset, 1, Some(cpu)));
    assert_eq!(d.from_ns, Some(s.to_merge_time(ts[0])));
    assert_eq!(d.until_ns, next_of_cpu.map(|t| s.to_merge_time(t)));
    let said = d.to_string();
    assert!(said.contains(&format!("Events of CPU {cpu}")), "{said}");
}

#[test]
fn times_past_i64_stay_in_the_future_and_damaged_counts_saturate() {
    // A timestamp of 2^63 or more was taken as negative: the record went to time 0.
    let mut b = TraceBuilder::new("h", 2);
    b.process(1, "/srv/app").thread(1, 1, "w", 'S');
    b.at(10, 0, 0, wake(1, 0));
    b.at_ns(u64::MAX - 5, 1, 0, wake(1, 1));
    b.lost = Some(trace_file::LostCounts {
        per_cpu: vec![u64::MAX, 3],
        skipped: 9,
        stacks_shed: 7,
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let (_, tl) = items(open(&dir, &[&b], MergeOptions::default()));
    assert_eq!(tl.end(), Some(u64::MAX - 5 - START));
    assert_eq!(tl.merger().sources()[0].lost(), u64::MAX);
    let report = trace_merge::InputReport::of(&tl);
    assert_eq!(report.lost_by_kernel, u64::MAX);
    // Shed stacks are not lost events: counted apart, and said.
    assert_eq!(report.stacks_shed, 7);
    assert!(report.to_string().contains("stacks not taken"), "{report}");
}
