//! Builds synthetic trace files for the tests.

use std::collections::BTreeMap;
use std::path::Path;

use trace_file::record::Comm;
use trace_file::{
    ChunkKind, Event, EventChunkEncoder, LostCounts, Probe, ProcessInfo, ThreadInfo, TraceHeader,
    Trailer, Writer,
};

/// A trace to write: metadata plus each CPU's records in kernel order.
pub struct TraceBuilder {
    /// The header chunk.
    pub header: TraceHeader,
    /// Process chunks.
    pub processes: Vec<ProcessInfo>,
    /// The thread list at start.
    pub threads: Vec<ThreadInfo>,
    /// The probe table.
    pub probes: Vec<Probe>,
    /// Per CPU, its records (time, tid, event) in kernel order.
    pub cpus: BTreeMap<u32, Vec<(u64, u32, Event)>>,
    /// Records per event chunk.
    pub chunk_records: usize,
    /// Order chunks are written in: CPUs take turns, starting from the last CPU, so the
    /// file interleaves them "wrongly".
    pub reverse_cpus: bool,
    /// A Lost chunk, written after the events.
    pub lost: Option<LostCounts>,
    /// The trailer; `None` for a recording that did not stop cleanly.
    pub trailer: Option<Trailer>,
}

/// CLOCK_MONOTONIC of the start of every built trace, ns.
pub const START: u64 = 1_000_000_000_000;
/// 2025-05-20 14:03:00 UTC minus START.
pub const M2R: i64 = 1_747_749_780_000_000_000 - START as i64;

impl TraceBuilder {
    /// A trace of `host` with `cpus` CPUs, started at [`START`], stopped never.
    pub fn new(host: &str, cpus: u32) -> Self {
        TraceBuilder {
            header: TraceHeader {
                tracer_version: "test".into(),
                hostname: host.into(),
                kernel: "6.1.0".into(),
                cpus,
                clock: "CLOCK_MONOTONIC".into(),
                monotonic_to_realtime_ns: M2R,
                start_ns: START,
                command_line: vec!["tracer".into(), "record".into()],
                mode: "record".into(),
                ..Default::default()
            },
            processes: vec![],
            threads: vec![],
            probes: vec![],
            cpus: BTreeMap::new(),
            chunk_records: 4,
            reverse_cpus: true,
            lost: None,
            trailer: None,
        }
    }

    /// Adds a traced process.
    pub fn process(&mut self, tgid: u32, exe: &str) -> &mut Self {
        self.processes.push(ProcessInfo {
            tgid,
            exe: exe.into(),
            cmdline: vec![exe.into()],
            launched: false,
            host_pid: None,
        });
        self
    }

    /// Adds a thread known at start, with its /proc state letter.
    pub fn thread(&mut self, tgid: u32, tid: u32, name: &str, state: char) -> &mut Self {
        self.threads.push(ThreadInfo {
            tgid,
            tid,
            name: name.into(),
            state,
            host_tid: None,
        });
        self
    }

    /// Adds a probe-table entry.
    pub fn probe(&mut self, id: u32, name: &str) -> &mut Self {
        self.probes.push(Probe {
            id,
            name: name.into(),
            symbol: format!("_Z{}", name.len()),
            binary: "/srv/app".into(),
            ..Probe::default()
        });
        self
    }

    /// Adds a record at `START + us` microseconds.
    pub fn at(&mut self, us: u64, cpu: u32, tid: u32, e: Event) -> &mut Self {
        self.at_ns(START + us * 1000, cpu, tid, e)
    }

    /// A record at absolute CLOCK_MONOTONIC `ts`.
    pub fn at_ns(&mut self, ts: u64, cpu: u32, tid: u32, e: Event) -> &mut Self {
        self.cpus.entry(cpu).or_default().push((ts, tid, e));
        self
    }

    /// A clean stop (the trailer) `us` after the start.
    pub fn stop(&mut self, us: u64) -> &mut Self {
        let n = self.cpus.values().map(Vec::len).sum::<usize>() as u64;
        self.trailer = Some(Trailer {
            end_ns: START + us * 1000,
            reason: "duration".into(),
            records: [("all".to_string(), n)].into_iter().collect(),
            lost: self.lost.as_ref().map_or(0, |l| l.per_cpu.iter().sum()),
        });
        self
    }

