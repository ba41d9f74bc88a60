//! Records: what the kernel's programs report, as the trace file holds them, and their
//! dense on-disk encoding (in [`codec`]).

use tracer_abi as abi;

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
    /// Go's scheduler changed goroutine `g`'s status (`tracer_abi::go_status`) on the
    /// record's thread: a goroutine starting to run runs there.
    GoStatus {
        /// The goroutine (its `g` pointer).
        g: u64,
        /// Its status before.
        old: u32,
        /// Its status after.
        new: u32,
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
            Event::GoStatus { .. } => GO_STATUS,
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
            abi::kind::GO_STATUS => {
                let r: abi::GoStatus = read(bytes)?;
                Event::GoStatus {
                    g: r.g,
                    old: r.old,
                    new: r.new,
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

mod codec;

pub(crate) use codec::peek_prefix;
pub use codec::{EventChunkDecoder, EventChunkEncoder};

#[cfg(test)]
mod tests;
