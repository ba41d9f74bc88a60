//! Where binaries are: /proc/PID (exe, maps, root) or an executable's DT_NEEDED.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::elf::ElfInfo;
use crate::{Error, Target};

/// One file-backed line of /proc/PID/maps.
#[derive(Clone, Debug)]
pub(crate) struct MapEntry {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    /// Path as the process sees it, or a pseudo name like `[vdso]`.
    pub path: String,
    pub deleted: bool,
}

pub(crate) fn proc_dir(pid: u32) -> Result<PathBuf, Error> {
    let dir = PathBuf::from(format!("/proc/{pid}"));
    if pid == 0 || !dir.join("stat").exists() {
        return Err(Error::NoSuchProcess(pid));
    }
    Ok(dir)
}

pub(crate) fn read_maps(pid: u32) -> Result<Vec<MapEntry>, Error> {
    let path = proc_dir(pid)?.join("maps");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::NoSuchProcess(pid)
        } else {
            Error::io(&path, e)
        }
    })?;
    Ok(text.lines().filter_map(parse_maps_line).collect())
}

fn parse_maps_line(line: &str) -> Option<MapEntry> {
    // start-end perms offset dev inode   path (path may contain spaces)
    let mut rest = line;
    let mut fields = Vec::with_capacity(5);
    for _ in 0..5 {
        rest = rest.trim_start();
        let end = rest.find(' ').unwrap_or(rest.len());
        fields.push(&rest[..end]);
        rest = &rest[end..];
    }
    let path = rest.trim_start();
    if path.is_empty() {
        return None;
    }
    let (start, end) = fields[0].split_once('-')?;
    let (path, deleted) = match path.strip_suffix(" (deleted)") {
        Some(p) => (p, true),
        None => (path, false),
    };
    Some(MapEntry {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        offset: u64::from_str_radix(fields[2], 16).ok()?,
        path: path.to_string(),
        deleted,
    })
}

/// Path through which the tracer can open `display` as seen by `pid`.
pub(crate) fn host_path(pid: u32, display: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/root{display}"))
}

/// The path to open for the file process `pid` maps at `m`: through the process's root,
/// as it names the file; through the mapping itself where that name does not lead to it:
/// a file deleted or replaced since, or a process that entered a chroot after mapping it
/// (its maps name the file from the recorder's root, which its own root is not).
pub(crate) fn mapped_path(pid: u32, m: &MapEntry) -> PathBuf {
    let via_root = host_path(pid, &m.path);
    if !m.deleted && via_root.exists() {
        return via_root;
    }
    PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end))
}

/// A binary as (path we open, path the target sees).
#[derive(Clone, Debug)]
pub(crate) struct Located {
    pub open: PathBuf,
    pub display: String,
}

/// The executable and the libraries that go with a target.
pub(crate) struct Scope {
    pub root: PathBuf,
    pub main: Located,
    pid: Option<u32>,
    exe_elf_needed: Option<(Vec<String>, Vec<String>)>,
    libs: OnceLock<Vec<Located>>,
}