    /// Writes the trace file.
    pub fn write(&self, path: &Path) {
        std::fs::write(path, self.bytes()).unwrap();
    }

    /// The trace file's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let mut w = Writer::new(Vec::new()).unwrap();
        w.meta(ChunkKind::Header, &self.header).unwrap();
        for p in &self.processes {
            w.meta(ChunkKind::Process, p).unwrap();
        }
        w.meta(ChunkKind::Threads, &self.threads).unwrap();
        w.meta(ChunkKind::Probes, &self.probes).unwrap();
        type Queue<'a> = (u32, &'a [(u64, u32, Event)]);
        let mut queues: Vec<Queue> = self.cpus.iter().map(|(c, v)| (*c, v.as_slice())).collect();
        if self.reverse_cpus {
            queues.reverse();
        }
        let n = self.chunk_records.max(1);
        loop {
            let mut any = false;
            for (cpu, q) in queues.iter_mut() {
                if q.is_empty() {
                    continue;
                }
                any = true;
                let take = n.min(q.len());
                let mut enc = EventChunkEncoder::new(*cpu);
                for (ts, tid, e) in &q[..take] {
                    enc.push(*ts, *tid, e);
                }
                w.chunk(ChunkKind::Events, &enc.finish()).unwrap();
                *q = &q[take..];
            }
            if !any {
                break;
            }
        }
        if let Some(l) = &self.lost {
            w.meta(ChunkKind::Lost, l).unwrap();
        }
        if let Some(t) = &self.trailer {
            w.meta(ChunkKind::Trailer, t).unwrap();
        }
        w.into_inner()
    }
}

/// A thread name.
pub fn comm(s: &str) -> Comm {
    Comm::from_str_lossy(s)
}

/// A switch to `next_tid`, the thread leaving in `prev_state`.
pub fn sw(next_tid: u32, prev_state: u32) -> Event {
    Event::Switch {
        next_tid,
        prev_state,
    }
}

/// A system call entry.
pub fn enter(nr: u32, arg0: u64, arg2: u64) -> Event {
    Event::SysEnter { nr, arg0, arg2 }
}

/// A system call exit.
pub fn exit(nr: u32, ret: i64) -> Event {
    Event::SysExit { nr, ret }
}

/// A wakeup of `wakee` onto `cpu`.
pub fn wake(wakee: u32, cpu: u32) -> Event {
    Event::Wakeup {
        wakee,
        target_cpu: cpu,
        new: false,
    }
}

/// The web-server scenario of the golden test: an acceptor hands a connection to a
/// worker, which creates a short-lived helper thread.
pub fn server_scenario() -> TraceBuilder {
    let mut b = TraceBuilder::new("web1", 2);
    b.process(100, "/srv/server")
        .thread(100, 100, "server", 'S')
        .thread(100, 101, "worker", 'S')
        .probe(1, "handle_accept")
        .probe(2, "process_request(Request&)");
    // CPU 0: the acceptor.
    b.at(1000, 0, 0, sw(100, 0))
        .at(1100, 0, 100, exit(288, 5)) // accept4 under way at attach returns fd 5
        .at(1200, 0, 100, Event::FuncEntry { func: 1 })
        .at(1300, 0, 100, wake(101, 1))
        .at(1400, 0, 100, Event::FuncExit { func: 1, ret: 0 })
        .at(1500, 0, 100, enter(288, 3, 0))
        .at(1600, 0, 100, sw(0, 1));
    // CPU 1: the worker, then the helper.
    b.at(1350, 1, 0, sw(101, 0))
        .at(1400, 1, 101, enter(0, 5, 4096))
        .at(1450, 1, 101, exit(0, 120))
        .at(1500, 1, 101, Event::FuncEntry { func: 2 })
        .at(1700, 1, 101, Event::FuncExit { func: 2, ret: 1 })
        .at(1750, 1, 101, enter(1, 5, 300))
        .at(1800, 1, 101, exit(1, 300))
        .at(1850, 1, 101, enter(3, 5, 0))
        .at(1860, 1, 101, exit(3, 0))
        .at(
            1900,
            1,
            101,
            Event::NewTask {
                child_tid: 102,
                child_tgid: 100,
                comm: comm("helper"),
            },
        )
        .at(2000, 1, 101, sw(0, 1))
        .at(
            2100,
            1,
            0,
            Event::Wakeup {
                wakee: 102,
                target_cpu: 1,
                new: true,
            },
        )
        .at(2200, 1, 0, sw(102, 0))
        .at(
            2250,
            1,
            102,
            Event::Rename {
                comm: comm("helper-1"),
            },
        )
        .at(
            2300,
            1,
            102,
            Event::Exit {
                tgid: 100,
                group_dead: false,
            },
        )
        .at(2350, 1, 102, sw(0, 0x10));
    b.lost = Some(LostCounts {
        at_ns: START + 2_500_000,
        per_cpu: vec![0, 2],
        threads_not_traced: 0,
        skipped: 0,
        stacks_shed: 0,
    });
    b.stop(3000);
    b
}

