//! The records the programs send through the ring buffers, and their kinds: one table
//! for the programs, the recorder's decoder and the trace file's codec.

/// Kinds of records, stored in [`Header::kind`]. The trace file encodes a record's kind
/// with the same number, and names it with [`kind::NAMES`].
pub mod kind {
    /// [`FuncEntry`](super::FuncEntry).
    pub const FUNC_ENTRY: u16 = 1;
    /// [`FuncExit`](super::FuncExit).
    pub const FUNC_EXIT: u16 = 2;
    /// [`SysEnter`](super::SysEnter).
    pub const SYS_ENTER: u16 = 3;
    /// [`SysExit`](super::SysExit).
    pub const SYS_EXIT: u16 = 4;
    /// [`Switch`](super::Switch).
    pub const SWITCH: u16 = 5;
    /// [`Wakeup`](super::Wakeup) of a thread that ran before.
    pub const WAKEUP: u16 = 6;
    /// [`Wakeup`](super::Wakeup): a new thread's first.
    pub const WAKEUP_NEW: u16 = 7;
    /// [`NewTask`](super::NewTask).
    pub const NEW_TASK: u16 = 8;
    /// [`Exit`](super::Exit).
    pub const EXIT: u16 = 9;
    /// [`Rename`](super::Rename) by prctl or pthread_setname_np.
    pub const RENAME: u16 = 10;
    /// [`Rename`](super::Rename) by exec.
    pub const EXEC: u16 = 11;
    /// [`Usdt`](super::Usdt).
    pub const USDT: u16 = 12;
    /// [`GoEntry`](super::GoEntry).
    pub const GO_ENTRY: u16 = 13;
    /// [`GoExit`](super::GoExit).
    pub const GO_EXIT: u16 = 14;
    /// [`Sample`](super::Sample): an on-CPU sample's stack, interned by the recorder.
    pub const SAMPLE: u16 = 15;
    /// [`Sample`](super::Sample): the stack a thread blocked in, just before its switch.
    pub const BLOCK_STACK: u16 = 16;
    /// [`FrameEntry`](super::FrameEntry).
    pub const FRAME_ENTRY: u16 = 17;
    /// [`FrameExit`](super::FrameExit).
    pub const FRAME_EXIT: u16 = 18;
    /// [`GoStatus`](super::GoStatus).
    pub const GO_STATUS: u16 = 19;
    /// How many kinds there are: their numbers are `1..=COUNT`.
    pub const COUNT: usize = 19;
    /// [`StackRaw`](super::StackRaw): ring buffers only. The recorder unwinds it and
    /// writes a [`SAMPLE`] or [`BLOCK_STACK`] record in its place.
    pub const STACK_RAW: u16 = 100;
    /// The name of each kind, by number - 1 (`tracer dump`, the recorder's counts, the
    /// trailer).
    pub const NAMES: [&str; COUNT] = [
        "func_entry",
        "func_exit",
        "sys_enter",
        "sys_exit",
        "switch",
        "wakeup",
        "wakeup_new",
        "new_task",
        "exit",
        "rename",
        "exec",
        "usdt",
        "go_entry",
        "go_exit",
        "sample",
        "block_stack",
        "frame_entry",
        "frame_exit",
        "go_status",
    ];
}

/// Common prefix of every record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// CLOCK_MONOTONIC, nanoseconds.
    pub ts: u64,
    /// The thread the event belongs to (for a switch: the thread leaving the CPU; for a
    /// wakeup or a new task: the thread doing it).
    pub tid: u32,
    /// Which record follows: one of [`kind`].
    pub kind: u16,
    /// Zero: the padding, explicit.
    pub _pad: u16,
}

/// A probed function was entered. `func` is the attach cookie: the probe-table id.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FuncEntry {
    /// Time, thread and kind.
    pub h: Header,
    /// The probe-table id of the function.
    pub func: u32,
    /// Zero: the padding, explicit.
    pub _pad: u32,
}

/// A probed function returned with `ret` (the raw return register).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FuncExit {
    /// Time, thread and kind.
    pub h: Header,
    /// The probe-table id of the function.
    pub func: u32,
    /// Zero: the padding, explicit.
    pub _pad: u32,
    /// The return register.
    pub ret: u64,
}

/// A system call started. `arg0` is the fd for I/O and socket calls, `arg2` the requested size.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SysEnter {
    /// Time, thread and kind.
    pub h: Header,
    /// The system call's number (x86_64).
    pub nr: u32,
    /// Zero: the padding, explicit.
    pub _pad: u32,
    /// Its first argument.
    pub arg0: u64,
    /// Its third argument.
    pub arg2: u64,
}

