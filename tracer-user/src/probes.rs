//! From `--uprobe` specs to attach points, through the `symbolizer` crate.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use symbolizer::{FunctionMatch, Options};
use trace_file::Probe;

use crate::procfs;

/// A function to probe, and the processes to probe it in (`None` = the launched command).
pub struct Resolved {
    pub func: FunctionMatch,
    pub pids: Vec<Option<u32>>,
}

/// Where probes are resolved: a process (`None`: the launched command, before its exec)
/// and the processes that run the same executable, which get the same probes.
pub struct Target {
    pub pid: Option<u32>,
    pub target: symbolizer::Target,
    pub same_exe: Vec<u32>,
}

/// Resolves every spec in every target. A spec must match in at least one target (else
/// the first target's error says why); the same function found in several processes is
/// one probe-table entry.
pub fn resolve_all(
    specs: &[String],
    targets: &[Target],
    allow_multiple: bool,
) -> Result<Vec<Resolved>> {
    let opts = Options { allow_multiple };
    let mut out: Vec<Resolved> = Vec::new();
    for spec in specs {
        let mut first_error = None;
        let mut found = false;
        for t in targets {
            let matches = match symbolizer::resolve(&t.target, spec, &opts) {
                Ok(m) => m,
                Err(e) => {
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            found = true;
            let pids = std::iter::once(t.pid).chain(t.same_exe.iter().map(|&p| Some(p)));
            for m in matches {
                let r = match out.iter().position(|r| {
                    r.func.display_binary == m.display_binary && r.func.address == m.address
                }) {
                    Some(i) => &mut out[i],
                    None => {
                        if let Some(w) = &m.warning {
                            eprintln!("tracer: warning: {}: {w}", m.name);
                        }
                        out.push(Resolved {
                            func: m,
                            pids: Vec::new(),
                        });
                        out.last_mut().unwrap()
                    }
                };
                for pid in pids.clone() {
                    if !r.pids.contains(&pid) {
                        r.pids.push(pid);
                    }
                }
            }
        }
        if !found {
            if let Some(e) = first_error {
                bail!("--uprobe {spec}: {e}");
            }
        }
    }
    Ok(out)
}

/// A process's executable file (device, inode), when /proc tells.
type ExeId = Option<(u64, u64)>;

/// Gives the processes of `descendants` the probes of the root they run the same
/// executable as; those that run another are resolved on their own, and a spec that
/// matches nothing there is no error (the roots had it).
pub fn extend_to(
    resolved: &mut Vec<Resolved>,
    roots: &[u32],
    descendants: &[u32],
    specs: &[String],
    allow_multiple: bool,
) {
    let root_exes: Vec<(u32, ExeId)> = roots
        .iter()
        .map(|&r| (r, procfs::exe_identity(r)))
        .collect();
    // Descendants running another executable, grouped by it.
    let mut others: Vec<(ExeId, Vec<u32>)> = Vec::new();
    for &d in descendants {
        let exe = procfs::exe_identity(d);
        let root = root_exes.iter().find(|(_, e)| e.is_some() && *e == exe);
        match root {
            Some(&(root, _)) => {
                for r in resolved.iter_mut().filter(|r| r.pids.contains(&Some(root))) {
                    r.pids.push(Some(d));
                }
            }
            None => match others.iter_mut().find(|(e, _)| e.is_some() && *e == exe) {
                Some((_, group)) => group.push(d),
                None => others.push((exe, vec![d])),
            },
        }
    }
    for (_, group) in others {
        let target = Target {
            pid: Some(group[0]),
            target: symbolizer::Target::Pid(group[0]),
            same_exe: group[1..].to_vec(),
        };
        for spec in specs {
            let Ok(more) = resolve_all(
                std::slice::from_ref(spec),
                std::slice::from_ref(&target),
                allow_multiple,
            ) else {
                continue;
            };
            for m in more {
                match resolved.iter_mut().find(|r| {
                    r.func.display_binary == m.func.display_binary
                        && r.func.address == m.func.address
                }) {
                    Some(r) => r.pids.extend(
                        m.pids
                            .into_iter()
                            .filter(|p| !r.pids.contains(p))
                            .collect::<Vec<_>>(),
                    ),
                    None => resolved.push(m),
                }
            }
        }
    }
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
        (Some(p), None) => symbolizer::Target::Pid(p),
        (None, Some(p)) => symbolizer::Target::Path(p),
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
