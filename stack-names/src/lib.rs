//! Names the frames of a trace's stacks (`tracer record --stacks`), for every output that
//! shows them. User addresses go through the mapping that held them, as the trace recorded
//! it, to the file and then the symbolizer (DWARF lines and inlined frames, debug files
//! found by debuglink or build-id, ELF and Go symbol tables); addresses no file held by
//! the names the process's JIT gave them in its perf map (Java, Node), which the recorder
//! read while it ran and the trace carries; kernel addresses by the kernel symbols the
//! trace carries. An address none of these
//! names shows as hex with its module; so does one whose file is not the build the trace
//! recorded (another build-id: `module [other build]+0xOFFSET`).
#![warn(missing_docs)]

use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap;
use trace_file::StackDef;
use trace_merge::stacks::StackStore;

/// One named frame.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FrameName {
    /// The function, or `module+0xOFFSET` when unknown.
    pub function: String,
    /// Its source file and line, when known.
    pub file: Option<String>,
    /// The line.
    pub line: Option<u32>,
    /// Whether it is a kernel frame.
    pub kernel: bool,
}

impl FrameName {
    /// `file:line` when both are known.
    pub fn location(&self) -> Option<String> {
        Some(format!("{}:{}", self.file.as_deref()?, self.line?))
    }
}

/// Names frames, with caches: a trace names the same addresses over and over.
#[derive(Default)]
pub struct StackNames {
    sym: symbolizer::Symbolizer,
    user: FxHashMap<(u32, u32, u64), Vec<FrameName>>,
}

impl StackNames {
    /// Empty caches.
    pub fn new() -> Self {
        Self::default()
    }

    /// The frames of `stack` of file `source` (whose stacks `store` holds), outermost
    /// first: user frames (inlined ones expanded), then kernel frames. A stack whose user
    /// frames were cut short starts with a frame saying why: `[cut: REASON]`.
    pub fn frames(&mut self, store: &StackStore, source: u32, stack: &StackDef) -> Vec<FrameName> {
        let mut out = Vec::new();
        if let Some(why) = &stack.cut {
            out.push(FrameName {
                function: format!("[cut: {}]", trace_file::meta::cut_category(why)),
                ..FrameName::default()
            });
        }
        for &addr in stack.user.iter().rev() {
            let key = (source, stack.tgid, addr);
            if !self.user.contains_key(&key) {
                let named = self.user_frame(store, stack.tgid, addr);
                self.user.insert(key, named);
            }
            out.extend(self.user[&key].iter().cloned());
        }
        for &addr in stack.kernel.iter().rev() {
            let function = match store.kernel_symbol(addr) {
                Some(s) => s.name.clone(),
                None => format!("[kernel]+{addr:#x}"),
            };
            out.push(FrameName {
                function,
                kernel: true,
                ..FrameName::default()
            });
        }
        out
    }

