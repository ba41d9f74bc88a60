//! The chunk container: framing, checksums, torn-tail detection and salvage.
//!
//! Version 2 frames every chunk with a self-checking header (see `docs/trace-format.md`),
//! so the reader can tell three endings apart: a file that ends at a chunk boundary, a tail
//! a crash left incomplete or zero-filled, and bytes that are not what the recorder wrote.
//! Version 1 files, whose header left its length unchecked until the payload was read,
//! still read with the rules they were written under.

use std::io::{self, Read, Write};

use crate::{Error, Result};

/// First bytes of every trace file.
pub const MAGIC: [u8; 8] = *b"TRACEBPF";
/// Version of the layout described in `docs/trace-format.md`; what [`Writer::new`] writes.
/// Version 3 frames chunks as version 2 does and adds stacks (a chunk kind and two record
/// kinds), which a version 2 reader would take for damage: it refuses the version instead.
/// Version 4 writes go_entry and go_exit with the frame's height, under two new codes.
/// Version 5 adds frame_entry and frame_exit (native calls paired by frame). Version 6
/// gives counting windows' latency histograms log-linear buckets, which a version 5
/// reader would miss (it refuses the version instead).
pub const FORMAT_VERSION: u32 = 6;
/// The oldest version [`Reader`] still reads.
pub const OLDEST_VERSION: u32 = 1;

/// First bytes of every version 2 chunk header, so a reader can find the next chunk after
/// damage. No byte of it can occur in UTF-8 text (0xF8, 0xFD), so JSON payloads never
/// contain it, and it is no run of 0x00 or 0xFF, the commonest filler in binary data.
pub const SYNC: [u8; 4] = [0xF8, 0xC1, 0xFD, 0x0F];

/// Size of a version 2 chunk header: sync, kind, length, payload CRC, header CRC.
pub const CHUNK_HEADER_LEN: usize = 20;
const CHUNK_HEADER_V1: usize = 16;

/// No chunk is larger than this; a larger length field means a damaged header.
pub const MAX_CHUNK: u32 = 64 << 20;

/// A crash can leave the file's length written but its last pages never filled: zeros from a
/// page boundary on. Pages are at least this large on every filesystem we run on.
const ZERO_PAGE: u64 = 4096;

/// The most a reader reserves for a payload before its bytes have arrived: beyond it the
/// payload grows as bytes arrive, so a length field (checked or not) cannot make a short
/// file cost more memory than this. Real chunks are smaller, so they are still read into
/// one allocation of their exact size.
const PREALLOC_MAX: usize = 1 << 20;

/// How much the scanning paths (damage, zero tails) read from the input at a time.
const SCAN_BLOCK: usize = 64 << 10;

/// What a chunk holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChunkKind {
    /// [`crate::TraceHeader`], JSON. Always the first chunk.
    Header,
    /// [`crate::ProcessInfo`], JSON, one per traced process.
    Process,
    /// A list of [`crate::ThreadInfo`], JSON: threads known when recording started.
    Threads,
    /// A list of [`crate::Probe`], JSON: the probe table.
    Probes,
    /// Records of one CPU, binary (see [`crate::record`]).
    Events,
    /// [`crate::LostCounts`], JSON: cumulative per-CPU drops, written periodically.
    Lost,
    /// [`crate::Trailer`], JSON: written last by a recorder that finished cleanly.
    Trailer,
    /// [`crate::StatWindow`], JSON: one interval of counting mode.
    Window,
    /// [`crate::StackTable`], JSON: stacks, mappings and kernel symbols defined since the
    /// previous one; written before any `Events` chunk that refers to them.
    Stacks,
    /// A kind this build does not know; readers skip it (forward compatibility).
    Unknown(u32),
}

impl ChunkKind {
    /// The kind's number in a chunk header.
    pub fn code(self) -> u32 {
        match self {
            ChunkKind::Header => 1,
            ChunkKind::Process => 2,
            ChunkKind::Threads => 3,
            ChunkKind::Probes => 4,
            ChunkKind::Events => 5,
            ChunkKind::Lost => 6,
            ChunkKind::Trailer => 7,
            ChunkKind::Window => 8,
            ChunkKind::Stacks => 9,
            ChunkKind::Unknown(c) => c,
        }
    }

