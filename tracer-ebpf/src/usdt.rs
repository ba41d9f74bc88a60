//! Reading a USDT probe's arguments as its note describes them: a register, memory at a
//! register plus a displacement (and an index), or a constant; sized and sign-extended. The
//! program `usdt` records a hit with them.

use aya_ebpf::{
    btf_maps::Array,
    helpers::{bpf_probe_read_kernel, bpf_probe_read_user, generated::bpf_get_attach_cookie},
    macros::{btf_map, uprobe},
    programs::ProbeContext,
    EbpfContext,
};
use tracer_abi::*;

use crate::shared::{counting, current, emit, header, probed};
use crate::stat;

/// The saved register at byte `offset` of `struct pt_regs` (0 if it cannot be read).
#[inline(always)]
fn register(ctx: &ProbeContext, offset: u16) -> u64 {
    // The verifier takes no variable offset into the context: read it as kernel memory.
    let at = (ctx.as_ptr() as *const u8).wrapping_add((offset & 0xff) as usize);
    // SAFETY: a read of the probe's saved registers through the helper.
    unsafe { bpf_probe_read_kernel(at as *const u64) }.unwrap_or(0)
}

/// `size` bytes of user memory at `addr`, zero-extended (0 if it cannot be read).
#[inline(always)]
fn memory(addr: u64, size: i8) -> u64 {
    // SAFETY: reads of the traced process's memory through the helper, which fails
    // cleanly on a bad address.
    unsafe {
        match size.unsigned_abs() {
            1 => bpf_probe_read_user(addr as *const u8).map_or(0, u64::from),
            2 => bpf_probe_read_user(addr as *const u16).map_or(0, u64::from),
            4 => bpf_probe_read_user(addr as *const u32).map_or(0, u64::from),
            _ => bpf_probe_read_user(addr as *const u64).unwrap_or(0),
        }
    }
}

/// One argument.
#[inline(always)]
pub fn arg(ctx: &ProbeContext, a: &UsdtArg) -> u64 {
    let raw = match a.kind {
        usdt_arg::REGISTER => register(ctx, a.reg),
        usdt_arg::MEMORY => memory(register(ctx, a.reg).wrapping_add(a.value as u64), a.size),
        usdt_arg::INDEXED => {
            let index = register(ctx, a.index).wrapping_mul(a.scale as u64);
            let addr = register(ctx, a.reg)
                .wrapping_add(index)
                .wrapping_add(a.value as u64);
            memory(addr, a.size)
        }
        usdt_arg::CONSTANT => a.value as u64,
        _ => 0,
    };
    extend(raw, a.size)
}

/// The low `size` bytes of `v`, sign-extended when `size` is negative.
#[inline(always)]
fn extend(v: u64, size: i8) -> u64 {
    let bits = (size.unsigned_abs() as u32 * 8).min(64);
    if bits >= 64 || bits == 0 {
        return v;
    }
    let shift = 64 - bits;
    if size < 0 {
        (((v << shift) as i64) >> shift) as u64
    } else {
        (v << shift) >> shift
    }
}

/// Per probe-table id of a USDT probe, how to read its arguments; set by the recorder.
#[btf_map]
static USDT_SPECS: Array<UsdtSpec, { MAX_FUNCS as usize }> = Array::new();

/// A USDT probe: its arguments, read as its note says.
#[uprobe]
pub fn usdt(ctx: ProbeContext) -> u32 {
    // SAFETY: helper reading this program's attach cookie.
    let probe = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    let (tgid, tid) = current();
    if !probed(tgid, tid) {
        return 0;
    }
    if counting() {
        // Counting mode counts hits; their arguments are not aggregated.
        let _ = stat::count(probe);
        return 0;
    }
    let Some(spec) = USDT_SPECS.get(probe) else {
        return 0;
    };
    let mut rec = Usdt {
        h: header(tid, kind::USDT),
        probe,
        nargs: spec.nargs,
        args: [0; MAX_USDT_ARGS],
    };
    for i in 0..MAX_USDT_ARGS {
        if (i as u32) < spec.nargs {
            rec.args[i] = arg(&ctx, &spec.args[i]);
        }
    }
    emit(rec);
    0
}