    /// The frames at user address `addr` of process `tgid`, outermost first.
    fn user_frame(&mut self, store: &StackStore, tgid: u32, addr: u64) -> Vec<FrameName> {
        let hex = |module: &str, off: u64| {
            vec![FrameName {
                function: format!("{module}+{off:#x}"),
                ..FrameName::default()
            }]
        };
        let Some(m) = store.mapping(tgid, addr) else {
            return match store.jit_symbol(tgid, addr) {
                Some(s) => vec![FrameName {
                    function: s.name.clone(),
                    ..FrameName::default()
                }],
                None => hex("[unknown]", addr),
            };
        };
        let offset = (addr - m.start).wrapping_add(m.offset);
        let module = Path::new(&m.path)
            .file_name()
            .map_or(m.path.clone(), |n| n.to_string_lossy().into_owned());
        if !m.path.starts_with('/') {
            return hex(&module, addr - m.start);
        }
        let path = PathBuf::from(&m.path);
        // The file there now is another build than the one that ran (rebuilt since, or
        // another machine): its symbols would name the wrong code.
        if let (Some(want), Ok(Some(have))) = (&m.build_id, self.sym.build_id(&path)) {
            if *want != have {
                return hex(&format!("{module} [other build]"), offset);
            }
        }
        let frames = match self.sym.symbolize_offset(&path, offset) {
            Ok(Some(f)) if f.iter().any(|f| f.function.is_some()) => f,
            // A function no symbol names (a stripped binary's static one): by where it
            // starts, so that all its addresses count together.
            _ => match self.sym.function_start_offset(&path, offset) {
                Ok(Some(start)) => return hex(&module, start),
                _ => return hex(&module, offset),
            },
        };
        frames
            .iter()
            .rev()
            .map(|f| FrameName {
                function: match &f.function {
                    Some(n) => n.to_string(),
                    None => format!("{module}+{offset:#x}"),
                },
                file: f.file.as_deref().map(str::to_string),
                line: f.line,
                kernel: false,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace_file::{JitSymbol, KernelSymbol, StackTable};

    #[test]
    fn jit_code_by_the_names_carried_kernel_by_symbols_the_rest_in_hex() {
        let tgid = 7;
        let jit = |start: u64, end: u64, name: &str| JitSymbol {
            tgid,
            start,
            end,
            name: name.into(),
        };
        let mut store = StackStore::default();
        store.absorb(StackTable {
            kernel_symbols: vec![KernelSymbol {
                addr: 0xffff_0000,
                end: 0xffff_0100,
                name: "schedule".into(),
            }],
            jit_symbols: vec![jit(0x7f00_0000_1000, 0x7f00_0000_1040, "LazyCompile:*old")],
            ..Default::default()
        });
        // Compiled again at the same address: the later name; another process's: not
        // this one's.
        store.absorb(StackTable {
            jit_symbols: vec![
                jit(
                    0x7f00_0000_1000,
                    0x7f00_0000_1040,
                    "LazyCompile:*handle app.js:10",
                ),
                JitSymbol {
                    tgid: 8,
                    ..jit(0x1000, 0x2000, "other")
                },
            ],
            ..Default::default()
        });
        let stack = StackDef {
            id: 1,
            tgid,
            user: vec![0x7f00_0000_1010, 0x7f00_0000_1040, 0x1234],
            kernel: vec![0xffff_0010, 0xffff_0200],
            cut: Some("unwind: no unwind information".into()),
        };
        let names: Vec<String> = StackNames::new()
            .frames(&store, 0, &stack)
            .into_iter()
            .map(|f| f.function)
            .collect();
        assert_eq!(
            names,
            [
                "[cut: unwind]",
                "[unknown]+0x1234",
                "[unknown]+0x7f0000001040",
                "LazyCompile:*handle app.js:10",
                "[kernel]+0xffff0200",
                "schedule",
            ]
        );
    }

    #[test]
    fn a_file_of_another_build_is_not_used_to_name_frames() {
        let exe = std::env::current_exe().unwrap();
        let id = symbolizer::Symbolizer::new().build_id(&exe).unwrap();
        let name = |build_id: Option<String>| {
            let mut store = StackStore::default();
            store.absorb(StackTable {
                mappings: vec![trace_file::ProcessMappings {
                    tgid: 7,
                    at_ns: 0,
                    maps: vec![trace_file::Mapping {
                        start: 0x40_0000,
                        end: 0x80_0000,
                        offset: 0,
                        path: exe.display().to_string(),
                        build_id,
                    }],
                }],
                ..Default::default()
            });
            let stack = StackDef {
                id: 1,
                tgid: 7,
                user: vec![0x40_1000],
                ..Default::default()
            };
            StackNames::new().frames(&store, 0, &stack)[0]
                .function
                .clone()
        };
        assert!(name(Some("00ff".into())).contains("[other build]+0x1000"));
        assert!(!name(id.clone()).contains("[other build]"), "{id:?}");
        assert!(!name(None).contains("[other build]"));
    }
}
