//! From `--uprobe` specs to attach points, through the `symbolizer` crate: functions (C,
//! C++, Rust, Go) and USDT probes (`usdt:[PATH_OR_LIB:]PROVIDER:NAME`).

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};
use symbolizer::{Exit, FunctionMatch, Language, Options, UsdtProbe};
use trace_file::{Probe, ProbeKind};

use crate::procfs;

/// What a probe-table entry is attached to.
pub enum Point {
    /// A function: its entry and its returns.
    Function(FunctionMatch),
    /// A USDT probe.
    Usdt(UsdtProbe),
}

impl Point {
    /// The name outputs show: the function's, or `provider:name`.
    pub fn name(&self) -> String {
        match self {
            Point::Function(f) => f.name.clone(),
            Point::Usdt(u) => format!("{}:{}", u.provider, u.name),
        }
    }

    /// Where it is: (binary as the process sees it, virtual address).
    fn place(&self) -> (&str, u64) {
        match self {
            Point::Function(f) => (&f.display_binary, f.address),
            Point::Usdt(u) => (&u.display_binary, u.address),
        }
    }

    /// The file the probes are attached in (through the process's root).
    pub fn binary(&self) -> &Path {
        match self {
            Point::Function(f) => &f.binary,
            Point::Usdt(u) => &u.binary,
        }
    }
}

