//! Where a table's rows go: one Parquet file, or one file per Hive-style partition
//! (`TABLE/host=H/date=YYYY-MM-DD/part-0.parquet`), each written row group by row group.
//!
//! Rows are buffered per open file up to [`BATCH_ROWS`], then handed to Parquet's Arrow
//! writer, which encodes and compresses them into the row group under way and writes the
//! row group out once it holds [`ROW_GROUP_ROWS`]: memory is a batch and a row group per
//! open file, whatever the length of the trace.
//!
//! The encoding runs on a thread of its own ([`Encoder`]), fed finished batches through a
//! bounded queue: the timeline and the rows on one core, Parquet's encoding and zstd on
//! another (each a large part of the work: docs/performance.md).

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};

use arrow_schema::DataType;
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use crate::columns::{Batch, Strings};
use crate::error::{Error, Result};
use crate::SCHEMA_VERSION;

/// Rows buffered before they are encoded.
pub(crate) const BATCH_ROWS: usize = 64 * 1024;
/// Rows of a row group: about what engines read as one unit of work (tens of MB of
/// values before compression).
pub const ROW_GROUP_ROWS: usize = 1 << 20;

/// How the big tables are split into directories.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Partition {
    /// `host=NAME/`: one directory per host.
    pub host: bool,
    /// `date=YYYY-MM-DD/`: one directory per UTC day of the rows' start.
    pub date: bool,
}

impl Partition {
    /// From `host`, `date` or `host,date`.
    pub fn parse(s: &str) -> std::result::Result<Partition, String> {
        let mut p = Partition::default();
        for k in s.split(',').map(str::trim).filter(|k| !k.is_empty()) {
            match k {
                "host" => p.host = true,
                "date" => p.date = true,
                _ => return Err(format!("unknown partition key {k:?} (expected host, date)")),
            }
        }
        Ok(p)
    }

    /// Any key.
    pub fn any(self) -> bool {
        self.host || self.date
    }
}

/// Nanoseconds in a day.
const DAY_NS: i64 = 86_400_000_000_000;

/// `YYYY-MM-DD` of day `days` since 1970-01-01 (proleptic Gregorian).
pub(crate) fn civil_date(days: i64) -> String {
    // Howard Hinnant's days_from_civil, inverted.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!("{y:04}-{m:02}-{d:02}")
}

/// A partition value as a path component, escaped as Hive does (`%XX` for `/`, `=`, `%`
/// and control characters, so that engines read the value back unchanged).
fn escape(v: &str) -> String {
    let mut out = String::new();
    for c in v.chars() {
        match c {
            '/' | '\\' | '=' | '%' | ':' | '#' | '?' | '*' | '"' | '\'' | '[' | ']' | '{' | '}'
            | '^' => out.push_str(&format!("%{:02X}", c as u32)),
            c if c.is_control() => out.push_str(&format!("%{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    if out.is_empty() || out == "." || out == ".." {
        // Hive's name for a missing value.
        return "__HIVE_DEFAULT_PARTITION__".into();
    }
    out
}

/// The writer properties of every file: zstd, row groups of [`ROW_GROUP_ROWS`], the
/// schema version in the key-value metadata, and an encoding per kind of column, chosen
/// so that zstd has little left to chew (docs/performance.md):
/// - strings: dictionary (their values repeat);
/// - times, durations and ids: delta-encoded (times and ids grow along a table, and a
///   duration needs a few bits, not eight bytes);
/// - other numbers (return values, byte counts, syscall numbers, CPUs, depths): a
///   dictionary, since few values repeat often, which Parquet's writer drops for plain
///   encoding in a column chunk where they do not.
///
/// Column chunks carry min/max statistics of the times only, what engines prune row
/// groups by (statistics of every column slowed the conversion: docs/performance.md).
fn properties<T: Batch>(columns: &[&str]) -> WriterProperties {
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).expect("level 1")))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_statistics_enabled(EnabledStatistics::None)
        .set_key_value_metadata(Some(vec![
            KeyValue::new("tracer.schema".into(), SCHEMA_VERSION.to_string()),
            KeyValue::new("tracer.table".into(), T::NAME.to_string()),
        ]))
        .set_created_by(format!(
            "tracer {} (trace-parquet)",
            env!("CARGO_PKG_VERSION")
        ));
    for (name, ty, _) in T::columns() {
        if !columns.contains(&name) || !matches!(ty, DataType::Int64 | DataType::Int32) {
            continue;
        }
        let col = || ColumnPath::from(name);
        let time = name.ends_with("_ns") && TIMES.iter().any(|t| name.contains(t));
        let delta = name.ends_with("_ns") || IDS.iter().any(|i| name.ends_with(i));
        if delta {
            b = b
                .set_column_dictionary_enabled(col(), false)
                .set_column_encoding(col(), Encoding::DELTA_BINARY_PACKED);
        }
        if time {
            b = b.set_column_statistics_enabled(col(), EnabledStatistics::Chunk);
        }
    }
    b.build()
}