    /// The kind a header number stands for (0 is no kind; it never reaches here).
    pub fn from_code(code: u32) -> ChunkKind {
        match code {
            1 => ChunkKind::Header,
            2 => ChunkKind::Process,
            3 => ChunkKind::Threads,
            4 => ChunkKind::Probes,
            5 => ChunkKind::Events,
            6 => ChunkKind::Lost,
            7 => ChunkKind::Trailer,
            8 => ChunkKind::Window,
            9 => ChunkKind::Stacks,
            c => ChunkKind::Unknown(c),
        }
    }
}

fn checksum_v1(kind: u32, len: u32, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&kind.to_le_bytes());
    h.update(&len.to_le_bytes());
    h.update(payload);
    h.finalize()
}

fn word(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Builds a version 2 chunk header.
fn header_v2(code: u32, len: u32, payload_crc: u32) -> [u8; CHUNK_HEADER_LEN] {
    let mut h = [0u8; CHUNK_HEADER_LEN];
    h[0..4].copy_from_slice(&SYNC);
    h[4..8].copy_from_slice(&code.to_le_bytes());
    h[8..12].copy_from_slice(&len.to_le_bytes());
    h[12..16].copy_from_slice(&payload_crc.to_le_bytes());
    let crc = crc32fast::hash(&h[..16]);
    h[16..20].copy_from_slice(&crc.to_le_bytes());
    h
}

/// A version 2 header whose checks all hold.
#[derive(Clone, Copy)]
struct HeaderV2 {
    code: u32,
    len: u32,
    payload_crc: u32,
}

/// Checks a version 2 header; the error says what is wrong with it, for [`Error::Corrupt`].
fn parse_v2(h: &[u8]) -> Result<HeaderV2, String> {
    if h[0..4] != SYNC {
        return Err("bad sync marker".into());
    }
    if crc32fast::hash(&h[..16]) != word(h, 16) {
        return Err("header checksum mismatch".into());
    }
    let (code, len) = (word(h, 4), word(h, 8));
    if code == 0 || len > MAX_CHUNK {
        return Err(format!(
            "impossible chunk header (kind {code}, length {len})"
        ));
    }
    Ok(HeaderV2 {
        code,
        len,
        payload_crc: word(h, 12),
    })
}

/// Appends chunks to a trace. Each chunk goes out in one `write_all`, so a reader never
/// sees a chunk of another one's bytes, and a kill leaves at most one torn chunk at the end.
pub struct Writer<W: Write> {
    out: W,
    version: u32,
    bytes: u64,
    buf: Vec<u8>,
}

impl<W: Write> Writer<W> {
    /// Starts a trace in the current format: writes the magic number and the version.
    pub fn new(out: W) -> Result<Self> {
        Self::with_version(out, FORMAT_VERSION)
    }

    /// Starts a trace in an older format version, so readers can be tested and measured
    /// against files older recorders wrote.
    pub fn with_version(mut out: W, version: u32) -> Result<Self> {
        if !(OLDEST_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(Error::Version(version));
        }
        out.write_all(&MAGIC)?;
        out.write_all(&version.to_le_bytes())?;
        Ok(Writer {
            out,
            version,
            bytes: MAGIC.len() as u64 + 4,
            buf: Vec::new(),
        })
    }

    /// Appends one chunk.
    pub fn chunk(&mut self, kind: ChunkKind, payload: &[u8]) -> Result<()> {
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|&l| l <= MAX_CHUNK)
            .ok_or_else(|| io::Error::other("chunk too large"))?;
        let code = kind.code();
        if code == 0 {
            return Err(io::Error::other("chunk kind 0 does not exist").into());
        }
        self.buf.clear();
        if self.version == 1 {
            self.buf.extend_from_slice(&code.to_le_bytes());
            self.buf.extend_from_slice(&len.to_le_bytes());
            let crc = checksum_v1(code, len, payload);
            self.buf.extend_from_slice(&crc.to_le_bytes());
            self.buf.extend_from_slice(&0u32.to_le_bytes());
        } else {
            let head = header_v2(code, len, crc32fast::hash(payload));
            self.buf.extend_from_slice(&head);
        }
        self.buf.extend_from_slice(payload);
        self.out.write_all(&self.buf)?;
        self.bytes += self.buf.len() as u64;
        Ok(())
    }

    /// Appends a metadata chunk holding `value` as JSON.
    pub fn meta<T: serde::Serialize>(&mut self, kind: ChunkKind, value: &T) -> Result<()> {
        let json = serde_json::to_vec(value).map_err(io::Error::other)?;
        self.chunk(kind, &json)
    }

    /// Bytes written so far, header included.
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    /// Flushes the output, so what was written so far survives a crash of the writer.
    pub fn flush(&mut self) -> Result<()> {
        self.out.flush()?;
        Ok(())
    }

    /// The output, e.g. to sync or measure it.
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// Ends writing and gives the output back.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// One chunk read back.
#[derive(Debug, Clone)]
pub struct Chunk {
    /// What the payload holds.
    pub kind: ChunkKind,
    /// Byte offset of the chunk header in the file.
    pub offset: u64,
    /// The payload, its checksum verified.
    pub payload: Vec<u8>,
}

impl Chunk {
    /// Decodes a metadata chunk's JSON.
    pub fn meta<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.payload).map_err(|source| Error::Meta {
            offset: self.offset,
            source,
        })
    }
}

