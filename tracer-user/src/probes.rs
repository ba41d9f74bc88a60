//! From `--uprobe` specs to attach points, through the `symbolizer` crate.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};
use symbolizer::{FunctionMatch, Options, Target};
use trace_file::Probe;

/// A function to probe, and the processes to probe it in (`None` = the launched command).
pub struct Resolved {
    pub func: FunctionMatch,
    pub pids: Vec<Option<u32>>,
}

/// Resolves every spec in every target. A spec that matches nothing in any target is an
/// error; the same function found in several processes is one probe-table entry.
pub fn resolve_all(
    specs: &[String],
    pids: &[u32],
    launch: Option<&Path>,
    allow_multiple: bool,
) -> Result<Vec<Resolved>> {
    let opts = Options { allow_multiple };
    let mut targets: Vec<(Option<u32>, Target)> =
        pids.iter().map(|&p| (Some(p), Target::Pid(p))).collect();
    if let Some(path) = launch {
        targets.push((None, Target::Path(path.to_path_buf())));
    }
    let mut out: Vec<Resolved> = Vec::new();
    for spec in specs {
        for (pid, target) in &targets {
            let matches = symbolizer::resolve(target, spec, &opts)
                .map_err(|e| anyhow!("--uprobe {spec}: {e}"))?;
            for m in matches {
                if let Some(r) = out.iter_mut().find(|r| {
                    r.func.display_binary == m.display_binary && r.func.address == m.address
                }) {
                    if !r.pids.contains(pid) {
                        r.pids.push(*pid);
                    }
                } else {
                    if let Some(w) = &m.warning {
                        eprintln!("tracer: warning: {}: {w}", m.name);
                    }
                    out.push(Resolved {
                        func: m,
                        pids: vec![*pid],
                    });
                }
            }
        }
    }
    Ok(out)
}

/// The probe-table entry for function `id`.
pub fn table_entry(id: u32, m: &FunctionMatch) -> Probe {
    Probe {
        id,
        name: m.name.clone(),
        symbol: m.symbol.clone(),
        binary: m.display_binary.clone(),
        build_id: m.build_id.clone(),
        address: m.address,
        size: m.size,
        file_offset: m.file_offset,
        skipped: m.skipped,
        source: m.source.clone(),
    }
}

/// `tracer probes`: prints the functions of a process or file that match `pattern`.
pub fn list(pid: Option<u32>, path: Option<PathBuf>, pattern: Option<&str>) -> Result<()> {
    let target = match (pid, path) {
        (Some(p), None) => Target::Pid(p),
        (None, Some(p)) => Target::Path(p),
        _ => bail!("give either --pid PID or --path FILE"),
    };
    let found = symbolizer::list(&target, pattern).map_err(|e| anyhow!("{e}"))?;
    let mut out = std::io::stdout().lock();
    use std::io::Write;
    for m in &found {
        let placement = if m.skipped > 0 {
            format!(" (+{} past endbr64)", m.skipped)
        } else {
            String::new()
        };
        writeln!(
            out,
            "uprobe:{}:{}  addr={:#x} size={} {}{}",
            m.display_binary,
            m.name,
            m.address,
            m.size,
            m.source.as_deref().unwrap_or("-"),
            placement
        )?;
        if let Some(w) = &m.warning {
            writeln!(out, "    warning: {w}")?;
        }
    }
    Ok(())
}
