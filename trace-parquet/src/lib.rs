//! Traces and stat files as Parquet tables, for the engines data people already use
//! (DuckDB, DataFusion, Spark, pandas, Polars).
//!
//! [`convert`] reads trace files of any number of hosts and writes one Parquet file per
//! table (or, with [`Options::partition`], one per Hive-style partition) into an output
//! directory, in the schema of `docs/parquet.md` ([`SCHEMA_VERSION`]):
//! - from recordings (`tracer record`), a [`trace_merge::Consumer`] of the timeline writes
//!   `calls` (one row per call of a probed function, with its state split and self time
//!   from [`trace_merge::call_time`], as `trace-summary`'s), `syscalls`, `states` and
//!   `links`;
//! - from counting-mode files (`tracer stat`), `windows`: per window a row per function,
//!   thread and system call, with the counts the summary adds up; and `latencies`, their
//!   latency histograms, from which the summary's percentiles come;
//! - from both, `threads`, `processes`, `probes` and `files`.
//!
//! Times are wall-clock nanoseconds since the Unix epoch (each host's monotonic clock
//! shifted by its header's offset to the real-time clock, as the merge aligns hosts), so
//! the rows of several hosts line up; the monotonic times are kept beside them.
//!
//! Hosts are converted one after the other, each in its own pass over its files' merged
//! timeline: memory is that of one host's timeline plus a batch and a row group per open
//! file, whatever the number of hosts or records.
//!
//! The output directory is written under a temporary name beside it and renamed once
//! complete; an existing one is replaced only when asked ([`Options::force`]).
#![warn(missing_docs)]

mod columns;
mod error;
mod meta;
mod record;
mod sink;
mod stat;
mod tables;

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

pub use error::{Error, Result};
pub use sink::{Partition, ROW_GROUP_ROWS};
pub use trace_merge::{InputReport, MergeOptions};

use columns::{Batch, Strings};
use sink::{Encoder, Sink};
use std::sync::Arc;
use tables::*;
use trace_file::{ChunkKind, ReadOptions, Reader, TraceHeader};

/// The schema's version, in every file's key-value metadata (`tracer.schema`) and in
/// `docs/parquet.md`. It changes when a column is renamed, removed or changes meaning;
/// columns added at the end of a table keep it.
pub const SCHEMA_VERSION: &str = "tracer-parquet/1";

/// A column: (name, type as docs/parquet.md names it, nullable).
pub type ColumnDoc = (&'static str, String, bool);

/// The tables, in the order of `docs/parquet.md`, with their columns.
pub fn schema() -> Vec<(&'static str, Vec<ColumnDoc>)> {
    fn cols<T: Batch>() -> (&'static str, Vec<ColumnDoc>) {
        let c = (T::columns().into_iter())
            .map(|(n, t, null)| (n, type_name(&t), null))
            .collect();
        (T::NAME, c)
    }
    vec![
        cols::<Calls>(),
        cols::<Syscalls>(),
        cols::<States>(),
        cols::<Links>(),
        cols::<Threads>(),
        cols::<Processes>(),
        cols::<Probes>(),
        cols::<Files>(),
        cols::<Windows>(),
        cols::<Latencies>(),
    ]
}

/// The Parquet type a column is read as, in the words of docs/parquet.md.
fn type_name(t: &arrow_schema::DataType) -> String {
    use arrow_schema::DataType::*;
    match t {
        Int64 => "int64".into(),
        Int32 => "int32".into(),
        Boolean => "boolean".into(),
        Utf8 | Dictionary(..) => "string".into(),
        other => format!("{other}"),
    }
}

/// What a conversion is asked.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Replace an existing output directory.
    pub force: bool,
    /// Hive-style directories for the big tables.
    pub partition: Partition,
    /// How the inputs are read and merged (`salvage` reads past damage).
    pub merge: MergeOptions,
}

