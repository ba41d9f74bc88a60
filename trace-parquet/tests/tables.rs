//! The Parquet tables against the summary of the same traces: per function, thread and
//! system call, every figure the rows can give is the summary's exactly. Plus the
//! schema against docs/parquet.md, partitions, several hosts, stat files and bad input.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use common::{kv, read_table, Table, V};
use trace_file::Event;
use trace_parquet::{convert, Options, Partition, SCHEMA_VERSION};
use trace_summary::{summarize, Summary};
use trace_testkit::builder::*;

fn write(dir: &Path, traces: &[&TraceBuilder]) -> Vec<PathBuf> {
    (traces.iter().enumerate())
        .map(|(i, t)| {
            let p = dir.join(format!("{i}.trace"));
            t.write(&p);
            p
        })
        .collect()
}

fn to_parquet(
    inputs: &[PathBuf],
    out: &Path,
    partition: Partition,
) -> trace_parquet::ParquetReport {
    let opts = Options {
        partition,
        ..Default::default()
    };
    convert(inputs, out, &opts).unwrap()
}

/// Adds `v` to `m[k]`.
fn add<K: Ord>(m: &mut BTreeMap<K, i64>, k: K, v: i64) {
    *m.entry(k).or_default() += v;
}

/// Per-function figures from `calls`: what `tracer summary --by function` shows.
#[derive(Debug, Default, PartialEq)]
struct Func {
    calls: u64,
    errors_negative: u64,
    errors_nonzero: u64,
    unfinished: u64,
    inclusive_ns: u64,
    self_ns: u64,
    running_ns: u64,
    ready_ns: u64,
    blocked_ns: u64,
    io_ns: u64,
    min_ns: u64,
    max_ns: u64,
    mean_ns: u64,
}

fn functions_of_rows(calls: &Table) -> BTreeMap<(String, String), Func> {
    let mut out: BTreeMap<(String, String), Func> = BTreeMap::new();
    let mut sums: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for r in &calls.rows {
        let key = (r["function"].s().to_string(), r["binary"].s().to_string());
        let f = out.entry(key.clone()).or_default();
        let g = |c: &str| r[c].i() as u64;
        f.calls += 1;
        f.errors_negative += r["error"].b() as u64;
        f.errors_nonzero += r["ret"].opt().is_some_and(|v| v != 0) as u64;
        f.unfinished += matches!(r["end_kind"].s(), "unwound" | "exited" | "trace_ended") as u64;
        f.self_ns += g("self_ns");
        if r["outermost"].b() {
            f.inclusive_ns += g("duration_ns");
            f.running_ns += g("running_ns");
            f.ready_ns += g("ready_ns");
            f.blocked_ns += g("blocked_ns");
            f.io_ns += g("io_ns");
        }
        if r["kind"].s() != "usdt" {
            let d = g("duration_ns");
            let s = sums.entry(key).or_default();
            f.min_ns = if s.1 == 0 { d } else { f.min_ns.min(d) };
            f.max_ns = f.max_ns.max(d);
            s.0 += d;
            s.1 += 1;
        }
    }
    for (k, (sum, n)) in sums {
        out.get_mut(&k).unwrap().mean_ns = sum / n.max(1);
    }
    out
}

fn functions_of_summary(s: &Summary) -> BTreeMap<(String, String), Func> {
    (s.functions().iter())
        .map(|f| {
            let v = Func {
                calls: f.calls,
                errors_negative: f.errors_negative,
                errors_nonzero: f.errors_nonzero,
                unfinished: f.unfinished,
                inclusive_ns: f.inclusive_ns,
                self_ns: f.self_ns,
                running_ns: f.running_ns,
                ready_ns: f.ready_ns,
                blocked_ns: f.blocked_ns,
                io_ns: f.io_ns,
                min_ns: f.min_ns,
                max_ns: f.max_ns,
                mean_ns: f.mean_ns,
            };
            ((f.name.clone(), f.binary.clone()), v)
        })
        .collect()
}

