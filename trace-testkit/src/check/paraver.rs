//! A conformance checker for Paraver traces: every rule of `paraver-format.md` (what
//! Paraver's reader rejects, and the writer conventions its tools expect), so tests can
//! hold any writer, ours or another, to them.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The file that breaks it.
    pub file: PathBuf,
    /// 1-based line, 0 for the file as a whole.
    pub line: usize,
    /// The rule and how it is broken.
    pub what: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.what)
    }
}

/// All broken rules found (the checker goes on after the first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violations(pub Vec<Violation>);

impl fmt::Display for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        for v in self.0.iter().take(20) {
            writeln!(f, "{v}")?;
        }
        if n > 20 {
            writeln!(f, "... and {} more", n - 20)?;
        }
        Ok(())
    }
}

impl std::error::Error for Violations {}

impl Violations {
    /// True when some violation's message contains `s` (for tests of negative cases).
    pub fn mentions(&self, s: &str) -> bool {
        self.0.iter().any(|v| v.what.contains(s))
    }
}

/// What a conformant trace contains.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// The header's end time.
    pub ftime: u64,
    /// Nodes of the resource model.
    pub nodes: usize,
    /// CPUs of all nodes.
    pub cpus: usize,
    /// Applications.
    pub appls: usize,
    /// Threads of all applications.
    pub threads: usize,
    /// State records.
    pub states: u64,
    /// Event records.
    pub events: u64,
    /// Communication records.
    pub comms: u64,
}

/// The process model of a header: per application, per task, (threads, node).
struct Model {
    ftime: u64,
    /// CPUs per node.
    node_cpus: Vec<u32>,
    appls: Vec<Vec<(u32, u32)>>,
}

impl Model {
    fn total_cpus(&self) -> u32 {
        self.node_cpus.iter().sum()
    }

    /// Node (1-based) of global CPU `cpu` (1-based).
    fn node_of_cpu(&self, cpu: u32) -> Option<u32> {
        let mut base = 0;
        for (i, &n) in self.node_cpus.iter().enumerate() {
            if cpu > base && cpu <= base + n {
                return Some(i as u32 + 1);
            }
            base += n;
        }
        None
    }

    /// (threads, node) of a task, when appl and task exist.
    fn task(&self, appl: u32, task: u32) -> Option<(u32, u32)> {
        let a = self.appls.get((appl as usize).checked_sub(1)?)?;
        a.get((task as usize).checked_sub(1)?).copied()
    }
}

/// Checks `STEM.prv`, `STEM.pcf` and `STEM.row` against every rule of
/// `paraver-format.md`.
pub fn check(stem: &Path) -> Result<CheckReport, Violations> {
    let mut v = Vec::new();
    let prv = path_with(stem, "prv");
    let pcf = path_with(stem, "pcf");
    let row = path_with(stem, "row");
    let mut report = CheckReport::default();
    let used = check_prv(&prv, &mut v, &mut report);
    if let Some((model, used)) = used {
        check_pcf(&pcf, &used, &mut v);
        check_row(&row, &model, &mut v);
    }
    if v.is_empty() {
        Ok(report)
    } else {
        Err(Violations(v))
    }
}

