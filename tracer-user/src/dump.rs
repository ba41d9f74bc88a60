//! `tracer dump`: a trace as text, one line per record, for debugging and tests.

use std::{
    fs::File,
    io::{BufReader, BufWriter, Write},
    path::Path,
};

use anyhow::{Context, Result};
use trace_file::{
    Chunk, ChunkKind, Event, EventChunkDecoder, LostCounts, Probe, ProcessInfo, ReadOptions,
    Reader, Skipped, StatWindow, ThreadInfo, TraceHeader, Trailer,
};

/// Prints every chunk of `path` in file order. Records are printed as
/// `TIME_NS cpu=N tid=N KIND fields`, with TIME_NS relative to the start of recording.
/// With `salvage`, damaged chunks are stepped over and a `# damaged` line says where.
pub fn dump(path: &Path, salvage: bool) -> Result<()> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let opts = ReadOptions { salvage };
    let mut reader = Reader::with_options(BufReader::with_capacity(1 << 20, file), opts)
        .with_context(|| format!("{}", path.display()))?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut start = 0u64;
    let mut skips_seen = 0;
    let mut buf = Vec::new();
    let result = (|| -> Result<()> {
        while let Some(chunk) = reader.next_chunk()? {
            for k in &reader.skipped()[skips_seen..] {
                writeln!(out, "# damaged: {}", skipped(k, start))?;
            }
            skips_seen = reader.skipped().len();
            buf.clear();
            match write_chunk(&mut buf, &chunk, &mut start) {
                Ok(()) => out.write_all(&buf)?,
                // A chunk that checked but does not decode: skipped too, and said.
                Err(e) if salvage => {
                    writeln!(out, "# damaged: the chunk at byte {} ({e:#})", chunk.offset)?
                }
                Err(e) => {
                    out.write_all(&buf)?;
                    return Err(e);
                }
            }
        }
        Ok(())
    })();
    out.flush().ok();
    result.with_context(|| format!("{}", path.display()))?;
    if let Some(at) = reader.truncated_at() {
        eprintln!(
            "tracer: warning: {} ends inside a chunk at byte {at} (the recorder was killed?); everything before it was read",
            path.display()
        );
    }
    Ok(())
}

