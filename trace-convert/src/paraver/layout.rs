//! The process model (.prv header, .row) and the labels (.pcf).

use std::io::Write;

use trace_merge::sysclass::SockOp;
use trace_merge::timeline::{ThreadRef, ThreadState, Timeline};

use super::*;

/// The process model and resources: which application is which process, on which node.
pub(super) struct Layout {
    /// Per application (1-based order): the process index and its threads in order.
    pub(super) appls: Vec<(u32, Vec<ThreadRef>)>,
}

impl Layout {
    pub(super) fn new(tl: &Timeline, slots: &[(u32, u32)]) -> Result<Layout> {
        let napps = slots.iter().map(|s| s.0).max().unwrap_or(0) as usize;
        let mut appls: Vec<(u32, Vec<ThreadRef>)> = vec![(0, Vec::new()); napps];
        for (r, &(a, _)) in slots.iter().enumerate() {
            let e = &mut appls[a as usize - 1];
            e.0 = tl.thread(r as ThreadRef).process;
            e.1.push(r as ThreadRef);
        }
        let cpus: u64 = tl.merger().nodes().iter().map(|n| n.cpus as u64).sum();
        if cpus > u16::MAX as u64 {
            return Err(Error::Input(trace_merge::Error::Limit(format!(
                "{cpus} CPUs: Paraver indexes at most 65535"
            ))));
        }
        Ok(Layout { appls })
    }

    pub(super) fn header(&self, tl: &Timeline, end: u64) -> String {
        let m = tl.merger();
        let start = (m.sources().iter())
            .map(|s| s.header.start_ns as i128 + s.header.monotonic_to_realtime_ns as i128)
            .min()
            .unwrap_or(0);
        let nodes: Vec<String> = m.nodes().iter().map(|n| n.cpus.to_string()).collect();
        let appls: Vec<String> = (self.appls.iter())
            .map(|(p, threads)| {
                let source = tl.processes()[*p as usize].source as usize;
                let node = m.sources()[source].node + 1;
                format!("1({}:{node})", threads.len())
            })
            .collect();
        // Applications are separated by ':' as Paraver itself writes them.
        format!(
            "#Paraver ({}):{end}_ns:{}({}):{}:{}\n",
            crate::fmt::paraver_date(start),
            nodes.len(),
            nodes.join(","),
            appls.len(),
            appls.join(":")
        )
    }

    pub(super) fn write_row(&self, f: &mut impl Write, tl: &Timeline) -> std::io::Result<()> {
        let nodes = tl.merger().nodes();
        let cpus: u32 = nodes.iter().map(|n| n.cpus).sum();
        writeln!(f, "LEVEL CPU SIZE {cpus}")?;
        for n in nodes {
            for c in 0..n.cpus {
                writeln!(f, "{}.{}", c + 1, n.hostname)?;
            }
        }
        writeln!(f, "\nLEVEL NODE SIZE {}", nodes.len())?;
        for n in nodes {
            writeln!(f, "{}", n.hostname)?;
        }
        let procs = tl.processes();
        for level in ["APPL", "TASK"] {
            writeln!(f, "\nLEVEL {level} SIZE {}", self.appls.len())?;
            for (p, _) in &self.appls {
                let p = &procs[*p as usize];
                writeln!(f, "{}:{}", clean(&p.name), p.tgid)?;
            }
        }
        let total: usize = self.appls.iter().map(|a| a.1.len()).sum();
        writeln!(f, "\nLEVEL THREAD SIZE {total}")?;
        for (_, threads) in &self.appls {
            for &r in threads {
                let t = tl.thread(r);
                writeln!(f, "{}:{}", clean(&t.name), t.tid)?;
            }
        }
        Ok(())
    }
}