/// Per-thread figures (by tid) from `states`, `syscalls`, `calls` and `links`.
fn threads_of_rows(out: &Path) -> BTreeMap<i64, BTreeMap<&'static str, i64>> {
    let mut t: BTreeMap<i64, BTreeMap<&'static str, i64>> = BTreeMap::new();
    for r in &read_table(out, "threads").rows {
        t.entry(r["tid"].i()).or_default();
    }
    let states = read_table(out, "states");
    let mut rows: Vec<&HashMap<String, V>> = states.rows.iter().collect();
    rows.sort_by_key(|r| (r["tid"].i(), r["start_ns"].i()));
    let mut prev: Option<(i64, String)> = None;
    for r in rows {
        let tid = r["tid"].i();
        let m = t.entry(tid).or_default();
        let state = r["state"].s();
        let d = r["duration_ns"].i();
        let col = match state {
            "running" => "running_ns",
            "ready" => "ready_ns",
            "blocked" => "blocked_ns",
            "io" => "io_ns",
            "unknown" => "unknown_ns",
            "not_created" => "not_created_ns",
            _ => "exited_ns",
        };
        *m.entry(col).or_default() += d;
        if let Some((ptid, p)) = &prev {
            if *ptid == tid && p == "running" {
                match state {
                    "blocked" | "io" => *m.entry("voluntary_switches").or_default() += 1,
                    "ready" => *m.entry("involuntary_switches").or_default() += 1,
                    _ => {}
                }
            }
        }
        if state == "ready" {
            *m.entry("ready_waits").or_default() += 1;
            let mx = m.entry("ready_max_ns").or_default();
            *mx = (*mx).max(d);
        }
        *m.entry("migrations").or_default() += r["migrations"].i();
        prev = Some((tid, state.to_string()));
    }
    for r in &read_table(out, "syscalls").rows {
        let m = t.entry(r["tid"].i()).or_default();
        *m.entry("syscalls").or_default() += 1;
        *m.entry("syscall_errors").or_default() += r["error"].b() as i64;
        *m.entry("syscall_ns").or_default() += r["duration_ns"].opt().unwrap_or(0);
    }
    for r in &read_table(out, "calls").rows {
        if r["kind"].s() != "usdt" {
            *t.entry(r["tid"].i())
                .or_default()
                .entry("function_calls")
                .or_default() += 1;
        }
    }
    for r in &read_table(out, "links").rows {
        if r["kind"].s() == "wakeup" {
            let s = t.entry(r["sender_tid"].i()).or_default();
            *s.entry("wakeups_sent").or_default() += 1;
            let s = t.entry(r["receiver_tid"].i()).or_default();
            *s.entry("wakeups_received").or_default() += 1;
        }
    }
    // Zero figures are absent from the rows' maps: drop them from both sides.
    for m in t.values_mut() {
        m.retain(|_, v| *v != 0);
    }
    t
}

fn threads_of_summary(s: &Summary) -> BTreeMap<i64, BTreeMap<&'static str, i64>> {
    let mut out = BTreeMap::new();
    for t in s.threads() {
        let m: BTreeMap<&'static str, i64> = [
            ("running_ns", t.running_ns),
            ("ready_ns", t.ready_ns),
            ("blocked_ns", t.blocked_ns),
            ("io_ns", t.io_ns),
            ("unknown_ns", t.unknown_ns),
            ("not_created_ns", t.not_created_ns),
            ("exited_ns", t.exited_ns),
            ("voluntary_switches", t.voluntary_switches),
            ("involuntary_switches", t.involuntary_switches),
            ("wakeups_sent", t.wakeups_sent),
            ("wakeups_received", t.wakeups_received),
            ("migrations", t.migrations),
            ("syscalls", t.syscalls),
            ("syscall_errors", t.syscall_errors),
            ("syscall_ns", t.syscall_ns),
            ("function_calls", t.function_calls),
            ("ready_waits", t.ready_waits.unwrap_or(0)),
            ("ready_max_ns", t.ready_max_ns.unwrap_or(0)),
        ]
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .map(|(k, v)| (k, v as i64))
        .collect();
        out.insert(t.tid as i64, m);
    }
    out
}

