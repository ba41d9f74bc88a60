//! Symbolizer benchmark: indexing time, and addresses per second against
//! binutils `addr2line -a -f -i -C` on the same addresses, with the whole
//! inlined chain (function, file, line of every frame) compared.
//!
//! Usage: `symbolize_bench [--addresses N] [--no-libc] [BINARY...]` (default:
//! this executable); the libc it runs with is always added unless `--no-libc`.
//! Output is `label: value` lines; labels of per-binary figures carry the
//! binary's file name in brackets.
//!
//! Phases per binary, each timed on its own:
//! * `index_ms`: symbol tables read, merged, sorted and demangled (`list`).
//! * `dwarf_load_ms`: a fresh `Symbolizer`'s first address, which opens the
//!   file and builds the DWARF context (unit ranges).
//! * `cold`: the first pass over address list A; units, line tables and
//!   function tables are parsed on demand, names demangled the first time.
//! * `warm_same`: a second pass over list A, what a long-running recorder
//!   sees for hot code.
//! * `warm_same_batch`: list A again through `symbolize_batch`, which finds
//!   the binary once per batch instead of once per address (both re-read
//!   the file's identity at most once per millisecond).
//! * `warm_other`: a pass over list B (other addresses, same distribution)
//!   once A has been done: binary indexed, but frames not seen before.
//! * `warm_other_batch`: list C, new as well, through `symbolize_batch`.
//!
//! Only the `symbolize` calls and collecting their frames are timed; addr2line
//! is timed from process start to its last line, once on list A and once on
//! A, B and C in one process: the difference is its own warm rate on B and C,
//! after it has read what A needed. Each time is given as wall time and as CPU time
//! (user + system, ours and the child's); on a loaded machine the CPU times
//! are the steadier of the two.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use symbolizer::{list, resolve, Frame, Options, Symbolizer, Target};

/// Deterministic xorshift so runs are comparable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// binutils names the CU file for code without line info; that says nothing
/// useful, so a frame without a line is compared on its function only.
fn normalize(frames: &[Frame]) -> Vec<Frame> {
    frames
        .iter()
        .map(|f| {
            let line = f.line.filter(|&l| l != 0);
            Frame {
                function: f.function.clone(),
                file: if line.is_some() { f.file.clone() } else { None },
                line,
            }
        })
        .collect()
}

/// Wall and CPU time of one timed stretch.
#[derive(Clone, Copy)]
struct Times {
    wall: Duration,
    cpu: Duration,
}

fn timeval(t: libc::timeval) -> Duration {
    Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
}

/// User + system time of this process (`RUSAGE_SELF`) or of its waited-for
/// children (`RUSAGE_CHILDREN`).
fn cpu(who: libc::c_int) -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut ru) };
    timeval(ru.ru_utime) + timeval(ru.ru_stime)
}

/// Runs `f`, timing it by wall clock and by the CPU time of `who`.
fn timed<T>(who: libc::c_int, f: impl FnOnce() -> T) -> (T, Times) {
    let (w, c) = (Instant::now(), cpu(who));
    let out = f();
    let times = Times {
        wall: w.elapsed(),
        cpu: cpu(who).saturating_sub(c),
    };
    (out, times)
}

/// Runs `addr2line -a -f -i -C -e BIN` once over all addresses; returns the
/// frames per address and its times including process start.
fn run_addr2line(bin: &Path, addrs: &[u64]) -> Option<(Vec<Vec<Frame>>, Times)> {
    let (out, times) = timed(libc::RUSAGE_CHILDREN, || addr2line_output(bin, addrs));
    Some((parse_addr2line(&out?), times))
}

/// addr2line's standard output for `addrs`, fed on standard input.
fn addr2line_output(bin: &Path, addrs: &[u64]) -> Option<String> {
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let mut child = Command::new("addr2line")
        .args(["-a", "-f", "-i", "-C", "-e"])
        .arg(bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    // Feed from a thread: addr2line writes while we write, and pipes are small.
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let out = child.wait_with_output().ok()?;
    let _ = feeder.join();
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Parses `addr2line -a -f -i` output into frames per address.
fn parse_addr2line(text: &str) -> Vec<Vec<Frame>> {
    let mut res: Vec<Vec<Frame>> = Vec::new();
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if l.starts_with("0x") {
            res.push(Vec::new());
            continue;
        }
        let loc = lines.next().unwrap_or("??:0");
        let loc = loc.split(" (discriminator").next().unwrap_or(loc);
        let (file, line) = loc.rsplit_once(':').unwrap_or((loc, "0"));
        if let Some(v) = res.last_mut() {
            v.push(Frame {
                function: (l != "??").then(|| l.into()),
                file: (file != "??").then(|| file.into()),
                line: line.parse().ok(),
            });
        }
    }
    res.iter().map(|f| normalize(f)).collect()
}

/// binutils 2.40 prefixes a relative DW_AT_comp_dir twice (`./libio/./libio/x.c`
/// for comp_dir `./libio`, file `x.c`); map both spellings to one to tell
/// those apart from real disagreements.
fn binutils_path_norm(p: &str) -> String {
    if let Some((a, b)) = p.split_once("/./") {
        if b.starts_with(a.trim_start_matches("./")) {
            return format!("./{b}");
        }
    }
    p.to_string()
}

/// How two answers for one address differ, from harmless to real.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Diff {
    Same,
    /// Only binutils' doubled relative comp_dir.
    RelativeCompDir,
    /// Same functions and lines, another file: binutils 2.40 names the wrong
    /// file for code from #included .c files (see the
    /// symbolize_code_from_included_file_against_source test).
    FileOnly,
    /// Function names, lines or the number of inlined frames differ.
    Real,
}

