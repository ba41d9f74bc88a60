//! A binary with its lazily built symbol index and DWARF context.

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::dwarf::DwarfCtx;
use crate::elf::{find_debug_file, ElfInfo, RawSym, SymbolIndex};
use crate::glob::{suggest, Matcher};
use crate::go::GoBinary;
use crate::nearest::NearestSymbols;
use crate::target::Located;
use crate::{probe, Error, Exit, Frame, FunctionMatch, Language};

pub(crate) struct Binary {
    pub elf: ElfInfo,
    pub debug: Option<ElfInfo>,
    root: PathBuf,
    symbols: OnceCell<SymbolIndex>,
    /// Names for addresses without a DWARF function, chosen like binutils;
    /// apart from `symbols`, whose alias ranking suits probe specs instead.
    nearest: OnceCell<NearestSymbols>,
    dwarf: OnceCell<Option<DwarfCtx>>,
    go: OnceCell<Option<GoBinary>>,
    /// Go function and file names by where their bytes are in the mapping,
    /// shared by every frame that names them.
    go_names: RefCell<HashMap<usize, Arc<str>>>,
}

impl Binary {
    /// Opens `open` (the path we can read) for a binary the target knows as `display`;
    /// `root` is the target's filesystem root for debug-file lookup.
    pub fn open(open: &Path, display: &str, root: &Path) -> Result<Binary, Error> {
        let elf = ElfInfo::open(open)?;
        Ok(Self::from_elf(elf, display, root))
    }

    pub fn from_elf(elf: ElfInfo, display: &str, root: &Path) -> Binary {
        let debug = if elf.has_symtab && elf.has_dwarf {
            None
        } else {
            find_debug_file(&elf, Path::new(display), root)
        };
        Binary {
            elf,
            debug,
            root: root.to_path_buf(),
            symbols: OnceCell::new(),
            nearest: OnceCell::new(),
            dwarf: OnceCell::new(),
            go: OnceCell::new(),
            go_names: RefCell::default(),
        }
    }

    /// Go facts, for a Go binary.
    pub fn go(&self) -> Option<&GoBinary> {
        self.go.get_or_init(|| GoBinary::load(&self.elf)).as_ref()
    }

    pub fn symbols(&self) -> &SymbolIndex {
        self.symbols.get_or_init(|| {
            let mut go_syms = Vec::new();
            if let Some(g) = self.go() {
                if let Ok(t) = &g.table {
                    let d = g.data(&self.elf);
                    go_syms.reserve(t.funcs.len());
                    for f in &t.funcs {
                        // A cgo binary's C functions: `.symtab`, when there is
                        // one, has their exact sizes.
                        if f.foreign && self.elf.has_symtab {
                            continue;
                        }
                        let Some(name) = t.name(d, f).filter(|n| !n.is_empty()) else {
                            continue;
                        };
                        go_syms.push(RawSym {
                            addr: f.entry,
                            size: f.end - f.entry,
                            raw: String::from_utf8_lossy(name).into_owned(),
                            rank: 0,
                        });
                    }
                }
            }
            SymbolIndex::build(&self.elf, self.debug.as_ref(), go_syms)
        })
    }

    /// The error to give for a Go binary whose table is unusable and that has
    /// no other symbols to name its functions.
    pub fn go_table_error(&self, display: &str) -> Option<Error> {
        let g = self.go()?;
        let reason = g.table.as_ref().err()?;
        Some(Error::GoTable {
            binary: display.to_string(),
            reason: reason.clone(),
        })
    }

    pub fn dwarf(&self) -> Option<&DwarfCtx> {
        self.dwarf
            .get_or_init(|| {
                let src = match &self.debug {
                    Some(d) if d.has_dwarf => d,
                    _ if self.elf.has_dwarf => &self.elf,
                    _ => return None,
                };
                DwarfCtx::load(src, &self.root)
            })
            .as_ref()
    }

    /// Indices of matching symbols, one per address (the best-ranked matching alias).
    pub fn find(&self, func: &str, is_glob: bool) -> Vec<usize> {
        let idx = self.symbols();
        let names = idx.names();
        let mut out: Vec<usize> = Vec::new();
        let m = is_glob.then(|| Matcher::new(func));
        for (i, s) in idx.syms.iter().enumerate() {
            let n = &names[i];
            let hit = if let Some(m) = &m {
                m.matches(&n.display)
                    || m.matches(&s.raw)
                    || (!n.no_params.is_empty() && m.matches(&n.no_params))
            } else {
                func == &*n.display
                    || func == s.raw
                    || (!n.full.is_empty() && func == n.full)
                    || (!n.no_params.is_empty() && func == n.no_params)
            };
            if hit {
                // Sorted by (addr, rank): the first hit at an address is the best alias.
                if out.last().is_some_and(|&j| idx.syms[j].addr == s.addr) {
                    continue;
                }
                out.push(i);
            }
        }
        out
    }

    pub fn suggest(&self, func: &str) -> Vec<String> {
        let names = self.symbols().names();
        suggest(func, names.iter().map(|n| &*n.display), 5)
    }