/// How a file ended, known once [`Reader::next_chunk`] has returned `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The file ends exactly at a chunk boundary (or, when salvaging, at the end of a
    /// damaged region listed in [`Reader::skipped`]): nothing is missing at the end.
    Complete,
    /// The writer stopped mid-chunk: the last chunk is incomplete, or zeros fill the file
    /// from a chunk boundary, or from a page boundary inside the last chunk, to its end.
    /// Every complete chunk before `offset` was read.
    Torn {
        /// Where the incomplete part starts: the offset of the first chunk not read.
        offset: u64,
    },
}

/// How a [`Reader`] treats damage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Instead of failing with [`Error::Corrupt`] on damage, skip to the next chunk whose
    /// header and payload both check, and list what was skipped ([`Reader::skipped`]).
    /// Only version 2 and later files can be salvaged; damage in a version 1 file is still an
    /// error.
    pub salvage: bool,
}

/// A damaged region that a salvaging [`Reader`] stepped over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// File offset where the damaged region starts (a chunk boundary).
    pub offset: u64,
    /// Length of the region in bytes.
    pub bytes: u64,
    /// How many chunks the region held as far as the reader can tell (sync markers seen),
    /// at least 1.
    pub chunks: u64,
    /// The kind, when the region is one chunk whose header checked and payload did not.
    pub kind: Option<ChunkKind>,
    /// For such an Events chunk, its CPU as its payload's prefix says: probably right,
    /// since the damage may be there too.
    pub cpu: Option<u32>,
    /// For such an Events chunk, its first record's time as its prefix says (probably).
    pub first_ts: Option<u64>,
}

/// Reads chunks in file order and says how the file ended ([`Reader::end`]).
///
/// A torn tail ends the stream and is reported, never taken for damage; damage (a
/// checksum that does not hold, a missing sync marker, an impossible header) anywhere else
/// is [`Error::Corrupt`], unless [`ReadOptions::salvage`] asks to step over it.
pub struct Reader<R: Read> {
    input: R,
    version: u32,
    opts: ReadOptions,
    /// Bytes read from `input` but not consumed yet: `buf[pos..]` starts at `offset`.
    /// Empty on the normal path, where headers and payloads are read straight from input.
    buf: Vec<u8>,
    pos: usize,
    /// File offset of the next byte to consume.
    offset: u64,
    /// The input returned end of file.
    eof: bool,
    done: bool,
    end: Option<End>,
    skipped: Vec<Skipped>,
}

impl<R: Read> Reader<R> {
    /// Opens a trace for strict reading: any damage is an error.
    pub fn new(input: R) -> Result<Self> {
        Self::with_options(input, ReadOptions::default())
    }

    /// Opens a trace with the given options.
    pub fn with_options(mut input: R, opts: ReadOptions) -> Result<Self> {
        let mut head = [0u8; 12];
        let n = read_full(&mut input, &mut head)?;
        if n < 12 || head[..8] != MAGIC {
            return Err(Error::BadMagic);
        }
        let version = word(&head, 8);
        if !(OLDEST_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(Error::Version(version));
        }
        Ok(Reader {
            input,
            version,
            opts,
            buf: Vec::new(),
            pos: 0,
            offset: 12,
            eof: false,
            done: false,
            end: None,
            skipped: Vec::new(),
        })
    }

