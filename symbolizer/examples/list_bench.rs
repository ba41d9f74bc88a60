//! Probe-listing benchmark: CPU time of `list` with a glob and of `resolve`
//! of a batch of names, each from a cold start (a fresh `Binary` per call, as
//! `tracer probes` and `tracer record` have).
//!
//! Usage: `list_bench [--runs N] (--bin PATH (--list GLOB | --resolve A,B,...)...)...`
//! Each `--list` or `--resolve` is one case on the binary named before it.
//! Output is `label: value` lines: `list[BIN GLOB]` and `resolve[BIN N names]`
//! give the minimum and median CPU milliseconds over the runs and what was
//! found (functions listed, names resolved).

use std::path::PathBuf;
use std::time::Duration;

use symbolizer::{list, resolve, Options, Target};

fn cpu() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

enum Case {
    List(String),
    Resolve(Vec<String>),
}

/// Runs `f` `runs` times; (min, median) CPU ms and the last result.
fn time(runs: usize, mut f: impl FnMut() -> usize) -> (f64, f64, usize) {
    let mut ms = Vec::with_capacity(runs);
    let mut found = 0;
    for _ in 0..runs {
        let t = cpu();
        found = f();
        ms.push(cpu().saturating_sub(t).as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    (ms[0], ms[ms.len() / 2], found)
}

fn main() {
    let mut runs = 10;
    let mut cases: Vec<(PathBuf, Case)> = Vec::new();
    let mut bin: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().expect("missing value");
        match a.as_str() {
            "--runs" => runs = val().parse().expect("--runs N"),
            "--bin" => bin = Some(PathBuf::from(val())),
            "--list" => cases.push((bin.clone().expect("--bin first"), Case::List(val()))),
            "--resolve" => cases.push((
                bin.clone().expect("--bin first"),
                Case::Resolve(val().split(',').map(String::from).collect()),
            )),
            other => panic!("unknown argument {other}"),
        }
    }
    let opts = Options {
        allow_multiple: true,
        ..Default::default()
    };
    for (bin, case) in &cases {
        let target = Target::Path(bin.clone());
        let tag = bin.file_name().unwrap_or_default().to_string_lossy();
        let (label, (min, med, found)) = match case {
            Case::List(glob) => (
                format!("list[{tag} {glob}]"),
                time(runs, || list(&target, Some(glob)).map_or(0, |v| v.len())),
            ),
            Case::Resolve(names) => (
                format!("resolve[{tag} {} names]", names.len()),
                time(runs, || {
                    names
                        .iter()
                        .filter(|n| resolve(&target, n, &opts).is_ok())
                        .count()
                }),
            ),
        };
        println!("{label}: min {min:.1} ms, median {med:.1} ms, found {found}");
    }
}