/// Checks that each thread's state records tile `[0, ftime]` exactly: the first begins
/// at 0, each begins where the previous ended, the last ends at the trace end.
pub fn check_tiling(stem: &Path) -> Result<(), Violations> {
    let prv = path_with(stem, "prv");
    let mut v = Vec::new();
    let viol = |line, what: String| Violation {
        file: prv.clone(),
        line,
        what,
    };
    let f = match File::open(&prv) {
        Ok(f) => f,
        Err(e) => return Err(Violations(vec![viol(0, e.to_string())])),
    };
    let mut lines = BufReader::new(f).lines();
    let header = match lines.next() {
        Some(Ok(h)) => h,
        _ => return Err(Violations(vec![viol(1, "no header".into())])),
    };
    let model = match parse_header(&header) {
        Ok(m) => m,
        Err(e) => return Err(Violations(vec![viol(1, e)])),
    };
    // Covered-until per (appl, task, thread).
    let mut upto: Vec<Vec<Vec<Option<u64>>>> = (model.appls.iter())
        .map(|a| a.iter().map(|&(n, _)| vec![None; n as usize]).collect())
        .collect();
    for (i, line) in lines.enumerate() {
        let Ok(line) = line else { break };
        let f: Vec<&str> = line.split(':').collect();
        if f.first() != Some(&"1") || f.len() != 8 {
            continue;
        }
        let n: Vec<u64> = f[1..].iter().filter_map(|x| x.parse().ok()).collect();
        if n.len() != 7 {
            continue;
        }
        let slot = (n[1] as usize).checked_sub(1).and_then(|a| {
            let t = upto.get_mut(a)?.get_mut((n[2] as usize).checked_sub(1)?)?;
            t.get_mut((n[3] as usize).checked_sub(1)?)
        });
        let Some(slot) = slot else { continue };
        let expect = slot.unwrap_or(0);
        if n[4] != expect {
            let what = format!(
                "thread {}.{}.{}: state begins at {} but the previous one ended at {expect}",
                n[1], n[2], n[3], n[4]
            );
            v.push(viol(i + 2, what));
        }
        *slot = Some(n[5].max(expect));
    }
    for (a, tasks) in upto.iter().enumerate() {
        for (t, threads) in tasks.iter().enumerate() {
            for (th, end) in threads.iter().enumerate() {
                if *end != Some(model.ftime) {
                    let what = format!(
                        "thread {}.{}.{}: states cover up to {:?}, not the trace end {}",
                        a + 1,
                        t + 1,
                        th + 1,
                        end,
                        model.ftime
                    );
                    v.push(viol(0, what));
                }
            }
        }
    }
    if v.is_empty() {
        Ok(())
    } else {
        Err(Violations(v))
    }
}

fn path_with(stem: &Path, ext: &str) -> PathBuf {
    let mut s = stem.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

/// Parses the first line of a .prv.
fn parse_header(line: &str) -> Result<Model, String> {
    let rest = line
        .strip_prefix("#Paraver (")
        .ok_or("header does not start with \"#Paraver (\"")?;
    let close = rest.find(')').ok_or("header date has no ')'")?;
    let rest = rest[close + 1..]
        .strip_prefix(':')
        .ok_or("no ':' after the header date")?;
    let (ftime_s, rest) = rest.split_once(':').ok_or("header ends after the date")?;
    let digits = ftime_s
        .strip_suffix("_ns")
        .or_else(|| ftime_s.strip_suffix("_ms"))
        .unwrap_or(ftime_s);
    let ftime: u64 = digits
        .parse()
        .map_err(|_| format!("bad end time {ftime_s:?}"))?;
    let mut p = Cursor { s: rest, pos: 0 };
    let nnodes = p.num()?;
    let mut node_cpus = Vec::new();
    if nnodes > 0 {
        p.expect('(')?;
        for i in 0..nnodes {
            if i > 0 {
                p.expect(',')?;
            }
            node_cpus.push(p.num()?);
        }
        p.expect(')')?;
    }
    p.expect(':')?;
    let nappl = p.num()?;
    if nappl == 0 {
        return Err("0 applications".into());
    }
    p.expect(':')?;
    let mut appls = Vec::new();
    for a in 0..nappl {
        if a > 0 {
            // Paraver's reader takes either ':' or ',' between applications.
            if !(p.eat(':') || p.eat(',')) {
                return Err(format!("expected ':' before application {}", a + 1));
            }
        }
        let ntasks = p.num()?;
        if ntasks == 0 {
            return Err(format!("application {} has 0 tasks", a + 1));
        }
        p.expect('(')?;
        let mut tasks = Vec::new();
        for t in 0..ntasks {
            if t > 0 {
                p.expect(',')?;
            }
            let threads = p.num()?;
            p.expect(':')?;
            let node = p.num()?;
            if threads == 0 {
                return Err(format!("task {}.{} has 0 threads", a + 1, t + 1));
            }
            if (nnodes == 0 && node != 0) || (nnodes > 0 && (node == 0 || node > nnodes)) {
                return Err(format!(
                    "task {}.{} is on node {node} of {nnodes}",
                    a + 1,
                    t + 1
                ));
            }
            tasks.push((threads, node));
        }
        p.expect(')')?;
        appls.push(tasks);
    }
    // An optional number of communicators may follow.
    if p.eat(',') {
        p.num()?;
    }
    if p.pos != p.s.trim_end().len() {
        return Err(format!(
            "unexpected {:?} at the end of the header",
            &p.s[p.pos..]
        ));
    }
    Ok(Model {
        ftime,
        node_cpus,
        appls,
    })
}

struct Cursor<'a> {
    s: &'a str,
    pos: usize,
}

