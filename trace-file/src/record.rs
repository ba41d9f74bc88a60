//! Records and their dense on-disk encoding.
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

use tracer_abi as abi;

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

/// A thread name as the kernel stores it: up to 16 bytes, NUL-padded.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Comm(pub [u8; 16]);

impl Comm {
    /// A name from a string, cut to the 15 bytes the kernel keeps.
    pub fn from_str_lossy(s: &str) -> Comm {
        let mut c = [0u8; 16];
        let n = s.len().min(15);
        c[..n].copy_from_slice(&s.as_bytes()[..n]);
        Comm(c)
    }

    /// The name up to its first NUL, invalid UTF-8 replaced.
    pub fn as_str(&self) -> std::borrow::Cow<'_, str> {
        let end = self.0.iter().position(|&b| b == 0).unwrap_or(16);
        String::from_utf8_lossy(&self.0[..end])
    }
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// What happened. Mirrors the kernel-side records of `tracer-abi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Entry of probed function `func` (an id of the probe table).
    FuncEntry {
        /// Probe-table id.
        func: u32,
    },
    /// Return of probed function `func` with the raw return register.
    FuncExit {
        /// Probe-table id.
        func: u32,
        /// The return register, as the kernel read it.
        ret: u64,
    },
    /// System call `nr` started; `arg0` is the fd for I/O calls, `arg2` the size asked.
    SysEnter {
        /// System call number (x86_64).
        nr: u32,
        /// First argument.
        arg0: u64,
        /// Third argument.
        arg2: u64,
    },
    /// System call `nr` returned `ret` (bytes, new fd, or `-errno`).
    SysExit {
        /// System call number (x86_64).
        nr: u32,
        /// The result.
        ret: i64,
    },
    /// The record's thread left the CPU in `prev_state`; `next_tid` took it (0 = idle).
    Switch {
        /// The thread that took the CPU (0 = idle).
        next_tid: u32,
        /// The leaving thread's state (sched_switch's `prev_state`).
        prev_state: u32,
    },
    /// The record's thread woke `wakee` onto `target_cpu`; `new` for a new thread's first.
    Wakeup {
        /// The thread woken.
        wakee: u32,
        /// The CPU it was woken onto.
        target_cpu: u32,
        /// Whether this is a new thread's first wakeup (`wakeup_new`).
        new: bool,
    },
    /// The record's thread created `child_tid` in process `child_tgid`.
    NewTask {
        /// The new thread.
        child_tid: u32,
        /// The new thread's process.
        child_tgid: u32,
        /// The new thread's name.
        comm: Comm,
    },
    /// The record's thread exited; `group_dead` when its process has no thread left.
    Exit {
        /// The exiting thread's process.
        tgid: u32,
        /// Whether it was the process's last thread.
        group_dead: bool,
    },
    /// The record's thread was renamed.
    Rename {
        /// The new name.
        comm: Comm,
    },
    /// The record's thread executed a new program, now called `comm`.
    Exec {
        /// The new program's name.
        comm: Comm,
    },
    /// USDT probe `probe` fired with its first `nargs` arguments.
    Usdt {
        /// Probe-table id.
        probe: u32,
        /// How many of `args` the probe has.
        nargs: u8,
        /// Its arguments, as its note describes them.
        args: [u64; tracer_abi::MAX_USDT_ARGS],
    },
    /// Entry of a Go function by a goroutine.
    GoEntry {
        /// Probe-table id.
        func: u32,
        /// The goroutine (its `g` pointer).
        g: u64,
        /// Where the call's frame is on the goroutine's stack (its distance below the
        /// stack's top, which Go's moving of stacks keeps); 0 when unknown (files of
        /// version 3 and before).
        height: u32,
    },
    /// Return of a Go function by a goroutine.
    GoExit {
        /// Probe-table id.
        func: u32,
        /// The first result register (RAX).
        ret: u64,
        /// The goroutine (its `g` pointer).
        g: u64,
        /// Where the returning frame is (as [`Event::GoEntry`]'s `height`).
        height: u32,
    },
    /// Entry of a native function whose returns are probed at their instructions (in a
    /// program that throws exceptions, which a uretprobe's hidden return address would
    /// end): paired with its exit by the stack pointer.
    FrameEntry {
        /// Probe-table id.
        func: u32,
        /// The stack pointer at the entry: where the call's return address is.
        sp: u64,
        /// The program switches stacks itself: the call pairs with its exit by its exact
        /// frame only, its thread's other calls being perhaps on other stacks.
        switching: bool,
    },
    /// A native function probed as [`Event::FrameEntry`] left the frame at `sp`.
    FrameExit {
        /// Probe-table id.
        func: u32,
        /// The stack pointer (see [`Event::FrameEntry`]'s).
        sp: u64,
        /// The return register; `None` when the function left by a jump to another
        /// (a tail call), which returns for it.
        ret: Option<u64>,
    },
    /// An on-CPU sample of the record's thread: its stack, an id of the file's stack
    /// table ([`crate::StackTable`]), and the CPU time it stands for.
    Sample {
        /// The stack's id.
        stack: u32,
        /// CPU time the sample stands for (the sampling event's period), ns.
        period: u64,
    },
    /// The stack the record's thread blocks in: its next switch, right after, leaves the
    /// CPU for a state that is not runnable.
    BlockStack {
        /// The stack's id.
        stack: u32,
    },
}

