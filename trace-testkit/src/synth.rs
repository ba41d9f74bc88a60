//! Synthetic server traces for the benchmarks: 8 CPUs, 50 threads of one process doing
//! switches, wakeups, accepts, reads and writes on connections, and probed functions.

use std::io::{BufWriter, Write};
use std::path::Path;

use trace_file::record::Comm;
use trace_file::{
    ChunkKind, Event, EventChunkEncoder, Probe, ProcessInfo, ThreadInfo, TraceHeader, Trailer,
    Writer,
};

const CPUS: u32 = 8;
const THREADS: u32 = 50;
const TGID: u32 = 1000;
const START: u64 = 5_000_000_000_000;
const CHUNK: u32 = 4096;

/// Runs `run` for each record count given as an argument; without arguments, runs this
/// program again for 5 M and 20 M records, each in its own process so that each peak RSS
/// (VmHWM) is its own.
pub fn main_for_sizes(run: fn(u64)) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        let me = std::env::current_exe().expect("own path");
        for n in ["5000000", "20000000"] {
            let st = std::process::Command::new(&me)
                .arg(n)
                .status()
                .expect("run");
            assert!(st.success(), "bench for {n} failed");
        }
        return;
    }
    for a in args {
        let n: u64 = a.replace('_', "").parse().expect("N: a number of records");
        run(n);
    }
}

/// `5M` for 5 000 000 records.
pub fn label(n: u64) -> String {
    if n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else {
        n.to_string()
    }
}

/// This process's peak resident memory, KiB (VmHWM).
pub fn vm_hwm_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// (on-CPU ns, runnable-but-waiting ns) of the calling thread so far: on a shared
/// machine, wall-clock rates depend on the other load, on-CPU ones much less.
pub fn thread_cpu_ns() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let mut f = s.split_whitespace().map(|v| v.parse().unwrap_or(0));
    (f.next().unwrap_or(0), f.next().unwrap_or(0))
}

/// CPU time (user + system) of the whole process so far, all threads, ended ones
/// included, in ns (clock-tick resolution, 10 ms).
#[allow(dead_code)] // used by one of the two benches
pub fn process_cpu_ns() -> u64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces): state is the first, utime
    // and stime the 12th and 13th.
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    ticks * 10_000_000
}

/// A tiny PRNG: the bench must not depend on a crate or on the system's randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

struct Cpu {
    enc: EventChunkEncoder,
    clock: u64,
    /// Index in `threads` of the running thread, or None when idle.
    current: Option<usize>,
    /// Threads that run on this CPU (each thread has a home CPU, so none runs twice).
    threads: Vec<usize>,
    turn: usize,
}