/// A system call returned `ret` (bytes moved, a new fd, or `-errno`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SysExit {
    /// Time, thread and kind.
    pub h: Header,
    /// The system call's number (x86_64).
    pub nr: u32,
    /// Zero: the padding, explicit.
    pub _pad: u32,
    /// Its result: bytes, a new fd, or -errno.
    pub ret: i64,
}

/// A context switch: `h.tid` leaves the CPU in `prev_state`, `next_tid` takes it.
/// `prev_state` is the sched_switch tracepoint's value (0 or bit 0x100 = preempted, still
/// runnable; 1 = interruptible sleep; 2 = uninterruptible; 0x10/0x20 = exiting).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Switch {
    /// Time, thread and kind.
    pub h: Header,
    /// The thread that takes the CPU (0: idle).
    pub next_tid: u32,
    /// The state the leaving thread is in ([`crate::switch_state`]).
    pub prev_state: u32,
}

/// `h.tid` (0 for an interrupt or the idle task) woke `wakee`, to run on `target_cpu`.
/// Used for both `WAKEUP` and `WAKEUP_NEW` (first wakeup of a new thread).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Wakeup {
    /// Time, thread and kind.
    pub h: Header,
    /// The thread woken.
    pub wakee: u32,
    /// The CPU it will run on.
    pub target_cpu: u32,
}

/// `h.tid` created `child_tid`, a thread of `child_tgid` (a new process when the two are
/// equal), named `comm`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NewTask {
    /// Time, thread and kind.
    pub h: Header,
    /// The new thread.
    pub child_tid: u32,
    /// Its process.
    pub child_tgid: u32,
    /// Its name, NUL-padded.
    pub comm: [u8; 16],
}

/// Thread `h.tid` of process `tgid` exits; `group_dead` is 1 when it is the last one.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Exit {
    /// Time, thread and kind.
    pub h: Header,
    /// Its process.
    pub tgid: u32,
    /// 1 when its process has no thread left.
    pub group_dead: u32,
}

/// Thread `h.tid` took a new name (prctl, pthread_setname_np, exec).
/// Used for both `RENAME` and `EXEC`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Rename {
    /// Time, thread and kind.
    pub h: Header,
    /// Its name, NUL-padded.
    pub comm: [u8; 16],
}

/// A USDT probe fired: `probe` is the attach cookie (its probe-table id), `args` its first
/// `nargs` arguments as its note describes them, each sign- or zero-extended.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Usdt {
    /// Time, thread and kind.
    pub h: Header,
    /// The probe-table id.
    pub probe: u32,
    /// How many of `args` hold an argument.
    pub nargs: u32,
    /// The arguments.
    pub args: [u64; MAX_USDT_ARGS],
}

/// Arguments a USDT record carries (SDT notes have at most 12; servers use few).
pub const MAX_USDT_ARGS: usize = 6;

/// A Go function was entered by goroutine `g` (the `g` pointer, in R14 under Go's register
/// ABI): Go's calls are paired by goroutine, which may resume on another thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct GoEntry {
    /// Time, thread and kind.
    pub h: Header,
    /// The probe-table id of the function.
    pub func: u32,
    /// Where the call's frame is on the goroutine's stack: the stack's top minus the
    /// stack pointer (which points at the return address at the entry and at the return
    /// instruction alike), a distance Go's moving of stacks keeps; 0 when unknown.
    pub height: u32,
    /// The goroutine.
    pub g: u64,
}

/// A Go function returned (a probe on one of its return instructions: Go programs cannot
/// have their return addresses replaced, as a uretprobe does), with its first result
/// register.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct GoExit {
    /// Time, thread and kind.
    pub h: Header,
    /// The probe-table id of the function.
    pub func: u32,
    /// Where the call's frame is on the goroutine's stack (see [`GoEntry::height`]).
    pub height: u32,
    /// RAX: the first result.
    pub ret: u64,
    /// The goroutine.
    pub g: u64,
}

/// Go's scheduler changed a goroutine's status (`runtime.casgstatus`), in a process whose
/// Go functions are probed: where a goroutine runs and when it waits, which a Go call's
/// time split needs (a goroutine moves between threads behind the kernel's back). The
/// record's thread is the one that made the change: for a goroutine starting to run, the
/// thread it runs on.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct GoStatus {
    /// Time, thread and kind.
    pub h: Header,
    /// Its status before (one of [`go_status`]).
    pub old: u32,
    /// Its status after.
    pub new: u32,
    /// The goroutine (its `g` pointer).
    pub g: u64,
}

