//! Symbolizer benchmark: indexing time, and addresses per second with a warm
//! cache against binutils `addr2line -f -i -C` on the same addresses.
//!
//! Usage: `symbolize_bench [--addresses N] [--no-libc] [BINARY...]` (default:
//! this executable); the libc it runs with is always added unless `--no-libc`.
//! Output is `label: value` lines; labels of per-binary figures carry the
//! binary's file name in brackets.

use std::collections::HashMap;
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

/// What we compare: the outer frame's function, file and line.
type Outer = (Option<String>, Option<String>, Option<u32>);

fn outer(frames: &[Frame]) -> Outer {
    let f = frames.last().cloned().unwrap_or_default();
    let line = f.line.filter(|&l| l != 0);
    // With no line, binutils still names the CU file; that says nothing useful.
    let file = if line.is_some() { f.file } else { None };
    (f.function, file, line)
}

/// Runs `addr2line -a -f -i -C -e BIN` once over all addresses; returns the
/// outer frame per address and the wall time including process start.
fn run_addr2line(bin: &Path, addrs: &[u64]) -> Option<(Vec<Outer>, Duration)> {
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let start = Instant::now();
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
    let elapsed = start.elapsed();
    let _ = feeder.join();
    let text = String::from_utf8_lossy(&out.stdout);
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
                function: (l != "??").then(|| l.to_string()),
                file: (file != "??").then(|| file.to_string()),
                line: line.parse().ok(),
            });
        }
    }
    Some((res.iter().map(|f| outer(f)).collect(), elapsed))
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

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn bench(bin: &Path, n: usize) {
    let tag = bin
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    println!("binary[{tag}]: {}", bin.display());

    // (1) Indexing: all symbol tables merged, sorted and demangled.
    let t = Instant::now();
    let funcs = match list(&Target::Path(bin.to_path_buf()), None) {
        Ok(f) => f,
        Err(e) => {
            println!("error[{tag}]: {e}");
            return;
        }
    };
    println!("index_ms[{tag}]: {}", ms(t.elapsed()));
    println!("functions[{tag}]: {}", funcs.len());
    let sized: Vec<_> = funcs.iter().filter(|f| f.size > 0).collect();
    if sized.is_empty() {
        println!("error[{tag}]: no sized functions");
        return;
    }

    // Addresses drawn uniformly over functions, then uniformly inside each.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let addrs: Vec<u64> = (0..n)
        .map(|_| {
            let f = sized[(rng.next() % sized.len() as u64) as usize];
            f.address + rng.next() % f.size
        })
        .collect();
    println!("addresses[{tag}]: {}", addrs.len());

    // (2) Cold pass builds the DWARF context and parses units on demand;
    // the warm pass is what a long-running recorder sees.
    let mut s = Symbolizer::new();
    let t = Instant::now();
    let first = s.symbolize(bin, addrs[0]);
    println!("dwarf_load_ms[{tag}]: {}", ms(t.elapsed()));
    if let Err(e) = first {
        println!("error[{tag}]: {e}");
        return;
    }
    let t = Instant::now();
    for &a in &addrs {
        let _ = s.symbolize(bin, a);
    }
    let cold = t.elapsed();
    let t = Instant::now();
    let ours: Vec<Outer> = addrs
        .iter()
        .map(|&a| outer(&s.symbolize(bin, a).unwrap_or_default()))
        .collect();
    let warm = t.elapsed();
    let rate = |d: Duration| addrs.len() as f64 / d.as_secs_f64().max(1e-9);
    println!("symbolizer_cold_per_sec[{tag}]: {:.0}", rate(cold));
    println!("symbolizer_warm_per_sec[{tag}]: {:.0}", rate(warm));

    match run_addr2line(bin, &addrs) {
        Some((theirs, d)) if theirs.len() == addrs.len() => {
            println!("addr2line_per_sec[{tag}]: {:.0}", rate(d));
            println!(
                "speedup_warm_vs_addr2line[{tag}]: {:.1}",
                d.as_secs_f64() / warm.as_secs_f64().max(1e-9)
            );
            let mut mismatches = 0;
            let mut path_only = 0;
            let mut file_only = 0;
            let mut examples: HashMap<usize, String> = HashMap::new();
            for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
                if o != t {
                    mismatches += 1;
                    let same_but_path = o.0 == t.0
                        && o.2 == t.2
                        && o.1.as_deref().map(binutils_path_norm)
                            == t.1.as_deref().map(binutils_path_norm);
                    path_only += usize::from(same_but_path);
                    if same_but_path {
                        continue;
                    }
                    // Same function and line, other file: binutils 2.40 names the
                    // wrong file for code from #included .c files (see the
                    // symbolize_code_from_included_file_against_source test).
                    if o.0 == t.0 && o.2 == t.2 {
                        file_only += 1;
                        continue;
                    }
                    if examples.len() < 3 {
                        examples.insert(i, format!("{:#x}: ours {o:?} addr2line {t:?}", addrs[i]));
                    }
                }
            }
            println!("outer_frame_mismatches[{tag}]: {mismatches}");
            println!("mismatches_only_relative_comp_dir_path[{tag}]: {path_only}");
            println!("mismatches_only_file_same_function_line[{tag}]: {file_only}");
            println!(
                "mismatches_function_or_line[{tag}]: {}",
                mismatches - path_only - file_only
            );
            println!(
                "identical[{tag}]: {}",
                if mismatches == 0 { "yes" } else { "no" }
            );
            let mut ex: Vec<_> = examples.into_iter().collect();
            ex.sort();
            for (_, e) in ex {
                println!("mismatch_example[{tag}]: {e}");
            }
        }
        Some((theirs, _)) => println!(
            "error[{tag}]: addr2line answered {} of {} addresses",
            theirs.len(),
            addrs.len()
        ),
        None => println!("error[{tag}]: could not run addr2line"),
    }
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
    for b in &bins {
        bench(b, n);
    }
}