/// A Go server: goroutine 0xa enters `main.handle` on thread 201 and returns on thread
/// 202 (the runtime moved it); meanwhile goroutine 0xb enters and leaves `main.handle` on
/// thread 201, with a nested `main.render`; a USDT probe fires twice with arguments.
pub fn go_scenario() -> TraceBuilder {
    let mut b = TraceBuilder::new("go1", 2);
    b.process(200, "/srv/goserver")
        .thread(200, 201, "goserver", 'S')
        .thread(200, 202, "goserver", 'S')
        .probe(1, "main.handle")
        .probe(2, "main.render")
        .probe(3, "app:request");
    b.probes[0].kind = trace_file::ProbeKind::Go;
    b.probes[1].kind = trace_file::ProbeKind::Go;
    b.probes[2].kind = trace_file::ProbeKind::Usdt {
        args: "-4@%edi 8@%rsi".into(),
    };
    let (ga, gb) = (0xa, 0xb);
    let entry = |func, g| Event::GoEntry { func, g, height: 0 };
    let ret = |func, ret, g| Event::GoExit {
        func,
        ret,
        g,
        height: 0,
    };
    let usdt = |a: u64, b: u64| Event::Usdt {
        probe: 3,
        nargs: 2,
        args: [a, b, 0, 0, 0, 0],
    };
    b.at(1000, 0, 0, sw(201, 0))
        .at(1100, 0, 201, entry(1, ga))
        .at(1150, 0, 201, usdt((-7i64) as u64, 42))
        // Goroutine a parks; b runs on the same thread.
        .at(1200, 0, 201, entry(1, gb))
        .at(1250, 0, 201, entry(2, gb))
        .at(1300, 0, 201, ret(2, 5, gb))
        .at(1400, 0, 201, ret(1, 7, gb))
        .at(1500, 0, 201, sw(0, 1));
    // Goroutine a resumes on the other thread and returns there.
    b.at(1600, 1, 0, sw(202, 0))
        .at(1700, 1, 202, usdt(1, 2))
        .at(1800, 1, 202, ret(1, 9, ga))
        .at(1900, 1, 202, sw(0, 1));
    b.stop(2000);
    b
}

