//! The event ABI between the eBPF programs (`tracer-ebpf`) and the recorder (`tracer-user`).
//!
//! Every record in a ring buffer starts with a [`Header`]; `Header::kind` says which of the
//! structs below follows. All structs are `#[repr(C)]`, 8-byte aligned and free of implicit
//! padding so both sides agree on the bytes without any serialization.
//!
//! Timestamps are `bpf_ktime_get_ns()`: CLOCK_MONOTONIC in nanoseconds.
#![no_std]
#![warn(missing_docs)]

mod config;
pub mod errno;
mod records;
mod stat;
mod state;
pub mod syscalls;

pub use config::*;
pub use records::*;
pub use stat::*;
pub use state::*;

/// Upper bound on CPUs: the size of the per-CPU ring buffer array.
pub const MAX_CPUS: u32 = 4096;
/// Upper bound on traced threads held in the kernel filter.
pub const MAX_THREADS: u32 = 65536;
/// Upper bound on traced processes.
pub const MAX_PROCESSES: u32 = 4096;
/// Slots of the filter's first test, one byte per `id % ID_HINT_SLOTS` (a power of two).
pub const ID_HINT_SLOTS: u32 = 65536;
/// Bytes of each per-CPU ring buffer (a power of two, a multiple of the page size).
pub const RING_BYTES: u32 = 8 << 20;
/// The `uretprobe` syscall (x86_64): every uretprobe return makes one; never recorded.
pub const SYS_URETPROBE: u32 = 335;

/// `clone(2)` flag: the new task is a thread of the caller's process.
pub const CLONE_THREAD: u64 = 0x0001_0000;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] integer structs with no padding.
    unsafe impl aya::Pod for super::Offsets {}
    unsafe impl aya::Pod for super::Config {}
    unsafe impl aya::Pod for super::FuncStat {}
    unsafe impl aya::Pod for super::SysStat {}
    unsafe impl aya::Pod for super::ThreadStat {}
    unsafe impl aya::Pod for super::ThreadSched {}
    unsafe impl aya::Pod for super::UsdtSpec {}
    unsafe impl aya::Pod for super::NsIds {}
    unsafe impl aya::Pod for super::NsSelf {}
    unsafe impl aya::Pod for super::StackKey {}
}