    pub fn function_match(
        &self,
        i: usize,
        loc: &Located,
        with_source: bool,
    ) -> Result<FunctionMatch, Error> {
        let idx = self.symbols();
        let s = &idx.syms[i];
        let name = idx.names()[i].display.to_string();
        let off = self
            .elf
            .vaddr_to_offset(s.addr)
            .ok_or_else(|| Error::NotLoadable {
                path: loc.open.clone(),
                func: name.clone(),
                addr: s.addr,
            })?;
        let (language, skipped, exit) = self.go_placement(s.addr, s.size, off);
        let mut p = probe::analyze(self.elf.bytes_at_offset(off + skipped, 16));
        p.skipped += skipped;
        let source = if with_source {
            self.dwarf()
                .and_then(|d| d.decl_source(s.addr))
                .or_else(|| self.go_source(s.addr))
        } else {
            None
        };
        Ok(FunctionMatch {
            name,
            symbol: s.raw.clone(),
            binary: loc.open.clone(),
            display_binary: loc.display.clone(),
            build_id: self.elf.build_id.clone(),
            address: s.addr,
            size: s.size,
            file_offset: off + p.skipped,
            skipped: p.skipped,
            source,
            warning: p.warning,
            language,
            exit,
        })
    }

    /// For a Go function: past its stack-bound check (see
    /// [`probe::go_prologue_end`]) and its RETs for exit probes.
    fn go_placement(&self, addr: u64, size: u64, off: u64) -> (Language, u64, Exit) {
        let Some(g) = self.go() else {
            return (Language::Native, 0, Exit::Uretprobe);
        };
        let version = g.version.as_deref().unwrap_or("of unknown version");
        let t = match &g.table {
            Ok(t) => t,
            // Cannot tell Go functions from C ones: refuse what could crash it.
            Err(e) => {
                return (
                    Language::Go,
                    0,
                    Exit::Refused(format!(
                        "Go binary ({version}) whose function table cannot be read: {e}"
                    )),
                )
            }
        };
        let Some(f) = t
            .find(addr)
            .map(|i| t.funcs[i])
            .filter(|f| f.entry == addr && !f.foreign)
        else {
            // C code linked into a cgo binary.
            return (Language::Native, 0, Exit::Uretprobe);
        };
        let code = self.elf.bytes_at_offset(off, size as usize);
        let skipped = probe::go_prologue_end(code, addr).unwrap_or(0);
        let exit = match (g.version_number(), t.version) {
            (Some((1, minor)), _) if minor < 17 => Exit::Refused(format!(
                "{version} binary: exit probes need Go 1.17 or later, whose register ABI keeps the goroutine in R14"
            )),
            (None, crate::go::GoPclnVersion::Go116) => Exit::Refused(
                "Go 1.16 or 1.17 binary without readable build info: exit probes need Go 1.17 or later, whose register ABI keeps the goroutine in R14".into(),
            ),
            _ if t.is_asm(g.data(&self.elf), &f) => Exit::Refused(
                "Go assembly function: the goroutine is not known to be in R14 at its returns".into(),
            ),
            _ if code.len() as u64 != size => Exit::Refused("its code is not all in the file".into()),
            _ => match probe::ret_offsets(code, addr) {
                Ok(rets) => Exit::Returns(rets.into_iter().map(|r| off + r).collect()),
                Err(e) => Exit::Refused(e),
            },
        };
        (Language::Go, skipped, exit)
    }

    /// "file:line" of a Go function's entry from its pclntab.
    fn go_source(&self, addr: u64) -> Option<String> {
        let g = self.go()?;
        let t = g.table.as_ref().ok()?;
        let f = t.funcs[t.find(addr)?];
        let (file, line) = t.file_line(g.data(&self.elf), &f, addr);
        Some(format!("{}:{line}", String::from_utf8_lossy(file?)))
    }

    /// Frames for an ELF virtual address; always at least one frame.
    pub fn symbolize(&self, vaddr: u64) -> Vec<Frame> {
        let dwarf = self.dwarf();
        if dwarf.is_none() {
            if let Some(g) = self.go() {
                let mut names = self.go_names.borrow_mut();
                let mut intern = |b: &[u8]| {
                    names
                        .entry(b.as_ptr() as usize)
                        .or_insert_with(|| String::from_utf8_lossy(b).into())
                        .clone()
                };
                if let Some(frames) = g.frames(&self.elf, vaddr, &mut intern) {
                    return frames;
                }
            }
        }
        let (mut frames, unlinked) = dwarf.map(|d| d.frames(vaddr)).unwrap_or_default();
        let nearest = || {
            self.nearest
                .get_or_init(|| NearestSymbols::build(&self.elf, self.debug.as_ref()))
        };
        if let (Some(die), Some(d)) = (unlinked, dwarf) {
            if let Some(low) = d.unlinked_low(vaddr, die) {
                if let (Some((name, start)), Some(inner)) =
                    (nearest().lookup_with_start(vaddr), frames.first_mut())
                {
                    if start == low {
                        inner.function = Some(name);
                    }
                }
            }
        }
        let needs_name = frames.last().is_none_or(|f| f.function.is_none());
        if needs_name {
            let name = nearest().lookup(vaddr);
            match frames.last_mut() {
                Some(f) => f.function = name,
                None => frames.push(Frame {
                    function: name,
                    file: None,
                    line: None,
                }),
            }
        }
        frames
    }
}