/// A probe to attach, and the processes to attach it in (`None` = the launched command).
pub struct Resolved {
    pub point: Point,
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
/// one probe-table entry. A Go function whose returns cannot be probed safely is refused
/// here, before anything is attached.
pub fn resolve_all(
    specs: &[String],
    targets: &[Target],
    matching: Options,
) -> Result<Vec<Resolved>> {
    let mut out: Vec<Resolved> = Vec::new();
    let resolver = symbolizer::Resolver::new();
    for spec in specs {
        let mut first_error = None;
        let mut found = false;
        for t in targets {
            let points = match resolve_one(&resolver, &t.target, spec, matching) {
                Ok(p) => p,
                Err(e) => {
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            found = true;
            let pids = std::iter::once(t.pid).chain(t.same_exe.iter().map(|&p| Some(p)));
            for point in points {
                let r = match out.iter().position(|r| r.point.place() == point.place()) {
                    Some(i) => &mut out[i],
                    None => {
                        out.push(Resolved {
                            point,
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
    add_catches(&resolver, &mut out, targets, matching);
    Ok(out)
}

/// Where C++ starts handling an exception it caught: the catching function's landing pad
/// calls it, so at its entry every frame below the catching one is gone.
const CATCH: &str = "__cxa_begin_catch";

/// In a program whose native returns are probed at their instructions (it throws), the
/// calls an exception left are known to be over at the thread's next probed entry or
/// return above their frames; probing [`CATCH`] as well (in the executable, or
/// libstdc++) ends them where the exception is caught, as its entry's frame says, and
/// counts the exceptions caught. Where it cannot be found, they end as before.
fn add_catches(
    resolver: &symbolizer::Resolver,
    out: &mut Vec<Resolved>,
    targets: &[Target],
    matching: Options,
) {
    for t in targets {
        let frames = out.iter().any(|r| {
            r.pids.contains(&t.pid)
                && matches!(&r.point, Point::Function(f)
                    if f.language == Language::Native
                        && !f.stacks_switch
                        && matches!(f.exit, Exit::Returns { .. }))
        });
        if !frames {
            continue;
        }
        let found = [CATCH.to_string(), format!("libstdc++:{CATCH}")]
            .iter()
            .find_map(|spec| resolver.resolve(&t.target, spec, &matching).ok());
        let Some(found) = found else { continue };
        let pids = std::iter::once(t.pid).chain(t.same_exe.iter().map(|&p| Some(p)));
        for m in found.into_iter().filter(|m| m.unprobeable.is_none()) {
            if !matches!(m.exit, Exit::Returns { .. }) {
                continue;
            }
            let point = Point::Function(m);
            let i = match out.iter().position(|r| r.point.place() == point.place()) {
                Some(i) => i,
                None => {
                    out.push(Resolved {
                        point,
                        pids: Vec::new(),
                    });
                    out.len() - 1
                }
            };
            for pid in pids.clone() {
                if !out[i].pids.contains(&pid) {
                    out[i].pids.push(pid);
                }
            }
        }
    }
}

const USDT_SPEC: &str =
    "a USDT spec is usdt:[PATH_OR_LIB:]PROVIDER:NAME, or usdt:PATH[:NAME] for any provider";

/// The library, provider and name of a USDT spec (what follows `usdt:`), as bpftrace
/// takes them: `[PATH_OR_LIB:]PROVIDER:NAME`, and a path (it has a `/`) followed by a
/// name or by nothing, of any provider (`usdt:/usr/bin/python3.11:*`).
fn usdt_parts(spec: &str) -> Result<(Option<&str>, &str, &str)> {
    let parts: Vec<&str> = spec.split(':').collect();
    if parts.contains(&"") {
        bail!("{USDT_SPEC}, none of them empty");
    }
    Ok(match parts.as_slice() {
        [path] if path.contains('/') => (Some(*path), "*", "*"),
        [path, name] if path.contains('/') => (Some(*path), "*", *name),
        [provider, name] => (None, *provider, *name),
        [lib, provider, name] => (Some(*lib), *provider, *name),
        _ => bail!("{USDT_SPEC}"),
    })
}

/// For each target that switches stacks or throws exceptions and has probed native
/// functions, one line (`warning: ...` or `note: ...`) on how their returns are probed:
/// at their instructions (symbolizer's choice there), or with uretprobes under
/// `--unsafe-returns`, when a switch under a probed call corrupts the process and an
/// exception thrown out of one ends it: the kernel keeps the real return address where
/// neither the other stack nor the unwinder can see it, and cannot be asked to put it
/// back (`bpf_probe_write_user` is refused under lockdown, as on this project's machine).
pub fn return_notes(resolved: &[Resolved], targets: &[Target]) -> Vec<String> {
    let mut out = Vec::new();
    for t in targets {
        let native = |uretprobe: bool| {
            (resolved.iter())
                .filter(|r| r.pids.contains(&t.pid))
                .find_map(|r| match &r.point {
                    Point::Function(f)
                        if f.language == Language::Native
                            && (f.exit == Exit::Uretprobe) == uretprobe =>
                    {
                        Some(f.name.as_str())
                    }
                    _ => None,
                })
        };
        let (hijacked, at_returns) = (native(true), native(false));
        if hijacked.is_none() && at_returns.is_none() {
            continue;
        }
        let switches = symbolizer::switches_stacks(&t.target);
        let throws = symbolizer::throws_exceptions(&t.target);
        let who = t
            .pid
            .map_or("the command".to_string(), |p| format!("process {p}"));
        if let Some(probed) = hijacked {
            if let Some(why) = &switches {
                out.push(format!(
                    "warning: {who} switches stacks ({why}): a call of {probed} that returns on another stack than it entered on corrupts the process, the kernel's return probe taking its return address back in the wrong order; without --unsafe-returns returns are probed at their instructions"
                ));
            }
            if let Some(why) = &throws {
                out.push(format!(
                    "warning: {who} throws exceptions ({why}): one thrown out of {probed} while it runs ends the process (std::terminate), the kernel's return probe hiding the call's return address from the unwinder; without --unsafe-returns returns are probed at their instructions"
                ));
            }
            continue;
        }
        let hazards = match (&switches, &throws) {
            (Some(s), Some(e)) => format!("switches stacks ({s}) and throws exceptions ({e})"),
            (Some(s), None) => format!("switches stacks ({s})"),
            (None, Some(e)) => format!("throws exceptions ({e})"),
            (None, None) => continue,
        };
        let mut line = format!(
            "note: {who} {hazards}, which a return probe's replaced return address would turn into a crash: its functions' returns are probed at their return instructions and tail calls instead, each single-stepped (dearer than a uretprobe on most machines; --unsafe-returns if no switch happens and no exception leaves under a probed call)"
        );
        match switches {
            Some(_) => line.push_str(
                "; a call pairs with its return by its exact frame, and one an exception leaves stays open to its thread's end",
            ),
            None => line.push_str(&format!(
                "; {CATCH} is probed to end the calls an exception leaves where it is caught"
            )),
        }
        out.push(line);
    }
    out
}

/// The attach points of one spec in one target.
fn resolve_one(
    resolver: &symbolizer::Resolver,
    target: &symbolizer::Target,
    spec: &str,
    matching: Options,
) -> Result<Vec<Point>, anyhow::Error> {
    if let Some(usdt) = spec.strip_prefix("usdt:") {
        let (lib, provider, name) = usdt_parts(usdt)?;
        let probes = symbolizer::resolve_usdt(target, lib, provider, name)?;
        if let Some(u) = probes.iter().find(|u| u.unsupported.is_some()) {
            bail!(
                "cannot read the arguments of USDT probe {}:{}: {}",
                u.provider,
                u.name,
                u.unsupported.as_deref().unwrap_or_default()
            );
        }
        return Ok(probes.into_iter().map(Point::Usdt).collect());
    }
    let matches = resolver.resolve(target, spec, &matching)?;
    // A glob's functions that cannot be probed (or their returns) are left out, named,
    // when others can be; a function named alone is refused.
    let glob = spec.contains(['*', '?', '[']);
    // What cannot be probed, and why.
    let refusal = |m: &symbolizer::FunctionMatch| match (&m.unprobeable, &m.exit) {
        (Some(why), _) => Some((m.name.clone(), why.clone())),
        (None, Exit::Refused(why)) => {
            let what = match m.language {
                Language::Go => "Go function ",
                Language::Native => "",
            };
            Some((format!("the returns of {what}{}", m.name), why.clone()))
        }
        _ => None,
    };
    let probeable = matches.iter().filter(|m| refusal(m).is_none()).count();
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    for m in matches {
        if let Some((what, why)) = refusal(&m) {
            if glob && probeable > 0 {
                warnings.push((m.name.clone(), format!("not probed: {why}")));
                continue;
            }
            bail!("cannot probe {what}: {why}");
        }
        if let Some(w) = &m.warning {
            warnings.push((m.name.clone(), w.clone()));
        }
        out.push(Point::Function(m));
    }
    // A pattern resolved in each of a server's processes finds the same functions in each.
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    for line in grouped_warnings(&warnings) {
        if !said.contains(&line) {
            eprintln!("tracer: warning: {line}");
            said.push(line);
        }
    }
    Ok(out)
}

/// Warnings about functions, one line each when they are few; when a glob matched many,
/// one line per kind of warning (the same words once the quoted instruction is left out),
/// naming a few of the functions.
fn grouped_warnings(warnings: &[(String, String)]) -> Vec<String> {
    const EACH: usize = 3;
    if warnings.len() <= EACH {
        return (warnings.iter())
            .map(|(f, w)| format!("{f}: {w}"))
            .collect();
    }
    let kind = |w: &str| {
        let mut parts = w.split('`');
        let before = parts.next().unwrap_or_default();
        let after = parts.nth(1).map_or(String::new(), |a| a.to_string());
        format!("{}{after}", before.trim_end()).replace("  ", " ")
    };
    let mut kinds: Vec<(String, Vec<&str>)> = Vec::new();
    for (f, w) in warnings {
        let k = kind(w);
        match kinds.iter_mut().find(|(x, _)| *x == k) {
            Some((_, fs)) => fs.push(f),
            None => kinds.push((k, vec![f])),
        }
    }
    kinds
        .into_iter()
        .map(|(k, fs)| {
            let shown = fs[..fs.len().min(EACH)].join(", ");
            let more = match fs.len().saturating_sub(EACH) {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            format!("{} functions: {k}: {shown}{more}", fs.len())
        })
        .collect()
}

/// Targets for `pids`, one per executable: the others running it get its probes.
pub fn by_executable(pids: &[u32]) -> Vec<Target> {
    let mut out: Vec<(ExeId, Target)> = Vec::new();
    for &pid in pids {
        let exe = procfs::exe_identity(pid);
        match out.iter_mut().find(|(e, _)| e.is_some() && *e == exe) {
            Some((_, t)) => t.same_exe.push(pid),
            None => out.push((
                exe,
                Target {
                    pid: Some(pid),
                    target: symbolizer::Target::Pid(pid),
                    same_exe: Vec::new(),
                },
            )),
        }
    }
    out.into_iter().map(|(_, t)| t).collect()
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
    matching: Options,
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
                matching,
            ) else {
                continue;
            };
            for m in more {
                match resolved
                    .iter_mut()
                    .find(|r| r.point.place() == m.point.place())
                {
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

/// The probe-table entry of probe `id`.
pub fn table_entry(id: u32, p: &Point) -> Probe {
    match p {
        Point::Function(m) => Probe {
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
            kind: match m.language {
                Language::Go => ProbeKind::Go,
                _ => ProbeKind::Function,
            },
        },
        Point::Usdt(u) => Probe {
            id,
            name: p.name(),
            symbol: String::new(),
            binary: u.display_binary.clone(),
            build_id: u.build_id.clone(),
            address: u.address,
            size: 0,
            file_offset: u.file_offset,
            skipped: 0,
            source: None,
            kind: ProbeKind::Usdt {
                args: u.args_spec.clone(),
            },
        },
    }
}

/// How the `usdt` program reads a probe's arguments.
pub fn usdt_spec(u: &UsdtProbe) -> tracer_abi::UsdtSpec {
    use symbolizer::UsdtLocation as L;
    use tracer_abi::{usdt_arg, UsdtArg};
    let mut spec = tracer_abi::UsdtSpec::default();
    for (slot, a) in spec.args.iter_mut().zip(&u.args) {
        *slot = match &a.location {
            L::Register { offset, .. } => UsdtArg {
                kind: usdt_arg::REGISTER,
                size: a.size,
                reg: *offset,
                ..Default::default()
            },
            L::Memory {
                offset,
                displacement,
                ..
            } => UsdtArg {
                kind: usdt_arg::MEMORY,
                size: a.size,
                reg: *offset,
                value: *displacement,
                ..Default::default()
            },
            L::Static {
                address, addend, ..
            } => UsdtArg {
                // The probe's saved %rip is its own address (uprobes set it so for
                // handlers), so the symbol is at that plus its distance from the probe.
                kind: usdt_arg::MEMORY,
                size: a.size,
                reg: symbolizer::PT_REGS_IP,
                value: address.wrapping_add(*addend as u64).wrapping_sub(u.address) as i64,
                ..Default::default()
            },
            L::Indexed {
                base,
                index,
                scale,
                displacement,
            } => UsdtArg {
                kind: usdt_arg::INDEXED,
                size: a.size,
                scale: *scale,
                reg: *base,
                index: *index,
                value: *displacement,
                ..Default::default()
            },
            L::Constant(v) => UsdtArg {
                kind: usdt_arg::CONSTANT,
                size: a.size,
                value: *v,
                ..Default::default()
            },
        };
        spec.nargs += 1;
    }
    spec
}

/// With `--sample N` in counting mode, says in one line which probes it does not record
/// in full: functions whose returns are probed at their instructions (their calls are
/// paired by frame in the kernel, which a goroutine moving between threads keeps apart
/// from the thread's events) and USDT probes (hits, with no call).
pub fn unsampled_note(resolved: &[Resolved]) -> Option<String> {
    let names: Vec<String> = (resolved.iter())
        .filter(|r| match &r.point {
            Point::Function(f) => f.exit != Exit::Uretprobe,
            Point::Usdt(_) => true,
        })
        .map(|r| r.point.name())
        .collect();
    if names.is_empty() {
        return None;
    }
    Some(format!(
        "--sample records no call of functions whose returns are probed at their instructions (Go's, and those of programs that throw exceptions or switch stacks) or hit of USDT probes in full (a goroutine moves between threads, whose events are then not its own); they are still counted, and their calls timed: {}",
        names.join(", ")
    ))
}

/// `tracer probes`: prints the functions of a process or file that match `pattern`.
pub fn list(pid: Option<u32>, path: Option<PathBuf>, pattern: Option<&str>) -> Result<()> {
    let (target, pattern) = match (pid, path) {
        (Some(p), None) => (symbolizer::Target::Pid(p), pattern.map(str::to_string)),
        (None, Some(p)) => (symbolizer::Target::Path(p), pattern.map(str::to_string)),
        (None, None) => {
            let (file, rest) = named_file(pattern.unwrap_or_default())?;
            (symbolizer::Target::Path(file), Some(rest))
        }
        (Some(_), Some(_)) => bail!("give either --pid PID or --path FILE"),
    };
    let pattern = pattern.as_deref();
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Some(rest) = pattern.and_then(|p| p.strip_prefix("usdt:")) {
        let rest = rest.trim();
        let rest = match usdt_parts(rest) {
            Ok((Some(lib), provider, name)) => format!("{lib}:{provider}:{name}"),
            Ok((None, provider, name)) => format!("{provider}:{name}"),
            // A name alone lists that name of every provider.
            Err(_) if !rest.contains(':') => rest.to_string(),
            Err(e) => return Err(e),
        };
        let found = symbolizer::list_usdt(&target, Some(&rest)).map_err(|e| anyhow!("{e}"))?;
        for u in &found {
            let semaphore = if u.semaphore != 0 { " semaphore" } else { "" };
            writeln!(
                out,
                "usdt:{}:{}:{}  addr={:#x} args=\"{}\"{semaphore}",
                u.display_binary, u.provider, u.name, u.address, u.args_spec
            )?;
            if let Some(why) = &u.unsupported {
                writeln!(out, "    cannot be traced: {why}")?;
            }
        }
        return Ok(());
    }
    let resolver = symbolizer::Resolver::new();
    let found = resolver
        .list(&target, pattern)
        .map_err(|e| anyhow!("{e}"))?;
    if found.is_empty() {
        // Why nothing: resolving says (stripped, in a library instead, a near name).
        let pattern = pattern.filter(|p| !p.is_empty()).unwrap_or("*");
        let all = symbolizer::Options {
            allow_multiple: true,
            ..Default::default()
        };
        resolver
            .resolve(&target, pattern, &all)
            .map_err(|e| anyhow!("{e}"))?;
        bail!("no function matches `{pattern}`");
    }
    for m in &found {
        let placement = if m.skipped > 0 {
            match m.language {
                Language::Go => format!(" (+{}: the stack check's branch)", m.skipped),
                _ => format!(" (probed at +{})", m.skipped),
            }
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

/// The file a pattern names by itself, as in `bpftrace -l 'uprobe:BIN:GLOB'`: its
/// PATH_OR_LIB part (`PATH_OR_LIB:GLOB`, `usdt:PATH_OR_LIB:PROVIDER:NAME`) is a file, else
/// a library of the system's library paths; and the pattern without it.
fn named_file(pattern: &str) -> Result<(PathBuf, String)> {
    let pattern = pattern.trim();
    let (lib, rest) = match pattern.strip_prefix("usdt:") {
        Some(usdt) => {
            let (lib, provider, name) = usdt_parts(usdt)?;
            (lib, format!("usdt:{provider}:{name}"))
        }
        None => {
            let (lib, glob) = symbolizer::split_spec(pattern);
            (lib, glob.to_string())
        }
    };
    let Some(lib) = lib.filter(|l| !l.is_empty()) else {
        bail!("give --pid PID or --path FILE, or name a file or library in the pattern (PATH_OR_LIB:GLOB, usdt:PATH_OR_LIB:PROVIDER:NAME)");
    };
    if Path::new(lib).is_file() {
        return Ok((PathBuf::from(lib), rest));
    }
    if lib.contains('/') {
        bail!("{lib}: no such file");
    }
    match symbolizer::system_library(lib)? {
        Some(file) => Ok((file, rest)),
        None => bail!(
            "`{lib}` is neither a file nor a library in the system's library paths; give --pid PID or --path FILE to look among a program's libraries"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usdt_specs_as_bpftrace_takes_them() {
        let p = |s| usdt_parts(s).unwrap();
        assert_eq!(
            p("python:function__entry"),
            (None, "python", "function__entry")
        );
        assert_eq!(p("libc:libc:setjmp"), (Some("libc"), "libc", "setjmp"));
        assert_eq!(
            p("/usr/bin/python3.11:*"),
            (Some("/usr/bin/python3.11"), "*", "*")
        );
        assert_eq!(
            p("/usr/bin/python3.11"),
            (Some("/usr/bin/python3.11"), "*", "*")
        );
        assert_eq!(p("./py:gc__start"), (Some("./py"), "*", "gc__start"));
        assert!(usdt_parts("gc__start").is_err());
        assert!(usdt_parts("a::b").is_err());
        assert!(usdt_parts("a:b:c:d").is_err());
    }

    #[test]
    fn many_warnings_of_a_kind_are_one_line() {
        let w = |f: &str, i: &str| {
            let text = format!(
                "first instruction `{i}` is single-stepped by uprobes (a second trap per hit)"
            );
            (f.to_string(), text)
        };
        let few = [w("a", "mov %rsi,%rdi")];
        assert_eq!(
            grouped_warnings(&few),
            ["a: first instruction `mov %rsi,%rdi` is single-stepped by uprobes (a second trap per hit)"]
        );
        let many: Vec<_> = (0..5).map(|i| w(&format!("f{i}"), "bytes 48 8b")).collect();
        assert_eq!(
            grouped_warnings(&many),
            ["5 functions: first instruction is single-stepped by uprobes (a second trap per hit): f0, f1, f2 and 2 more"]
        );
    }
}
