//! Uprobes as tracefs uprobe events (`uprobe_events`), each opened as a tracepoint perf
//! event per traced process with `inherit`, so that the processes and threads it creates
//! later are probed from their first instruction, and linked to its program with the
//! function's id as the BPF cookie.
//!
//! Not the kernel's `uprobe` perf PMU: its events name the binary by a pointer into the
//! opener's memory, which an inherited copy reads again in the forking process, where it
//! means nothing: the target's `fork` fails with EFAULT. A tracefs event is named by its
//! id. The events live in a group of this recorder's own (`tracer_<pid>`), removed when it
//! stops; groups left by recorders that died are removed when the next one starts.

use std::{
    collections::HashMap,
    fs::OpenOptions,
    io::Write,
    os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
    path::{Path, PathBuf},
};

use anyhow::{anyhow, Context, Result};
use aya_obj::generated::{bpf_attach_type, bpf_attr, bpf_cmd, perf_event_attr, perf_type_id};

/// An attached probe: closing its descriptors detaches it, and its inherited copies.
pub struct Link {
    /// The perf event the program is linked through, and the link: for the event's first
    /// process only.
    _link: Option<(OwnedFd, OwnedFd)>,
    _event: OwnedFd,
}

/// A perf event of tracepoint `id` for process `pid`, inherited by the processes and
/// threads it creates when `inherit`.
fn open(id: u64, pid: u32, inherit: bool) -> std::io::Result<OwnedFd> {
    // SAFETY: a plain C struct, valid when zeroed.
    let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
    attr.size = std::mem::size_of::<perf_event_attr>() as u32;
    attr.type_ = perf_type_id::PERF_TYPE_TRACEPOINT as u32;
    attr.config = id;
    attr.set_inherit(inherit as u64);
    // SAFETY: perf_event_open reads `attr`.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const perf_event_attr,
            pid as libc::pid_t,
            -1 as libc::c_int,
            -1 as libc::c_int,
            aya_obj::generated::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        // ENOTSUPP, the kernel's own number, which libc has no words for.
        if e.raw_os_error() == Some(524) {
            return Err(std::io::Error::other(
                "the kernel cannot place a uprobe on the instruction there",
            ));
        }
        return Err(e);
    }
    // SAFETY: a descriptor just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Where a uprobe goes.
pub struct Point<'a> {
    /// The file (through the target's root).
    pub binary: &'a Path,
    /// Its offset in the file.
    pub offset: u64,
    /// A return probe.
    pub ret: bool,
    /// A USDT semaphore's file offset: the kernel raises it while the probe is attached.
    pub ref_ctr: Option<u64>,
}

/// An event's definition: (binary, offset, return, semaphore).
type EventKey = (PathBuf, u64, bool, Option<u64>);

/// This recorder's uprobe events, by (binary, offset, return, semaphore): their
/// tracepoint ids.
pub struct Events {
    tracefs: PathBuf,
    group: String,
    ids: HashMap<EventKey, (String, u64)>,
    /// Events whose program is linked: it runs for every process an event of it is open
    /// for, so it is linked once.
    linked: std::collections::HashSet<u64>,
}

impl Events {
    /// No events yet; stale groups of recorders that are gone are removed.
    pub fn new(tracefs: &Path) -> Events {
        remove_stale_groups(tracefs);
        Events {
            tracefs: tracefs.to_path_buf(),
            group: format!("tracer_{}", std::process::id()),
            ids: HashMap::new(),
            linked: Default::default(),
        }
    }

    /// The tracepoint id of the event at `at`, created on first use.
    fn id(&mut self, at: &Point) -> Result<u64> {
        let (binary, offset, ret) = (at.binary, at.offset, at.ret);
        let key = (binary.to_path_buf(), offset, ret, at.ref_ctr);
        if let Some((_, id)) = self.ids.get(&key) {
            return Ok(*id);
        }
        let path = binary
            .to_str()
            .filter(|p| !p.contains(char::is_whitespace))
            .ok_or_else(|| {
                anyhow!(
                    "cannot probe {}: uprobe events take paths without spaces",
                    binary.display()
                )
            })?;
        let name = format!("e{}", self.ids.len());
        let kind = if ret { 'r' } else { 'p' };
        let ref_ctr = at.ref_ctr.map(|r| format!("({r:#x})")).unwrap_or_default();
        let def = format!("{kind}:{}/{name} {path}:{offset:#x}{ref_ctr}\n", self.group);
        self.write(&def)
            .with_context(|| format!("defining a uprobe at {path}+{offset:#x}"))?;
        let id_file = self
            .tracefs
            .join("events")
            .join(&self.group)
            .join(&name)
            .join("id");
        let id = std::fs::read_to_string(&id_file)
            .with_context(|| format!("reading {}", id_file.display()))?
            .trim()
            .parse()
            .with_context(|| format!("{} is not a number", id_file.display()))?;
        self.ids.insert(key, (name, id));
        Ok(id)
    }

