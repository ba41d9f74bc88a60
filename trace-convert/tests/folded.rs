//! Folded stacks on synthetic traces: exact figures on a known scenario, and on random
//! traces agreement with the two other places that account for a thread's time (its
//! state intervals, and the summary's state split of each function).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use trace_file::Event;
use trace_testkit::builder::*;

use trace_convert::folded;
use trace_merge::timeline::Item;
use trace_merge::MergeOptions;
use trace_merge::Window;
use trace_summary::summarize;

const US: u64 = 1000;

fn write(dir: &tempfile::TempDir, b: &TraceBuilder) -> PathBuf {
    let p = dir.path().join("t.trace");
    b.write(&p);
    p
}

/// The lines of the folded output of `input`, as stack -> ns.
fn folded(dir: &tempfile::TempDir, input: &PathBuf) -> BTreeMap<String, u64> {
    let out = dir.path().join("t.folded");
    let _ = std::fs::remove_file(&out);
    let report = folded::convert(std::slice::from_ref(input), &out, &opts(false)).unwrap();
    let text = std::fs::read_to_string(&out).unwrap();
    let mut lines = BTreeMap::new();
    for l in text.lines() {
        let (stack, ns) = l.rsplit_once(' ').expect("a value");
        let prev = lines.insert(stack.to_owned(), ns.parse::<u64>().expect("ns"));
        assert!(prev.is_none(), "stack {stack} twice");
    }
    assert_eq!(report.stacks, lines.len() as u64);
    let sum = lines.values().fold(0, |a: u64, &ns| a.saturating_add(ns));
    assert_eq!(report.total_ns, sum);
    lines
}

/// One thread: `handle_request` sleeps in nanosleep (35), then `other` runs 100 us.
#[test]
fn a_sleeping_handler_splits_by_system_call_and_state() {
    let mut b = TraceBuilder::new("h1", 1);
    b.process(100, "/srv/server")
        .thread(100, 100, "server", 'S')
        .probe(1, "handle_request")
        .probe(2, "other");
    let s = 500;
    b.at(1000, 0, 0, sw(100, 0))
        .at(1100, 0, 100, Event::FuncEntry { func: 1 })
        .at(1200, 0, 100, enter(35, 0, 0))
        .at(1300, 0, 100, sw(0, 1))
        .at(1300 + s, 0, 0, wake(100, 0))
        .at(1400 + s, 0, 0, sw(100, 0))
        .at(1500 + s, 0, 100, exit(35, 0))
        .at(1600 + s, 0, 100, Event::FuncExit { func: 1, ret: 0 })
        .at(1700 + s, 0, 100, Event::FuncEntry { func: 2 })
        .at(1800 + s, 0, 100, Event::FuncExit { func: 2, ret: 0 });
    b.stop(2000 + s);
    let dir = tempfile::tempdir().unwrap();
    let lines = folded(&dir, &write(&dir, &b));
    let get = |k: &str| lines.get(k).copied().unwrap_or(0);
    let h = "server;server;handle_request";
    assert_eq!(get(&format!("{h};nanosleep;[blocked]")), s * US);
    assert_eq!(get(&format!("{h};nanosleep;[ready]")), 100 * US);
    assert_eq!(get(&format!("{h};nanosleep;[running]")), 200 * US);
    assert_eq!(get(&format!("{h};[running]")), 200 * US);
    assert_eq!(get("server;server;other;[running]"), 100 * US);
    // Outside the functions: running between them and after, blocked before the switch.
    assert_eq!(get("server;server;[running]"), (100 + 100 + 200) * US);
    assert!(get("server;server;[blocked]") > 0);
    assert!(lines.keys().all(|k| k.starts_with("server;server;")));
}

/// A system call under way when the recording started shows under its name.
#[test]
fn a_call_under_way_at_the_start_takes_the_time_before_its_exit() {
    let mut b = TraceBuilder::new("h1", 1);
    b.process(100, "/srv/server")
        .thread(100, 100, "server", 'S');
    b.at(1000, 0, 0, wake(100, 0))
        .at(1100, 0, 0, sw(100, 0))
        .at(1200, 0, 100, exit(232, 1))
        .at(1300, 0, 100, enter(0, 4, 10))
        .at(1400, 0, 100, exit(0, 10));
    b.stop(1500);
    let dir = tempfile::tempdir().unwrap();
    let lines = folded(&dir, &write(&dir, &b));
    let get = |k: &str| lines.get(&format!("server;server;{k}")).copied();
    assert_eq!(get("epoll_wait;[ready]"), Some(100 * US));
    assert_eq!(get("epoll_wait;[running]"), Some(100 * US));
    assert_eq!(get("read;[running]"), Some(100 * US));
    assert_eq!(get("[running]"), Some(200 * US));
    assert!(get("epoll_wait;[blocked]").is_some_and(|ns| ns > 0));
    assert!(get("[blocked]").is_none());
}

/// The intervals of the trace's threads in a known state, as (thread name, begin, end),
/// and the trace's end.
fn known_states(input: &PathBuf) -> (Vec<(String, u64, u64)>, u64) {
    let mut tl = trace_merge::open(std::slice::from_ref(input), &MergeOptions::default()).unwrap();
    let mut intervals = Vec::new();
    while let Some(item) = tl.next_item().unwrap() {
        if let Item::State(s) = item {
            if trace_convert::chrome::state_name(s.state).is_some() {
                intervals.push((tl.thread(s.thread).name.clone(), s.begin, s.end));
            }
        }
    }
    (intervals, tl.end().unwrap())
}

