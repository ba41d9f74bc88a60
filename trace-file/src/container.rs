//! The chunk container: framing, checksums, and torn-tail detection.

use std::io::{self, Read, Write};

use crate::{Error, Result};

/// First bytes of every trace file.
pub const MAGIC: [u8; 8] = *b"TRACEBPF";
/// Version of the layout described in `docs/trace-format.md`.
pub const FORMAT_VERSION: u32 = 1;

const CHUNK_HEADER: usize = 16;
/// No chunk is larger than this; a larger length field means a corrupt header.
const MAX_CHUNK: u32 = 64 << 20;

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
    /// A kind this build does not know; readers skip it (forward compatibility).
    Unknown(u32),
}

impl ChunkKind {
    fn code(self) -> u32 {
        match self {
            ChunkKind::Header => 1,
            ChunkKind::Process => 2,
            ChunkKind::Threads => 3,
            ChunkKind::Probes => 4,
            ChunkKind::Events => 5,
            ChunkKind::Lost => 6,
            ChunkKind::Trailer => 7,
            ChunkKind::Window => 8,
            ChunkKind::Unknown(c) => c,
        }
    }

    fn from_code(code: u32) -> ChunkKind {
        match code {
            1 => ChunkKind::Header,
            2 => ChunkKind::Process,
            3 => ChunkKind::Threads,
            4 => ChunkKind::Probes,
            5 => ChunkKind::Events,
            6 => ChunkKind::Lost,
            7 => ChunkKind::Trailer,
            8 => ChunkKind::Window,
            c => ChunkKind::Unknown(c),
        }
    }
}

fn checksum(kind: u32, len: u32, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&kind.to_le_bytes());
    h.update(&len.to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// Appends chunks to a trace. Each chunk goes out in one `write_all`, so a reader never
/// sees a chunk of another one's bytes, and a kill leaves at most one torn chunk at the end.
pub struct Writer<W: Write> {
    out: W,
    bytes: u64,
    buf: Vec<u8>,
}

impl<W: Write> Writer<W> {
    /// Starts a trace: writes the magic number and the format version.
    pub fn new(mut out: W) -> Result<Self> {
        out.write_all(&MAGIC)?;
        out.write_all(&FORMAT_VERSION.to_le_bytes())?;
        Ok(Writer {
            out,
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
        self.buf.clear();
        self.buf.extend_from_slice(&code.to_le_bytes());
        self.buf.extend_from_slice(&len.to_le_bytes());
        self.buf
            .extend_from_slice(&checksum(code, len, payload).to_le_bytes());
        self.buf.extend_from_slice(&0u32.to_le_bytes());
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

    pub fn flush(&mut self) -> Result<()> {
        self.out.flush()?;
        Ok(())
    }

    pub fn get_ref(&self) -> &W {
        &self.out
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// One chunk read back.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub kind: ChunkKind,
    /// Byte offset of the chunk header in the file.
    pub offset: u64,
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

/// Reads chunks in file order. A torn last chunk (the file ends inside it) ends the
/// stream and is reported by [`Reader::truncated_at`]; a checksum mismatch anywhere is an
/// error, since it means the bytes are not what the recorder wrote.
pub struct Reader<R: Read> {
    input: R,
    offset: u64,
    truncated_at: Option<u64>,
    done: bool,
}

impl<R: Read> Reader<R> {
    pub fn new(mut input: R) -> Result<Self> {
        let mut head = [0u8; 12];
        let n = read_full(&mut input, &mut head)?;
        if n < 12 || head[..8] != MAGIC {
            return Err(Error::BadMagic);
        }
        let version = u32::from_le_bytes(head[8..12].try_into().unwrap());
        if version != FORMAT_VERSION {
            return Err(Error::Version(version));
        }
        Ok(Reader {
            input,
            offset: 12,
            truncated_at: None,
            done: false,
        })
    }

    /// Where the file ended inside a chunk, if it did (a recorder killed mid-write).
    pub fn truncated_at(&self) -> Option<u64> {
        self.truncated_at
    }

    /// The next complete chunk, or `None` at the end of the file or of its intact part.
    pub fn next_chunk(&mut self) -> Result<Option<Chunk>> {
        if self.done {
            return Ok(None);
        }
        let offset = self.offset;
        let mut head = [0u8; CHUNK_HEADER];
        let n = read_full(&mut self.input, &mut head)?;
        if n == 0 {
            self.done = true;
            return Ok(None);
        }
        if n < CHUNK_HEADER {
            self.done = true;
            self.truncated_at = Some(offset);
            return Ok(None);
        }
        let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().unwrap());
        let (code, len, crc) = (word(0), word(4), word(8));
        if len > MAX_CHUNK || code == 0 {
            self.done = true;
            return Err(Error::Corrupt {
                offset,
                what: format!("impossible chunk header (kind {code}, length {len})"),
            });
        }
        // Read into spare capacity: zeroing the buffer first cost as much as the copy.
        let mut payload = Vec::with_capacity(len as usize);
        (&mut self.input)
            .take(len as u64)
            .read_to_end(&mut payload)?;
        if payload.len() < len as usize {
            self.done = true;
            self.truncated_at = Some(offset);
            return Ok(None);
        }
        if checksum(code, len, &payload) != crc {
            self.done = true;
            return Err(Error::Corrupt {
                offset,
                what: "checksum mismatch".into(),
            });
        }
        self.offset += (CHUNK_HEADER + payload.len()) as u64;
        Ok(Some(Chunk {
            kind: ChunkKind::from_code(code),
            offset,
            payload,
        }))
    }
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
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut w = Writer::new(Vec::new()).unwrap();
        w.chunk(ChunkKind::Header, b"{\"a\":1}").unwrap();
        w.chunk(ChunkKind::Events, &[1, 2, 3, 4, 5]).unwrap();
        w.chunk(ChunkKind::Trailer, b"{}").unwrap();
        w.into_inner()
    }

    #[test]
    fn round_trip() {
        let bytes = sample();
        let chunks: Vec<_> = Reader::new(&bytes[..])
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks[1].kind, ChunkKind::Events);
        assert_eq!(chunks[1].payload, vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn every_truncation_reads_back_the_complete_chunks() {
        let bytes = sample();
        let ends: Vec<usize> = {
            let mut r = Reader::new(&bytes[..]).unwrap();
            let mut ends = vec![];
            while let Some(c) = r.next_chunk().unwrap() {
                ends.push(c.offset as usize + CHUNK_HEADER + c.payload.len());
            }
            ends
        };
        for cut in 12..bytes.len() {
            let mut r = Reader::new(&bytes[..cut]).unwrap();
            let mut n = 0;
            while r.next_chunk().unwrap().is_some() {
                n += 1;
            }
            let complete = ends.iter().filter(|&&e| e <= cut).count();
            assert_eq!(n, complete, "cut at {cut}");
            let at_boundary = cut == 12 || ends.contains(&cut);
            assert_eq!(r.truncated_at().is_some(), !at_boundary, "cut {cut}");
        }
    }

    #[test]
    fn flipped_byte_is_corrupt() {
        let mut bytes = sample();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        let res: Result<Vec<_>> = Reader::new(&bytes[..]).unwrap().collect();
        assert!(matches!(res, Err(Error::Corrupt { .. })));
    }

    #[test]
    fn not_a_trace() {
        assert!(matches!(
            Reader::new(&b"hello world, this is text"[..]),
            Err(Error::BadMagic)
        ));
        assert!(matches!(Reader::new(&b""[..]), Err(Error::BadMagic)));
    }
}
