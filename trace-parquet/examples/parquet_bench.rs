//! Parquet conversion rate, output size and peak memory on the synthetic traces the other
//! converters' benchmarks use, and a fleet for the engines.
//!
//! `parquet_bench N` writes the synthetic trace of N records (trace-convert's
//! convert_bench: 8 CPUs, 50 server threads) and converts it to Parquet tables, printing
//! `label: value` lines. Without arguments it runs itself for 5 M and 20 M records, each
//! in its own process so that each peak RSS (VmHWM) is its own.
//!
//! `parquet_bench fleet DIR HOSTS N` writes HOSTS traces of N records each, as HOSTS
//! hosts (`host-0`...) whose clocks start a day apart, and converts them together with
//! `--partition host,date` into DIR/fleet: the input of the Spark and DuckDB runs of
//! `cargo xtask bench --only parquet`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use trace_file::{ChunkKind, ReadOptions, Reader, TraceHeader, Writer};
use trace_parquet::{convert, Options, Partition};
use trace_testkit::synth::{
    label, main_for_sizes, process_cpu_ns, synthesize, thread_cpu_ns, vm_hwm_kib,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("fleet") {
        let dir = PathBuf::from(&args[1]);
        let hosts: usize = args[2].parse().expect("HOSTS");
        let n: u64 = args[3].replace('_', "").parse().expect("N");
        fleet(&dir, hosts, n);
        return;
    }
    main_for_sizes(run);
}

fn run(n: u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("bench.trace");
    synthesize(&input, n).expect("write trace");
    let size = std::fs::metadata(&input).map(|m| m.len()).unwrap_or(0);
    let out = dir.path().join("bench.parquet");
    let t0 = Instant::now();
    let (c0, p0) = (thread_cpu_ns(), process_cpu_ns());
    let opts = Options {
        force: true,
        ..Default::default()
    };
    let r = convert(std::slice::from_ref(&input), &out, &opts).expect("convert");
    let secs = t0.elapsed().as_secs_f64();
    let (c1, p1) = (thread_cpu_ns(), process_cpu_ns());
    let cpu = (c1.0 - c0.0) as f64 / 1e9;
    let all_cpu = (p1 - p0) as f64 / 1e9;
    let records = r.input.records_in;
    let l = label(n);
    println!("{l} records: {records}");
    println!(
        "{l} trace bytes: {size} ({:.1} per event)",
        size as f64 / records as f64
    );
    println!(
        "{l} parquet bytes: {} ({:.1} per event, {:.2}x the trace)",
        r.bytes(),
        r.bytes() as f64 / records as f64,
        r.bytes() as f64 / size as f64
    );
    println!(
        "{l} parquet: {secs:.3} s, {:.0} events/s wall; per CPU s: {:.0} of the timeline thread (waited for a CPU: {:.3} s), {:.0} of both threads (timeline and encoder: {all_cpu:.3} CPU s)",
        records as f64 / secs,
        records as f64 / cpu,
        (c1.1 - c0.1) as f64 / 1e9,
        records as f64 / all_cpu,
    );
    let rows: Vec<String> = (r.rows.iter())
        .filter(|x| x.1 > 0)
        .map(|(t, n)| format!("{t} {n}"))
        .collect();
    println!("{l} rows: {}", rows.join(", "));
    for (p, b) in r.files.iter().filter(|f| f.1 > 1 << 20) {
        println!("{l} file {}: {b} bytes", p.display());
    }
    println!("{l} peak RSS KiB: {}", vm_hwm_kib());
}

/// A copy of `from` as if recorded on `host`, its clocks `shift_ns` later.
fn as_host(from: &Path, to: &Path, host: &str, shift_ns: i64) {
    let f = std::io::BufReader::new(std::fs::File::open(from).unwrap());
    let mut r = Reader::with_options(f, ReadOptions::default()).unwrap();
    let out = std::io::BufWriter::new(std::fs::File::create(to).unwrap());
    let mut w = Writer::new(out).unwrap();
    while let Some(c) = r.next_chunk().unwrap() {
        if c.kind == ChunkKind::Header {
            let mut h: TraceHeader = c.meta().unwrap();
            h.hostname = host.into();
            h.monotonic_to_realtime_ns += shift_ns;
            w.meta(ChunkKind::Header, &h).unwrap();
        } else {
            w.chunk(c.kind, &c.payload).unwrap();
        }
    }
    std::io::Write::flush(&mut w.into_inner()).unwrap();
}

fn fleet(dir: &Path, hosts: usize, n: u64) {
    std::fs::create_dir_all(dir).unwrap();
    let one = dir.join("one.trace");
    synthesize(&one, n).expect("write trace");
    let day = 86_400_000_000_000i64;
    let inputs: Vec<PathBuf> = (0..hosts)
        .map(|h| {
            let p = dir.join(format!("host-{h}.trace"));
            as_host(&one, &p, &format!("host-{h}"), h as i64 * day);
            p
        })
        .collect();
    let out = dir.join("fleet");
    let opts = Options {
        force: true,
        partition: Partition {
            host: true,
            date: true,
        },
        ..Default::default()
    };
    let t0 = Instant::now();
    let r = convert(&inputs, &out, &opts).expect("convert");
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "fleet: {hosts} hosts x {n} records -> {} files, {} bytes, {} calls rows in {secs:.2} s ({:.0} events/s)",
        r.files.len(),
        r.bytes(),
        r.rows_of("calls"),
        r.input.records_in as f64 / secs
    );
    for p in inputs.iter().chain([&one]) {
        let _ = std::fs::remove_file(p);
    }
}