/// Writes a trace of `n` records: each CPU round-robins over its threads, each slice
/// doing server work, and CPUs take turns writing 4096-record chunks like the recorder.
pub fn synthesize(path: &Path, n: u64) -> std::io::Result<()> {
    let file = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut w = Writer::new(file).map_err(std::io::Error::other)?;
    let header = TraceHeader {
        tracer_version: "bench".into(),
        hostname: "bench".into(),
        kernel: "6.1".into(),
        cpus: CPUS,
        clock: "CLOCK_MONOTONIC".into(),
        monotonic_to_realtime_ns: 1_700_000_000_000_000_000 - START as i64,
        start_ns: START,
        command_line: vec![],
        mode: "record".into(),
        ..Default::default()
    };
    w.meta(ChunkKind::Header, &header)
        .map_err(std::io::Error::other)?;
    let proc_ = ProcessInfo {
        tgid: TGID,
        exe: "/srv/bench-server".into(),
        cmdline: vec![],
        launched: true,
        host_pid: None,
    };
    w.meta(ChunkKind::Process, &proc_)
        .map_err(std::io::Error::other)?;
    let threads: Vec<ThreadInfo> = (0..THREADS)
        .map(|i| ThreadInfo {
            tgid: TGID,
            tid: TGID + i,
            name: if i == 0 {
                "acceptor".into()
            } else {
                format!("worker-{i}")
            },
            state: 'S',
            host_tid: None,
        })
        .collect();
    w.meta(ChunkKind::Threads, &threads)
        .map_err(std::io::Error::other)?;
    let probes: Vec<Probe> = (1..=20)
        .map(|id| Probe {
            id,
            name: format!("app::handler_{id}"),
            ..Probe::default()
        })
        .collect();
    w.meta(ChunkKind::Probes, &probes)
        .map_err(std::io::Error::other)?;

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut cpus: Vec<Cpu> = (0..CPUS)
        .map(|c| Cpu {
            enc: EventChunkEncoder::new(c),
            clock: START + c as u64 * 100,
            current: None,
            threads: (0..THREADS as usize)
                .filter(|t| *t as u32 % CPUS == c)
                .collect(),
            turn: 0,
        })
        .collect();
    // Connections accepted by the acceptor, served by workers.
    let mut conns: Vec<u64> = Vec::new();
    let mut next_fd = 100u64;
    let mut written = 0u64;
    let mut c = 0usize;
    while written < n {
        let cpu = &mut cpus[c];
        // One scheduling slice on this CPU: switch to its next thread, run some work.
        let next = cpu.threads[cpu.turn % cpu.threads.len()];
        cpu.turn += 1;
        let prev_tid = cpu.current.map_or(0, |t| TGID + t as u32);
        let next_tid = TGID + next as u32;
        let push = |cpu: &mut Cpu, tid: u32, e: Event, rng: &mut Rng| {
            cpu.clock += 200 + rng.below(1500);
            cpu.enc.push(cpu.clock, tid, &e);
        };
        if prev_tid != next_tid {
            if prev_tid != 0 {
                push(
                    cpu,
                    prev_tid,
                    Event::Wakeup {
                        wakee: next_tid,
                        target_cpu: c as u32,
                        new: false,
                    },
                    &mut rng,
                );
            }
            let ps = [1u32, 1, 0x100, 2][rng.below(4) as usize];
            push(
                cpu,
                prev_tid,
                Event::Switch {
                    next_tid,
                    prev_state: ps,
                },
                &mut rng,
            );
            cpu.current = Some(next);
        }
        let work = 2 + rng.below(6);
        for _ in 0..work {
            let tid = next_tid;
            let f = 1 + rng.below(20) as u32;
            push(cpu, tid, Event::FuncEntry { func: f }, &mut rng);
            if next == 0 {
                push(
                    cpu,
                    tid,
                    Event::SysEnter {
                        nr: 288,
                        arg0: 3,
                        arg2: 0,
                    },
                    &mut rng,
                );
                let fd = next_fd;
                next_fd = 100 + (next_fd + 1 - 100) % 5000;
                push(
                    cpu,
                    tid,
                    Event::SysExit {
                        nr: 288,
                        ret: fd as i64,
                    },
                    &mut rng,
                );
                conns.push(fd);
                if conns.len() > 32 {
                    conns.remove(0);
                }
            } else if !conns.is_empty() && rng.below(10) == 0 {
                // The worker is done with a connection.
                let fd = conns.swap_remove(rng.below(conns.len() as u64) as usize);
                push(
                    cpu,
                    tid,
                    Event::SysEnter {
                        nr: 3,
                        arg0: fd,
                        arg2: 0,
                    },
                    &mut rng,
                );
                push(cpu, tid, Event::SysExit { nr: 3, ret: 0 }, &mut rng);
            } else if let Some(&fd) = conns.get(rng.below(conns.len().max(1) as u64) as usize) {
                let nr = [0u32, 1, 45, 44, 20][rng.below(5) as usize];
                push(
                    cpu,
                    tid,
                    Event::SysEnter {
                        nr,
                        arg0: fd,
                        arg2: 4096,
                    },
                    &mut rng,
                );
                let ret = rng.below(4096) as i64;
                push(cpu, tid, Event::SysExit { nr, ret }, &mut rng);
            } else {
                push(
                    cpu,
                    tid,
                    Event::SysEnter {
                        nr: 232,
                        arg0: 4,
                        arg2: 64,
                    },
                    &mut rng,
                );
                push(cpu, tid, Event::SysExit { nr: 232, ret: 1 }, &mut rng);
            }
            push(cpu, tid, Event::FuncExit { func: f, ret: 0 }, &mut rng);
        }
        if rng.below(2000) == 0 {
            let e = Event::Rename {
                comm: Comm::from_str_lossy("renamed"),
            };
            push(cpu, next_tid, e, &mut rng);
        }
        if cpu.enc.len() >= CHUNK {
            written += cpu.enc.len() as u64;
            w.chunk(ChunkKind::Events, &cpu.enc.finish())
                .map_err(std::io::Error::other)?;
        }
        // CPUs take turns in an order that is not CPU order.
        c = (c + 3) % CPUS as usize;
    }
    let mut end = 0;
    for cpu in &mut cpus {
        end = end.max(cpu.clock);
        if !cpu.enc.is_empty() {
            w.chunk(ChunkKind::Events, &cpu.enc.finish())
                .map_err(std::io::Error::other)?;
        }
    }
    let trailer = Trailer {
        end_ns: end + 1000,
        reason: "duration".into(),
        ..Trailer::default()
    };
    w.meta(ChunkKind::Trailer, &trailer)
        .map_err(std::io::Error::other)?;
    w.flush().map_err(std::io::Error::other)?;
    w.into_inner().flush()
}