/// One chunk as text into `out`; a header sets `start`, the time records are shown from.
fn write_chunk(out: &mut Vec<u8>, chunk: &Chunk, start: &mut u64) -> Result<()> {
    match chunk.kind {
        ChunkKind::Header => {
            let h: TraceHeader = chunk.meta()?;
            *start = h.start_ns;
            writeln!(
                out,
                "# header host={} kernel={} cpus={} clock={} start_ns={} monotonic_to_realtime_ns={} tracer={}",
                h.hostname, h.kernel, h.cpus, h.clock, h.start_ns, h.monotonic_to_realtime_ns, h.tracer_version
            )?;
            writeln!(out, "# command {}", one_line(&h.command_line.join(" ")))?;
        }
        ChunkKind::Process => {
            let p: ProcessInfo = chunk.meta()?;
            writeln!(
                out,
                "# process tgid={}{} exe={} launched={} cmdline={}",
                p.tgid,
                host_id("pid", p.host_pid),
                one_line(&p.exe),
                p.launched,
                one_line(&p.cmdline.join(" "))
            )?;
        }
        ChunkKind::Threads => {
            let threads: Vec<ThreadInfo> = chunk.meta()?;
            for t in threads {
                writeln!(
                    out,
                    "# thread tgid={} tid={}{} state={} name={}",
                    t.tgid,
                    t.tid,
                    host_id("tid", t.host_tid),
                    t.state,
                    one_line(&t.name)
                )?;
            }
        }
        ChunkKind::Probes => {
            let probes: Vec<Probe> = chunk.meta()?;
            for p in probes {
                writeln!(
                    out,
                    "# probe id={} name={} binary={} address={:#x} file_offset={:#x} skipped={} source={}",
                    p.id,
                    p.name,
                    p.binary,
                    p.address,
                    p.file_offset,
                    p.skipped,
                    p.source.as_deref().unwrap_or("-")
                )?;
            }
        }
        ChunkKind::Stacks => {
            let t: trace_file::StackTable = chunk.meta()?;
            for m in &t.mappings {
                for e in &m.maps {
                    writeln!(
                        out,
                        "# mapping tgid={} start={:#x} end={:#x} offset={:#x} build_id={} path={}",
                        m.tgid,
                        e.start,
                        e.end,
                        e.offset,
                        e.build_id.as_deref().unwrap_or("-"),
                        e.path
                    )?;
                }
            }
            for k in &t.kernel_symbols {
                writeln!(
                    out,
                    "# kernel_symbol addr={:#x} end={:#x} name={}",
                    k.addr, k.end, k.name
                )?;
            }
            for j in &t.jit_symbols {
                writeln!(
                    out,
                    "# jit_symbol tgid={} start={:#x} end={:#x} name={}",
                    j.tgid, j.start, j.end, j.name
                )?;
            }
            for s in &t.stacks {
                let hex = |v: &[u64]| {
                    v.iter()
                        .map(|a| format!("{a:#x}"))
                        .collect::<Vec<_>>()
                        .join(",")
                };
                writeln!(
                    out,
                    "# stack id={} tgid={} cut={} user={} kernel={}",
                    s.id,
                    s.tgid,
                    s.cut.as_deref().unwrap_or("-"),
                    hex(&s.user),
                    hex(&s.kernel)
                )?;
            }
        }
        ChunkKind::Events => {
            for r in EventChunkDecoder::new(&chunk.payload, chunk.offset)? {
                let r = r?;
                let t = r.ts as i64 - *start as i64;
                writeln!(
                    out,
                    "{t} cpu={} tid={} {}",
                    r.cpu,
                    r.tid,
                    describe(&r.event)
                )?;
            }
        }
        ChunkKind::Lost => {
            let l: LostCounts = chunk.meta()?;
            writeln!(
                out,
                "# lost per_cpu={:?} threads_not_traced={} skipped={} stacks_shed={}",
                l.per_cpu, l.threads_not_traced, l.skipped, l.stacks_shed
            )?;
        }
        ChunkKind::Trailer => {
            let t: Trailer = chunk.meta()?;
            writeln!(
                out,
                "# trailer end_ns={} reason={} lost={} records={:?}",
                t.end_ns, t.reason, t.lost, t.records
            )?;
        }
        ChunkKind::Window => {
            let win: StatWindow = chunk.meta()?;
            writeln!(
                out,
                "# window {}..{} ns: {} functions, {} threads, {} syscalls, dropped={}",
                win.start_ns as i64 - *start as i64,
                win.end_ns as i64 - *start as i64,
                win.functions.len(),
                win.threads.len(),
                win.syscalls.len(),
                win.dropped
            )?;
            for f in &win.functions {
                writeln!(
                    out,
                    "#   func id={} calls={} errors={} total_ns={}",
                    f.id, f.calls, f.errors, f.total_ns
                )?;
            }
            for t in &win.threads {
                writeln!(
                    out,
                    "#   thread tid={} name={} running_ns={} ready_ns={} blocked_ns={} io_ns={} voluntary={} involuntary={} wakeups_sent={} wakeups_received={} migrations={} syscalls={} waits={}",
                    t.tid, t.name, t.running_ns, t.ready_ns, t.blocked_ns, t.io_ns, t.voluntary, t.involuntary, t.wakeups_sent, t.wakeups_received, t.migrations, t.syscalls,
                    t.wait_hist.iter().sum::<u64>()
                )?;
            }
            for c in &win.syscalls {
                writeln!(
                    out,
                    "#   syscall {} calls={} errors={} total_ns={} positive_sum={}",
                    sys(c.nr),
                    c.calls,
                    c.errors,
                    c.total_ns,
                    c.positive_sum
                )?;
            }
        }
        ChunkKind::Unknown(code) => writeln!(out, "# unknown chunk kind {code}")?,
    }
    Ok(())
}

/// ` host_pid=N` (or tid) when the file keeps the kernel's id beside the container's.
fn host_id(what: &str, id: Option<u32>) -> String {
    id.map_or(String::new(), |id| format!(" host_{what}={id}"))
}