/// A small deterministic PRNG (xorshift64*), so property tests need no dependency.
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// A random but plausible trace: `threads` threads of one process on `cpus` CPUs doing
/// `steps` scheduling rounds of syscalls, functions, wakeups and connections.
pub fn random_scenario(seed: u64, cpus: u32, threads: u32, steps: u32) -> TraceBuilder {
    let mut rng = Rng(seed | 1);
    let mut b = TraceBuilder::new("rnd", cpus);
    b.process(500, "/srv/rnd");
    for i in 0..threads {
        b.thread(
            500,
            500 + i,
            &format!("t{i}"),
            if i % 3 == 0 { 'R' } else { 'S' },
        );
    }
    for f in 1..=5 {
        b.probe(f, &format!("fn{f}"));
    }
    b.chunk_records = 1 + rng.below(7) as usize;
    // Per CPU: current thread (0 = idle) and clock (ns after START).
    let mut on_cpu = vec![0u32; cpus as usize];
    let mut clock = vec![0u64; cpus as usize];
    let mut where_ = vec![None::<usize>; threads as usize];
    let mut next_fd = 10u64;
    let mut open_conns: Vec<u64> = vec![];
    let mut next_child = 900u32;
    for _ in 0..steps {
        let c = rng.below(cpus as u64) as usize;
        clock[c] += 1 + rng.below(5000);
        let mut t = START + clock[c];
        // Small backward steps, as nested programs produce.
        let jitter = if rng.below(10) == 0 {
            rng.below(3000)
        } else {
            0
        };
        let cur = on_cpu[c];
        macro_rules! push {
            ($b:expr, $tid:expr, $e:expr, $t:expr) => {{
                let e = $e;
                $b.at_ns(*$t - jitter.min(*$t - START), c as u32, $tid, e);
                *$t += 1 + rng.below(200);
            }};
        }
        if cur == 0 || rng.below(4) == 0 {
            // Switch to a random thread not running elsewhere.
            let cand = 500 + rng.below(threads as u64) as u32;
            let idx = (cand - 500) as usize;
            let next = if where_[idx].is_none() && rng.below(5) != 0 {
                cand
            } else {
                0
            };
            if cur == next {
                continue;
            }
            let states = [0u32, 1, 1, 2, 0x100, 0x402, 0x80];
            let ps = states[rng.below(states.len() as u64) as usize];
            if next != 0 && rng.below(2) == 0 {
                push!(b, cur, wake(next, c as u32), &mut t);
            }
            push!(b, cur, sw(next, ps), &mut t);
            if cur != 0 {
                where_[(cur - 500) as usize] = None;
            }
            if next != 0 {
                where_[idx] = Some(c);
            }
            on_cpu[c] = next;
        } else {
            match rng.below(6) {
                0 => {
                    let f = 1 + rng.below(5) as u32;
                    push!(b, cur, Event::FuncEntry { func: f }, &mut t);
                    if rng.below(3) != 0 {
                        let nr = rng.below(3) as u32;
                        push!(b, cur, enter(nr, 4, 100), &mut t);
                        push!(b, cur, exit(nr, 50), &mut t);
                    }
                    push!(b, cur, Event::FuncExit { func: f, ret: 0 }, &mut t);
                }
                1 => {
                    push!(b, cur, enter(288, 3, 0), &mut t);
                    let fd = next_fd;
                    next_fd += 1;
                    open_conns.push(fd);
                    push!(b, cur, exit(288, fd as i64), &mut t);
                }
                2 if !open_conns.is_empty() => {
                    let fd = open_conns[rng.below(open_conns.len() as u64) as usize];
                    let nr = [0u32, 1, 44, 45][rng.below(4) as usize];
                    push!(b, cur, enter(nr, fd, 512), &mut t);
                    push!(b, cur, exit(nr, rng.below(600) as i64), &mut t);
                }
                3 if !open_conns.is_empty() => {
                    let i = rng.below(open_conns.len() as u64) as usize;
                    let fd = open_conns.swap_remove(i);
                    push!(b, cur, enter(3, fd, 0), &mut t);
                    push!(b, cur, exit(3, 0), &mut t);
                }
                4 => {
                    let wakee = 500 + rng.below(threads as u64) as u32;
                    push!(b, cur, wake(wakee, c as u32), &mut t);
                }
                _ if rng.below(20) == 0 => {
                    let child = next_child;
                    next_child += 1;
                    let e = Event::NewTask {
                        child_tid: child,
                        child_tgid: 500,
                        comm: comm("child"),
                    };
                    push!(b, cur, e, &mut t);
                }
                _ => {
                    // A function that never returns before the thread leaves the CPU.
                    push!(b, cur, Event::FuncEntry { func: 5 }, &mut t);
                }
            }
        }
        clock[c] = t - START;
    }
    let end = clock.iter().max().copied().unwrap_or(0) / 1000 + 10;
    b.stop(end);
    b
}
