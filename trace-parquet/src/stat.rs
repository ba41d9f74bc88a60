//! Counting-mode files (`tracer stat`) to rows: each window's functions, threads and
//! system calls become `windows` rows as the file is read, with the figures
//! `tracer summary` adds up over windows; the file's probes, threads and processes go to
//! the small tables.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use trace_file::{
    latency_buckets, wait_buckets, ChunkKind, FuncWindow, Probe, ProcessInfo, ReadOptions, Reader,
    StatWindow, SysWindow, ThreadInfo, ThreadWindow, TraceHeader,
};
use trace_merge::sysclass;

use crate::error::{Error, Result};
use crate::meta::{self, FileRow, ProcessRow};
use crate::Out;

/// What is known of the file while its windows are read.
struct StatFile {
    header: TraceHeader,
    host: i32,
    run: i32,
    probes: Vec<Probe>,
    threads: Vec<ThreadInfo>,
    processes: Vec<ProcessInfo>,
    keys: Keys,
    end: Option<u64>,
    lost: u64,
}

struct Keys {
    function: i32,
    thread: i32,
    syscall: i32,
}

/// Converts one stat file.
pub(crate) fn convert_file(path: &Path, salvage: bool, out: &mut Out) -> Result<()> {
    let file = File::open(path).map_err(|e| Error::trace(path, e.into()))?;
    let mut r = Reader::with_options(BufReader::new(file), ReadOptions { salvage })
        .map_err(|e| Error::trace(path, e))?;
    let mut f: Option<StatFile> = None;
    let mut damaged = (0usize, 0u64);
    while let Some(c) = r.next_chunk().map_err(|e| Error::trace(path, e))? {
        let read: std::result::Result<(), trace_file::Error> = match (c.kind, f.as_mut()) {
            (ChunkKind::Header, None) => c.meta::<TraceHeader>().map(|header| {
                let s = &mut out.strings;
                let keys = Keys {
                    function: s.key("function"),
                    thread: s.key("thread"),
                    syscall: s.key("syscall"),
                };
                f = Some(StatFile {
                    host: s.key(&header.hostname),
                    run: s.key(&meta::run_of(&header, path)),
                    header,
                    probes: Vec::new(),
                    threads: Vec::new(),
                    processes: Vec::new(),
                    keys,
                    end: None,
                    lost: 0,
                });
            }),
            (ChunkKind::Probes, Some(f)) => c.meta::<Vec<Probe>>().map(|p| f.probes.extend(p)),
            (ChunkKind::Threads, Some(f)) => {
                c.meta::<Vec<ThreadInfo>>().map(|t| f.threads.extend(t))
            }
            (ChunkKind::Process, Some(f)) => c.meta::<ProcessInfo>().map(|p| f.processes.push(p)),
            (ChunkKind::Window, Some(f)) => match c.meta::<StatWindow>() {
                Ok(w) => {
                    f.end = Some(w.end_ns);
                    f.lost = w.dropped;
                    window_rows(out, f, &w)?;
                    Ok(())
                }
                Err(e) => Err(e),
            },
            _ => Ok(()),
        };
        if let Err(e) = read {
            // A chunk that checked but does not decode: skipped when salvaging.
            if !salvage {
                return Err(Error::trace(path, e));
            }
            damaged.0 += 1;
            damaged.1 += c.payload.len() as u64;
        }
    }
    let Some(f) = f else {
        return Err(Error::Input(trace_merge::Error::Invalid {
            path: path.to_owned(),
            what: "no header chunk".into(),
        }));
    };
    damaged.0 += r.skipped().len();
    damaged.1 += r.skipped().iter().map(|k| k.bytes).sum::<u64>();
    let m2r = f.header.monotonic_to_realtime_ns;
    let wall = |t: u64| (t as i64).saturating_add(m2r);
    let start = wall(f.header.start_ns);
    identity_rows(out, &f, path, start)?;
    meta::file_row(
        out,
        &FileRow {
            path,
            header: &f.header,
            host: f.host,
            run: f.run,
            start_ns: start,
            end_ns: f.end.map(wall),
            lost: f.lost,
            truncated: r.truncated_at().is_some(),
            damaged,
        },
    )
}