/// Per system call (by number): calls, errors, unfinished, total, max, mean, bytes.
fn syscalls_of_rows(out: &Path) -> BTreeMap<i64, [i64; 8]> {
    let mut m: BTreeMap<i64, [i64; 8]> = BTreeMap::new();
    let mut entered: BTreeMap<i64, i64> = BTreeMap::new();
    for r in &read_table(out, "syscalls").rows {
        let x = m.entry(r["nr"].i()).or_default();
        x[0] += 1;
        x[1] += r["error"].b() as i64;
        x[2] += r["ret"].opt().is_none() as i64;
        if let Some(d) = r["duration_ns"].opt() {
            x[3] += d;
            x[4] = x[4].max(d);
            add(&mut entered, r["nr"].i(), 1);
        }
        x[6] += r["bytes_read"].i();
        x[7] += r["bytes_written"].i();
    }
    for (nr, x) in m.iter_mut() {
        x[5] = x[3] / entered.get(nr).copied().unwrap_or(0).max(1);
    }
    m
}

fn syscalls_of_summary(s: &Summary) -> BTreeMap<i64, [i64; 8]> {
    (s.syscalls().iter())
        .map(|x| {
            let v = [
                x.calls,
                x.errors,
                x.unfinished,
                x.total_ns,
                x.max_ns,
                x.mean_ns,
                x.bytes_read,
                x.bytes_written,
            ];
            (x.nr as i64, v.map(|v| v as i64))
        })
        .collect()
}

/// Converts `traces` and checks the tables against the summary of the same files.
fn check_against_summary(traces: &[&TraceBuilder], partition: Partition) {
    let dir = tempfile::tempdir().unwrap();
    let inputs = write(dir.path(), traces);
    let out = dir.path().join("out");
    let report = to_parquet(&inputs, &out, partition);
    let s = summarize(&inputs).unwrap();
    let calls = read_table(&out, "calls");
    assert_eq!(calls.rows.len() as u64, report.rows_of("calls"));
    assert_eq!(functions_of_rows(&calls), functions_of_summary(&s));
    assert_eq!(threads_of_rows(&out), threads_of_summary(&s));
    assert_eq!(syscalls_of_rows(&out), syscalls_of_summary(&s));
}

#[test]
fn the_server_scenario_adds_up_to_its_summary() {
    check_against_summary(&[&server_scenario()], Partition::default());
}

#[test]
fn go_calls_and_usdt_hits_add_up_to_their_summary() {
    check_against_summary(&[&go_scenario()], Partition::default());
}

#[test]
fn random_traces_add_up_to_their_summary_exactly() {
    for seed in 1..=40 {
        let t = random_scenario(seed, 1 + (seed % 4) as u32, 2 + (seed % 7) as u32, 3000);
        let partition = Partition {
            host: seed % 2 == 0,
            date: seed % 3 == 0,
        };
        check_against_summary(&[&t], partition);
    }
}