impl Scope {
    pub fn new(target: &Target) -> Result<Scope, Error> {
        match target {
            Target::Pid(pid) => {
                let dir = proc_dir(*pid)?;
                let exe = std::fs::read_link(dir.join("exe")).map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => Error::NoExecutable(*pid),
                    _ => Error::io(&dir.join("exe"), e),
                })?;
                let exe = exe.to_string_lossy().into_owned();
                let (display, deleted) = match exe.strip_suffix(" (deleted)") {
                    Some(p) => (p.to_string(), true),
                    None => (exe, false),
                };
                let via_root = host_path(*pid, &display);
                // A replaced or deleted executable is only reachable through the exe link.
                let open = if !deleted && via_root.exists() {
                    via_root
                } else {
                    dir.join("exe")
                };
                Ok(Scope {
                    root: dir.join("root"),
                    main: Located { open, display },
                    pid: Some(*pid),
                    exe_elf_needed: None,
                    libs: OnceLock::new(),
                })
            }
            Target::Path(p) => {
                let mut abs = if p.is_absolute() {
                    p.clone()
                } else {
                    std::env::current_dir()
                        .map(|d| d.join(p))
                        .unwrap_or_else(|_| p.clone())
                };
                // `tracer record -- ls`: a bare command name is looked up like exec does.
                if !abs.exists() && p.components().count() == 1 {
                    if let Some(found) = search_path(p) {
                        abs = found;
                    }
                }
                if !abs.exists() {
                    return Err(Error::io(
                        &abs,
                        std::io::Error::from(std::io::ErrorKind::NotFound),
                    ));
                }
                // A script runs as its interpreter, whose files are the ones probed.
                for _ in 0..4 {
                    match interpreter(&abs) {
                        Some(i) => abs = i,
                        None => break,
                    }
                }
                let elf = ElfInfo::open(&abs)?;
                Ok(Scope {
                    root: PathBuf::from("/"),
                    main: Located {
                        open: abs.clone(),
                        display: abs.to_string_lossy().into_owned(),
                    },
                    pid: None,
                    exe_elf_needed: Some((elf.needed.clone(), elf.runpath.clone())),
                    libs: OnceLock::new(),
                })
            }
        }
    }

    /// Who we are looking at, for messages.
    pub fn describe(&self) -> String {
        match self.pid {
            Some(pid) => format!("process {pid}"),
            None => self.main.display.clone(),
        }
    }

    /// Libraries of the target: mapped ones for a process, DT_NEEDED closure for a file.
    pub fn libs(&self) -> &[Located] {
        self.libs.get_or_init(|| match self.pid {
            Some(pid) => {
                let mut seen = HashSet::new();
                read_maps(pid)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|m| m.path.starts_with('/') && m.path != self.main.display)
                    .filter(|m| seen.insert(m.path.clone()))
                    .map(|m| Located {
                        open: mapped_path(pid, &m),
                        display: m.path,
                    })
                    .collect()
            }
            None => {
                let (needed, runpath) = self.exe_elf_needed.clone().unwrap_or_default();
                needed_closure(Path::new(&self.main.display), needed, runpath)
            }
        })
    }

    /// The first of the program's files (the executable, then its libraries) of which
    /// `says` (told whether the file is the executable) says something, as `FILE SAYS`
    /// for a message.
    fn first_file(&self, says: impl Fn(&ElfInfo, bool) -> Option<String>) -> Option<String> {
        std::iter::once(&self.main)
            .chain(self.libs())
            .enumerate()
            .find_map(|(i, l)| {
                Some(format!(
                    "{} {}",
                    l.display,
                    says(&ElfInfo::open(&l.open).ok()?, i == 0)?
                ))
            })
    }

    /// Whether the program switches stacks itself (see `return_hazards`): which of its
    /// files imports or defines which switching function, for a message.
    pub fn switches_stacks(&self) -> Option<String> {
        self.first_file(|elf, main| {
            let (function, how) = crate::return_hazards::switch_of(elf, main)?;
            Some(format!("{how} {function}"))
        })
    }

    /// Whether the program throws exceptions (see `return_hazards`): which of its files
    /// imports which throwing function, for a message.
    pub fn throws(&self) -> Option<String> {
        self.first_file(crate::return_hazards::thrower_of)
    }

    /// Whether the process maps `l` now (a library found otherwise is probed where it is
    /// loaded later).
    pub fn maps(&self, l: &Located) -> bool {
        self.libs().iter().any(|m| m.display == l.display)
    }

    /// Finds a library by path or short name (`libc`, `libssl.so.3`).
    pub fn find_lib(&self, name: &str) -> Result<Located, Error> {
        if name.contains('/') {
            if let Some(l) = self.libs().iter().find(|l| l.display == name) {
                return Ok(l.clone());
            }
            // Not mapped (yet): a uprobe on the file still fires once it is.
            let open = match self.pid {
                Some(pid) => host_path(pid, name),
                None => PathBuf::from(name),
            };
            if open.is_file() {
                return Ok(Located {
                    open,
                    display: name.to_string(),
                });
            }
            return Err(Error::LibraryNotFound {
                lib: name.to_string(),
                target: self.describe(),
                available: Vec::new(),
            });
        }
        let wanted = LibName::new(name);
        let hits: Vec<&Located> = self
            .libs()
            .iter()
            .filter(|l| wanted.matches(&l.display))
            .collect();
        let mut uniq: Vec<&Located> = Vec::new();
        for h in hits {
            if !uniq
                .iter()
                .any(|u| basename(&u.display) == basename(&h.display))
            {
                uniq.push(h);
            }
        }
        match uniq.len() {
            0 => {
                // A process that does not load it (yet), as a server's master does not
                // load what its workers do: the system's library, which a uprobe on the
                // file probes in the processes that load it.
                if let Ok(Some(file)) = system_library(name) {
                    let display = file.to_string_lossy().into_owned();
                    let open = match self.pid {
                        Some(pid) => host_path(pid, &display),
                        None => file,
                    };
                    if open.is_file() {
                        return Ok(Located { open, display });
                    }
                }
                Err(Error::LibraryNotFound {
                    lib: name.to_string(),
                    target: self.describe(),
                    available: (self.libs().iter())
                        .map(|l| basename(&l.display).to_string())
                        .filter(|b| b.contains(".so"))
                        .collect(),
                })
            }
            1 => Ok(uniq[0].clone()),
            _ => {
                // An exact basename wins over prefix matches (`libssl` vs `libssl3`).
                if let Some(exact) = uniq.iter().find(|l| basename(&l.display) == name) {
                    return Ok((*exact).clone());
                }
                Err(Error::AmbiguousLibrary {
                    lib: name.to_string(),
                    candidates: uniq.iter().map(|l| l.display.clone()).collect(),
                })
            }
        }
    }
}