/// A label fit for one line of the .row/.pcf.
pub(super) fn clean(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

pub(super) fn write_pcf(f: &mut impl Write, tl: &Timeline) -> std::io::Result<()> {
    f.write_all(
        b"DEFAULT_OPTIONS\n\nLEVEL               THREAD\nUNITS               NANOSEC\n\
          LOOK_BACK           100\nSPEED               1\nFLAG_ICONS          ENABLED\n\
          NUM_OF_STATE_COLORS 1000\nYMAX_SCALE          37\n\n\n\
          DEFAULT_SEMANTIC\n\nTHREAD_FUNC          State As Is\n\n\n",
    )?;
    let mut states = ThreadState::ALL;
    states.sort_by_key(|&s| state_value(s));
    writeln!(f, "STATES")?;
    for s in states {
        writeln!(f, "{:<4} {}", state_value(s), state_look(s).0)?;
    }
    writeln!(f, "\n\nSTATES_COLOR")?;
    for s in states {
        let (r, g, b) = state_look(s).1;
        writeln!(f, "{:<4} {{{r},{g},{b}}}", state_value(s))?;
    }

    writeln!(
        f,
        "\n\nEVENT_TYPE\n0    {EV_FUNCTION}    User function\nVALUES"
    )?;
    writeln!(f, "0      End")?;
    let bases = func_bases(tl);
    for (s, base) in tl.merger().sources().iter().zip(bases) {
        let mut probes: Vec<_> = s.probes.iter().collect();
        probes.sort_by_key(|p| p.id);
        for p in probes {
            writeln!(f, "{}      {}", base as u64 + p.id as u64, clean(&p.name))?;
        }
    }

    let usdt = |p: &&trace_file::Probe| matches!(p.kind, trace_file::ProbeKind::Usdt { .. });
    if tl
        .merger()
        .sources()
        .iter()
        .any(|s| s.probes.iter().any(|p| usdt(&p)))
    {
        writeln!(f, "\n\nEVENT_TYPE\n0    {EV_USDT}    USDT probe\nVALUES")?;
        for (s, base) in tl.merger().sources().iter().zip(func_bases(tl)) {
            for p in s.probes.iter().filter(usdt) {
                writeln!(f, "{}      {}", base as u64 + p.id as u64, clean(&p.name))?;
            }
        }
        writeln!(f, "\n\nEVENT_TYPE")?;
        for i in 0..tracer_abi::MAX_USDT_ARGS as u32 {
            writeln!(f, "0    {}    USDT argument {i}", EV_USDT_ARG + i)?;
        }
    }

    writeln!(
        f,
        "\n\nEVENT_TYPE\n9    {EV_SYSCALL}    System call\nVALUES"
    )?;
    writeln!(f, "0      End")?;
    for nr in 0..1024u32 {
        if let Some(name) = tracer_abi::syscalls::name(nr) {
            writeln!(f, "{}      {name}", nr + 1)?;
        }
    }

    writeln!(f, "\n\nEVENT_TYPE")?;
    writeln!(f, "0    {EV_BYTES_READ}    Bytes read")?;
    writeln!(f, "0    {EV_BYTES_WRITTEN}    Bytes written")?;
    writeln!(
        f,
        "\n\nEVENT_TYPE\n0    {EV_FD}    File descriptor (value - 1)\nVALUES"
    )?;
    writeln!(f, "0      End")?;

    writeln!(
        f,
        "\n\nEVENT_TYPE\n0    {EV_SOCKET_OP}    Socket operation\nVALUES"
    )?;
    writeln!(f, "0      End")?;
    for op in SockOp::ALL {
        writeln!(f, "{}      {}", op as u32, op.label())?;
    }

    writeln!(
        f,
        "\n\nEVENT_TYPE\n0    {EV_CONNECTION}    Connection\nVALUES"
    )?;
    writeln!(f, "0      End")?;
    writeln!(
        f,
        "\n\nEVENT_TYPE\n0    {EV_ACCEPTED}    Accepted connection"
    )?;
    writeln!(f, "\n\nEVENT_TYPE\n0    {EV_CPU}    Executing CPU")?;
    Ok(())
}