    fn write(&self, line: &str) -> std::io::Result<()> {
        OpenOptions::new()
            .append(true)
            .open(self.tracefs.join("uprobe_events"))?
            .write_all(line.as_bytes())
    }

    /// Attaches program `prog` at `at`, for process `pid` and, with `inherit`, every process and thread it creates from now
    /// on; `cookie` is what `bpf_get_attach_cookie` returns in the program.
    ///
    /// An event's programs are the kernel's for the event, not per perf event: they run for
    /// a hit in any process one of its perf events is open for. So the program is linked
    /// once, through a perf event of its own that is never inherited (a second link of it is
    /// refused), and the perf events of the processes only say which are probed. Linked
    /// through an inherited one, it would be unlinked from the event when the first process
    /// that inherited the perf event exits: the kernel hands the program to the copy and
    /// detaches it when the copy is freed.
    pub fn attach(
        &mut self,
        prog: BorrowedFd<'_>,
        at: &Point,
        pid: u32,
        inherit: bool,
        cookie: u64,
    ) -> Result<Link> {
        let (binary, offset) = (at.binary, at.offset);
        let id = self.id(at)?;
        let place = || {
            format!(
                "the uprobe at {}+{offset:#x} for process {pid}",
                binary.display()
            )
        };
        let event = open(id, pid, inherit).with_context(|| format!("opening {}", place()))?;
        let link = if self.linked.contains(&id) {
            None
        } else {
            let anchor = open(id, pid, false).with_context(|| format!("opening {}", place()))?;
            let link = link_create(prog, anchor.as_raw_fd(), cookie)
                .with_context(|| format!("attaching to {}", place()))?;
            self.linked.insert(id);
            Some((anchor, link))
        };
        Ok(Link {
            _link: link,
            _event: event,
        })
    }

    /// Removes the events; every [`Link`] to them must be closed first.
    pub fn remove(&mut self) {
        for (name, _) in self.ids.values() {
            let _ = self.write(&format!("-:{}/{name}\n", self.group));
        }
        self.ids.clear();
        self.linked.clear();
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Removes the uprobe events of recorders that are gone (killed before they could).
fn remove_stale_groups(tracefs: &Path) {
    let Ok(defs) = std::fs::read_to_string(tracefs.join("uprobe_events")) else {
        return;
    };
    let stale: Vec<String> = defs
        .lines()
        .filter_map(|l| {
            l.split_whitespace()
                .next()?
                .split_once(':')
                .map(|(_, n)| n.to_string())
        })
        .filter(|name| {
            name.strip_prefix("tracer_")
                .and_then(|rest| rest.split('/').next()?.parse::<u32>().ok())
                .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        })
        .collect();
    if stale.is_empty() {
        return;
    }
    let Ok(mut f) = OpenOptions::new()
        .append(true)
        .open(tracefs.join("uprobe_events"))
    else {
        return;
    };
    for name in stale {
        let _ = f.write_all(format!("-:{name}\n").as_bytes());
    }
}

/// `bpf(BPF_LINK_CREATE)` of `prog` to perf event `event`, with `cookie`.
fn link_create(prog: BorrowedFd<'_>, event: i32, cookie: u64) -> std::io::Result<OwnedFd> {
    // SAFETY: a plain C union, valid when zeroed.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the link_create member of a zeroed union.
    unsafe {
        let lc = &mut attr.link_create;
        lc.__bindgen_anon_1.prog_fd = prog.as_raw_fd() as u32;
        lc.__bindgen_anon_2.target_fd = event as u32;
        lc.attach_type = bpf_attach_type::BPF_PERF_EVENT as u32;
        lc.__bindgen_anon_3.perf_event.bpf_cookie = cookie;
    }
    // SAFETY: BPF_LINK_CREATE reads `attr`.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            bpf_cmd::BPF_LINK_CREATE as libc::c_long,
            &attr as *const bpf_attr,
            std::mem::size_of::<bpf_attr>(),
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        // ENOTSUPP, the kernel's own number, which libc has no words for.
        if e.raw_os_error() == Some(524) {
            return Err(std::io::Error::other(
                "the kernel cannot place a uprobe on the instruction there",
            ));
        }
        return Err(e);
    }
    // SAFETY: a descriptor just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
