//! User stacks from a copy of the top of a thread's stack and its registers, unwound with
//! the binaries' own unwind tables (`.eh_frame`, `.debug_frame`): right on code built
//! without frame pointers, as `perf record --call-graph dwarf` is. The recorder calls it
//! while recording, when every process's mappings can still be read from /proc.
//!
//! Each process has its own unwinder, holding the unwind tables of what it maps; the
//! tables are read from the files once per process, and again when an address falls
//! outside every mapping known (a library loaded since).
#![warn(missing_docs)]

mod maps;

use std::{
    ops::Range,
    sync::Arc,
    time::{Duration, Instant},
};

use framehop::{
    x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64},
    FrameAddress, Unwinder as _,
};
use rustc_hash::FxHashMap;
use symbolizer::{GoFrame, GoUnwindTable};
use trace_file::{Mapping, ProcessMappings};

/// Frames kept at most: deeper stacks are cut, and say so.
pub const MAX_FRAMES: usize = 128;

/// How often a process's mappings are read again for an address none of them holds.
const REREAD_EVERY: Duration = Duration::from_millis(100);

/// The registers an unwind starts from and the stack copied from `sp` up.
pub struct Regs<'a> {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer: `stack[0]` is the byte at this address.
    pub sp: u64,
    /// Frame pointer.
    pub bp: u64,
    /// The stack copied.
    pub stack: &'a [u8],
    /// Whether the copy stopped at its size limit (rather than at the stack's end): a read
    /// past it then means the copy was too short.
    pub full: bool,
}

/// An unwound user stack.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unwound {
    /// Addresses to look up, innermost first: the instruction pointer, then each return
    /// address minus one.
    pub frames: Vec<u64>,
    /// Why the frames stop short of the thread's first function, if they do.
    pub cut: Option<String>,
}

/// The unwinders of the processes seen so far.
#[derive(Default)]
pub struct Unwinders {
    procs: FxHashMap<u32, Process>,
    /// What each file mapped needs for unwinding, parsed once for all the processes that
    /// map it (`None`: it could not be read or parsed).
    images: FxHashMap<maps::ImageKey, Option<Arc<maps::Image>>>,
    cache: CacheX86_64,
    /// Mapping lists read since the last [`Unwinders::take_mappings`].
    read: Vec<ProcessMappings>,
}

struct Process {
    unwinder: UnwinderX86_64<maps::Bytes>,
    /// The Go binaries mapped: (addresses, bias, table).
    go: Vec<(Range<u64>, u64, Arc<GoUnwindTable>)>,
    maps: Vec<Mapping>,
    read_at: Instant,
}

impl Unwinders {
    /// No process known yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Unwinds the user stack of a thread of process `pid`; `now_ns` dates the mappings
    /// read on the way.
    pub fn unwind(&mut self, pid: u32, regs: &Regs<'_>, now_ns: u64) -> Unwound {
        let p = match self.procs.get_mut(&pid) {
            Some(p) => p,
            None => {
                let p = load(pid, now_ns, &mut self.images, &mut self.read);
                self.procs.entry(pid).or_insert(p)
            }
        };
        let mut out = p.walk(regs, &mut self.cache);
        // An address no mapping holds, the instruction pointer's or a caller's: a library
        // mapped since they were read (dlopen), whose unwind tables and mapping the stack
        // needs. Read them again, at most every REREAD_EVERY (JIT code is never mapped).
        let unmapped = std::iter::once(regs.ip)
            .chain(out.frames.iter().copied())
            .any(|a| !p.holds(a));
        if unmapped && p.read_at.elapsed() >= REREAD_EVERY {
            let before = std::mem::take(&mut p.maps);
            *p = load(pid, now_ns, &mut self.images, &mut self.read);
            if p.maps == before {
                // Nothing new to keep in the trace.
                self.read.pop();
            }
            out = p.walk(regs, &mut self.cache);
        }
        if !p.holds(regs.ip) && out.cut.is_none() {
            // Code no file maps (JIT code, say): frames past it are guesses from the frame
            // pointer.
            out.cut = Some("unwind: instruction pointer outside every mapped file".into());
        }
        out
    }

    /// Reads the mappings of process `pid` if they were not read yet (for stacks walked
    /// elsewhere, whose addresses still need them); `now_ns` dates them.
    pub fn note(&mut self, pid: u32, now_ns: u64) {
        if !self.procs.contains_key(&pid) {
            let p = load(pid, now_ns, &mut self.images, &mut self.read);
            self.procs.insert(pid, p);
        }
    }

    /// Forgets process `pid` (it exited, or executed another program).
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }

    /// The mapping lists read since the last call, with their build-ids: what a trace
    /// needs to symbolize the stacks later.
    pub fn take_mappings(&mut self) -> Vec<ProcessMappings> {
        std::mem::take(&mut self.read)
    }
}

impl Process {
    /// Whether a mapping holds `addr` (`maps` is sorted by address).
    fn holds(&self, addr: u64) -> bool {
        let i = self.maps.partition_point(|m| m.start <= addr);
        i > 0 && addr < self.maps[i - 1].end
    }

