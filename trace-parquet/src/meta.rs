//! The small tables: `threads`, `processes`, `probes` and `files`, from what a host's
//! timeline knows at its end (recordings) or from a stat file's chunks.

use std::path::Path;

use trace_file::{Probe, ProbeKind, ProcessInfo, TraceHeader};
use trace_merge::merge::Source;
use trace_merge::timeline::Timeline;

use crate::columns::Strings;
use crate::error::Result;
use crate::Out;

/// The `run` column: the recorder's run id when it wrote several files (`--rotate`),
/// else the file's name (one file, one recording).
pub(crate) fn run_name(s: &Source) -> String {
    run_of(&s.header, &s.path)
}

pub(crate) fn run_of(h: &TraceHeader, path: &Path) -> String {
    if !h.run.is_empty() {
        return h.run.clone();
    }
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    )
}

/// The `kind` column of `calls` and `probes`.
pub(crate) fn probe_kind(k: &ProbeKind) -> &'static str {
    match k {
        ProbeKind::Function => "function",
        ProbeKind::Go => "go",
        ProbeKind::Usdt { .. } => "usdt",
    }
}

/// A `processes` row.
pub(crate) struct ProcessRow<'a> {
    pub(crate) host: i32,
    pub(crate) run: i32,
    pub(crate) pid: u32,
    pub(crate) name: &'a str,
    pub(crate) info: Option<&'a ProcessInfo>,
    pub(crate) threads: u32,
}

pub(crate) fn process_row(out: &mut Out, p: &ProcessRow) -> Result<()> {
    let s = &mut out.strings;
    let name = s.key(p.name);
    let b = out.processes.at(s, p.host, 0)?;
    b.host.push(p.host);
    b.run.push(p.run);
    b.pid.append_value(p.pid as i32);
    b.process.push(name);
    b.exe.append_option(p.info.map(|i| i.exe.as_str()));
    b.cmdline.append_option(p.info.map(|i| i.cmdline.join(" ")));
    b.launched.append_value(p.info.is_some_and(|i| i.launched));
    b.threads.append_value(p.threads as i32);
    b.row();
    Ok(())
}

pub(crate) fn probe_row(out: &mut Out, host: i32, run: i32, p: &Probe) -> Result<()> {
    let s = &mut out.strings;
    let (function, binary) = (s.key(&p.name), s.key(&p.binary));
    let kind = s.key(probe_kind(&p.kind));
    let b = out.probes.at(s, host, 0)?;
    b.host.push(host);
    b.run.push(run);
    b.id.append_value(p.id as i32);
    b.function.push(function);
    b.binary.push(binary);
    b.kind.push(kind);
    b.symbol.append_value(&p.symbol);
    b.build_id.append_option(p.build_id.as_deref());
    b.address.append_value(p.address as i64);
    b.size.append_value(p.size as i64);
    b.file_offset.append_value(p.file_offset as i64);
    b.source.append_option(p.source.as_deref());
    b.usdt_args.append_option(match &p.kind {
        ProbeKind::Usdt { args } => Some(args.as_str()),
        _ => None,
    });
    b.row();
    Ok(())
}

/// A `files` row.
pub(crate) struct FileRow<'a> {
    pub(crate) path: &'a Path,
    pub(crate) header: &'a TraceHeader,
    pub(crate) host: i32,
    pub(crate) run: i32,
    pub(crate) start_ns: i64,
    pub(crate) end_ns: Option<i64>,
    pub(crate) lost: u64,
    pub(crate) truncated: bool,
    /// (regions, bytes) stepped over by a salvaging read.
    pub(crate) damaged: (usize, u64),
}

pub(crate) fn file_row(out: &mut Out, f: &FileRow) -> Result<()> {
    let s: &mut Strings = &mut out.strings;
    let mode = s.key(if f.header.mode.is_empty() {
        "record"
    } else {
        &f.header.mode
    });
    let b = out.files.at(s, f.host, 0)?;
    b.path.append_value(f.path.display().to_string());
    b.host.push(f.host);
    b.run.push(f.run);
    b.part.append_value(f.header.part as i32);
    b.mode.push(mode);
    b.start_ns.append_value(f.start_ns);
    b.end_ns.append_option(f.end_ns);
    b.start_mono_ns.append_value(f.header.start_ns as i64);
    b.monotonic_to_realtime_ns
        .append_value(f.header.monotonic_to_realtime_ns);
    b.cpus.append_value(f.header.cpus as i32);
    b.kernel.append_value(&f.header.kernel);
    b.tracer_version.append_value(&f.header.tracer_version);
    b.lost.append_value(f.lost as i64);
    b.truncated.append_value(f.truncated);
    b.damaged_regions.append_value(f.damaged.0 as i32);
    b.damaged_bytes.append_value(f.damaged.1 as i64);
    b.row();
    Ok(())
}

/// The small tables of a host's recordings, once its timeline has ended. `zero`: wall
/// time of merge time 0.
pub(crate) fn timeline_tables(out: &mut Out, tl: &Timeline, host: i32, zero: i64) -> Result<()> {
    let sources = tl.merger().sources();
    let wall = |t: u64| (t as i64).saturating_add(zero);
    let runs: Vec<i32> = (sources.iter())
        .map(|s| out.strings.key(&run_name(&sources[s.identity as usize])))
        .collect();
    for m in tl.threads() {
        let s = &mut out.strings;
        let name = s.key(&m.name);
        let process = s.key(&tl.processes()[m.process as usize].name);
        let b = out.threads.at(s, host, 0)?;
        b.host.push(host);
        b.run.push(runs[m.source as usize]);
        b.pid.append_value(m.tgid as i32);
        b.tid.append_value(m.tid as i32);
        b.thread.push(name);
        b.process.push(process);
        b.first_seen_ns.append_value(wall(m.first_seen));
        b.file
            .append_value(sources[m.source as usize].path.display().to_string());
        b.row();
    }
    for p in tl.processes() {
        let info = (sources.iter())
            .filter(|s| s.identity == p.source)
            .find_map(|s| s.processes.iter().find(|i| i.tgid == p.tgid));
        let row = ProcessRow {
            host,
            run: runs[p.source as usize],
            pid: p.tgid,
            name: &p.name,
            info,
            threads: p.threads,
        };
        process_row(out, &row)?;
    }
    for (i, s) in sources.iter().enumerate() {
        if s.identity as usize != i {
            continue;
        }
        for p in &s.probes {
            probe_row(out, host, runs[i], p)?;
        }
    }
    for (i, s) in sources.iter().enumerate() {
        let bytes = s.damage.iter().map(|d| d.bytes).sum();
        file_row(
            out,
            &FileRow {
                path: &s.path,
                header: &s.header,
                host,
                run: runs[i],
                start_ns: wall(s.start),
                end_ns: s.trailer.as_ref().map(|t| wall(s.to_merge_time(t.end_ns))),
                lost: s.lost(),
                truncated: s.truncated_at.is_some(),
                damaged: (s.damage.len(), bytes),
            },
        )?;
    }
    Ok(())
}