/// One event with its time, thread and CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// CLOCK_MONOTONIC nanoseconds.
    pub ts: u64,
    /// The thread the event belongs to (0 for the idle task and interrupts).
    pub tid: u32,
    /// The CPU whose stream it came from.
    pub cpu: u32,
    /// What happened.
    pub event: Event,
}

impl Event {
    /// Number of record kinds.
    pub const KINDS: usize = abi::kind::COUNT;
    /// Names of the kinds, by [`Event::kind_index`].
    pub const KIND_NAMES: [&'static str; Event::KINDS] = abi::kind::NAMES;

    /// A short lowercase name, used by `tracer dump` and the recorder's counts.
    pub fn name(&self) -> &'static str {
        Event::KIND_NAMES[self.kind_index()]
    }

    /// A dense index of the kind, in `0..KINDS`, for counting without a map.
    pub fn kind_index(&self) -> usize {
        self.code() as usize - 1
    }

    /// The record's kind: the number the programs give it ([`tracer_abi::kind`]), also
    /// its code in the file.
    fn code(&self) -> u8 {
        use abi::kind::*;
        (match self {
            Event::FuncEntry { .. } => FUNC_ENTRY,
            Event::FuncExit { .. } => FUNC_EXIT,
            Event::SysEnter { .. } => SYS_ENTER,
            Event::SysExit { .. } => SYS_EXIT,
            Event::Switch { .. } => SWITCH,
            Event::Wakeup { new: false, .. } => WAKEUP,
            Event::Wakeup { new: true, .. } => WAKEUP_NEW,
            Event::NewTask { .. } => NEW_TASK,
            Event::Exit { .. } => EXIT,
            Event::Rename { .. } => RENAME,
            Event::Exec { .. } => EXEC,
            Event::Usdt { .. } => USDT,
            Event::GoEntry { .. } => GO_ENTRY,
            Event::GoExit { .. } => GO_EXIT,
            Event::Sample { .. } => SAMPLE,
            Event::BlockStack { .. } => BLOCK_STACK,
            Event::FrameEntry { .. } => FRAME_ENTRY,
            Event::FrameExit { .. } => FRAME_EXIT,
        }) as u8
    }