/// A goroutine's status (`runtime._Grunnable`...; the same numbers from Go 1.0 to 1.24),
/// without the garbage collector's scan bit.
pub mod go_status {
    /// Just allocated.
    pub const IDLE: u32 = 0;
    /// On a run queue: ready, waiting for a thread.
    pub const RUNNABLE: u32 = 1;
    /// Running Go code on a thread.
    pub const RUNNING: u32 = 2;
    /// In a system call, on its thread.
    pub const SYSCALL: u32 = 3;
    /// Blocked in the runtime (a channel, a lock, the network poller, a sleep).
    pub const WAITING: u32 = 4;
    /// Exited or not yet started.
    pub const DEAD: u32 = 6;
    /// Its stack being moved (still on its thread).
    pub const COPYSTACK: u32 = 8;
    /// Preempted, being suspended.
    pub const PREEMPTED: u32 = 9;
    /// The garbage collector's bit, set while it scans the goroutine's stack.
    pub const SCAN: u32 = 0x1000;
}

/// A native function whose returns are probed at its return instructions (and at its
/// jumps to other functions) was entered: no uretprobe replaced its return address, which
/// an exception's unwinder must find. The stack pointer pairs the call with its return.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameEntry {
    /// Time, thread and kind.
    pub h: Header,
    /// The probe-table id of the function.
    pub func: u32,
    /// 1: the program switches stacks itself, so the call pairs with its exit by its
    /// exact frame only (its thread's other calls may be on other stacks).
    pub switching: u32,
    /// The stack pointer, which points at the return address at the entry and at the
    /// return instruction alike.
    pub sp: u64,
}

/// In the attach cookie of a probe of a function whose returns are probed at their
/// instructions, above the function's id: its program switches stacks
/// ([`FrameEntry::switching`]; counting mode then pairs its calls by exact frame too).
pub const COOKIE_STACKS_SWITCH: u64 = 1 << 32;

/// In the attach cookie of a native function's probes, above its id: the function
/// returns a signed 32-bit integer (its DWARF says so), the lower half of the return
/// register, whose upper half need not be its sign (`-1` reads 4294967295 there). The
/// programs sign-extend it, so that a negative return is one in records and counts.
pub const COOKIE_RET_I32: u64 = 1 << 33;

/// In the attach cookie of a uprobe session of one process (a library's function in
/// counting mode), above the function's id: the function's calls are counted by an
/// entry probe of their own, which the process's forks inherit from their first
/// instruction on, where a session is the process's alone and a fork's own comes only
/// once the recorder has seen the fork. The session then only times.
pub const COOKIE_COUNTED_APART: u64 = 1 << 34;

/// The return value of a function probed with attach cookie `cookie`, from its return
/// register `rax` (see [`COOKIE_RET_I32`]).
#[inline(always)]
pub fn return_value(cookie: u64, rax: u64) -> u64 {
    match cookie & COOKIE_RET_I32 {
        0 => rax,
        _ => rax as u32 as i32 as i64 as u64,
    }
}

/// A native function probed as [`FrameEntry`] says left the frame at `sp`: by a return
/// instruction, with `ret`, or (`tail` 1) by a jump to another function, which returns
/// for it (its result is then not known here).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameExit {
    /// Time, thread and kind.
    pub h: Header,
    /// The probe-table id of the function.
    pub func: u32,
    /// 1: left by a jump to another function (a tail call); 0: by a return instruction.
    pub tail: u32,
    /// The stack pointer (see [`FrameEntry::sp`]).
    pub sp: u64,
    /// RAX: the return register (0 at a tail call).
    pub ret: u64,
}

/// Kernel frames a [`StackRaw`] carries (the kernel's own limit is 127).
pub const MAX_KERNEL_FRAMES: usize = 64;
/// Bytes of a thread's user stack a [`StackRaw`] copies at most, from its stack pointer up
/// (perf's `--call-graph dwarf` copies 8 KiB by default; servers' stacks are deeper).
pub const USER_STACK_BYTES: usize = 16384;
/// The copy goes a page at a time: a page that cannot be read ends it, keeping the pages
/// before it (a single read of the whole range fails whole).
pub const STACK_PAGE: usize = 4096;

/// Why a [`StackRaw`] was taken.
pub mod stack_cause {
    /// An on-CPU sample (the cpu-clock perf event).
    pub const SAMPLE: u32 = 0;
    /// The thread switches out in a state that is not runnable: it blocks here.
    pub const BLOCK: u32 = 1;
}

