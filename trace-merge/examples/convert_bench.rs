//! Conversion throughput and peak memory on synthetic traces.
//!
//! `convert_bench N` writes a realistic trace of N records (8 CPUs, 50 threads of a
//! server: switches, wakeups, accepts, reads and writes on connections, probed
//! functions) to a temporary file, converts it to Paraver and prints `label: value`
//! lines. Without arguments it runs itself for 5 M and 20 M records, each in its own
//! process so that each peak RSS (VmHWM) is its own.

mod synth;
use synth::{synthesize, vm_hwm_kib};

use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        let me = std::env::current_exe().expect("own path");
        for n in ["5000000", "20000000"] {
            let st = std::process::Command::new(&me)
                .arg(n)
                .status()
                .expect("run");
            assert!(st.success(), "bench for {n} failed");
        }
        return;
    }
    for a in args {
        let n: u64 = a.replace('_', "").parse().expect("N: a number of records");
        run(n);
    }
}

fn label(n: u64) -> String {
    if n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else {
        n.to_string()
    }
}

fn run(n: u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("bench.trace");
    let t0 = Instant::now();
    synthesize(&input, n).expect("write trace");
    let gen = t0.elapsed().as_secs_f64();
    let size = std::fs::metadata(&input).map(|m| m.len()).unwrap_or(0);

    let t1 = Instant::now();
    let report =
        trace_merge::convert_paraver(&[input], &dir.path().join("bench"), true).expect("convert");
    let secs = t1.elapsed().as_secs_f64();
    let prv = std::fs::metadata(dir.path().join("bench.prv")).map_or(0, |m| m.len());
    let l = label(n);
    println!("{l} records: {}", report.records_in);
    println!("{l} trace bytes: {size}");
    println!("{l} synthesize s: {gen:.3}");
    println!("{l} convert s: {secs:.3}");
    println!("{l} events/s: {:.0}", report.records_in as f64 / secs);
    println!("{l} prv bytes: {prv}");
    println!(
        "{l} prv lines: {} states, {} events, {} comms",
        report.states, report.events, report.comms
    );
    println!("{l} out of order: {}", report.out_of_order);
    println!("{l} records merged late: {}", report.late_records);
    println!("{l} peak RSS KiB: {}", vm_hwm_kib());
}