    /// Decodes one record of a program's ring buffer: its time, thread and event. `None`
    /// for bytes that are not a record of a known kind (a program newer than this code).
    pub fn from_ring(bytes: &[u8]) -> Option<(u64, u32, Event)> {
        fn read<T: Copy>(b: &[u8]) -> Option<T> {
            (b.len() >= size_of::<T>())
                // SAFETY: length checked; the record types are plain integers.
                .then(|| unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
        }
        let h: abi::Header = read(bytes)?;
        let event = match h.kind {
            abi::kind::FUNC_ENTRY => Event::FuncEntry {
                func: read::<abi::FuncEntry>(bytes)?.func,
            },
            abi::kind::FUNC_EXIT => {
                let r: abi::FuncExit = read(bytes)?;
                Event::FuncExit {
                    func: r.func,
                    ret: r.ret,
                }
            }
            abi::kind::SYS_ENTER => {
                let r: abi::SysEnter = read(bytes)?;
                Event::SysEnter {
                    nr: r.nr,
                    arg0: r.arg0,
                    arg2: r.arg2,
                }
            }
            abi::kind::SYS_EXIT => {
                let r: abi::SysExit = read(bytes)?;
                Event::SysExit {
                    nr: r.nr,
                    ret: r.ret,
                }
            }
            abi::kind::SWITCH => {
                let r: abi::Switch = read(bytes)?;
                Event::Switch {
                    next_tid: r.next_tid,
                    prev_state: r.prev_state,
                }
            }
            abi::kind::WAKEUP | abi::kind::WAKEUP_NEW => {
                let r: abi::Wakeup = read(bytes)?;
                Event::Wakeup {
                    wakee: r.wakee,
                    target_cpu: r.target_cpu,
                    new: h.kind == abi::kind::WAKEUP_NEW,
                }
            }
            abi::kind::NEW_TASK => {
                let r: abi::NewTask = read(bytes)?;
                Event::NewTask {
                    child_tid: r.child_tid,
                    child_tgid: r.child_tgid,
                    comm: Comm(r.comm),
                }
            }
            abi::kind::EXIT => {
                let r: abi::Exit = read(bytes)?;
                Event::Exit {
                    tgid: r.tgid,
                    group_dead: r.group_dead != 0,
                }
            }
            abi::kind::RENAME => Event::Rename {
                comm: Comm(read::<abi::Rename>(bytes)?.comm),
            },
            abi::kind::EXEC => Event::Exec {
                comm: Comm(read::<abi::Rename>(bytes)?.comm),
            },
            abi::kind::USDT => {
                let r: abi::Usdt = read(bytes)?;
                Event::Usdt {
                    probe: r.probe,
                    nargs: r.nargs.min(abi::MAX_USDT_ARGS as u32) as u8,
                    args: r.args,
                }
            }
            abi::kind::GO_ENTRY => {
                let r: abi::GoEntry = read(bytes)?;
                Event::GoEntry {
                    func: r.func,
                    g: r.g,
                    height: r.height,
                }
            }
            abi::kind::GO_EXIT => {
                let r: abi::GoExit = read(bytes)?;
                Event::GoExit {
                    func: r.func,
                    ret: r.ret,
                    g: r.g,
                    height: r.height,
                }
            }
            abi::kind::FRAME_ENTRY => {
                let r: abi::FrameEntry = read(bytes)?;
                Event::FrameEntry {
                    func: r.func,
                    sp: r.sp,
                    switching: r.switching != 0,
                }
            }
            abi::kind::FRAME_EXIT => {
                let r: abi::FrameExit = read(bytes)?;
                Event::FrameExit {
                    func: r.func,
                    sp: r.sp,
                    ret: (r.tail == 0).then_some(r.ret),
                }
            }
            abi::kind::SAMPLE | abi::kind::BLOCK_STACK => {
                let r: abi::Sample = read(bytes)?;
                match h.kind {
                    abi::kind::SAMPLE => Event::Sample {
                        stack: r.stack,
                        period: r.period,
                    },
                    _ => Event::BlockStack { stack: r.stack },
                }
            }
            _ => return None,
        };
        Some((h.ts, h.tid, event))
    }
}

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

#[cfg(test)]
mod tests;
