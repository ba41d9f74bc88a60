//! tracefs: making sure it is mounted, and reading tracepoint record layouts from it
//! (with the kernel structure layouts from BTF: all the offsets the programs read at).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use tracer_abi::Offsets;

use crate::btf::Btf;

const CANDIDATES: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The tracefs mount point, mounting it at /sys/kernel/tracing if nothing is mounted;
/// the mount's error otherwise.
pub fn ensure_mounted() -> std::io::Result<PathBuf> {
    for dir in CANDIDATES {
        if Path::new(dir).join("events").is_dir() {
            return Ok(PathBuf::from(dir));
        }
    }
    let target = c"/sys/kernel/tracing";
    // SAFETY: plain mount(2) with static NUL-terminated strings.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(PathBuf::from(CANDIDATES[0]))
}

/// Where the programs read: fields of the classic tracepoints from their `format` files,
/// fields of kernel structures from the kernel's BTF.
pub fn offsets(tracefs: &Path) -> Result<Offsets> {
    let fmt = |event: &str| -> Result<String> {
        let path = tracefs.join("events").join(event).join("format");
        std::fs::read_to_string(&path)
            .with_context(|| format!("tracepoint {event} is not available ({})", path.display()))
    };
    let exit = fmt("sched/sched_process_exit")?;
    let rename = fmt("task/task_rename")?;
    let exec = fmt("sched/sched_process_exec")?;
    let btf = Btf::kernel()?;
    Ok(Offsets {
        exit_pid: field(&exit, "pid", 4)?,
        exit_group_dead: field(&exit, "group_dead", 1)?,
        rename_pid: field(&rename, "pid", 4)?,
        rename_newcomm: field(&rename, "newcomm", 16)?,
        exec_pid: field(&exec, "pid", 4)?,
        exec_old_pid: field(&exec, "old_pid", 4)?,
        task_pid: btf.offset("task_struct", "pid", 4)?,
        task_exit_state: btf.offset("task_struct", "exit_state", 4)?,
        task_cpu: btf.offset("task_struct", "thread_info.cpu", 4)?,
        task_sum_exec: btf.offset("task_struct", "se.sum_exec_runtime", 8)?,
        regs_arg0: btf.offset("pt_regs", "di", 8)?,
        regs_arg2: btf.offset("pt_regs", "dx", 8)?,
        regs_nr: btf.offset("pt_regs", "orig_ax", 8)?,
        task_thread_pid: btf.offset("task_struct", "thread_pid", 8)?,
        task_comm: btf.offset("task_struct", "comm", 16)?,
        task_group_leader: btf.offset("task_struct", "group_leader", 8)?,
        pid_level: btf.offset("pid", "level", 4)?,
        // A flexible array (size 0) in today's kernels, one element in older ones.
        pid_numbers: (btf.offset("pid", "numbers", 0))
            .or_else(|_| btf.offset("pid", "numbers", 16))?,
        upid_size: btf.size_of("upid")?,
        upid_ns: btf.offset("upid", "ns", 8)?,
        mm_flags: btf.offset("mm_struct", "flags", 8).unwrap_or(0),
        ..uretprobe_offsets(&btf).unwrap_or(Offsets::DEFAULT)
    })
}

/// Where the programs find a thread's pending uretprobes, to put back in its stack
/// copies the return addresses they replaced; the defaults (0: not known) when the
/// kernel's types do not have them, which costs stacks through probed functions a frame,
/// not the recording.
fn uretprobe_offsets(btf: &Btf) -> Result<Offsets> {
    Ok(Offsets {
        task_utask: btf.offset("task_struct", "utask", 8)?,
        utask_return_instances: btf.offset("uprobe_task", "return_instances", 8)?,
        ri_stack: btf.offset("return_instance", "stack", 8)?,
        ri_orig_ret: btf.offset("return_instance", "orig_ret_vaddr", 8)?,
        ri_next: btf.offset("return_instance", "next", 8)?,
        task_mm: btf.offset("task_struct", "mm", 8)?,
        mm_xol_area: btf.offset("mm_struct", "uprobes_state.xol_area", 8)?,
        xol_vaddr: btf.offset("xol_area", "vaddr", 8)?,
        ..Offsets::DEFAULT
    })
}

/// Offset of field `name` in a format file, checking it has the size the programs read.
fn field(format: &str, name: &str, size: u32) -> Result<u32> {
    for line in format.lines() {
        let Some(decl) = line.trim().strip_prefix("field:") else {
            continue;
        };
        let mut parts = decl.split(';').map(str::trim);
        let declaration = parts.next().unwrap_or("");
        let ident = declaration
            .rsplit(|c: char| c.is_whitespace())
            .next()
            .unwrap_or("")
            .split('[')
            .next()
            .unwrap_or("");
        if ident != name {
            continue;
        }
        let mut offset = None;
        let mut found_size = None;
        for p in parts {
            if let Some(v) = p.strip_prefix("offset:") {
                offset = v.parse::<u32>().ok();
            } else if let Some(v) = p.strip_prefix("size:") {
                found_size = v.parse::<u32>().ok();
            }
        }
        let (Some(offset), Some(found)) = (offset, found_size) else {
            bail!("cannot parse tracepoint field line `{}`", line.trim());
        };
        if found != size {
            bail!("tracepoint field {name} has size {found}, the programs expect {size}");
        }
        // Direct context loads must be aligned to their size.
        if size <= 8 && offset % size != 0 {
            bail!("tracepoint field {name} at offset {offset} is not aligned");
        }
        return Ok(offset);
    }
    bail!("tracepoint field {name} not found")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWITCH: &str = "name: sched_switch
ID: 318
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;
";

    #[test]
    fn parses_fields() {
        assert_eq!(field(SWITCH, "prev_pid", 4).unwrap(), 24);
        assert_eq!(field(SWITCH, "prev_state", 8).unwrap(), 32);
        assert_eq!(field(SWITCH, "prev_comm", 16).unwrap(), 8);
        assert!(field(SWITCH, "prev_state", 4).is_err());
        assert!(field(SWITCH, "nothing", 4).is_err());
    }
}