fn diff(ours: &[Frame], theirs: &[Frame]) -> Diff {
    if ours == theirs {
        return Diff::Same;
    }
    if ours.len() != theirs.len() {
        return Diff::Real;
    }
    let mut worst = Diff::Same;
    for (o, t) in ours.iter().zip(theirs) {
        let d = if o == t {
            Diff::Same
        } else if o.function != t.function || o.line != t.line {
            Diff::Real
        } else if o.file.as_deref().map(binutils_path_norm)
            == t.file.as_deref().map(binutils_path_norm)
        {
            Diff::RelativeCompDir
        } else {
            Diff::FileOnly
        };
        worst = worst.max(d);
    }
    worst
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

/// `VmHWM`, `RssAnon` and `RssFile` of this process in KiB.
fn memory_kb() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().trim_end_matches(" kB").to_string())
            .unwrap_or_default()
    };
    format!(
        "VmHWM {} RssAnon {} RssFile {}",
        field("VmHWM:"),
        field("RssAnon:"),
        field("RssFile:")
    )
}

fn addresses(funcs: &[&symbolizer::FunctionMatch], n: usize, seed: u64) -> Vec<u64> {
    // Drawn uniformly over functions, then uniformly inside each.
    let mut rng = Rng(seed);
    (0..n)
        .map(|_| {
            let f = funcs[(rng.next() % funcs.len() as u64) as usize];
            f.address + rng.next() % f.size
        })
        .collect()
}

/// One timed pass: every address symbolized and its frames kept.
fn pass(s: &mut Symbolizer, bin: &Path, addrs: &[u64]) -> (Vec<Vec<Frame>>, Times) {
    timed(libc::RUSAGE_SELF, || {
        addrs
            .iter()
            .map(|&a| s.symbolize(bin, a).unwrap_or_default())
            .collect()
    })
}

fn compare(tag: &str, list: &str, addrs: &[u64], ours: &[Vec<Frame>], theirs: &[Vec<Frame>]) {
    let mut counts = [0usize; 4];
    let mut examples = Vec::new();
    for ((a, o), t) in addrs.iter().zip(ours).zip(theirs) {
        let d = diff(&normalize(o), t);
        counts[d as usize] += 1;
        if d == Diff::Real && examples.len() < 3 {
            examples.push(format!("{a:#x}: ours {o:?} addr2line {t:?}"));
        }
    }
    let differ = addrs.len() - counts[Diff::Same as usize];
    println!("differ_{list}[{tag}]: {differ}");
    println!(
        "differ_only_relative_comp_dir_path_{list}[{tag}]: {}",
        counts[Diff::RelativeCompDir as usize]
    );
    println!(
        "differ_only_file_same_function_line_{list}[{tag}]: {}",
        counts[Diff::FileOnly as usize]
    );
    println!(
        "differ_function_line_or_depth_{list}[{tag}]: {}",
        counts[Diff::Real as usize]
    );
    println!(
        "identical_{list}[{tag}]: {}",
        if differ == 0 { "yes" } else { "no" }
    );
    for e in examples {
        println!("mismatch_example_{list}[{tag}]: {e}");
    }
}