#[test]
fn calls_nest_and_point_at_their_parents_and_connections() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = write(dir.path(), &[&server_scenario()]);
    let out = dir.path().join("out");
    to_parquet(&inputs, &out, Partition::default());
    let calls = read_table(&out, "calls");
    assert_eq!(calls.rows.len(), 2);
    let pr = (calls.rows.iter())
        .find(|r| r["function"].s() == "process_request(Request&)")
        .unwrap();
    // 1500-1700 us after the start, on the wall clock of the builder's header.
    let start = START as i64 + M2R;
    assert_eq!(pr["start_ns"].i(), start + 1_500_000);
    assert_eq!(pr["end_ns"].i(), start + 1_700_000);
    assert_eq!(pr["start_mono_ns"].i(), START as i64 + 1_500_000);
    assert_eq!(pr["duration_ns"].i(), 200_000);
    assert_eq!(pr["ret"], V::I(1));
    assert_eq!((pr["tid"].i(), pr["thread"].s()), (101, "worker"));
    assert_eq!((pr["host"].s(), pr["run"].s()), ("web1", "0.trace"));
    // The worker read connection 1 before the call: the call itself made no system call.
    assert_eq!(pr["connection"], V::Null);
    let sys = read_table(&out, "syscalls");
    let write = (sys.rows.iter())
        .find(|r| r["name"].s() == "write")
        .unwrap();
    assert_eq!(write["connection"], V::I(1));
    assert_eq!(write["bytes_written"], V::I(300));
    assert_eq!(write["fd"], V::I(5));
    let accept = (sys.rows.iter()).find(|r| r["nr"].i() == 288 && r["ret"] == V::I(5));
    assert_eq!(
        accept.unwrap()["duration_ns"],
        V::Null,
        "entry not recorded"
    );
    let links = read_table(&out, "links");
    let kinds: Vec<&str> = links.rows.iter().map(|r| r["kind"].s()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "handoff").count(), 1);
    assert_eq!(kinds.iter().filter(|k| **k == "wakeup").count(), 1);
    let threads = read_table(&out, "threads");
    let names: Vec<&str> = threads.rows.iter().map(|r| r["thread"].s()).collect();
    assert_eq!(names, ["server", "worker", "helper-1"]);
    let files = read_table(&out, "files");
    assert_eq!(files.rows[0]["lost"], V::I(2));
    assert_eq!(files.rows[0]["mode"].s(), "record");
    let probes = read_table(&out, "probes");
    assert_eq!(probes.rows.len(), 2);
    for f in common::parquet_files(&out) {
        let md = kv(&f);
        assert_eq!(md["tracer.schema"], SCHEMA_VERSION);
    }
}

#[test]
fn nested_calls_have_parents_self_time_and_a_connection() {
    let mut b = TraceBuilder::new("h", 1);
    b.process(7, "/srv/x")
        .thread(7, 7, "main", 'R')
        .probe(1, "outer")
        .probe(2, "inner");
    b.at(10, 0, 0, sw(7, 0))
        .at(20, 0, 7, exit(288, 9)) // an accept under way at attach: connection 1, fd 9
        .at(100, 0, 7, Event::FuncEntry { func: 1 })
        .at(110, 0, 7, Event::FuncEntry { func: 2 })
        .at(120, 0, 7, enter(0, 9, 10))
        .at(130, 0, 7, exit(0, 10))
        .at(
            150,
            0,
            7,
            Event::FuncExit {
                func: 2,
                ret: -5i64 as u64,
            },
        )
        .at(200, 0, 7, Event::FuncExit { func: 1, ret: 0 })
        .stop(300);
    let dir = tempfile::tempdir().unwrap();
    let inputs = write(dir.path(), &[&b]);
    let out = dir.path().join("out");
    to_parquet(&inputs, &out, Partition::default());
    let calls = read_table(&out, "calls");
    let by = |f: &str| {
        (calls.rows.iter())
            .find(|r| r["function"].s() == f)
            .unwrap()
    };
    let (o, i) = (by("outer"), by("inner"));
    assert_eq!(i["parent_id"], o["call_id"]);
    assert_eq!(o["parent_id"], V::Null);
    assert_eq!((o["depth"].i(), i["depth"].i()), (0, 1));
    assert_eq!(o["self_ns"].i(), 100_000 - 40_000);
    assert_eq!((i["error"].b(), i["ret"].i()), (true, -5));
    assert_eq!((o["connection"].i(), i["connection"].i()), (1, 1));
    assert_eq!(o["running_ns"].i(), 100_000);
    let sys = read_table(&out, "syscalls");
    let read = (sys.rows.iter()).find(|r| r["name"].s() == "read").unwrap();
    assert_eq!(read["call_id"], i["call_id"]);
}

