//! Summary throughput and peak memory on synthetic traces.
//!
//! `summary_bench N` writes a realistic trace of N records (8 CPUs, 50 threads of a
//! server: switches, wakeups, accepts, reads and writes on connections, 20 probed
//! functions; the generator of `convert_bench`) to a temporary file, then measures:
//! the bare merge + timeline (the floor any consumer pays), and `summarize` (the same
//! plus the aggregation), and prints `label: value` lines. Without arguments it runs
//! itself for 5 M and 20 M records, each in its own process so that each peak RSS
//! (VmHWM) is its own: memory flat in N means the two peaks are close.

use trace_testkit::synth::{label, synthesize, thread_cpu_ns, vm_hwm_kib};

use std::time::Instant;

use trace_merge::MergeOptions;
use trace_summary::{render, summarize, SummaryOptions};

fn main() {
    trace_testkit::synth::main_for_sizes(run);
}

fn run(n: u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("bench.trace");
    synthesize(&input, n).expect("write trace");
    let l = label(n);
    let rss_before = vm_hwm_kib();

    // The floor: merge and state machine alone.
    let t0 = Instant::now();
    let c0 = thread_cpu_ns();
    let mut tl =
        trace_merge::open(std::slice::from_ref(&input), &MergeOptions::default()).expect("open");
    let mut items = 0u64;
    while tl.next_item().expect("timeline").is_some() {
        items += 1;
    }
    let records = tl.stats().records;
    let floor = t0.elapsed().as_secs_f64();
    let c1 = thread_cpu_ns();
    drop(tl);

    let t1 = Instant::now();
    let c2 = thread_cpu_ns();
    let s = summarize(std::slice::from_ref(&input)).expect("summarize");
    let secs = t1.elapsed().as_secs_f64();
    let c3 = thread_cpu_ns();
    let floor_cpu = (c1.0 - c0.0) as f64 / 1e9;
    let cpu = (c3.0 - c2.0) as f64 / 1e9;
    let mut out = Vec::new();
    render(&s, &SummaryOptions::default(), &mut out).expect("render");

    println!("{l} records: {records}");
    println!("{l} timeline items: {items}");
    println!(
        "{l} merge+timeline s: {floor:.3} ({:.0} events/s)",
        records as f64 / floor
    );
    println!("{l} summarize s: {secs:.3}");
    println!("{l} events/s: {:.0}", s.records as f64 / secs);
    // Rates per second on the CPU, and the time spent waiting for one (other load).
    println!(
        "{l} on-CPU events/s: merge+timeline {:.0}, summarize {:.0} (waited for a CPU: {:.3} s, {:.3} s)",
        records as f64 / floor_cpu,
        s.records as f64 / cpu,
        (c1.1 - c0.1) as f64 / 1e9,
        (c3.1 - c2.1) as f64 / 1e9,
    );
    println!(
        "{l} aggregation alone ns/event: {:.1}",
        (secs - floor).max(0.0) * 1e9 / records as f64
    );
    println!(
        "{l} functions {} threads {} connections {}",
        s.functions().len(),
        s.threads().len(),
        s.connections().accepted
    );
    println!(
        "{l} peak RSS KiB: {} (after synthesizing: {rss_before})",
        vm_hwm_kib()
    );
}