fn bench(bin: &Path, n: usize) {
    let tag = bin
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    println!("binary[{tag}]: {}", bin.display());

    let (funcs, index) = timed(libc::RUSAGE_SELF, || {
        list(&Target::Path(bin.to_path_buf()), None)
    });
    let funcs = match funcs {
        Ok(f) => f,
        Err(e) => {
            println!("error[{tag}]: {e}");
            return;
        }
    };
    println!("index_ms[{tag}]: {}", ms(index.wall));
    println!("index_cpu_ms[{tag}]: {}", ms(index.cpu));
    println!("functions[{tag}]: {}", funcs.len());
    let sized: Vec<_> = funcs.iter().filter(|f| f.size > 0).collect();
    if sized.is_empty() {
        println!("error[{tag}]: no sized functions");
        return;
    }
    let list_a = addresses(&sized, n, 0x9e37_79b9_7f4a_7c15);
    let list_b = addresses(&sized, n, 0x2545_f491_4f6c_dd1d);
    let list_c = addresses(&sized, n, 0x5851_f42d_4c95_7f2d);
    println!("addresses[{tag}]: {} per list", list_a.len());

    let mut s = Symbolizer::new();
    let (first, load) = timed(libc::RUSAGE_SELF, || s.symbolize(bin, list_a[0]));
    println!("dwarf_load_ms[{tag}]: {}", ms(load.wall));
    println!("dwarf_load_cpu_ms[{tag}]: {}", ms(load.cpu));
    println!("memory_kb_after_load[{tag}]: {}", memory_kb());
    if let Err(e) = first {
        println!("error[{tag}]: {e}");
        return;
    }
    let (_, cold) = pass(&mut s, bin, &list_a);
    let (ours_a, warm_same) = pass(&mut s, bin, &list_a);
    let (_, warm_same_batch) = timed(libc::RUSAGE_SELF, || s.symbolize_batch(bin, &list_a));
    let (ours_b, warm_other) = pass(&mut s, bin, &list_b);
    let (ours_c, warm_other_batch) = timed(libc::RUSAGE_SELF, || s.symbolize_batch(bin, &list_c));
    let ours_c = ours_c.unwrap_or_default();
    println!("memory_kb_after_passes[{tag}]: {}", memory_kb());
    for (name, t) in [
        ("cold", cold),
        ("warm_same", warm_same),
        ("warm_same_batch", warm_same_batch),
        ("warm_other", warm_other),
        ("warm_other_batch", warm_other_batch),
    ] {
        println!("symbolizer_{name}_per_sec[{tag}]: {:.0}", rate(n, t.wall));
        println!(
            "symbolizer_{name}_per_cpu_sec[{tag}]: {:.0}",
            rate(n, t.cpu)
        );
    }

    let all: Vec<u64> = [&list_a, &list_b, &list_c]
        .into_iter()
        .flatten()
        .copied()
        .collect();
    let (Some((theirs_a, a)), Some((theirs_all, abc))) =
        (run_addr2line(bin, &list_a), run_addr2line(bin, &all))
    else {
        println!("error[{tag}]: could not run addr2line");
        return;
    };
    if theirs_a.len() != n || theirs_all.len() != 3 * n {
        println!("error[{tag}]: addr2line answered too few addresses");
        return;
    }
    let bc = Times {
        wall: abc.wall.saturating_sub(a.wall),
        cpu: abc.cpu.saturating_sub(a.cpu),
    };
    println!("addr2line_a_per_sec[{tag}]: {:.0}", rate(n, a.wall));
    println!("addr2line_a_per_cpu_sec[{tag}]: {:.0}", rate(n, a.cpu));
    println!(
        "addr2line_bc_after_a_per_sec[{tag}]: {:.0}",
        rate(2 * n, bc.wall)
    );
    println!(
        "addr2line_bc_after_a_per_cpu_sec[{tag}]: {:.0}",
        rate(2 * n, bc.cpu)
    );
    // Ratios of rates, wall (cpu).
    let speedup = |ours: Times, theirs: Times, their_n: usize| {
        let r = |o: Duration, t: Duration| rate(n, o) / rate(their_n, t);
        format!(
            "{:.1} ({:.1})",
            r(ours.wall, theirs.wall),
            r(ours.cpu, theirs.cpu)
        )
    };
    // The goal's figure: warm symbolizer against addr2line on the same list.
    println!(
        "speedup_warm_same_vs_addr2line_a[{tag}]: {}",
        speedup(warm_same, a, n)
    );
    println!(
        "speedup_warm_same_batch_vs_addr2line_a[{tag}]: {}",
        speedup(warm_same_batch, a, n)
    );
    // Both warm: addresses not asked before, for us and for addr2line.
    println!(
        "speedup_warm_other_vs_addr2line_bc_after_a[{tag}]: {}",
        speedup(warm_other, bc, 2 * n)
    );
    println!(
        "speedup_warm_other_batch_vs_addr2line_bc_after_a[{tag}]: {}",
        speedup(warm_other_batch, bc, 2 * n)
    );
    compare(&tag, "a", &list_a, &ours_a, &theirs_a);
    compare(&tag, "b", &list_b, &ours_b, &theirs_all[n..2 * n]);
    compare(&tag, "c", &list_c, &ours_c, &theirs_all[2 * n..]);
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

fn main() {
    let mut n = 20_000;
    let mut with_libc = true;
    let mut bins: Vec<PathBuf> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--addresses" => n = args.next().and_then(|v| v.parse().ok()).unwrap_or(n),
            "--no-libc" => with_libc = false,
            _ => bins.push(PathBuf::from(a)),
        }
    }
    if bins.is_empty() {
        if let Ok(exe) = std::env::current_exe() {
            bins.push(exe);
        }
    }
    if with_libc {
        // The libc this very process runs with, found the way `tracer` would.
        let me = Target::Pid(std::process::id());
        if let Ok(m) = resolve(&me, "libc:malloc", &Options::default()) {
            bins.push(PathBuf::from(&m[0].display_binary));
        }
    }
    println!("memory_kb_at_start: {}", memory_kb());
    for b in &bins {
        bench(b, n);
    }
}