    /// The file's format version.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// How the file ended; `None` until the stream has ended without an error.
    pub fn end(&self) -> Option<End> {
        self.end
    }

    /// Where the file ended inside a chunk, if it did (a recorder killed mid-write).
    pub fn truncated_at(&self) -> Option<u64> {
        match self.end {
            Some(End::Torn { offset }) => Some(offset),
            _ => None,
        }
    }

    /// The damaged regions a salvaging reader stepped over so far, in file order.
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }

    /// The file offset of the next chunk: just past the last chunk read.
    pub fn position(&self) -> u64 {
        self.offset
    }

    /// The next complete chunk, or `None` at the end of the file or of its intact part.
    pub fn next_chunk(&mut self) -> Result<Option<Chunk>> {
        if self.done {
            return Ok(None);
        }
        let r = if self.version == 1 {
            self.next_v1()
        } else {
            self.next_v2()
        };
        if r.is_err() {
            self.done = true;
        }
        r
    }

    fn finish(&mut self, end: End) -> Result<Option<Chunk>> {
        self.done = true;
        self.end = Some(end);
        Ok(None)
    }

    fn next_v1(&mut self) -> Result<Option<Chunk>> {
        let offset = self.offset;
        let mut head = [0u8; CHUNK_HEADER_V1];
        let n = self.read_head(&mut head)?;
        if n == 0 {
            return self.finish(End::Complete);
        }
        if n < CHUNK_HEADER_V1 {
            return self.finish(End::Torn { offset });
        }
        let (code, len, crc) = (word(&head, 0), word(&head, 4), word(&head, 8));
        if len > MAX_CHUNK || code == 0 {
            return Err(Error::Corrupt {
                offset,
                what: format!("impossible chunk header (kind {code}, length {len})"),
            });
        }
        let payload = self.read_payload(len as usize)?;
        if payload.len() < len as usize {
            return self.finish(End::Torn { offset });
        }
        if checksum_v1(code, len, &payload) != crc {
            return Err(Error::Corrupt {
                offset,
                what: "checksum mismatch".into(),
            });
        }
        Ok(Some(Chunk {
            kind: ChunkKind::from_code(code),
            offset,
            payload,
        }))
    }

    fn next_v2(&mut self) -> Result<Option<Chunk>> {
        loop {
            let offset = self.offset;
            let mut head = [0u8; CHUNK_HEADER_LEN];
            let n = self.read_head(&mut head)?;
            if n == 0 {
                return self.finish(End::Complete);
            }
            let h = match parse_v2_prefix(&head[..n]) {
                Ok(h) => h,
                Err(what) => {
                    let head = &head[..n];
                    // A torn write leaves a prefix of a header, which starts with SYNC.
                    let torn_header = n < CHUNK_HEADER_LEN && head[..n.min(4)] == SYNC[..n.min(4)];
                    let z = offset + trailing_zeros_start(head) as u64;
                    if torn_header || (zeros_explain(offset, z) && self.rest_is_zero()?) {
                        return self.finish(End::Torn { offset });
                    }
                    if !self.opts.salvage {
                        return Err(Error::Corrupt {
                            offset,
                            what: self.header_damage(what, head),
                        });
                    }
                    // Only zeros were consumed past the header, so the scan can go on
                    // from here; otherwise give the header's bytes back to scan them.
                    if self.offset == offset + n as u64 {
                        self.unread(head);
                    }
                    match self.resync(offset)? {
                        true => continue,
                        false => return Ok(None),
                    }
                }
            };
            let payload = self.read_payload(h.len as usize)?;
            if payload.len() < h.len as usize {
                return self.finish(End::Torn { offset });
            }
            if crc32fast::hash(&payload) == h.payload_crc {
                return Ok(Some(Chunk {
                    kind: ChunkKind::from_code(h.code),
                    offset,
                    payload,
                }));
            }
            let chunk_end = self.offset;
            let tail = trailing_zeros_start(&payload);
            let z = offset + (CHUNK_HEADER_LEN + tail) as u64;
            if aligned_inside(z, chunk_end) && self.rest_is_zero()? {
                return self.finish(End::Torn { offset });
            }
            if !self.opts.salvage {
                return Err(Error::Corrupt {
                    offset,
                    what: "payload checksum mismatch".into(),
                });
            }
            let kind = ChunkKind::from_code(h.code);
            let prefix = (kind == ChunkKind::Events)
                .then(|| crate::record::peek_prefix(&payload))
                .flatten();
            self.skipped.push(Skipped {
                offset,
                bytes: chunk_end - offset,
                chunks: 1,
                kind: Some(kind),
                cpu: prefix.map(|p| p.0),
                first_ts: prefix.map(|p| p.1),
            });
            // The header checked, so its length is trusted and the next chunk starts at
            // its end; zeros consumed past it mean the next header is damaged too.
            if self.offset > chunk_end && !self.resync(chunk_end)? {
                return Ok(None);
            }
        }
    }

    /// Says what is wrong with a damaged header, naming a zero run followed by data,
    /// which otherwise looks like a mere bad marker.
    fn header_damage(&self, what: String, head: &[u8]) -> String {
        if head.iter().all(|&b| b == 0) {
            format!("{what} (zero bytes up to byte {}, then data)", self.offset)
        } else {
            what
        }
    }

    /// Scans from the cursor for the next chunk whose header checks, after damage found
    /// at `region_start`, a chunk boundary at or before the cursor (bytes between them were
    /// consumed looking for a zero tail and hold no chunk).
    /// Returns true with the cursor on that header, the region recorded as skipped, or
    /// false when the file ended first (having set how it ended).
    fn resync(&mut self, region_start: u64) -> Result<bool> {
        let mut markers = 0u64;
        // Start of the run of zero bytes that ends at the cursor.
        let mut zero_from = region_start;
        loop {
            let avail = self.fill(CHUNK_HEADER_LEN)?;
            if avail == 0 {
                let at_eof = self.offset;
                if zeros_explain(region_start, zero_from) {
                    self.finish(End::Torn {
                        offset: region_start,
                    })?;
                } else {
                    self.skip(region_start, at_eof, markers);
                    self.finish(End::Complete)?;
                }
                return Ok(false);
            }
            let data = &self.buf[self.pos..self.pos + avail];
            let found = find_sync(data);
            // Without a marker, keep the last bytes: they may begin one.
            let upto = match found {
                Some(i) => i,
                None if self.eof => avail,
                None => avail - (SYNC.len() - 1),
            };
            if let Some(nz) = data[..upto].iter().rposition(|&b| b != 0) {
                zero_from = self.offset + nz as u64 + 1;
            }
            self.consume(upto);
            if found.is_none() {
                continue;
            }
            let cand = self.offset;
            let avail = self.fill(CHUNK_HEADER_LEN)?;
            if avail < CHUNK_HEADER_LEN {
                self.skip(region_start, cand, markers);
                self.consume(avail);
                self.finish(End::Torn { offset: cand })?;
                return Ok(false);
            }
            if parse_v2(&self.buf[self.pos..self.pos + CHUNK_HEADER_LEN]).is_ok() {
                self.skip(region_start, cand, markers);
                return Ok(true);
            }
            if cand > region_start {
                markers += 1;
            }
            zero_from = cand + 1;
            self.consume(1);
        }
    }

    /// Records a skipped region `[start, end)` holding `markers` sync markers past its
    /// first byte.
    fn skip(&mut self, start: u64, end: u64, markers: u64) {
        if end > start {
            self.skipped.push(Skipped {
                offset: start,
                bytes: end - start,
                chunks: markers + 1,
                kind: None,
                cpu: None,
                first_ts: None,
            });
        }
    }

    /// Consumes zero bytes up to the end of the file and says whether only zeros were
    /// left; if not, stops at the first other byte.
    fn rest_is_zero(&mut self) -> io::Result<bool> {
        loop {
            let avail = self.fill(1)?;
            if avail == 0 {
                return Ok(true);
            }
            let data = &self.buf[self.pos..self.pos + avail];
            match data.iter().position(|&b| b != 0) {
                Some(i) => {
                    self.consume(i);
                    return Ok(false);
                }
                None => self.consume(avail),
            }
        }
    }

    /// Puts bytes just consumed back in front of the buffer.
    fn unread(&mut self, bytes: &[u8]) {
        self.offset -= bytes.len() as u64;
        if self.pos >= bytes.len() {
            // Still there: consuming only moved the cursor.
            self.pos -= bytes.len();
            return;
        }
        let mut v = Vec::with_capacity(bytes.len() + self.buf.len() - self.pos);
        v.extend_from_slice(bytes);
        v.extend_from_slice(&self.buf[self.pos..]);
        self.buf = v;
        self.pos = 0;
    }

    fn consume(&mut self, n: usize) {
        self.pos += n;
        self.offset += n as u64;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
    }

    /// Buffers at least `n` bytes at the cursor unless the input ends first; returns how
    /// many are buffered. Reads a block at a time, so memory follows what the file holds.
    fn fill(&mut self, n: usize) -> io::Result<usize> {
        if self.buf.len() - self.pos >= n || self.eof {
            return Ok(self.buf.len() - self.pos);
        }
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        while self.buf.len() < n && !self.eof {
            let got = (&mut self.input)
                .take(SCAN_BLOCK as u64)
                .read_to_end(&mut self.buf)?;
            if got < SCAN_BLOCK {
                self.eof = true;
            }
        }
        Ok(self.buf.len())
    }

    /// Consumes up to `head.len()` bytes, buffered ones first; returns how many there were.
    fn read_head(&mut self, head: &mut [u8]) -> io::Result<usize> {
        let mut n = (self.buf.len() - self.pos).min(head.len());
        head[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.consume(n);
        if n < head.len() && !self.eof {
            let got = read_full(&mut self.input, &mut head[n..])?;
            self.offset += got as u64;
            n += got;
            if n < head.len() {
                self.eof = true;
            }
        }
        Ok(n)
    }

    /// Consumes up to `len` bytes as a payload; shorter only at the end of the file.
    fn read_payload(&mut self, len: usize) -> io::Result<Vec<u8>> {
        let mut payload = Vec::with_capacity(len.min(PREALLOC_MAX));
        let n = (self.buf.len() - self.pos).min(len);
        payload.extend_from_slice(&self.buf[self.pos..self.pos + n]);
        self.consume(n);
        if n < len && !self.eof {
            // Straight into the payload's spare capacity: zeroing it first, or going
            // through `buf`, would cost as much as the copy.
            let want = (len - n) as u64;
            let got = (&mut self.input).take(want).read_to_end(&mut payload)? as u64;
            self.offset += got;
            if got < want {
                self.eof = true;
            }
        }
        Ok(payload)
    }
}