/// Two hosts whose monotonic clocks differ by an hour: on the wall clock their rows line
/// up; partitioned by host and date, each host has its own directory.
#[test]
fn hosts_line_up_on_the_wall_clock_and_partition_by_host_and_date() {
    let a = server_scenario();
    let mut b = server_scenario();
    b.header.hostname = "web2".into();
    let hour = 3_600_000_000_000u64;
    b.header.start_ns += hour;
    b.header.monotonic_to_realtime_ns -= hour as i64;
    b.cpus = (b.cpus.iter())
        .map(|(c, v)| {
            (
                *c,
                v.iter().map(|(t, tid, e)| (t + hour, *tid, *e)).collect(),
            )
        })
        .collect();
    if let Some(l) = b.lost.as_mut() {
        l.at_ns += hour;
    }
    if let Some(t) = b.trailer.as_mut() {
        t.end_ns += hour;
    }
    let dir = tempfile::tempdir().unwrap();
    let inputs = write(dir.path(), &[&a, &b]);
    let out = dir.path().join("fleet");
    let partition = Partition {
        host: true,
        date: true,
    };
    let report = to_parquet(&inputs, &out, partition);
    assert_eq!(report.hosts, 2);
    let calls = read_table(&out, "calls");
    let starts: BTreeMap<String, Vec<i64>> = calls.rows.iter().fold(BTreeMap::new(), |mut m, r| {
        m.entry(r["host"].s().to_string())
            .or_default()
            .push(r["start_ns"].i());
        m
    });
    assert_eq!(starts["web1"], starts["web2"]);
    assert!(out
        .join("calls/host=web1/date=2025-05-20/part-0.parquet")
        .exists());
    assert!(out
        .join("calls/host=web2/date=2025-05-20/part-0.parquet")
        .exists());
    // The partition columns are in the path, not in the files.
    let one = common::read_file(&out.join("calls/host=web2/date=2025-05-20/part-0.parquet"));
    assert!(!one.columns.iter().any(|c| c == "host"));
    // Connection ids are unique across hosts.
    let conns: Vec<i64> = (read_table(&out, "links").rows.iter())
        .filter_map(|r| r["connection"].opt())
        .collect();
    assert_eq!(conns.len(), 2);
    assert_ne!(conns[0], conns[1]);
    // The monotonic times are each host's own.
    let mono: Vec<i64> = (calls.rows.iter())
        .filter(|r| r["function"].s() == "handle_accept")
        .map(|r| r["start_mono_ns"].i())
        .collect();
    assert_eq!(mono.len(), 2);
    assert_eq!((mono[0] - mono[1]).abs(), hour as i64);
}

/// Probe ids no probe table defines and system call numbers past every table, as a
/// damaged or hostile file may carry (u32::MAX among them): rows named `function_N` and
/// `syscall_N`, as the summary names them, and no allocation in proportion to the id
/// (a table indexed by it would ask for tens of GiB here).
#[test]
fn huge_probe_ids_and_syscall_numbers_are_named_unknown_without_a_table_that_size() {
    let mut b = TraceBuilder::new("h", 1);
    b.process(7, "/srv/x")
        .thread(7, 7, "main", 'R')
        .probe(1, "known");
    let mut t = 10;
    for id in [1, u32::MAX, u32::MAX - 1, 1 << 20] {
        b.at(t, 0, 7, Event::FuncEntry { func: id }).at(
            t + 5,
            0,
            7,
            Event::FuncExit { func: id, ret: 0 },
        );
        t += 10;
    }
    for nr in [
        0,
        469,
        470,
        tracer_abi::MAX_SYSCALLS,
        u32::MAX,
        u32::MAX - 1,
    ] {
        b.at(t, 0, 7, enter(nr, 3, 4)).at(t + 5, 0, 7, exit(nr, 0));
        t += 10;
    }
    b.stop(t);
    let dir = tempfile::tempdir().unwrap();
    let inputs = write(dir.path(), &[&b]);
    let out = dir.path().join("out");
    to_parquet(&inputs, &out, Partition::default());
    let s = summarize(&inputs).unwrap();
    let calls = read_table(&out, "calls");
    assert_eq!(functions_of_rows(&calls), functions_of_summary(&s));
    // The nr column is an INT32: numbers past i32::MAX read back negative.
    let rows: BTreeMap<i64, [i64; 8]> = (syscalls_of_rows(&out).into_iter())
        .map(|(nr, x)| (nr as u32 as i64, x))
        .collect();
    assert_eq!(rows, syscalls_of_summary(&s));
    let mut funcs: Vec<&str> = calls.rows.iter().map(|r| r["function"].s()).collect();
    funcs.sort();
    let want = [
        "function_1048576".to_string(),
        format!("function_{}", u32::MAX - 1),
        format!("function_{}", u32::MAX),
        "known".to_string(),
    ];
    assert_eq!(funcs, want);
    let sys = read_table(&out, "syscalls");
    let names: BTreeMap<i64, &str> = (sys.rows.iter())
        .map(|r| (r["nr"].i(), r["name"].s()))
        .collect();
    assert_eq!(names.len(), 6, "{names:?}");
    assert_eq!(names[&0], "read");
    for (&nr, name) in &names {
        // The nr column is an INT32: u32::MAX reads back as -1.
        let nr = nr as u32;
        let want = tracer_abi::syscalls::name(nr).map_or(format!("syscall_{nr}"), String::from);
        assert_eq!(*name, want, "{names:?}");
    }
    assert_eq!(names[&-1], format!("syscall_{}", u32::MAX));
}