/// A region a salvaging read stepped over, as a `# damaged` line says it.
fn skipped(k: &Skipped, start: u64) -> String {
    let mut s = format!("{} bytes at byte {} skipped", k.bytes, k.offset);
    match (k.kind, k.cpu) {
        (Some(ChunkKind::Events), Some(cpu)) => {
            s += &format!(" (an Events chunk of CPU {cpu}");
            if let Some(t) = k.first_ts {
                s += &format!(", records from {}", t as i64 - start as i64);
            }
            s += ")";
        }
        (Some(kind), _) => s += &format!(" (a {kind:?} chunk)"),
        (None, _) => s += &format!(" ({} chunks or more)", k.chunks),
    }
    s
}

fn sys(nr: u32) -> String {
    trace_merge::sysclass::name(nr).into_owned()
}

/// One record's fields as `key=value` text.
pub fn describe(e: &Event) -> String {
    match *e {
        Event::FuncEntry { func } => format!("func_entry func={func}"),
        Event::FuncExit { func, ret } => format!("func_exit func={func} ret={}", ret as i64),
        Event::SysEnter { nr, arg0, arg2 } => {
            format!("sys_enter {} arg0={} arg2={}", sys(nr), arg0 as i64, arg2)
        }
        Event::SysExit { nr, ret } => format!("sys_exit {} ret={ret}", sys(nr)),
        Event::Switch {
            next_tid,
            prev_state,
        } => format!("switch next_tid={next_tid} prev_state={prev_state:#x}"),
        Event::Wakeup {
            wakee,
            target_cpu,
            new,
        } => format!(
            "{} wakee={wakee} target_cpu={target_cpu}",
            if new { "wakeup_new" } else { "wakeup" }
        ),
        Event::NewTask {
            child_tid,
            child_tgid,
            comm,
        } => format!(
            "new_task child_tid={child_tid} child_tgid={child_tgid} name={}",
            comm.as_str()
        ),
        Event::Exit { tgid, group_dead } => {
            format!("exit tgid={tgid} group_dead={}", group_dead as u8)
        }
        Event::Rename { comm } => format!("rename name={}", comm.as_str()),
        Event::Exec { comm } => format!("exec name={}", comm.as_str()),
        Event::Usdt { probe, nargs, args } => {
            let mut s = format!("usdt probe={probe}");
            for (i, a) in args.iter().take(nargs as usize).enumerate() {
                s.push_str(&format!(" arg{i}={}", *a as i64));
            }
            s
        }
        Event::GoEntry { func, g, height } => {
            format!("go_entry func={func} g={g:#x} height={height}")
        }
        Event::GoExit {
            func,
            ret,
            g,
            height,
        } => format!(
            "go_exit func={func} ret={} g={g:#x} height={height}",
            ret as i64
        ),
        Event::Sample { stack, period } => format!("sample stack={stack} period_ns={period}"),
        Event::BlockStack { stack } => format!("block_stack stack={stack}"),
        Event::GoStatus { g, old, new } => format!("go_status g={g:#x} old={old} new={new}"),
        Event::FrameEntry {
            func,
            sp,
            switching,
        } => format!(
            "frame_entry func={func} sp={sp:#x}{}",
            if switching { " switching" } else { "" }
        ),
        Event::FrameExit { func, sp, ret } => match ret {
            Some(r) => format!("frame_exit func={func} ret={} sp={sp:#x}", r as i64),
            None => format!("frame_exit func={func} tail_call sp={sp:#x}"),
        },
    }
}

/// `s` on one line of the dump: its control characters (a command line's newlines, a
/// thread named with a tab) escaped as Rust writes them, so that every record stays one
/// line for tools that read the dump line by line.
fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return s.into();
    }
    (s.chars())
        .map(|c| match c.is_control() {
            true => c.escape_default().to_string(),
            false => c.to_string(),
        })
        .collect::<String>()
        .into()
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(super::one_line("bash -c 'a\nb'"), "bash -c 'a\\nb'");
        assert_eq!(super::one_line("x\ty"), "x\\ty");
        assert_eq!(super::one_line("plain é"), "plain é");
    }
}