/// The program a script names on its `#!` line (through `env`, as `#!/usr/bin/env
/// python3` does, looked up in `PATH`), the process that runs it; `None` for a file that
/// is not a script.
fn interpreter(script: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(script).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&b| b == b'\n')?];
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let program = PathBuf::from(words.next()?);
    if program.file_name() != Some(std::ffi::OsStr::new("env")) {
        return Some(program);
    }
    // `env [-S] [NAME=VALUE...] PROGRAM`: the first word that is neither.
    let name = words.find(|w| !w.starts_with('-') && !w.contains('='))?;
    search_path(Path::new(name))
}

fn search_path(name: &Path) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|c| c.is_file())
}

pub(crate) fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// A library as a user names it: `libc` matches `libc.so.6` and `libc-2.31.so`;
/// `libssl.so` matches `libssl.so.3`; a glob (`libevent*`) matches the file names it
/// matches. Made once per name, since a glob compiles to an automaton.
pub(crate) struct LibName {
    query: String,
    glob: Option<crate::glob::Matcher>,
}

impl LibName {
    pub(crate) fn new(query: &str) -> LibName {
        LibName {
            query: query.to_string(),
            glob: crate::glob::is_glob(query).then(|| crate::glob::Matcher::new(query)),
        }
    }

    pub(crate) fn matches(&self, path: &str) -> bool {
        let base = basename(path);
        let query = self.query.as_str();
        if base == query {
            return true;
        }
        if let Some(glob) = &self.glob {
            return glob.matches(base);
        }
        let with_lib = if query.starts_with("lib") {
            None
        } else {
            Some(format!("lib{query}"))
        };
        std::iter::once(query)
            .chain(with_lib.as_deref())
            .any(|q| match base.strip_prefix(q) {
                Some(rest) => {
                    rest.starts_with(".so")
                        || (rest.starts_with('-') && rest.contains(".so"))
                        || (rest.starts_with('.') && q.contains(".so"))
                }
                None => false,
            })
    }
}

fn ldconfig_cache() -> &'static Vec<(String, String)> {
    static CACHE: OnceLock<Vec<(String, String)>> = OnceLock::new();
    CACHE.get_or_init(|| {
        let out = ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]
            .iter()
            .find_map(|c| std::process::Command::new(c).arg("-p").output().ok());
        let Some(out) = out else { return Vec::new() };
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                // "\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6"
                let (lhs, path) = l.trim().split_once(" => ")?;
                let name = lhs.split_whitespace().next()?;
                // Only 64-bit entries are loadable by our 64-bit targets.
                if !lhs.contains("x86-64")
                    && !lhs.contains("64bit")
                    && cfg!(target_pointer_width = "64")
                {
                    return None;
                }
                Some((name.to_string(), path.to_string()))
            })
            .collect()
    })
}

const STD_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
    "/usr/local/lib",
];

/// The files of the standard directories, listed once: a tracer resolves many names.
fn std_dir_files() -> &'static Vec<PathBuf> {
    static FILES: OnceLock<Vec<PathBuf>> = OnceLock::new();
    FILES.get_or_init(|| {
        (STD_DIRS.iter())
            .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten())
            .map(|e| e.path())
            .collect()
    })
}

