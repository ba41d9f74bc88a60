//! Thread states: what the scheduler reports at a switch, and the states the tracer
//! keeps, defined once for the programs, the recorder and the timeline.

/// Task state bits (include/linux/sched.h) that `sched_switch` reports.
pub mod task_state {
    /// `TASK_UNINTERRUPTIBLE`.
    pub const UNINTERRUPTIBLE: u32 = 0x2;
    /// The final switch of a thread that exited: `EXIT_DEAD | EXIT_ZOMBIE`.
    pub const EXITED: u32 = 0x10 | 0x20;
    /// Every state the tracepoint reports (`TASK_REPORT`).
    pub const REPORT: u32 = 0x7f;
    /// `TASK_NOLOAD`.
    pub const NOLOAD: u32 = 0x400;
    /// `TASK_RTLOCK_WAIT`: reported as uninterruptible.
    pub const RTLOCK_WAIT: u32 = 0x1000;
    /// `TASK_FROZEN`: reported as uninterruptible.
    pub const FROZEN: u32 = 0x8000;
    /// `TASK_IDLE`: uninterruptible without counting as load.
    pub const IDLE: u32 = UNINTERRUPTIBLE | NOLOAD;
    /// `TASK_REPORT_IDLE`.
    pub const REPORT_IDLE: u32 = REPORT + 1;
    /// Reported for a preempted thread (`TASK_REPORT_MAX`): still runnable.
    pub const PREEMPTED: u32 = REPORT_IDLE << 1;
}

/// The `prev_state` the classic `sched:sched_switch` tracepoint records, from the raw
/// tracepoint's arguments and the thread's `exit_state`: the kernel's
/// `__trace_sched_switch_state`, so that traces and their readers do not depend on which
/// of the two the programs attach to.
pub const fn switch_state(preempt: bool, prev_state: u32, exit_state: u32) -> u32 {
    use task_state::*;
    if preempt {
        return PREEMPTED;
    }
    let mut state = (prev_state | exit_state) & REPORT;
    if prev_state & IDLE == IDLE {
        state = REPORT_IDLE;
    }
    if prev_state & (RTLOCK_WAIT | FROZEN) != 0 {
        state = UNINTERRUPTIBLE;
    }
    // fls(state), then the bit below it: the highest reported state bit.
    if state == 0 {
        0
    } else {
        1 << (31 - state.leading_zeros())
    }
}

/// The thread states every part of the tracer uses: the eBPF counting code indexes its
/// time-per-state array by them, the recorder seeds threads with them, and the timeline
/// maps them to its own richer states.
pub mod tstate {
    /// On a CPU.
    pub const RUNNING: u32 = 0;
    /// Runnable, waiting for a CPU.
    pub const READY: u32 = 1;
    /// Interruptible sleep: a lock, a socket, a timer.
    pub const BLOCKED: u32 = 2;
    /// Uninterruptible sleep: disk I/O, page faults, some kernel locks.
    pub const IO: u32 = 3;
    /// Gone: the thread's last switch.
    pub const EXITED: u32 = 4;
}

/// The state a thread is in once a context switch has taken it off its CPU, from the
/// `prev_state` that [`switch_state`] gives (the classic tracepoint's value).
pub const fn state_after_switch(prev_state: u32) -> u32 {
    use task_state::*;
    if prev_state & EXITED != 0 {
        tstate::EXITED
    } else if prev_state & (REPORT | REPORT_IDLE) == 0 {
        // 0, or PREEMPTED: still runnable.
        tstate::READY
    } else if prev_state & UNINTERRUPTIBLE != 0 {
        tstate::IO
    } else {
        // Interruptible, stopped, traced, parked, idle.
        tstate::BLOCKED
    }
}

/// The state of a thread found at attach with `letter` in `/proc/PID/task/TID/stat`;
/// `None` for a letter that says nothing.
///
/// `R` is runnable: on a CPU or waiting for one, which /proc does not tell. It is
/// [`tstate::READY`]; since only a running thread can be switched out, a thread still in
/// its first, seeded READY state when a switch takes it off a CPU was running since
/// attach, and both the counting code and the timeline count it so.
pub const fn state_of_proc_letter(letter: u8) -> Option<u32> {
    match letter {
        b'R' => Some(tstate::READY),
        b'S' | b'I' | b'T' | b't' | b'P' | b'W' | b'K' => Some(tstate::BLOCKED),
        b'D' => Some(tstate::IO),
        b'Z' | b'X' | b'x' => Some(tstate::EXITED),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_state_is_the_kernels_mapping() {
        // (preempt, __state, exit_state) -> the classic tracepoint's prev_state.
        let cases = [
            (true, 0x1, 0, task_state::PREEMPTED),
            (false, 0x0, 0, 0),
            (false, 0x1, 0, 0x1),
            (false, 0x2, 0, 0x2),
            // TASK_KILLABLE and freezable sleeps report their base state.
            (false, 0x102, 0, 0x2),
            (false, 0x2001, 0, 0x1),
            (false, task_state::IDLE, 0, task_state::REPORT_IDLE),
            (false, task_state::RTLOCK_WAIT, 0, 0x2),
            (false, task_state::FROZEN | 0x1, 0, 0x2),
            (false, 0x40, 0, 0x40),
            // TASK_DEAD is not reported; the exit state is.
            (false, 0x80, 0x20, 0x20),
            (false, 0x80, 0x10, 0x10),
        ];
        for (preempt, state, exit, want) in cases {
            assert_eq!(
                switch_state(preempt, state, exit),
                want,
                "preempt {preempt} state {state:#x} exit {exit:#x}"
            );
        }
        assert_ne!(switch_state(false, 0x80, 0x20) & task_state::EXITED, 0);
    }

    #[test]
    fn states_after_a_switch() {
        use tstate::*;
        let cases = [
            (0, READY),
            (task_state::PREEMPTED, READY),
            (0x1, BLOCKED),
            (0x2, IO),
            (0x4, BLOCKED),
            (0x40, BLOCKED),
            (task_state::REPORT_IDLE, BLOCKED),
            (0x10, EXITED),
            (0x20, EXITED),
        ];
        for (prev_state, want) in cases {
            assert_eq!(state_after_switch(prev_state), want, "{prev_state:#x}");
        }
        // Every value the kernel's mapping can produce has a state.
        for preempt in [false, true] {
            for raw in 0..0x10000u32 {
                let s = state_after_switch(switch_state(preempt, raw, 0));
                assert!(s <= EXITED);
                if preempt {
                    assert_eq!(s, READY);
                }
            }
        }
    }
}
