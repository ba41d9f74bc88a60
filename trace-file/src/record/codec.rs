//! The dense on-disk encoding of records.
//!
//! An `Events` chunk holds the records of one CPU in the order the kernel produced them:
//!
//! ```text
//! cpu: varint   count: varint   base_ts: u64 LE
//! count x ( kind: u8   ts - previous ts: zigzag varint   tid: varint   fields... )
//! ```
//!
//! The first delta is taken against `base_ts`. Fields are varints (zigzag for signed
//! values), in the order of the [`Event`] variant. A typical record takes 7 to 12 bytes.

use super::{Comm, Event, Record};
use crate::{Error, Result};

/// The file's codes of go_entry and go_exit since format version 4, which carry the
/// frame's height; the ring kinds' codes (13 and 14) are version 3's, read with the
/// height unknown. The frame records have codes of their own ([`FRAME_ENTRY_AT`]); every
/// other record's file code is its ring kind.
const GO_ENTRY_AT: u8 = 17;
/// See [`GO_ENTRY_AT`].
const GO_EXIT_AT: u8 = 18;
/// The file's codes of frame_entry and frame_exit (ring kinds 17 and 18, whose numbers
/// the file gave to [`GO_ENTRY_AT`] and [`GO_EXIT_AT`]).
const FRAME_ENTRY_AT: u8 = 19;
/// See [`FRAME_ENTRY_AT`].
const FRAME_EXIT_AT: u8 = 20;
/// The file's code of go_status (ring kind 19, the number [`FRAME_ENTRY_AT`] has).
const GO_STATUS_AT: u8 = 21;

/// Builds the payload of one CPU's `Events` chunk.
pub struct EventChunkEncoder {
    cpu: u32,
    base_ts: u64,
    prev_ts: u64,
    count: u32,
    body: Vec<u8>,
}

impl EventChunkEncoder {
    /// An empty chunk for the records of `cpu`.
    pub fn new(cpu: u32) -> Self {
        EventChunkEncoder {
            cpu,
            base_ts: 0,
            prev_ts: 0,
            count: 0,
            body: Vec::with_capacity(64 << 10),
        }
    }

    /// The CPU whose records this chunk holds.
    pub fn cpu(&self) -> u32 {
        self.cpu
    }

    /// Records pushed since the last [`Self::finish`].
    pub fn len(&self) -> u32 {
        self.count
    }

    /// Whether nothing was pushed since the last [`Self::finish`].
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes encoded so far.
    pub fn encoded_bytes(&self) -> usize {
        self.body.len()
    }

    /// Appends one record; `ts` may be a little earlier than the previous one.
    pub fn push(&mut self, ts: u64, tid: u32, event: &Event) {
        if self.count == 0 {
            self.base_ts = ts;
            self.prev_ts = ts;
        }
        let b = &mut self.body;
        b.push(match event {
            Event::GoEntry { .. } => GO_ENTRY_AT,
            Event::GoExit { .. } => GO_EXIT_AT,
            Event::FrameEntry { .. } => FRAME_ENTRY_AT,
            Event::FrameExit { .. } => FRAME_EXIT_AT,
            Event::GoStatus { .. } => GO_STATUS_AT,
            e => e.code(),
        });
        put_i64(b, ts.wrapping_sub(self.prev_ts) as i64);
        put_u64(b, tid as u64);
        match *event {
            Event::FuncEntry { func } => put_u64(b, func as u64),
            Event::FuncExit { func, ret } => {
                put_u64(b, func as u64);
                put_i64(b, ret as i64);
            }
            Event::SysEnter { nr, arg0, arg2 } => {
                put_u64(b, nr as u64);
                put_u64(b, arg0);
                put_u64(b, arg2);
            }
            Event::SysExit { nr, ret } => {
                put_u64(b, nr as u64);
                put_i64(b, ret);
            }
            Event::Switch {
                next_tid,
                prev_state,
            } => {
                put_u64(b, next_tid as u64);
                put_u64(b, prev_state as u64);
            }
            Event::Wakeup {
                wakee, target_cpu, ..
            } => {
                put_u64(b, wakee as u64);
                put_u64(b, target_cpu as u64);
            }
            Event::NewTask {
                child_tid,
                child_tgid,
                comm,
            } => {
                put_u64(b, child_tid as u64);
                put_u64(b, child_tgid as u64);
                put_comm(b, &comm);
            }
            Event::Exit { tgid, group_dead } => {
                put_u64(b, tgid as u64);
                b.push(group_dead as u8);
            }
            Event::Rename { comm } | Event::Exec { comm } => put_comm(b, &comm),
            Event::Usdt { probe, nargs, args } => {
                put_u64(b, probe as u64);
                b.push(nargs);
                for &a in &args[..(nargs as usize).min(args.len())] {
                    put_i64(b, a as i64);
                }
            }
            Event::GoEntry { func, g, height } => {
                put_u64(b, func as u64);
                put_u64(b, g);
                put_u64(b, height as u64);
            }
            Event::GoExit {
                func,
                ret,
                g,
                height,
            } => {
                put_u64(b, func as u64);
                put_i64(b, ret as i64);
                put_u64(b, g);
                put_u64(b, height as u64);
            }
            Event::Sample { stack, period } => {
                put_u64(b, stack as u64);
                put_u64(b, period);
            }
            Event::BlockStack { stack } => put_u64(b, stack as u64),
            Event::FrameEntry {
                func,
                sp,
                switching,
            } => {
                put_u64(b, func as u64);
                put_u64(b, sp);
                b.push(switching as u8);
            }
            Event::FrameExit { func, sp, ret } => {
                put_u64(b, func as u64);
                put_u64(b, sp);
                match ret {
                    Some(r) => {
                        b.push(1);
                        put_i64(b, r as i64);
                    }
                    None => b.push(0),
                }
            }
            Event::GoStatus { g, old, new } => {
                put_u64(b, g);
                put_u64(b, old as u64);
                put_u64(b, new as u64);
            }
        }
        self.prev_ts = ts;
        self.count += 1;
    }