/// Checks a header that may be cut short by the end of the file: a short one is damaged
/// (the caller tells whether it is a torn prefix instead).
fn parse_v2_prefix(h: &[u8]) -> Result<HeaderV2, String> {
    if h.len() < CHUNK_HEADER_LEN {
        let n = h.len().min(SYNC.len());
        if h[..n] != SYNC[..n] {
            return Err("bad sync marker".into());
        }
        return Err("header cut short by the end of the file".into());
    }
    parse_v2(h)
}

/// Where the final run of zero bytes of `b` starts (`b.len()` when the last byte is not 0).
fn trailing_zeros_start(b: &[u8]) -> usize {
    b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1)
}

/// Whether zeros from `z` to the end of the file explain damage to the header at
/// `chunk`: they start at the chunk itself, or at a page boundary inside its header.
fn zeros_explain(chunk: u64, z: u64) -> bool {
    z == chunk || aligned_inside(z, chunk + CHUNK_HEADER_LEN as u64)
}

/// Whether the first page boundary at or after `z` lies before `end`.
fn aligned_inside(z: u64, end: u64) -> bool {
    z.checked_next_multiple_of(ZERO_PAGE)
        .is_some_and(|q| q < end)
}

/// Offset of the first complete sync marker in `b`.
fn find_sync(b: &[u8]) -> Option<usize> {
    b.windows(SYNC.len()).position(|w| w == SYNC)
}

impl<R: Read> Iterator for Reader<R> {
    type Item = Result<Chunk>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_chunk().transpose()
    }
}

/// Reads until `buf` is full or the input ends; returns how much was read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests;