/// What the name of a point-in-time column holds (`start_ns`, `send_mono_ns`...), as
/// against durations.
const TIMES: &[&str] = &["start", "end", "send", "recv", "seen"];

/// How the names of id columns end (`tid`, `sender_pid`, `call_id`, `new_connection`...).
const IDS: &[&str] = &["pid", "tid", "_id", "connection", "goroutine"];

/// Work for the encoding thread.
type Job = Box<dyn FnOnce() -> Result<()> + Send>;

/// An open Parquet file, used by the encoding thread only (the lock is never contended).
type Shared = Arc<Mutex<Option<ArrowWriter<BufWriter<File>>>>>;

/// The encoding thread: runs the jobs sent to it in order; after a failed one it skips the
/// rest, and the first error is reported to the next sender and at the end.
pub(crate) struct Encoder {
    tx: SyncSender<Job>,
    error: Arc<Mutex<Option<Error>>>,
    worker: std::thread::JoinHandle<()>,
}

impl Encoder {
    pub(crate) fn start() -> Encoder {
        // Two batches waiting at most: memory stays flat if encoding is the slower side.
        let (tx, rx) = sync_channel::<Job>(2);
        let error: Arc<Mutex<Option<Error>>> = Arc::default();
        let slot = error.clone();
        let worker = std::thread::Builder::new()
            .name("parquet-encode".into())
            .spawn(move || {
                let mut failed = false;
                for job in rx {
                    if failed {
                        continue;
                    }
                    if let Err(e) = job() {
                        failed = true;
                        *slot.lock().unwrap() = Some(e);
                    }
                }
            })
            .expect("a thread");
        Encoder { tx, error, worker }
    }

    /// Hands `job` to the thread; fails with the error of an earlier job.
    fn send(&self, job: Job) -> Result<()> {
        self.check()?;
        // The thread only ends when every sender is gone: this cannot fail.
        let _ = self.tx.send(job);
        Ok(())
    }

    fn check(&self) -> Result<()> {
        match self.error.lock().unwrap().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Waits for every job sent to be done.
    pub(crate) fn finish(self) -> Result<()> {
        let Encoder { tx, error, worker } = self;
        drop(tx);
        let _ = worker.join();
        let e = error.lock().unwrap().take();
        e.map_or(Ok(()), Err)
    }
}

struct Part<T> {
    /// (host key, day) of its rows; both 0 when not partitioned by them.
    key: (i32, i64),
    rows: T,
    writer: Shared,
    path: PathBuf,
}

/// A table's open output files.
pub(crate) struct Sink<T: Batch> {
    dir: PathBuf,
    partition: Partition,
    /// Column indices written (the partition columns are in the path instead).
    keep: Vec<usize>,
    schema: SchemaRef,
    props: WriterProperties,
    parts: Vec<Part<T>>,
    last: usize,
    /// Rows written, all files.
    pub(crate) rows: u64,
    /// Files closed, with their sizes (by the encoding thread).
    pub(crate) files: Arc<Mutex<Vec<(PathBuf, u64)>>>,
    encoder: Arc<Encoder>,
}

impl<T: Batch> Sink<T> {
    /// A table written under `dir` (the output directory being written), partitioned as
    /// `partition` says.
    pub(crate) fn new(dir: &Path, partition: Partition, encoder: &Arc<Encoder>) -> Sink<T> {
        let cols = T::columns();
        let keep: Vec<usize> = (0..cols.len())
            .filter(|&i| !(partition.host && cols[i].0 == "host"))
            .collect();
        let full = T::schema();
        let schema = Arc::new(full.project(&keep).expect("columns exist"));
        let names: Vec<&str> = keep.iter().map(|&i| cols[i].0).collect();
        Sink {
            dir: dir.to_owned(),
            partition,
            keep,
            schema,
            props: properties::<T>(&names),
            parts: Vec::new(),
            last: 0,
            rows: 0,
            files: Arc::default(),
            encoder: encoder.clone(),
        }
    }

    /// The table's name.
    pub(crate) fn name(&self) -> &'static str {
        T::NAME
    }