#[test]
fn random_traces_agree_with_states_and_the_summary() {
    for seed in 1..=12u64 {
        let b = random_scenario(
            seed * 11,
            1 + (seed % 4) as u32,
            3 + (seed % 5) as u32,
            2000,
        );
        let dir = tempfile::tempdir().unwrap();
        let input = write(&dir, &b);
        let lines = folded(&dir, &input);

        // Every thread's time in a known state; threads of one name fold together.
        let mut by_name: HashMap<String, u64> = HashMap::new();
        for (name, begin, end) in known_states(&input).0 {
            *by_name.entry(name).or_default() += end - begin;
        }
        assert!(by_name.len() >= 3, "seed {seed}");
        for (name, ns) in by_name {
            let folded: u64 = (lines.iter())
                .filter(|(k, _)| k.split(';').nth(1) == Some(name.as_str()))
                .map(|(_, v)| v)
                .sum();
            assert_eq!(folded, ns, "seed {seed}: thread {name}");
        }

        // Each function's time by state: the lines with it on the stack.
        let s = summarize(std::slice::from_ref(&input)).unwrap();
        assert!(
            s.functions().iter().any(|f| f.running_ns > 0),
            "seed {seed}"
        );
        for f in s.functions() {
            let mut split = [0u64; 4];
            for (k, v) in &lines {
                let frames: Vec<&str> = k.split(';').collect();
                if !frames[2..frames.len() - 1].contains(&f.name.as_str()) {
                    continue;
                }
                let leaf = ["[running]", "[ready]", "[blocked]", "[I/O]"];
                let i = leaf
                    .iter()
                    .position(|l| l == frames.last().unwrap())
                    .unwrap();
                split[i] += v;
            }
            let want = [f.running_ns, f.ready_ns, f.blocked_ns, f.io_ns];
            assert_eq!(split, want, "seed {seed}: function {}", f.name);
        }
    }
}

/// A window holds each thread's time inside it, and nothing else.
#[test]
fn random_windows_hold_each_threads_time_inside_them() {
    for seed in 1..=12u64 {
        let b = random_scenario(
            seed * 13,
            1 + (seed % 3) as u32,
            3 + (seed % 4) as u32,
            1500,
        );
        let dir = tempfile::tempdir().unwrap();
        let input = write(&dir, &b);
        let (intervals, end) = known_states(&input);
        let mut rng = Rng(seed);
        let from = rng.below(end / 2);
        let until = from + 1 + rng.below(end / 2);
        let out = dir.path().join("w.folded");
        let o = trace_convert::Options {
            window: Window {
                from_ns: from,
                until_ns: until,
            },
            ..Default::default()
        };
        folded::convert(std::slice::from_ref(&input), &out, &o).unwrap();
        let mut folded: HashMap<String, u64> = HashMap::new();
        for l in std::fs::read_to_string(&out).unwrap().lines() {
            let (stack, ns) = l.rsplit_once(' ').unwrap();
            let thread = stack.split(';').nth(1).unwrap().to_owned();
            *folded.entry(thread).or_default() += ns.parse::<u64>().unwrap();
        }
        let mut want: HashMap<String, u64> = HashMap::new();
        for (name, b, e) in intervals {
            let inside = e.min(until).saturating_sub(b.max(from));
            if inside > 0 {
                *want.entry(name).or_default() += inside;
            }
        }
        assert_eq!(folded, want, "seed {seed}: window {from}..{until}");
    }
}

#[test]
fn times_that_add_up_past_u64_stay_at_its_largest() {
    // Three same-named threads asleep for nearly 2^63 ns each (a damaged time can say
    // so): their line and the total overflowed.
    let mut b = TraceBuilder::new("h", 1);
    b.process(1, "/srv/app");
    for tid in 1..=3 {
        b.thread(1, tid, "w", 'S');
    }
    b.at_ns(i64::MAX as u64, 0, 0, wake(9, 0));
    let dir = tempfile::tempdir().unwrap();
    let input = write(&dir, &b);
    let lines = folded(&dir, &input);
    assert_eq!(lines["app;w;[blocked]"], u64::MAX, "{lines:?}");
}

#[test]
fn an_existing_output_is_kept_unless_forced() {
    let b = server_scenario();
    let dir = tempfile::tempdir().unwrap();
    let input = write(&dir, &b);
    let out = dir.path().join("t.folded");
    std::fs::write(&out, "keep").unwrap();
    let err = folded::convert(std::slice::from_ref(&input), &out, &opts(false)).unwrap_err();
    assert!(err.to_string().contains("exists"), "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep");
    folded::convert(std::slice::from_ref(&input), &out, &opts(true)).unwrap();
    assert!(std::fs::read_to_string(&out).unwrap().contains("[running]"));
    assert!(!dir.path().join("t.folded.tmp").exists());
}

/// Conversion options: replace existing outputs or not.
fn opts(force: bool) -> trace_convert::Options {
    trace_convert::Options {
        force,
        ..Default::default()
    }
}