impl Cursor<'_> {
    fn num(&mut self) -> Result<u32, String> {
        let rest = &self.s[self.pos..];
        let n = rest.bytes().take_while(u8::is_ascii_digit).count();
        let v = rest[..n]
            .parse()
            .map_err(|_| format!("expected a number at {:?}", rest))?;
        self.pos += n;
        Ok(v)
    }
    fn eat(&mut self, c: char) -> bool {
        if self.s[self.pos..].starts_with(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, c: char) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected {c:?} at {:?}", &self.s[self.pos..]))
        }
    }
}

/// States and event types a body uses.
struct Used {
    states: BTreeSet<u32>,
    types: BTreeSet<u32>,
}

fn check_prv(path: &Path, v: &mut Vec<Violation>, r: &mut CheckReport) -> Option<(Model, Used)> {
    let mut viol = |line, what: String| {
        v.push(Violation {
            file: path.to_path_buf(),
            line,
            what,
        })
    };
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) => {
            viol(0, e.to_string());
            return None;
        }
    };
    let mut lines = BufReader::new(f).lines();
    let header = match lines.next() {
        Some(Ok(h)) => h,
        _ => {
            viol(1, "empty file: no header".into());
            return None;
        }
    };
    let model = match parse_header(&header) {
        Ok(m) => m,
        Err(e) => {
            viol(1, e);
            return None;
        }
    };
    r.ftime = model.ftime;
    r.nodes = model.node_cpus.len();
    r.cpus = model.total_cpus() as usize;
    r.appls = model.appls.len();
    r.threads = model.appls.iter().flatten().map(|t| t.0 as usize).sum();
    let mut used = Used {
        states: BTreeSet::new(),
        types: BTreeSet::new(),
    };
    let mut prev: Option<(u64, u8)> = None;
    let mut events_at: HashSet<(u32, u32, u32)> = HashSet::new();
    let mut records = 0u64;
    let total_cpus = model.total_cpus();
    for (i, line) in lines.enumerate() {
        let ln = i + 2;
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                viol(ln, e.to_string());
                break;
            }
        };
        if line.contains("new format") {
            viol(
                ln,
                "a \"new format\" line switches the reader to another syntax".into(),
            );
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(':').collect();
        let rank = match f[0] {
            "1" => 2u8,
            "2" => 1,
            "3" => 0,
            "4" => continue,
            other => {
                viol(ln, format!("unknown record type {other:?}"));
                continue;
            }
        };
        if f.iter().any(|x| x.starts_with('-')) && rank != 1 {
            viol(ln, "negative field (time, index or size)".into());
            continue;
        }
        let expected_len = match rank {
            2 => Some(8),
            0 => Some(15),
            _ => None,
        };
        if let Some(n) = expected_len {
            if f.len() != n {
                viol(ln, format!("{} fields instead of {n}", f.len()));
                continue;
            }
        } else if f.len() < 8 || !(f.len() - 6).is_multiple_of(2) {
            viol(
                ln,
                "event record needs type:value pairs (odd count or none)".into(),
            );
            continue;
        }
        let num = |s: &str| s.parse::<u64>().ok();
        let ids: Option<Vec<u64>> = f[1..6].iter().map(|s| num(s)).collect();
        let Some(ids) = ids else {
            viol(ln, "non-numeric or negative field".into());
            continue;
        };
        let (cpu, appl, task, thread, time) = (ids[0], ids[1], ids[2], ids[3], ids[4]);
        if !check_object(&model, cpu, appl, task, thread, total_cpus, ln, &mut viol) {
            continue;
        }
        records += 1;
        if time > model.ftime {
            viol(
                ln,
                format!("time {time} after the trace end {}", model.ftime),
            );
        }
        if let Some(p) = prev {
            if (time, rank) < p {
                viol(
                    ln,
                    format!(
                        "not sorted: time {time} (tie rank {rank}) after time {} (rank {})",
                        p.0, p.1
                    ),
                );
            }
            if time != p.0 {
                events_at.clear();
            }
        }
        prev = Some((time, rank));
        match rank {
            2 => {
                let (Some(end), Some(state)) = (num(f[6]), f[7].parse::<u32>().ok()) else {
                    viol(ln, "bad state end or value".into());
                    continue;
                };
                if end <= time {
                    viol(ln, format!("empty state: begin {time} >= end {end}"));
                }
                if end > model.ftime {
                    viol(ln, format!("state ends at {end}, after the trace end"));
                }
                used.states.insert(state);
                r.states += 1;
            }
            1 => {
                if !events_at.insert((appl as u32, task as u32, thread as u32)) {
                    viol(
                        ln,
                        format!(
                            "second event line for thread {appl}.{task}.{thread} at {time}: \
                             events of one thread at one time must share a line"
                        ),
                    );
                }
                for pair in f[6..].chunks(2) {
                    match (pair[0].parse::<u32>(), pair[1].parse::<i64>()) {
                        (Ok(t), Ok(_)) => {
                            used.types.insert(t);
                        }
                        _ => viol(ln, format!("bad type/value {}:{}", pair[0], pair[1])),
                    }
                }
                r.events += 1;
            }
            _ => {
                let ids: Option<Vec<u64>> = f[6..13].iter().map(|s| num(s)).collect();
                let sizes = (f[13].parse::<i64>(), f[14].parse::<i64>());
                let (Some(ids), (Ok(_), Ok(_))) = (ids, sizes) else {
                    viol(ln, "bad communication field".into());
                    continue;
                };
                let (psend, rcpu, rappl, rtask, rthread, lrecv, precv) =
                    (ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[6]);
                if !check_object(
                    &model, rcpu, rappl, rtask, rthread, total_cpus, ln, &mut viol,
                ) {
                    continue;
                }
                if psend < time {
                    viol(ln, "physical send before logical send".into());
                }
                if lrecv < time || precv < psend {
                    viol(ln, "received before sent".into());
                }
                if lrecv.max(precv).max(psend) > model.ftime {
                    viol(ln, "communication after the trace end".into());
                }
                r.comms += 1;
            }
        }
    }
    if records == 0 {
        viol(0, "body has no records".into());
    }
    Some((model, used))
}