    /// The buffer for one more row of host `host` (a key of `strings`) starting at
    /// `wall_ns`: push a value into every column, then call the table's `row()`.
    #[inline]
    pub(crate) fn at(&mut self, strings: &mut Strings, host: i32, wall_ns: i64) -> Result<&mut T> {
        let key = (
            if self.partition.host { host } else { 0 },
            if self.partition.date {
                wall_ns.div_euclid(DAY_NS)
            } else {
                0
            },
        );
        let i = match self.parts.get(self.last) {
            Some(p) if p.key == key => self.last,
            _ => self.find(strings, key)?,
        };
        self.last = i;
        if self.parts[i].rows.len() >= BATCH_ROWS {
            self.flush(strings, i)?;
        }
        self.rows += 1;
        Ok(&mut self.parts[i].rows)
    }

    #[inline(never)]
    fn find(&mut self, strings: &mut Strings, key: (i32, i64)) -> Result<usize> {
        if let Some(i) = self.parts.iter().position(|p| p.key == key) {
            return Ok(i);
        }
        let path = if self.partition.any() {
            let mut d = self.dir.join(T::NAME);
            if self.partition.host {
                d.push(format!("host={}", escape(strings.get(key.0))));
            }
            if self.partition.date {
                d.push(format!("date={}", civil_date(key.1)));
            }
            d.join("part-0.parquet")
        } else {
            self.dir.join(format!("{}.parquet", T::NAME))
        };
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(|e| Error::io(d, e))?;
        }
        let file = File::create(&path).map_err(|e| Error::io(&path, e))?;
        let writer = ArrowWriter::try_new(
            BufWriter::with_capacity(1 << 20, file),
            self.schema.clone(),
            Some(self.props.clone()),
        )
        .map_err(|e| Error::parquet(&path, e))?;
        self.parts.push(Part {
            key,
            rows: T::default(),
            writer: Arc::new(Mutex::new(Some(writer))),
            path,
        });
        Ok(self.parts.len() - 1)
    }

    fn flush(&mut self, strings: &mut Strings, i: usize) -> Result<()> {
        let p = &mut self.parts[i];
        if p.rows.len() == 0 {
            return Ok(());
        }
        let batch = p.rows.finish(strings);
        let batch = batch.project(&self.keep).expect("columns exist");
        let (writer, path) = (p.writer.clone(), p.path.clone());
        self.encoder.send(Box::new(move || {
            let mut w = writer.lock().unwrap();
            let w = w.as_mut().expect("open until closed");
            w.write(&batch).map_err(|e| Error::parquet(&path, e))
        }))
    }

    /// Makes sure the table has a file even without rows (unpartitioned tables only: a
    /// partitioned table without rows has no directory).
    pub(crate) fn touch(&mut self, strings: &mut Strings) -> Result<()> {
        if !self.partition.any() && self.parts.is_empty() {
            self.find(strings, (0, 0))?;
        }
        Ok(())
    }

    /// Writes what is buffered and closes every file.
    pub(crate) fn close(&mut self, strings: &mut Strings) -> Result<()> {
        for i in 0..self.parts.len() {
            self.flush(strings, i)?;
        }
        for p in self.parts.drain(..) {
            let (writer, path, files) = (p.writer, p.path, self.files.clone());
            self.encoder.send(Box::new(move || {
                let w = writer.lock().unwrap().take().expect("closed once");
                let out = w.into_inner().map_err(|e| Error::parquet(&path, e))?;
                let file = out
                    .into_inner()
                    .map_err(|e| Error::io(&path, e.into_error()))?;
                file.sync_all().map_err(|e| Error::io(&path, e))?;
                let len = file.metadata().map_or(0, |m| m.len());
                files.lock().unwrap().push((path, len));
                Ok(())
            }))?;
        }
        self.last = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_days() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(-1), "1969-12-31");
        assert_eq!(civil_date(19_723), "2024-01-01");
        assert_eq!(civil_date(19_782), "2024-02-29");
        // 2026-11-24 12:00 UTC.
        assert_eq!(civil_date(1_795_521_600_000_000_000 / DAY_NS), "2026-11-24");
    }

    #[test]
    fn partition_values_are_escaped() {
        assert_eq!(escape("web-1.example"), "web-1.example");
        assert_eq!(escape("a/b=c"), "a%2Fb%3Dc");
        assert_eq!(escape(""), "__HIVE_DEFAULT_PARTITION__");
        assert_eq!(
            Partition::parse("host,date"),
            Ok(Partition {
                host: true,
                date: true
            })
        );
        assert!(Partition::parse("cpu").is_err());
    }
}