#[test]
fn an_existing_output_is_refused_without_force_and_replaced_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = write(dir.path(), &[&server_scenario()]);
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("keep"), b"x").unwrap();
    let err = convert(&inputs, &out, &Options::default()).unwrap_err();
    assert!(matches!(err, trace_parquet::Error::Exists { .. }), "{err}");
    assert!(!err.to_string().contains('\n'));
    assert!(out.join("keep").exists());
    let opts = Options {
        force: true,
        ..Default::default()
    };
    convert(&inputs, &out, &opts).unwrap();
    assert!(!out.join("keep").exists());
    assert!(out.join("calls.parquet").exists());
    // Nothing is left beside it.
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
    assert_eq!(left.len(), 2, "{left:?}");
}

#[test]
fn a_damaged_file_is_one_line_of_error_and_salvage_reads_past_it() {
    let dir = tempfile::tempdir().unwrap();
    let t = random_scenario(7, 2, 4, 4000);
    let path = dir.path().join("d.trace");
    let mut bytes = t.bytes();
    // Damage a byte in the middle (an Events chunk's payload).
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let out = dir.path().join("out");
    let err = convert(std::slice::from_ref(&path), &out, &Options::default()).unwrap_err();
    let msg = err.to_string();
    assert!(!msg.contains('\n') && msg.contains("d.trace"), "{msg}");
    assert!(!out.exists());
    let opts = Options {
        merge: trace_parquet::MergeOptions {
            salvage: true,
            ..Default::default()
        },
        ..Default::default()
    };
    convert(std::slice::from_ref(&path), &out, &opts).unwrap();
    let files = read_table(&out, "files");
    assert_eq!(files.rows[0]["damaged_regions"].i(), 1);
    assert!(files.rows[0]["damaged_bytes"].i() > 0);
}