/// The probes, threads and processes of stat file `f`, as rows of their tables; `start` is
/// the file's start in wall-clock ns.
fn identity_rows(out: &mut Out, f: &StatFile, path: &Path, start: i64) -> Result<()> {
    for p in &f.probes {
        meta::probe_row(out, f.host, f.run, p)?;
    }
    for t in &f.threads {
        let s = &mut out.strings;
        let name = s.key(&t.name);
        let process = s.key(&process_name(f, t.tgid));
        let b = out.threads.at(s, f.host, 0)?;
        b.host.push(f.host);
        b.run.push(f.run);
        b.pid.append_value(t.tgid as i32);
        b.tid.append_value(t.tid as i32);
        b.thread.push(name);
        b.process.push(process);
        b.first_seen_ns.append_value(start);
        b.file.append_value(path.display().to_string());
        b.row();
    }
    let mut pids: Vec<u32> = f.threads.iter().map(|t| t.tgid).collect();
    pids.extend(f.processes.iter().map(|p| p.tgid));
    pids.sort_unstable();
    pids.dedup();
    for pid in pids {
        let name = process_name(f, pid);
        let row = ProcessRow {
            host: f.host,
            run: f.run,
            pid,
            name: &name,
            info: f.processes.iter().find(|p| p.tgid == pid),
            threads: f.threads.iter().filter(|t| t.tgid == pid).count() as u32,
        };
        meta::process_row(out, &row)?;
    }
    Ok(())
}

/// A process's name, as the summary gives it: its main thread's.
fn process_name(f: &StatFile, pid: u32) -> String {
    (f.threads.iter())
        .find(|t| t.tid == pid)
        .map(|t| t.name.clone())
        .or_else(|| {
            (f.processes.iter().find(|p| p.tgid == pid)).map(|p| {
                let exe = Path::new(&p.exe);
                exe.file_name()
                    .map_or(p.exe.clone(), |n| n.to_string_lossy().into())
            })
        })
        .unwrap_or_default()
}

/// One window's rows: in `windows` a row per function, thread and system call, and in
/// `latencies` their histograms.
fn window_rows(out: &mut Out, f: &StatFile, w: &StatWindow) -> Result<()> {
    for fw in &w.functions {
        function_rows(out, f, w, fw)?;
    }
    for t in &w.threads {
        thread_rows(out, f, w, t)?;
    }
    for c in &w.syscalls {
        syscall_rows(out, f, w, c)?;
    }
    Ok(())
}

/// Whose figures a row gives: its kind's key and the identity columns of that kind.
#[derive(Default)]
struct Element {
    kind: i32,
    /// Name and binary keys.
    function: Option<(i32, i32)>,
    /// Process id, thread id and name key.
    thread: Option<(u32, u32, i32)>,
    /// Number and name key.
    syscall: Option<(u32, i32)>,
}

/// Pushes the columns of a `windows` or `latencies` row that say when and whose: the
/// window, then the element's identity (null where its kind has none).
macro_rules! identity {
    ($b:expr, $f:expr, $w:expr, $e:expr) => {{
        let m2r = $f.header.monotonic_to_realtime_ns;
        $b.host.push($f.host);
        $b.run.push($f.run);
        $b.kind.push($e.kind);
        $b.window_start_ns
            .append_value(($w.start_ns as i64).saturating_add(m2r));
        $b.window_end_ns
            .append_value(($w.end_ns as i64).saturating_add(m2r));
        $b.window_start_mono_ns.append_value($w.start_ns as i64);
        $b.function.push_opt($e.function.map(|k| k.0));
        $b.binary.push_opt($e.function.map(|k| k.1));
        $b.pid.append_option($e.thread.map(|t| t.0 as i32));
        $b.tid.append_option($e.thread.map(|t| t.1 as i32));
        $b.thread.push_opt($e.thread.map(|t| t.2));
        $b.nr.append_option($e.syscall.map(|s| s.0 as i32));
        $b.syscall.push_opt($e.syscall.map(|s| s.1));
    }};
}

/// The window's start, wall clock: where its rows are partitioned.
fn wall_start(f: &StatFile, w: &StatWindow) -> i64 {
    (w.start_ns as i64).saturating_add(f.header.monotonic_to_realtime_ns)
}

fn function_rows(out: &mut Out, f: &StatFile, w: &StatWindow, fw: &FuncWindow) -> Result<()> {
    // As the summary: a function not in the probe table is not shown.
    let Some(p) = f.probes.iter().find(|p| p.id == fw.id) else {
        return Ok(());
    };
    let s = &mut out.strings;
    let e = Element {
        kind: f.keys.function,
        function: Some((s.key(&p.name), s.key(&p.binary))),
        ..Element::default()
    };
    let b = out.windows.at(s, f.host, wall_start(f, w))?;
    identity!(b, f, w, e);
    b.calls.append_value(fw.calls as i64);
    b.timed_calls.append_value(fw.timed_calls() as i64);
    b.errors.append_value(fw.errors as i64);
    b.total_ns.append_value(fw.total_ns as i64);
    zeros(b, 0..14);
    b.row();
    latency_rows(out, f, w, &e, latency_buckets(&fw.buckets, &fw.hist))
}