/// The raw material of a stack: the kernel's frames, the user registers and the top of the
/// user stack, which the recorder unwinds with the binaries' unwind tables. Only the first
/// [`StackRaw::FIXED`] + `user_len` bytes are sent.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StackRaw {
    /// Time, thread and kind ([`kind::STACK_RAW`]).
    pub h: Header,
    /// The thread's process.
    pub tgid: u32,
    /// One of [`stack_cause`].
    pub cause: u32,
    /// For a sample, the perf event's period: ns of CPU time it stands for.
    pub period: u64,
    /// User registers: instruction, stack and frame pointers.
    pub ip: u64,
    /// The user stack pointer: `user[0]` is the byte at this address.
    pub sp: u64,
    /// The user frame pointer.
    pub bp: u64,
    /// How many of `kernel` hold a frame.
    pub kernel_frames: u32,
    /// How many bytes of `user` were copied.
    pub user_len: u32,
    /// Zero, or the error of the read that ended the copy before [`USER_STACK_BYTES`].
    pub user_err: i32,
    /// Zero, or the error of `bpf_get_stack` for the kernel's frames.
    pub kernel_err: i32,
    /// Kernel return addresses, innermost first.
    pub kernel: [u64; MAX_KERNEL_FRAMES],
    /// The user stack from `sp` up; a page more than is ever sent, so that every page's
    /// read has room whatever the verifier knows of its offset.
    pub user: [u8; USER_STACK_BYTES + STACK_PAGE],
}

impl StackRaw {
    /// Bytes before `user`: always sent.
    pub const FIXED: usize = core::mem::size_of::<StackRaw>() - USER_STACK_BYTES - STACK_PAGE;
}

/// A stack the recorder unwound, as it writes it: an id of the file's stack table.
/// Used for both `SAMPLE` (with the period) and `BLOCK_STACK`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    /// Time, thread and kind.
    pub h: Header,
    /// The stack's id in the file's stack table.
    pub stack: u32,
    /// Zero: the padding, explicit.
    pub _pad: u32,
    /// For an on-CPU sample, ns of CPU time it stands for (0 for a blocking stack).
    pub period: u64,
}

/// How the `usdt` program reads one argument: the register (a byte offset in `struct
/// pt_regs`), the memory it points to, or a constant.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsdtArg {
    /// One of [`usdt_arg`].
    pub kind: u8,
    /// Bytes, negative when signed: 1, 2, 4 or 8.
    pub size: i8,
    /// For [`usdt_arg::INDEXED`]: the index's multiplier.
    pub scale: u8,
    /// Zero: the padding, explicit.
    pub _pad: u8,
    /// `pt_regs` offset of the register (the base, for memory).
    pub reg: u16,
    /// `pt_regs` offset of the index register, for [`usdt_arg::INDEXED`].
    pub index: u16,
    /// The displacement for memory, the value for a constant.
    pub value: i64,
}

/// Kinds of [`UsdtArg`].
pub mod usdt_arg {
    /// No argument.
    pub const NONE: u8 = 0;
    /// A register's value.
    pub const REGISTER: u8 = 1;
    /// Memory at a register plus a displacement.
    pub const MEMORY: u8 = 2;
    /// Memory at base + index * scale + displacement.
    pub const INDEXED: u8 = 3;
    /// A constant.
    pub const CONSTANT: u8 = 4;
}

/// How to read the arguments of one USDT probe, by its probe-table id.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsdtSpec {
    /// How many of `args` are used.
    pub nargs: u32,
    /// Zero: the padding, explicit.
    pub _pad: u32,
    /// The arguments.
    pub args: [UsdtArg; MAX_USDT_ARGS],
}

/// Asserts at compile time that each `$t` is exactly its fields, in order of their types,
/// with no implicit padding: the programs and the recorder read the same bytes without
/// any serialization.
macro_rules! exact_layout {
    ($($t:ty { $($f:ty),* })*) => {
        $(
            const _: () = assert!(core::mem::size_of::<$t>() == 0 $(+ core::mem::size_of::<$f>())*);
        )*
    };
}
pub(crate) use exact_layout;

// Ring records are read at 8-byte alignment.
const _: () = assert!(core::mem::align_of::<Header>() == 8);

exact_layout! {
    Header { u64, u32, u16, u16 }
    FuncEntry { Header, u32, u32 }
    FuncExit { Header, u32, u32, u64 }
    SysEnter { Header, u32, u32, u64, u64 }
    SysExit { Header, u32, u32, i64 }
    Switch { Header, u32, u32 }
    Wakeup { Header, u32, u32 }
    NewTask { Header, u32, u32, [u8; 16] }
    Exit { Header, u32, u32 }
    Rename { Header, [u8; 16] }
    Usdt { Header, u32, u32, [u64; MAX_USDT_ARGS] }
    GoEntry { Header, u32, u32, u64 }
    GoExit { Header, u32, u32, u64, u64 }
    FrameEntry { Header, u32, u32, u64 }
    FrameExit { Header, u32, u32, u64, u64 }
    GoStatus { Header, u32, u32, u64 }
    StackRaw { Header, u32, u32, u64, u64, u64, u64, u32, u32, i32, i32, [u64; MAX_KERNEL_FRAMES], [u8; USER_STACK_BYTES + STACK_PAGE] }
    Sample { Header, u32, u32, u64 }
    UsdtArg { u8, i8, u8, u8, u16, u16, i64 }
    UsdtSpec { u32, u32, [UsdtArg; MAX_USDT_ARGS] }
}