/// A stat file written as `tracer stat` writes them: header, probes, threads, windows.
fn stat_file(path: &Path, host: &str, windows: u64) {
    use trace_file::{
        ChunkKind, FuncWindow, Probe, StatWindow, SysWindow, ThreadInfo, ThreadWindow, Writer,
    };
    let mut b = TraceBuilder::new(host, 2);
    b.header.mode = "stat".into();
    let mut w = Writer::new(Vec::new()).unwrap();
    w.meta(ChunkKind::Header, &b.header).unwrap();
    let threads = vec![
        ThreadInfo {
            tgid: 10,
            tid: 10,
            name: "srv".into(),
            state: 'S',
            host_tid: None,
        },
        ThreadInfo {
            tgid: 10,
            tid: 11,
            name: "worker".into(),
            state: 'S',
            host_tid: None,
        },
    ];
    w.meta(ChunkKind::Threads, &threads).unwrap();
    let probes = vec![Probe {
        id: 1,
        name: "handle_request".into(),
        binary: "/srv/server".into(),
        ..Default::default()
    }];
    w.meta(ChunkKind::Probes, &probes).unwrap();
    let sec = 1_000_000_000;
    for i in 0..windows {
        let win = StatWindow {
            start_ns: START + i * sec,
            end_ns: START + (i + 1) * sec,
            functions: vec![FuncWindow {
                id: 1,
                calls: 100 + i,
                // One call in two timed: the summary scales time to all calls.
                timed: Some(50 + i),
                errors: i,
                total_ns: 5_000_000 * (i + 1),
                buckets: Vec::new(),
                hist: vec![0, 0, 3, 97 + i],
                untimed: 0,
            }],
            threads: vec![ThreadWindow {
                tgid: 10,
                tid: 11,
                name: String::new(),
                running_ns: 1000 * (i + 1),
                ready_ns: 10,
                blocked_ns: 20 + i,
                io_ns: 0,
                voluntary: 5,
                involuntary: 1,
                wakeups_sent: 2,
                wakeups_received: 3,
                migrations: i,
                wait_hist: vec![1, 2],
                syscalls: 7,
                syscall_ns: 700,
            }],
            syscalls: vec![
                SysWindow {
                    nr: 0,
                    calls: 4,
                    errors: 1,
                    total_ns: 400 + i,
                    positive_sum: 4096,
                    buckets: Vec::new(),
                    hist: Vec::new(),
                },
                SysWindow {
                    nr: 1,
                    calls: 3,
                    errors: 0,
                    total_ns: 300,
                    positive_sum: 300,
                    buckets: Vec::new(),
                    hist: Vec::new(),
                },
            ],
            dropped: 0,
            stacks: Vec::new(),
            stack_period_ns: 0,
        };
        w.meta(ChunkKind::Window, &win).unwrap();
    }
    std::fs::write(path, w.into_inner()).unwrap();
}

#[test]
fn stat_windows_add_up_to_the_summary_of_stat_files_and_mix_with_recordings() {
    let dir = tempfile::tempdir().unwrap();
    let stats: Vec<PathBuf> = (0..3)
        .map(|i| {
            let p = dir.path().join(format!("h{i}.stat"));
            stat_file(&p, &format!("host{i}"), 4 + i);
            p
        })
        .collect();
    let rec = write(dir.path(), &[&server_scenario()]);
    let mut inputs = stats.clone();
    inputs.extend(rec);
    let out = dir.path().join("fleet");
    let partition = Partition {
        host: true,
        date: true,
    };
    let report = to_parquet(&inputs, &out, partition);
    assert_eq!(
        (report.stat_files, report.record_files, report.hosts),
        (3, 1, 4)
    );
    assert_eq!(read_table(&out, "calls").rows.len(), 2);
    let s = summarize(&stats).unwrap();
    let w = read_table(&out, "windows");
    let mut calls = BTreeMap::new();
    let mut totals = BTreeMap::new();
    let mut timed = BTreeMap::new();
    let mut thread = BTreeMap::new();
    let mut sys = BTreeMap::new();
    for r in &w.rows {
        match r["kind"].s() {
            "function" => {
                let f = r["function"].s().to_string();
                add(&mut calls, f.clone(), r["calls"].i());
                add(&mut timed, f.clone(), r["timed_calls"].i());
                add(&mut totals, f, r["total_ns"].i());
            }
            "thread" => {
                for c in [
                    "running_ns",
                    "blocked_ns",
                    "migrations",
                    "ready_waits",
                    "syscall_ns",
                ] {
                    add(&mut thread, (r["tid"].i(), c), r[c].i());
                }
            }
            _ => {
                add(&mut sys, (r["nr"].i(), "calls"), r["calls"].i());
                add(&mut sys, (r["nr"].i(), "total_ns"), r["total_ns"].i());
                add(&mut sys, (r["nr"].i(), "bytes_read"), r["bytes_read"].i());
                add(
                    &mut sys,
                    (r["nr"].i(), "bytes_written"),
                    r["bytes_written"].i(),
                );
            }
        }
    }
    let f = s.function("handle_request").unwrap();
    assert_eq!(calls["handle_request"], f.calls as i64);
    // docs/sql.md's estimate of all calls' time, the summary's.
    let h = "handle_request";
    assert!(f.estimated);
    assert_eq!(
        totals[h] * calls[h] / timed[h],
        f.inclusive_ns as i64,
        "timed {}",
        timed[h]
    );
    let t = s.thread(11).unwrap();
    assert_eq!(thread[&(11, "running_ns")], t.running_ns as i64);
    assert_eq!(thread[&(11, "blocked_ns")], t.blocked_ns as i64);
    assert_eq!(thread[&(11, "migrations")], t.migrations as i64);
    assert_eq!(thread[&(11, "ready_waits")], t.ready_waits.unwrap() as i64);
    assert_eq!(thread[&(11, "syscall_ns")], t.syscall_ns as i64);
    for x in s.syscalls() {
        let nr = x.nr as i64;
        assert_eq!(sys[&(nr, "calls")], x.calls as i64);
        assert_eq!(sys[&(nr, "total_ns")], x.total_ns as i64);
        assert_eq!(sys[&(nr, "bytes_read")], x.bytes_read as i64);
        assert_eq!(sys[&(nr, "bytes_written")], x.bytes_written as i64);
    }
    // Each host's windows in its own directory; the window's wall-clock start.
    assert!(out
        .join("windows/host=host2/date=2025-05-20/part-0.parquet")
        .exists());
    let first = (w.rows.iter())
        .map(|r| r["window_start_ns"].i())
        .min()
        .unwrap();
    assert_eq!(first, START as i64 + M2R);
    let files = read_table(&out, "files");
    let modes: Vec<&str> = files.rows.iter().map(|r| r["mode"].s()).collect();
    assert_eq!(modes.iter().filter(|m| **m == "stat").count(), 3);
}