fn thread_rows(out: &mut Out, f: &StatFile, w: &StatWindow, t: &ThreadWindow) -> Result<()> {
    let name = if t.name.is_empty() {
        (f.threads.iter().find(|x| x.tid == t.tid)).map_or("", |x| x.name.as_str())
    } else {
        t.name.as_str()
    };
    let s = &mut out.strings;
    let e = Element {
        kind: f.keys.thread,
        thread: Some((t.tgid, t.tid, s.key(name))),
        ..Element::default()
    };
    let b = out.windows.at(s, f.host, wall_start(f, w))?;
    identity!(b, f, w, e);
    b.calls.append_value(0);
    b.timed_calls.append_value(0);
    b.errors.append_value(0);
    b.total_ns.append_value(0);
    for (col, v) in [
        (&mut b.running_ns, t.running_ns),
        (&mut b.ready_ns, t.ready_ns),
        (&mut b.blocked_ns, t.blocked_ns),
        (&mut b.io_ns, t.io_ns),
        (&mut b.voluntary_switches, t.voluntary),
        (&mut b.involuntary_switches, t.involuntary),
        (&mut b.wakeups_sent, t.wakeups_sent),
        (&mut b.wakeups_received, t.wakeups_received),
        (&mut b.migrations, t.migrations),
        (&mut b.ready_waits, t.wait_hist.iter().sum()),
        (&mut b.syscalls, t.syscalls),
        (&mut b.syscall_ns, t.syscall_ns),
        (&mut b.bytes_read, 0),
        (&mut b.bytes_written, 0),
    ] {
        col.append_value(v as i64);
    }
    b.row();
    latency_rows(out, f, w, &e, wait_buckets(&t.wait_hist))
}

fn syscall_rows(out: &mut Out, f: &StatFile, w: &StatWindow, c: &SysWindow) -> Result<()> {
    let class = sysclass::class(c.nr);
    let s = &mut out.strings;
    let e = Element {
        kind: f.keys.syscall,
        syscall: Some((c.nr, s.key(&sysclass::name(c.nr)))),
        ..Element::default()
    };
    let b = out.windows.at(s, f.host, wall_start(f, w))?;
    identity!(b, f, w, e);
    b.calls.append_value(c.calls as i64);
    b.timed_calls.append_value(c.calls as i64);
    b.errors.append_value(c.errors as i64);
    b.total_ns.append_value(c.total_ns as i64);
    zeros(b, 0..12);
    let (read, written) = if class.reads {
        (c.positive_sum, 0)
    } else if class.writes {
        (0, c.positive_sum)
    } else {
        (0, 0)
    };
    b.bytes_read.append_value(read as i64);
    b.bytes_written.append_value(written as i64);
    b.row();
    latency_rows(out, f, w, &e, latency_buckets(&c.buckets, &c.hist))
}

/// The `latencies` rows of one element of window `w`: a row per duration standing for
/// calls (the summary's own reading of the buckets, `trace_file::latency_buckets`).
fn latency_rows(
    out: &mut Out,
    f: &StatFile,
    w: &StatWindow,
    e: &Element,
    buckets: impl Iterator<Item = (u64, u64)>,
) -> Result<()> {
    for (ns, count) in buckets {
        let b = out
            .latencies
            .at(&mut out.strings, f.host, wall_start(f, w))?;
        identity!(b, f, w, e);
        b.ns.append_value(i64::try_from(ns).unwrap_or(i64::MAX));
        b.count
            .append_value(i64::try_from(count).unwrap_or(i64::MAX));
        b.row();
    }
    Ok(())
}

/// Zeros in the thread figures' columns `range` (in table order from `running_ns`; 12
/// columns up to `syscall_ns`, 14 with the byte counts).
fn zeros(b: &mut crate::tables::Windows, range: std::ops::Range<usize>) {
    let cols = [
        &mut b.running_ns,
        &mut b.ready_ns,
        &mut b.blocked_ns,
        &mut b.io_ns,
        &mut b.voluntary_switches,
        &mut b.involuntary_switches,
        &mut b.wakeups_sent,
        &mut b.wakeups_received,
        &mut b.migrations,
        &mut b.ready_waits,
        &mut b.syscalls,
        &mut b.syscall_ns,
        &mut b.bytes_read,
        &mut b.bytes_written,
    ];
    for c in cols.into_iter().skip(range.start).take(range.len()) {
        c.append_value(0);
    }
}
