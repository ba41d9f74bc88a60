//! The tables, column by column, in the order of docs/parquet.md (a test checks that the
//! document lists exactly these columns).
//!
//! Times: `*_ns` columns are wall-clock nanoseconds since the Unix epoch (each host's
//! CLOCK_MONOTONIC turned into CLOCK_REALTIME by its file header's offset, as the merge
//! aligns hosts); `*_mono_ns` the host's CLOCK_MONOTONIC; durations are ns.

use crate::columns::table;

table! {
    /// One call of a probed function (or a hit of a USDT probe).
    Calls "calls" {
        host: Dict,
        run: Dict,
        pid: I32,
        tid: I32,
        thread: Dict,
        function: Dict,
        binary: Dict,
        kind: Dict,
        call_id: I64,
        parent_id: I64 null,
        depth: I32,
        outermost: Bool,
        start_ns: I64,
        end_ns: I64,
        start_mono_ns: I64,
        duration_ns: I64,
        self_ns: I64,
        running_ns: I64,
        ready_ns: I64,
        blocked_ns: I64,
        io_ns: I64,
        ret: I64 null,
        error: Bool,
        end_kind: Dict,
        goroutine: I64 null,
        connection: I64 null,
    }
}

table! {
    /// One system call.
    Syscalls "syscalls" {
        host: Dict,
        run: Dict,
        pid: I32,
        tid: I32,
        thread: Dict,
        nr: I32,
        name: Dict,
        start_ns: I64,
        end_ns: I64,
        start_mono_ns: I64,
        duration_ns: I64 null,
        ret: I64 null,
        error: Bool,
        errno: I32 null,
        bytes: I64,
        bytes_read: I64,
        bytes_written: I64,
        requested: I64,
        fd: I32 null,
        connection: I64 null,
        new_connection: I64 null,
        call_id: I64 null,
        end_kind: Dict,
    }
}

table! {
    /// A stretch of time a thread spent in one state.
    States "states" {
        host: Dict,
        run: Dict,
        pid: I32,
        tid: I32,
        state: Dict,
        start_ns: I64,
        end_ns: I64,
        start_mono_ns: I64,
        duration_ns: I64,
        cpu: I32 null,
        migrations: I32,
    }
}

table! {
    /// A wakeup or a connection hand-off between two threads.
    Links "links" {
        host: Dict,
        kind: Dict,
        sender_run: Dict,
        sender_pid: I32,
        sender_tid: I32,
        receiver_run: Dict,
        receiver_pid: I32,
        receiver_tid: I32,
        send_ns: I64,
        recv_ns: I64,
        send_mono_ns: I64,
        send_cpu: I32,
        recv_cpu: I32,
        connection: I64 null,
        bytes: I64,
    }
}

table! {
    /// A thread of a recording.
    Threads "threads" {
        host: Dict,
        run: Dict,
        pid: I32,
        tid: I32,
        thread: Dict,
        process: Dict,
        first_seen_ns: I64,
        file: Str,
    }
}

table! {
    /// A process of a recording.
    Processes "processes" {
        host: Dict,
        run: Dict,
        pid: I32,
        process: Dict,
        exe: Str null,
        cmdline: Str null,
        launched: Bool,
        threads: I32,
    }
}

table! {
    /// An entry of a file's probe table.
    Probes "probes" {
        host: Dict,
        run: Dict,
        id: I32,
        function: Dict,
        binary: Dict,
        kind: Dict,
        symbol: Str,
        build_id: Str null,
        address: I64,
        size: I64,
        file_offset: I64,
        source: Str null,
        usdt_args: Str null,
    }
}

table! {
    /// An input file.
    Files "files" {
        path: Str,
        host: Dict,
        run: Dict,
        part: I32,
        mode: Dict,
        start_ns: I64,
        end_ns: I64 null,
        start_mono_ns: I64,
        monotonic_to_realtime_ns: I64,
        cpus: I32,
        kernel: Str,
        tracer_version: Str,
        lost: I64,
        truncated: Bool,
        damaged_regions: I32,
        damaged_bytes: I64,
    }
}

table! {
    /// One window of a stat file: a row per function, per thread and per system call.
    Windows "windows" {
        host: Dict,
        run: Dict,
        kind: Dict,
        window_start_ns: I64,
        window_end_ns: I64,
        window_start_mono_ns: I64,
        function: Dict null,
        binary: Dict null,
        pid: I32 null,
        tid: I32 null,
        thread: Dict null,
        nr: I32 null,
        syscall: Dict null,
        calls: I64,
        timed_calls: I64,
        errors: I64,
        total_ns: I64,
        running_ns: I64,
        ready_ns: I64,
        blocked_ns: I64,
        io_ns: I64,
        voluntary_switches: I64,
        involuntary_switches: I64,
        wakeups_sent: I64,
        wakeups_received: I64,
        migrations: I64,
        ready_waits: I64,
        syscalls: I64,
        syscall_ns: I64,
        bytes_read: I64,
        bytes_written: I64,
    }
}

table! {
    /// A stat file's latency histograms: per window, function, system call or thread (its
    /// waits for a CPU), how many calls (or waits) took about how long; percentiles over
    /// any set of windows, hosts or files are a cumulative sum away.
    Latencies "latencies" {
        host: Dict,
        run: Dict,
        kind: Dict,
        window_start_ns: I64,
        window_end_ns: I64,
        window_start_mono_ns: I64,
        function: Dict null,
        binary: Dict null,
        pid: I32 null,
        tid: I32 null,
        thread: Dict null,
        nr: I32 null,
        syscall: Dict null,
        ns: I64,
        count: I64,
    }
}