/// The rules on (cpu, appl, task, thread) that make Paraver's reader drop a record.
#[allow(clippy::too_many_arguments)]
fn check_object(
    model: &Model,
    cpu: u64,
    appl: u64,
    task: u64,
    thread: u64,
    total_cpus: u32,
    ln: usize,
    viol: &mut impl FnMut(usize, String),
) -> bool {
    if cpu > u16::MAX as u64 || thread > u16::MAX as u64 {
        viol(ln, "CPU or thread index above 65535".into());
        return false;
    }
    if cpu > total_cpus as u64 {
        viol(ln, format!("cpu {cpu} but the trace has {total_cpus} CPUs"));
        return false;
    }
    let Some((threads, node)) = model.task(appl as u32, task as u32) else {
        viol(
            ln,
            format!("no application {appl} task {task} in the header"),
        );
        return false;
    };
    if thread == 0 || thread > threads as u64 {
        viol(
            ln,
            format!("thread {thread} in task {appl}.{task} of {threads} threads"),
        );
        return false;
    }
    if cpu != 0 && model.node_of_cpu(cpu as u32) != Some(node) {
        viol(
            ln,
            format!("cpu {cpu} is not on node {node} of task {appl}.{task}"),
        );
        return false;
    }
    true
}

const PCF_SECTIONS: [&str; 7] = [
    "DEFAULT_OPTIONS",
    "DEFAULT_SEMANTIC",
    "STATES",
    "STATES_COLOR",
    "EVENT_TYPE",
    "GRADIENT_COLOR",
    "GRADIENT_NAMES",
];

