//! Conversion throughput and peak memory on synthetic traces.
//!
//! `convert_bench N` writes a realistic trace of N records (8 CPUs, 50 threads of a
//! server: switches, wakeups, accepts, reads and writes on connections, probed
//! functions) to a temporary file, converts it to Paraver, then to the Trace Event Format, and prints `label: value`
//! lines. Without arguments it runs itself for 5 M and 20 M records, each in its own
//! process so that each peak RSS (VmHWM) is its own.

use trace_testkit::synth::{label, process_cpu_ns, synthesize, thread_cpu_ns, vm_hwm_kib};

use std::time::Instant;

fn main() {
    trace_testkit::synth::main_for_sizes(run);
}

fn run(n: u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("bench.trace");
    let t0 = Instant::now();
    synthesize(&input, n).expect("write trace");
    let gen = t0.elapsed().as_secs_f64();
    let size = std::fs::metadata(&input).map(|m| m.len()).unwrap_or(0);

    let t1 = Instant::now();
    let (c0, p0) = (thread_cpu_ns(), process_cpu_ns());
    let report = trace_convert::paraver::convert(
        std::slice::from_ref(&input),
        &dir.path().join("bench"),
        &force(),
    )
    .expect("convert");
    let secs = t1.elapsed().as_secs_f64();
    let (c1, p1) = (thread_cpu_ns(), process_cpu_ns());
    // The converting thread's own CPU time, and the rest of the process's (the formatter).
    let main_cpu = (c1.0 - c0.0) as f64 / 1e9;
    let other_cpu = ((p1 - p0) as f64 / 1e9 - main_cpu).max(0.0);
    let prv = std::fs::metadata(dir.path().join("bench.prv")).map_or(0, |m| m.len());
    let l = label(n);
    println!("{l} records: {}", report.input.records_in);
    println!("{l} trace bytes: {size}");
    println!("{l} synthesize s: {gen:.3}");
    println!("{l} convert s: {secs:.3}");
    println!("{l} events/s: {:.0}", report.input.records_in as f64 / secs);
    // Without other load, a conversion takes about as long as its busier thread.
    println!(
        "{l} CPU s: converting thread {main_cpu:.3} (waited for a CPU: {:.3}), formatter ~{other_cpu:.2}; events/s per busier thread's CPU s: {:.0}",
        (c1.1 - c0.1) as f64 / 1e9,
        report.input.records_in as f64 / main_cpu.max(other_cpu),
    );
    println!("{l} prv bytes: {prv}");
    println!(
        "{l} prv lines: {} states, {} events, {} comms",
        report.states, report.events, report.comms
    );
    println!("{l} out of order: {}", report.input.out_of_order);
    println!("{l} records merged late: {}", report.late_records);
    println!("{l} peak RSS KiB: {}", vm_hwm_kib());

    // The same trace as Trace Event Format (one thread; after the Paraver run, so the
    // peak RSS above is Paraver's).
    let json = dir.path().join("bench.json");
    let t2 = Instant::now();
    let c0 = thread_cpu_ns();
    let r = trace_convert::chrome::convert(std::slice::from_ref(&input), &json, &force())
        .expect("convert to JSON");
    let secs = t2.elapsed().as_secs_f64();
    let cpu = (thread_cpu_ns().0 - c0.0) as f64 / 1e9;
    let bytes = std::fs::metadata(&json).map_or(0, |m| m.len());
    println!(
        "{l} chrome: {secs:.3} s, {:.0} events/s ({:.0} per CPU s), {bytes} JSON bytes",
        r.input.records_in as f64 / secs,
        r.input.records_in as f64 / cpu
    );

    // And as folded stacks.
    let folded = dir.path().join("bench.folded");
    let t3 = Instant::now();
    let c0 = thread_cpu_ns();
    let r = trace_convert::folded::convert(&[input], &folded, &force()).expect("convert to stacks");
    let secs = t3.elapsed().as_secs_f64();
    let cpu = (thread_cpu_ns().0 - c0.0) as f64 / 1e9;
    println!(
        "{l} folded: {secs:.3} s, {:.0} events/s ({:.0} per CPU s), {} stacks",
        r.input.records_in as f64 / secs,
        r.input.records_in as f64 / cpu,
        r.stacks
    );
}

/// Conversions replace the previous round's outputs.
fn force() -> trace_convert::Options {
    trace_convert::Options {
        force: true,
        ..Default::default()
    }
}