    /// The chunk payload of everything pushed since the last call; the encoder is reset.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.body.len() + 20);
        put_u64(&mut out, self.cpu as u64);
        put_u64(&mut out, self.count as u64);
        out.extend_from_slice(&self.base_ts.to_le_bytes());
        out.extend_from_slice(&self.body);
        self.body.clear();
        self.count = 0;
        out
    }
}

/// Iterates over the records of one `Events` chunk payload.
pub struct EventChunkDecoder<'a> {
    buf: &'a [u8],
    pos: usize,
    cpu: u32,
    remaining: u32,
    prev_ts: u64,
    offset: u64,
}

impl<'a> EventChunkDecoder<'a> {
    /// `offset` is the chunk's position in the file, for error messages.
    pub fn new(payload: &'a [u8], offset: u64) -> Result<Self> {
        let mut d = EventChunkDecoder {
            buf: payload,
            pos: 0,
            cpu: 0,
            remaining: 0,
            prev_ts: 0,
            offset,
        };
        d.cpu = d.u32()?;
        d.remaining = d.u32()?;
        let ts = d
            .buf
            .get(d.pos..d.pos + 8)
            .ok_or_else(|| d.corrupt("short event chunk header"))?;
        d.prev_ts = u64::from_le_bytes(ts.try_into().unwrap());
        d.pos += 8;
        // Callers size buffers by `remaining()`: a count the bytes cannot hold is damage.
        let room = (d.buf.len() - d.pos) / MIN_RECORD_BYTES;
        if d.remaining as usize > room {
            return Err(d.corrupt(&format!(
                "{} records announced, room for at most {room}",
                d.remaining
            )));
        }
        Ok(d)
    }

    /// The CPU whose records these are.
    pub fn cpu(&self) -> u32 {
        self.cpu
    }

    /// Records left to decode.
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    #[cold]
    fn corrupt(&self, what: &str) -> Error {
        Error::Corrupt {
            offset: self.offset,
            what: format!("event record: {what}"),
        }
    }

    /// Decodes one varint. This is the inner loop of every trace reader: the common case
    /// (10 bytes or more left, so no byte needs a bounds check of its own) is inlined, and
    /// anything else (the end of the chunk, a malformed value) takes [`Self::u64_slow`],
    /// which also makes the error messages.
    #[inline(always)]
    fn u64(&mut self) -> Result<u64> {
        if let Some(bytes) = self.buf.get(self.pos..self.pos + 10) {
            let mut v: u64 = 0;
            for (i, &byte) in bytes.iter().enumerate() {
                v |= ((byte & 0x7f) as u64) << (7 * i);
                if byte & 0x80 == 0 {
                    self.pos += i + 1;
                    return Ok(v);
                }
            }
        }
        self.u64_slow()
    }

    #[cold]
    #[inline(never)]
    fn u64_slow(&mut self) -> Result<u64> {
        let mut v: u64 = 0;
        let mut shift = 0;
        loop {
            let byte = *self
                .buf
                .get(self.pos)
                .ok_or_else(|| self.corrupt("truncated varint"))?;
            self.pos += 1;
            if shift >= 64 {
                return Err(self.corrupt("varint too long"));
            }
            v |= ((byte & 0x7f) as u64) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
            shift += 7;
        }
    }

    #[inline(always)]
    fn u32(&mut self) -> Result<u32> {
        let v = self.u64()?;
        u32::try_from(v).map_err(|_| self.corrupt("value out of range"))
    }

    #[inline(always)]
    fn i64(&mut self) -> Result<i64> {
        let v = self.u64()?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    fn usdt(&mut self) -> Result<Event> {
        let probe = self.u32()?;
        let nargs = *self
            .buf
            .get(self.pos)
            .filter(|&&n| n as usize <= tracer_abi::MAX_USDT_ARGS)
            .ok_or_else(|| self.corrupt("bad USDT argument count"))?;
        self.pos += 1;
        let mut args = [0u64; tracer_abi::MAX_USDT_ARGS];
        for a in args.iter_mut().take(nargs as usize) {
            *a = self.i64()? as u64;
        }
        Ok(Event::Usdt { probe, nargs, args })
    }

    fn comm(&mut self) -> Result<Comm> {
        let n = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| self.corrupt("truncated name"))? as usize;
        let s = self
            .buf
            .get(self.pos + 1..self.pos + 1 + n)
            .filter(|_| n <= 16)
            .ok_or_else(|| self.corrupt("bad name"))?;
        let mut c = [0u8; 16];
        c[..n].copy_from_slice(s);
        self.pos += 1 + n;
        Ok(Comm(c))
    }