fn check_pcf(path: &Path, used: &Used, v: &mut Vec<Violation>) {
    let mut viol = |line, what: String| {
        v.push(Violation {
            file: path.to_path_buf(),
            line,
            what,
        })
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return viol(0, e.to_string()),
    };
    let mut section = "";
    let mut in_values = false;
    let mut seen = BTreeSet::new();
    let mut states = BTreeSet::new();
    let mut colours = BTreeSet::new();
    let mut types = BTreeSet::new();
    for (i, raw) in text.lines().enumerate() {
        let ln = i + 1;
        let line = raw.replace('\t', " ");
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            if line.is_empty() && section == "EVENT_TYPE" {
                in_values = false;
            }
            continue;
        }
        if let Some(s) = PCF_SECTIONS.iter().find(|s| **s == line) {
            section = s;
            in_values = false;
            seen.insert(*s);
            continue;
        }
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        match section {
            "STATES" => match first.parse::<u32>() {
                Ok(n) if words.next().is_some() => {
                    states.insert(n);
                }
                _ => viol(ln, format!("bad STATES line {line:?}")),
            },
            "STATES_COLOR" => {
                let rest = line[first.len()..].trim();
                let ok = rest.starts_with('{')
                    && rest.ends_with('}')
                    && rest[1..rest.len() - 1]
                        .split(',')
                        .filter(|c| c.trim().parse::<u8>().is_ok())
                        .count()
                        == 3;
                match first.parse::<u32>() {
                    Ok(n) if ok => {
                        colours.insert(n);
                    }
                    _ => viol(ln, format!("bad STATES_COLOR line {line:?}")),
                }
            }
            "EVENT_TYPE" if line == "VALUES" => in_values = true,
            "EVENT_TYPE"
                if in_values && (first.parse::<i64>().is_err() || words.next().is_none()) =>
            {
                viol(ln, format!("bad VALUES line {line:?}"));
            }
            "EVENT_TYPE" if in_values => {}
            "EVENT_TYPE" => {
                let ty = words.next().and_then(|t| t.parse::<u32>().ok());
                match (first.parse::<u32>(), ty, words.next()) {
                    (Ok(_), Some(t), Some(_)) => {
                        types.insert(t);
                    }
                    _ => viol(
                        ln,
                        format!("bad EVENT_TYPE line {line:?} (want: gradient type label)"),
                    ),
                }
            }
            "" => viol(ln, format!("text outside any section: {line:?}")),
            _ => {}
        }
    }
    for s in ["DEFAULT_OPTIONS", "STATES", "STATES_COLOR"] {
        if !seen.contains(s) {
            viol(0, format!("no {s} section"));
        }
    }
    for s in &used.states {
        if !states.contains(s) {
            viol(0, format!("state {s} is used but has no label in STATES"));
        }
        if !colours.contains(s) {
            viol(
                0,
                format!("state {s} is used but has no colour in STATES_COLOR"),
            );
        }
    }
    for t in &used.types {
        if !types.contains(t) {
            viol(
                0,
                format!("event type {t} is used but not declared in EVENT_TYPE"),
            );
        }
    }
}