/// What a conversion read and wrote.
#[derive(Clone, Debug, Default)]
pub struct ParquetReport {
    /// What was read from the recordings, all hosts added up.
    pub input: InputReport,
    /// Recordings (`tracer record` files) read.
    pub record_files: usize,
    /// Counting-mode files (`tracer stat`) read.
    pub stat_files: usize,
    /// Hosts.
    pub hosts: usize,
    /// Rows written per table, in [`schema`] order.
    pub rows: Vec<(&'static str, u64)>,
    /// Files written, with their sizes in bytes (paths inside the output directory).
    pub files: Vec<(PathBuf, u64)>,
    /// The output directory.
    pub output: PathBuf,
}

impl ParquetReport {
    /// Bytes of all files written.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.1).sum()
    }

    /// Rows written to `table`.
    pub fn rows_of(&self, table: &str) -> u64 {
        self.rows.iter().find(|r| r.0 == table).map_or(0, |r| r.1)
    }
}

impl std::fmt::Display for ParquetReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.record_files > 0 {
            write!(f, "{}", self.input)?;
        }
        writeln!(
            f,
            "read: {} recordings, {} stat files, {} hosts",
            self.record_files, self.stat_files, self.hosts
        )?;
        let rows: Vec<String> = (self.rows.iter())
            .filter(|r| r.1 > 0)
            .map(|(t, n)| format!("{t} {n}"))
            .collect();
        writeln!(
            f,
            "written: {} files, {} bytes; rows: {}",
            self.files.len(),
            self.bytes(),
            rows.join(", ")
        )?;
        write!(f, "output: {} ({SCHEMA_VERSION})", self.output.display())
    }
}

/// Every table's output, and the strings of their dictionary columns.
pub(crate) struct Out {
    pub(crate) strings: Strings,
    pub(crate) calls: Sink<Calls>,
    pub(crate) syscalls: Sink<Syscalls>,
    pub(crate) states: Sink<States>,
    pub(crate) links: Sink<Links>,
    pub(crate) threads: Sink<Threads>,
    pub(crate) processes: Sink<Processes>,
    pub(crate) probes: Sink<Probes>,
    pub(crate) files: Sink<Files>,
    pub(crate) windows: Sink<Windows>,
    pub(crate) latencies: Sink<Latencies>,
    /// Call ids handed out so far: ids are unique in the output.
    pub(crate) next_call: i64,
    /// Added to a host's connection ids, so that they are unique in the output.
    pub(crate) conn_base: i64,
    encoder: Arc<Encoder>,
}

impl Out {
    fn new(dir: &Path, partition: Partition) -> Out {
        let whole = Partition::default();
        let e = Arc::new(Encoder::start());
        Out {
            strings: Strings::default(),
            calls: Sink::new(dir, partition, &e),
            syscalls: Sink::new(dir, partition, &e),
            states: Sink::new(dir, partition, &e),
            links: Sink::new(dir, partition, &e),
            windows: Sink::new(dir, partition, &e),
            latencies: Sink::new(dir, partition, &e),
            threads: Sink::new(dir, whole, &e),
            processes: Sink::new(dir, whole, &e),
            probes: Sink::new(dir, whole, &e),
            files: Sink::new(dir, whole, &e),
            next_call: 1,
            conn_base: 0,
            encoder: e,
        }
    }

    /// Closes every table; returns (rows per table, files written).
    fn close(mut self) -> Result<Closed> {
        let s = &mut self.strings;
        let mut rows = Vec::new();
        let mut files = Vec::new();
        macro_rules! close {
            ($($t:ident),*) => {
                $(
                    self.$t.touch(s)?;
                    self.$t.close(s)?;
                    rows.push((self.$t.name(), self.$t.rows));
                    files.push(self.$t.files.clone());
                )*
                // The sinks' handles on the encoder go with them.
                $(drop(self.$t);)*
            };
        }
        close!(
            calls, syscalls, states, links, threads, processes, probes, files, windows, latencies
        );
        let encoder = Arc::into_inner(self.encoder).expect("the sinks are gone");
        encoder.finish()?;
        let mut all: Vec<(PathBuf, u64)> = Vec::new();
        for f in files {
            all.append(&mut f.lock().unwrap());
        }
        Ok((rows, all))
    }
}

