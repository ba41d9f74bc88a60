//! Writing JSON: keys made at compile time, fields without `fmt`, the buffered event array.

use std::io::Write;

use crate::fmt::{push_i64, push_u64, push_us};

/// `,"name":`: a key after the first, made at compile time (appended in pieces, keys
/// were a large share of the writer's time: docs/performance.md).
macro_rules! k {
    ($name:literal) => {
        concat!(",\"", $name, "\":")
    };
}

/// `{"name":`: an object's first key.
macro_rules! first {
    ($name:literal) => {
        concat!("{\"", $name, "\":")
    };
}

pub(super) use {first, k};

/// Appends the fields of an event, numbers without `fmt` (`write!` was most of a
/// conversion's time: docs/performance.md): [`Json::head`], then `,"key":value` pairs
/// with keys from [`k!`].
pub(super) struct Json<'a>(pub(super) &'a mut Vec<u8>);

impl Json<'_> {
    /// Opens an event with the fields every event has.
    #[inline]
    pub(super) fn head(self, ph: &str, cat: &str, pid: u64, tid: u64, ts: u64) -> Self {
        self.raw(r#"{"ph":""#)
            .raw(ph)
            .raw(r#"","cat":""#)
            .raw(cat)
            .raw("\"")
            .n(k!("pid"), pid)
            .n(k!("tid"), tid)
            .t(k!("ts"), ts)
    }

    #[inline]
    pub(super) fn raw(self, piece: &str) -> Self {
        self.0.extend_from_slice(piece.as_bytes());
        self
    }

    /// A string that needs no escaping (names this writer makes).
    #[inline]
    pub(super) fn q(self, key: &str, v: &str) -> Self {
        self.raw(key).raw("\"").raw(v).raw("\"")
    }

    #[inline]
    pub(super) fn n(self, key: &str, v: u64) -> Self {
        let j = self.raw(key);
        push_u64(j.0, v);
        j
    }

    #[inline]
    pub(super) fn i(self, key: &str, v: i64) -> Self {
        let j = self.raw(key);
        push_i64(j.0, v);
        j
    }

    /// Microseconds with three decimals: exact nanoseconds, without float rounding.
    #[inline]
    pub(super) fn t(self, key: &str, ns: u64) -> Self {
        let j = self.raw(key);
        push_us(j.0, ns);
        j
    }
}

/// Appends `s` as a JSON string: as it is when nothing in it needs escaping (thread
/// names, nearly always), else escaped.
pub(super) fn json_str(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        out.extend_from_slice(Str(s).to_string().as_bytes());
    }
}

/// A JSON string, escaped.
pub(super) struct Str<'a>(pub(super) &'a str);

impl std::fmt::Display for Str<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = serde_json::to_string(self.0).map_err(|_| std::fmt::Error)?;
        f.write_str(&s)
    }
}

/// The array of events being written, through a buffer written out a MiB at a time.
pub(super) struct Events<W: Write> {
    w: W,
    pub(super) buf: Vec<u8>,
    first: bool,
}

impl<W: Write> Events<W> {
    /// Room for the MiB the buffer is written out at and the event that crosses it.
    pub(super) fn new(w: W) -> Self {
        Events {
            w,
            buf: Vec::with_capacity(2 << 20),
            first: true,
        }
    }

    /// Starts the next event.
    pub(super) fn next(&mut self) -> std::io::Result<&mut Vec<u8>> {
        if self.buf.len() >= 1 << 20 {
            self.w.write_all(&self.buf)?;
            self.buf.clear();
        }
        if !self.first {
            self.buf.extend_from_slice(b",\n");
        }
        self.first = false;
        Ok(&mut self.buf)
    }

    /// Writes out what is buffered and returns the output.
    pub(super) fn finish(mut self) -> std::io::Result<W> {
        self.w.write_all(&self.buf)?;
        self.w.flush()?;
        Ok(self.w)
    }
}