fn check_row(path: &Path, model: &Model, v: &mut Vec<Violation>) {
    let mut viol = |line, what: String| {
        v.push(Violation {
            file: path.to_path_buf(),
            line,
            what,
        })
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return viol(0, e.to_string()),
    };
    let tasks: usize = model.appls.iter().map(Vec::len).sum();
    let threads: usize = model.appls.iter().flatten().map(|t| t.0 as usize).sum();
    let mut lines = text.lines().enumerate().peekable();
    let mut levels = BTreeSet::new();
    while let Some((i, line)) = lines.next() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        let (level, size) = match w.as_slice() {
            ["LEVEL", level, "SIZE", n] => match n.parse::<usize>() {
                Ok(n) => (*level, n),
                Err(_) => {
                    viol(i + 1, format!("bad size in {line:?}"));
                    continue;
                }
            },
            _ => {
                viol(
                    i + 1,
                    format!("expected \"LEVEL <name> SIZE <n>\", got {line:?}"),
                );
                continue;
            }
        };
        let expected = match level {
            "CPU" => Some(model.total_cpus() as usize),
            "NODE" => Some(model.node_cpus.len()),
            "APPL" => Some(model.appls.len()),
            "TASK" => Some(tasks),
            "THREAD" => Some(threads),
            "WORKLOAD" | "SYSTEM" => None,
            other => {
                viol(i + 1, format!("unknown level {other:?}"));
                None
            }
        };
        levels.insert(level.to_string());
        if let Some(e) = expected {
            if e != size {
                viol(
                    i + 1,
                    format!("LEVEL {level} SIZE {size}, but the trace has {e}"),
                );
            }
        }
        let mut labels = 0;
        while labels < size {
            match lines.peek() {
                Some((_, l)) if !l.trim().is_empty() && !l.starts_with("LEVEL ") => {
                    labels += 1;
                    lines.next();
                }
                _ => break,
            }
        }
        if labels != size {
            viol(
                i + 1,
                format!("LEVEL {level} has {labels} labels, not {size}"),
            );
        }
    }
    if !levels.contains("THREAD") {
        viol(0, "no LEVEL THREAD block (thread names)".into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_grammar() {
        let m = parse_header("#Paraver (20/05/2025 at 14:03):1500000_ns:1(4):1:1(3:1)").unwrap();
        assert_eq!(
            (m.ftime, m.node_cpus.clone(), m.appls.clone()),
            (1500000, vec![4], vec![vec![(3, 1)]])
        );
        let m = parse_header("#Paraver (x):10:2(2,4):2:1(3:1):2(1:2,2:2),3").unwrap();
        assert_eq!(m.appls, vec![vec![(3, 1)], vec![(1, 2), (2, 2)]]);
        assert_eq!(m.node_of_cpu(3), Some(2));
        let m = parse_header("#Paraver (x):10:0:1:1(1:0)").unwrap();
        assert!(m.node_cpus.is_empty());
        for bad in [
            "Paraver (x):10:1(4):1:1(3:1)",
            "#Paraver (x):10:1(4):0:1(3:1)",
            "#Paraver (x):10:1(4):1:0()",
            "#Paraver (x):10:1(4):1:1(0:1)",
            "#Paraver (x):10:1(4):1:1(3:2)",
            "#Paraver (x):10:1(4):1:1(3:0)",
            "#Paraver (x):abc:1(4):1:1(3:1)",
            "#Paraver (x):10:1(4):2:1(3:1)",
            "#Paraver (x):10:1(4):1:1(3:1)junk",
        ] {
            assert!(parse_header(bad).is_err(), "{bad}");
        }
    }
}
