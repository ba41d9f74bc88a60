//! Conversion throughput and peak memory on synthetic traces.
//!
//! `convert_bench N` writes a realistic trace of N records (8 CPUs, 50 threads of a
//! server: switches, wakeups, accepts, reads and writes on connections, probed
//! functions) to a temporary file, converts it to Paraver and prints `label: value`
//! lines. Without arguments it runs itself for 5 M and 20 M records, each in its own
//! process so that each peak RSS (VmHWM) is its own.

mod synth;
use synth::{label, synthesize, vm_hwm_kib};

use std::time::Instant;

fn main() {
    synth::main_for_sizes(run);
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