/// A table as documented: its name and columns (name, type, nullable).
type Doc = (String, Vec<(String, String, bool)>);

/// docs/parquet.md lists every table's columns, in order, with their types.
#[test]
fn the_documented_schema_is_the_written_one() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/parquet.md"))
            .unwrap();
    assert!(doc.contains(&format!("**`{SCHEMA_VERSION}`**")));
    let mut documented: Vec<Doc> = vec![];
    for line in doc.lines() {
        if let Some(t) = line.strip_prefix("## ") {
            documented.push((t.trim().to_string(), vec![]));
        } else if let Some(rest) = line.strip_prefix("| `") {
            let cells: Vec<&str> = rest.split('|').map(str::trim).collect();
            let name = cells[0].trim_end_matches('`').to_string();
            let (ty, null) = match cells[1].split_once(", ") {
                Some((t, "null")) => (t.to_string(), true),
                _ => (cells[1].to_string(), false),
            };
            documented.last_mut().unwrap().1.push((name, ty, null));
        }
    }
    documented.retain(|(_, c)| !c.is_empty());
    let written: Vec<Doc> = (trace_parquet::schema().into_iter())
        .map(|(t, c)| {
            let c = c.into_iter().map(|(n, ty, null)| (n.to_string(), ty, null));
            (t.to_string(), c.collect())
        })
        .collect();
    assert_eq!(documented, written);
}

/// Every table exists in an unpartitioned output, with its documented columns, even
/// without rows; written with the zstd codec.
#[test]
fn every_table_is_written_with_zstd() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = write(dir.path(), &[&server_scenario()]);
    let out = dir.path().join("out");
    to_parquet(&inputs, &out, Partition::default());
    for (table, cols) in trace_parquet::schema() {
        let path = out.join(format!("{table}.parquet"));
        let t = common::read_file(&path);
        let names: Vec<&str> = cols.iter().map(|c| c.0).collect();
        if !t.rows.is_empty() {
            assert_eq!(t.columns, names, "{table}");
        }
        let r =
            parquet::file::reader::SerializedFileReader::new(std::fs::File::open(&path).unwrap())
                .unwrap();
        use parquet::file::reader::FileReader;
        for rg in r.metadata().row_groups() {
            for c in rg.columns() {
                assert!(
                    matches!(c.compression(), parquet::basic::Compression::ZSTD(_)),
                    "{table}"
                );
            }
        }
    }
}