/// A library named on its own (`libc`, `libssl.so.3`), with no process or executable
/// whose libraries to look among (`tracer probes 'libc:mallo*'`), where the dynamic loader
/// would find it for any program: in ldconfig's cache, else in the standard directories. `Ok(None)`
/// when there is none; several different files that match are ambiguous unless one is
/// named exactly.
pub fn system_library(name: &str) -> Result<Option<PathBuf>, Error> {
    let wanted = LibName::new(name);
    let mut found: Vec<PathBuf> = ldconfig_cache()
        .iter()
        .filter(|(n, _)| wanted.matches(n))
        .map(|(_, p)| PathBuf::from(p))
        .collect();
    if found.is_empty() {
        // Outside the cache, development links and linker scripts (`libc.so`) sit beside
        // the libraries: only ELF files count.
        found.extend(
            std_dir_files()
                .iter()
                .filter(|p| wanted.matches(&p.to_string_lossy()) && is_elf(p))
                .cloned(),
        );
    }
    // Several names (a soname and its development link, /lib and /usr/lib) for one file.
    let mut files: Vec<(PathBuf, PathBuf)> = Vec::new();
    for p in found {
        let real = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
        if !files.iter().any(|(_, r)| *r == real) {
            files.push((p, real));
        }
    }
    match files.len() {
        0 => Ok(None),
        1 => Ok(Some(files.swap_remove(0).0)),
        _ => match files
            .iter()
            .find(|(p, _)| basename(&p.to_string_lossy()) == name)
        {
            Some((p, _)) => Ok(Some(p.clone())),
            None => Err(Error::AmbiguousLibrary {
                lib: name.to_string(),
                candidates: files.iter().map(|(p, _)| p.display().to_string()).collect(),
            }),
        },
    }
}

fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

fn search_lib(name: &str, origin: &Path, runpath: &[String]) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.is_file().then_some(p);
    }
    let origin_s = origin.to_string_lossy();
    let mut dirs: Vec<String> = runpath
        .iter()
        .map(|d| {
            d.replace("$ORIGIN", &origin_s)
                .replace("${ORIGIN}", &origin_s)
        })
        .collect();
    if let Ok(llp) = std::env::var("LD_LIBRARY_PATH") {
        dirs.extend(llp.split(':').filter(|d| !d.is_empty()).map(String::from));
    }
    for d in &dirs {
        let p = Path::new(d).join(name);
        if p.is_file() {
            return Some(p);
        }
    }
    if let Some((_, p)) = ldconfig_cache().iter().find(|(n, _)| n == name) {
        return Some(PathBuf::from(p));
    }
    STD_DIRS
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// Resolves DT_NEEDED transitively the way ld.so would (minus hwcaps subtleties).
fn needed_closure(exe: &Path, needed: Vec<String>, runpath: Vec<String>) -> Vec<Located> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let exe_dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut queue: std::collections::VecDeque<(String, PathBuf, Vec<String>)> = needed
        .into_iter()
        .map(|n| (n, exe_dir.clone(), runpath.clone()))
        .collect();
    while let Some((name, origin, rp)) = queue.pop_front() {
        if !seen.insert(name.clone()) || out.len() > 512 {
            continue;
        }
        let Some(path) = search_lib(&name, &origin, &rp) else {
            continue;
        };
        if let Ok(elf) = ElfInfo::open(&path) {
            let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
            for n in elf.needed {
                queue.push_back((n, dir.clone(), elf.runpath.clone()));
            }
        }
        out.push(Located {
            display: path.to_string_lossy().into_owned(),
            open: path,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib_matches(query: &str, path: &str) -> bool {
        LibName::new(query).matches(path)
    }

    #[test]
    fn lib_names() {
        assert!(lib_matches("libc", "/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(lib_matches("c", "/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(!lib_matches("libc", "/usr/lib/libcrypto.so.3"));
        assert!(lib_matches("libssl.so.3", "/usr/lib/libssl.so.3"));
        assert!(lib_matches("libssl.so", "/usr/lib/libssl.so.3"));
        assert!(lib_matches("libc", "/lib/libc-2.31.so"));
        assert!(lib_matches("libevent*", "/usr/lib/libevent-2.1.so.7.0.1"));
        assert!(lib_matches(
            "libev?nt-*.so*",
            "/usr/lib/libevent-2.1.so.7.0.1"
        ));
        assert!(!lib_matches("libevent*", "/usr/lib/libc.so.6"));
    }

    #[test]
    fn maps_line() {
        let m = parse_maps_line(
            "7f0000000000-7f0000021000 r-xp 00002000 08:01 1234      /usr/lib/my lib.so (deleted)",
        )
        .unwrap();
        assert_eq!(m.start, 0x7f0000000000);
        assert_eq!(m.offset, 0x2000);
        assert_eq!(m.path, "/usr/lib/my lib.so");
        assert!(m.deleted);
        assert!(parse_maps_line("7f0000000000-7f0000021000 rw-p 00000000 00:00 0").is_none());
    }
}