/// Rows per table and the files written (with their sizes).
type Closed = (Vec<(&'static str, u64)>, Vec<(PathBuf, u64)>);

/// An input's kind and host, from its header.
struct Input {
    path: PathBuf,
    header: TraceHeader,
}

fn read_header(path: &Path, salvage: bool) -> Result<Input> {
    let file = File::open(path).map_err(|e| Error::trace(path, e.into()))?;
    let mut r = Reader::with_options(BufReader::new(file), ReadOptions { salvage })
        .map_err(|e| Error::trace(path, e))?;
    match r.next_chunk().map_err(|e| Error::trace(path, e))? {
        Some(c) if c.kind == ChunkKind::Header => Ok(Input {
            path: path.to_owned(),
            header: c.meta().map_err(|e| Error::trace(path, e))?,
        }),
        _ => Err(Error::Input(trace_merge::Error::Invalid {
            path: path.to_owned(),
            what: "no header chunk (not a trace file, or damaged at its start)".into(),
        })),
    }
}

/// Converts trace and stat files (any hosts, any mix) into Parquet tables in the
/// directory `output`, written under a temporary name beside it and renamed at the end.
/// An existing `output` is an error unless [`Options::force`].
pub fn convert(inputs: &[PathBuf], output: &Path, opts: &Options) -> Result<ParquetReport> {
    if inputs.is_empty() {
        return Err(Error::Input(trace_merge::Error::NoInput));
    }
    atomic_output::refuse_existing::<Error>(output, opts.force)?;
    let headers: Vec<Input> = (inputs.iter())
        .map(|p| read_header(p, opts.merge.salvage))
        .collect::<Result<_>>()?;
    let tmp = atomic_output::PendingDir::<Error>::new(output, opts.force)?;
    let mut out = Out::new(tmp.path(), opts.partition);

    // Hosts in order of first appearance; each host's recordings in one timeline.
    let mut hosts: Vec<&str> = Vec::new();
    for i in &headers {
        if !hosts.contains(&i.header.hostname.as_str()) {
            hosts.push(&i.header.hostname);
        }
    }
    let mut report = ParquetReport {
        hosts: hosts.len(),
        output: output.to_owned(),
        ..Default::default()
    };
    for host in &hosts {
        let of_host = |stat: bool| -> Vec<PathBuf> {
            (headers.iter())
                .filter(|i| i.header.hostname == *host && (i.header.mode == "stat") == stat)
                .map(|i| i.path.clone())
                .collect()
        };
        let records = of_host(false);
        if !records.is_empty() {
            report.record_files += records.len();
            let input = record::convert_host(&records, &opts.merge, &mut out)?;
            add_input(&mut report.input, input);
        }
        for path in of_host(true) {
            report.stat_files += 1;
            stat::convert_file(&path, opts.merge.salvage, &mut out)?;
        }
    }
    let (rows, files) = out.close()?;
    report.rows = rows;
    let base = tmp.path().to_owned();
    report.files = (files.into_iter())
        .map(|(p, n)| (p.strip_prefix(&base).unwrap_or(&p).to_owned(), n))
        .collect();
    tmp.commit()?;
    Ok(report)
}

/// The counts of one host's recordings added to those of the hosts before.
fn add_input(all: &mut InputReport, one: InputReport) {
    all.records_in += one.records_in;
    all.out_of_order += one.out_of_order;
    all.max_lateness_ns = all.max_lateness_ns.max(one.max_lateness_ns);
    all.lost_by_kernel += one.lost_by_kernel;
    all.threads_not_traced += one.threads_not_traced;
    all.stacks_shed += one.stacks_shed;
    all.truncated.extend(one.truncated);
    all.damage.extend(one.damage);
    all.without_trailer.extend(one.without_trailer);
    all.orphan_func_exits += one.orphan_func_exits;
    all.unresolved_wakeups += one.unresolved_wakeups;
    all.unseen_switch_ins += one.unseen_switch_ins;
}