    #[inline]
    fn decode(&mut self) -> Result<Record> {
        let code = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| self.corrupt("fewer records than announced"))?;
        self.pos += 1;
        let ts = self.prev_ts.wrapping_add(self.i64()? as u64);
        let tid = self.u32()?;
        let event = match code {
            1 => Event::FuncEntry { func: self.u32()? },
            2 => Event::FuncExit {
                func: self.u32()?,
                ret: self.i64()? as u64,
            },
            3 => Event::SysEnter {
                nr: self.u32()?,
                arg0: self.u64()?,
                arg2: self.u64()?,
            },
            4 => Event::SysExit {
                nr: self.u32()?,
                ret: self.i64()?,
            },
            5 => Event::Switch {
                next_tid: self.u32()?,
                prev_state: self.u32()?,
            },
            6 | 7 => Event::Wakeup {
                wakee: self.u32()?,
                target_cpu: self.u32()?,
                new: code == 7,
            },
            8 => Event::NewTask {
                child_tid: self.u32()?,
                child_tgid: self.u32()?,
                comm: self.comm()?,
            },
            9 => Event::Exit {
                tgid: self.u32()?,
                group_dead: self.u64()? != 0,
            },
            10 => Event::Rename { comm: self.comm()? },
            11 => Event::Exec { comm: self.comm()? },
            12 => self.usdt()?,
            13 => Event::GoEntry {
                func: self.u32()?,
                g: self.u64()?,
                height: 0,
            },
            14 => Event::GoExit {
                func: self.u32()?,
                ret: self.i64()? as u64,
                g: self.u64()?,
                height: 0,
            },
            GO_ENTRY_AT => Event::GoEntry {
                func: self.u32()?,
                g: self.u64()?,
                height: self.u32()?,
            },
            GO_EXIT_AT => Event::GoExit {
                func: self.u32()?,
                ret: self.i64()? as u64,
                g: self.u64()?,
                height: self.u32()?,
            },
            15 => Event::Sample {
                stack: self.u32()?,
                period: self.u64()?,
            },
            16 => Event::BlockStack { stack: self.u32()? },
            FRAME_ENTRY_AT => Event::FrameEntry {
                func: self.u32()?,
                sp: self.u64()?,
                switching: match self.u64()? {
                    0 => false,
                    1 => true,
                    _ => return Err(self.corrupt("bad frame entry")),
                },
            },
            FRAME_EXIT_AT => Event::FrameExit {
                func: self.u32()?,
                sp: self.u64()?,
                ret: match self.u64()? {
                    0 => None,
                    1 => Some(self.i64()? as u64),
                    _ => return Err(self.corrupt("bad frame exit")),
                },
            },
            GO_STATUS_AT => Event::GoStatus {
                g: self.u64()?,
                old: self.u32()?,
                new: self.u32()?,
            },
            other => return Err(self.corrupt(&format!("unknown record kind {other}"))),
        };
        self.prev_ts = ts;
        Ok(Record {
            ts,
            tid,
            cpu: self.cpu,
            event,
        })
    }
}

impl Iterator for EventChunkDecoder<'_> {
    type Item = Result<Record>;
    // Inlined into the readers' loops (across crates), with the varint decoding.
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let r = self.decode();
        if r.is_err() {
            self.remaining = 0;
        }
        Some(r)
    }
}

/// The fewest bytes any record takes: kind, time delta, tid and one field byte.
const MIN_RECORD_BYTES: usize = 4;

/// Reads an Events payload's CPU and first timestamp without checking the rest, to say
/// what a damaged chunk probably held.
pub(crate) fn peek_prefix(payload: &[u8]) -> Option<(u32, u64)> {
    let mut d = EventChunkDecoder {
        buf: payload,
        pos: 0,
        cpu: 0,
        remaining: 0,
        prev_ts: 0,
        offset: 0,
    };
    let cpu = d.u32().ok()?;
    d.u32().ok()?;
    let ts = payload.get(d.pos..d.pos.checked_add(8)?)?;
    Some((cpu, u64::from_le_bytes(ts.try_into().ok()?)))
}

fn put_u64(b: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        b.push((v as u8) | 0x80);
        v >>= 7;
    }
    b.push(v as u8);
}

fn put_i64(b: &mut Vec<u8>, v: i64) {
    put_u64(b, ((v << 1) ^ (v >> 63)) as u64);
}

fn put_comm(b: &mut Vec<u8>, c: &Comm) {
    let n = c.0.iter().position(|&x| x == 0).unwrap_or(16);
    b.push(n as u8);
    b.extend_from_slice(&c.0[..n]);
}