    /// Unwinds from `regs` with the unwind tables known: Go's own for Go code, the
    /// binaries' CFI for the rest.
    fn walk(&self, regs: &Regs<'_>, cache: &mut CacheX86_64) -> Unwound {
        let sp = regs.sp;
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            let off = usize::try_from(addr.checked_sub(sp).ok_or(())?).map_err(|_| ())?;
            let bytes = regs
                .stack
                .get(off..off.checked_add(8).ok_or(())?)
                .ok_or(())?;
            Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let mut state = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
        let mut frame = FrameAddress::from_instruction_pointer(regs.ip);
        let mut out = Unwound::default();
        let cut = loop {
            if out.frames.len() == MAX_FRAMES {
                break Some("depth".into());
            }
            let pc = frame.address_for_lookup();
            out.frames.push(pc);
            let next = match self.go_frame(pc) {
                Some(GoFrame::Top) => break None,
                Some(GoFrame::StackSwitch) => break Some("go: stack switch".into()),
                Some(GoFrame::Frame {
                    sp_offset,
                    saves_bp,
                }) => go_step(&mut state, sp_offset, saves_bp, &mut read_stack),
                None => self
                    .unwinder
                    .unwind_frame(frame, &mut state, cache, &mut read_stack),
            };
            match next {
                Ok(Some(ret)) => match FrameAddress::from_return_address(ret) {
                    Some(f) => frame = f,
                    None => {
                        break Some(format!("unwind: {}", framehop::Error::ReturnAddressIsNull))
                    }
                },
                Ok(None) => break None,
                Err(framehop::Error::CouldNotReadStack(addr))
                    if regs.full && addr >= sp + regs.stack.len() as u64 =>
                {
                    break Some("copy".into())
                }
                Err(e) => break Some(format!("unwind: {e}")),
            }
        };
        out.cut = cut;
        out
    }

    /// How to leave the frame at `pc` if Go code is there.
    fn go_frame(&self, pc: u64) -> Option<GoFrame> {
        let (_, bias, table) = self.go.iter().find(|(r, _, _)| r.contains(&pc))?;
        table.frame(pc.wrapping_sub(*bias))
    }
}

/// One step out of a Go function's frame, as Go's own traceback takes it: the return
/// address `sp_offset` above the stack pointer, the caller's frame pointer below it.
fn go_step(
    regs: &mut UnwindRegsX86_64,
    sp_offset: u32,
    saves_bp: bool,
    read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Result<Option<u64>, framehop::Error> {
    // The address that could not be read, as framehop says it: past the copy, the stack
    // was cut by the copy's size.
    let mut read =
        |addr: u64| read_stack(addr).map_err(|()| framehop::Error::CouldNotReadStack(addr));
    let at = regs.sp().saturating_add(u64::from(sp_offset));
    let ret = read(at)?;
    if saves_bp {
        regs.set_bp(read(at - 8)?);
    }
    regs.set_sp(at + 8);
    regs.set_ip(ret);
    Ok((ret != 0).then_some(ret))
}

/// Reads the mappings of `pid` and the unwind tables of what they map (each file parsed
/// once, into `images`).
fn load(
    pid: u32,
    now_ns: u64,
    images: &mut FxHashMap<maps::ImageKey, Option<Arc<maps::Image>>>,
    read: &mut Vec<ProcessMappings>,
) -> Process {
    let mut unwinder = UnwinderX86_64::new();
    let mut go = Vec::new();
    let mut maps = maps::read(pid);
    maps.sort_by_key(|m| m.start);
    for m in &mut maps {
        let Some(key) = maps::key(pid, m) else {
            continue;
        };
        let image = images
            .entry(key)
            .or_insert_with(|| maps::Image::load(pid, m).map(Arc::new));
        if let Some(image) = image {
            m.build_id = image.build_id.clone();
            if let Some(module) = image.module(m) {
                unwinder.add_module(module);
            }
            if let (Some(table), Some(bias)) = (&image.go, image.bias(m)) {
                go.push((m.start..m.end, bias, table.clone()));
            }
        }
    }
    read.push(ProcessMappings {
        tgid: pid,
        at_ns: now_ns,
        maps: maps.clone(),
    });
    Process {
        unwinder,
        go,
        maps,
        read_at: Instant::now(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The registers where it is written: the stack above `sp` stays as it is while
    /// the function that uses it runs.
    macro_rules! here {
        () => {{
            let (ip, sp, bp): (u64, u64, u64);
            // SAFETY: reads three registers, touches nothing.
            unsafe {
                std::arch::asm!("lea {ip}, [rip]", "mov {sp}, rsp", "mov {bp}, rbp",
                    ip = out(reg) ip, sp = out(reg) sp, bp = out(reg) bp);
            }
            (ip, sp, bp)
        }};
    }

    #[test]
    fn unwinds_its_own_stack_to_the_thread_start() {
        let (ip, sp, bp) = here!();
        // SAFETY: the live stack above `sp` (this frame's callers), read-only.
        let stack = unsafe { std::slice::from_raw_parts(sp as *const u8, 64 << 10) };
        let mut u = Unwinders::new();
        let out = u.unwind(
            std::process::id(),
            &Regs {
                ip,
                sp,
                bp,
                stack,
                full: true,
            },
            0,
        );
        assert!(out.frames.len() >= 3, "{out:?}");
        assert_eq!(out.frames[0], ip);
        let maps = u.take_mappings();
        assert_eq!(maps.len(), 1);
        assert!(maps[0].maps.iter().any(|m| m.build_id.is_some()));
        // Read again (an exec, say), the files are not parsed again.
        let parsed = u.images.len();
        u.forget(std::process::id());
        let again = u.unwind(
            std::process::id(),
            &Regs {
                ip,
                sp,
                bp,
                stack,
                full: true,
            },
            0,
        );
        assert_eq!(again, out);
        assert_eq!(u.images.len(), parsed);
    }

    #[test]
    fn a_process_that_is_gone_has_no_frames_past_its_ip() {
        let mut u = Unwinders::new();
        let out = u.unwind(
            u32::MAX,
            &Regs {
                ip: 0x1000,
                sp: 0x2000,
                bp: 0,
                stack: &[],
                full: false,
            },
            0,
        );
        assert_eq!(out.frames, vec![0x1000]);
        assert!(out.cut.is_some());
    }
}
