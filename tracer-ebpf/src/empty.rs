//! The kernel's floors: programs that do nothing, attached by `tracer record
//! --empty-probes` in place of the real ones (benchmarks only), so that what recording
//! costs can be told from what the kernel charges for reaching a program at all.

use aya_ebpf::{
    macros::{raw_tracepoint, tracepoint, uprobe, uretprobe},
    programs::{ProbeContext, RawTracePointContext, RetProbeContext, TracePointContext},
};

/// The kernel's floor for a probe: what `func_entry` costs minus the recording.
/// Attached instead of it by `tracer record --empty-probes` (benchmarks only).
#[uprobe]
pub fn func_entry_empty(_ctx: ProbeContext) -> u32 {
    0
}

#[uretprobe]
pub fn func_exit_empty(_ctx: RetProbeContext) -> u32 {
    0
}

/// The same for every tracepoint (`--empty-probes` attaches these in place of all).
#[tracepoint]
pub fn tracepoint_empty(_ctx: TracePointContext) -> u32 {
    0
}

#[raw_tracepoint]
pub fn raw_tracepoint_empty(_ctx: RawTracePointContext) -> u32 {
    0
}
