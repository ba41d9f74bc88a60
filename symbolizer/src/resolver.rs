//! Probe specs resolved to functions, and listings: a [`Resolver`] keeps the binaries it
//! opened, so that the specs of one command (`-u a -u b`, each of a program's
//! processes) read a binary and index its symbols once.

use std::cell::RefCell;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::binary::{Binary, Detail};
use crate::target::{Located, Scope};
use crate::{
    glob, return_hazards, short_lib_name, split_spec, Error, Exit, FunctionMatch, Options, Target,
};

/// Binaries a resolver keeps: a failed lookup opens every library of the process to say
/// which one has the function, and their indexes are not all worth holding.
const KEPT: usize = 16;

/// Resolves specs and lists functions, keeping the binaries it opened (the last
/// [`KEPT`]) for as long as it lives.
#[derive(Default)]
pub struct Resolver {
    opened: RefCell<Vec<(Identity, Rc<Binary>)>>,
}

/// A binary as opened: by path, as the target knows it, and by file identity (a file
/// replaced is read again).
#[derive(PartialEq)]
struct Identity {
    open: PathBuf,
    display: String,
    root: PathBuf,
    file: (u64, u64, u64, i64, i64),
}

impl Resolver {
    /// A resolver that has opened nothing yet.
    pub fn new() -> Resolver {
        Resolver::default()
    }

    /// The binary at `open`, opened once (see [`Binary::open`]).
    fn binary(&self, open: &Path, display: &str, root: &Path) -> Result<Rc<Binary>, Error> {
        let md = std::fs::metadata(open).map_err(|e| Error::io(open, e))?;
        let id = Identity {
            open: open.to_path_buf(),
            display: display.to_string(),
            root: root.to_path_buf(),
            file: (md.dev(), md.ino(), md.size(), md.mtime(), md.mtime_nsec()),
        };
        let mut opened = self.opened.borrow_mut();
        if let Some((_, b)) = opened.iter().find(|(i, _)| *i == id) {
            return Ok(b.clone());
        }
        let b = Rc::new(Binary::open(open, display, root)?);
        if opened.len() == KEPT {
            opened.remove(0);
        }
        opened.push((id, b.clone()));
        Ok(b)
    }

    /// Resolves a probe spec (`FUNC`, `LIB:FUNC`, `PATH:FUNC`, globs allowed) to
    /// attach points in `target`.
    pub fn resolve(
        &self,
        target: &Target,
        spec: &str,
        opts: &Options,
    ) -> Result<Vec<FunctionMatch>, Error> {
        let (lib, func) = split_spec(spec.trim());
        let bad = |reason: &str| Error::BadSpec {
            spec: spec.to_string(),
            reason: reason.to_string(),
        };
        if func.is_empty() {
            return Err(bad("missing function name (expected FUNC or LIB:FUNC)"));
        }
        if lib == Some("") {
            return Err(bad("empty library name before `:`"));
        }
        let scope = Scope::new(target)?;
        let located = match lib {
            None => scope.main.clone(),
            Some(l) => scope.find_lib(l)?,
        };
        let unmapped = lib.is_some() && !scope.maps(&located);
        let bin = self.binary(&located.open, &located.display, &scope.root)?;
        // A pattern that is a function's exact name is that function: Go's method names hold
        // a `*` (`pkg.(*Server).Put`), which as a glob also matched `(*otherServer).Put`.
        let exact = bin.find(func, false);
        let is_glob = glob::is_glob(func) && exact.is_empty();
        let hits = if is_glob { bin.find(func, true) } else { exact };
        if hits.is_empty() {
            return Err(self.not_found(&scope, &located, &bin, lib, func, is_glob));
        }
        if !is_glob && hits.len() > 1 && !opts.allow_multiple {
            return Err(ambiguous(&bin, func, &hits));
        }
        let mut found: Vec<FunctionMatch> = (hits.into_iter())
            .map(|i| bin.function_match(i, &located, Detail::Probe))
            .collect::<Result<_, _>>()?;
        if !opts.unsafe_returns && found.iter().any(|m| m.exit == Exit::Uretprobe) {
            guard_returns(&scope, &located, &bin, &mut found);
        }
        if unmapped {
            let note = format!(
                "{} does not load {} (yet): probed in the processes that do",
                scope.describe(),
                located.display
            );
            for m in &mut found {
                m.warn(&note);
            }
        }
        Ok(found)
    }

    /// Why `func` matched nothing in `bin`: found in another of the process's libraries
    /// (when no library was named), the binary stripped (or its Go table unreadable), or
    /// no such function, with names close to it.
    fn not_found(
        &self,
        scope: &Scope,
        located: &Located,
        bin: &Binary,
        lib: Option<&str>,
        func: &str,
        is_glob: bool,
    ) -> Error {
        // Names close to a name; a glob has none.
        let suggestions = || match is_glob {
            true => Vec::new(),
            false => bin.suggest(func),
        };
        // (`*` alone would be found in any library: no hint.)
        if lib.is_none() && func != "*" {
            for l in scope.libs() {
                let Ok(lb) = self.binary(&l.open, &l.display, &scope.root) else {
                    continue;
                };
                if !lb.find(func, is_glob).is_empty() {
                    return Error::FoundInLibrary {
                        func: func.to_string(),
                        binary: located.display.clone(),
                        lib: l.display.clone(),
                        short: short_lib_name(&l.display),
                    };
                }
            }
        }
        if !bin.symbols().complete {
            if let Some(e) = bin.go_table_error(&located.display) {
                return e;
            }
            return Error::Stripped {
                func: func.to_string(),
                binary: located.display.clone(),
                build_id: bin.elf.build_id.clone(),
                suggestions: suggestions(),
            };
        }
        Error::NoSuchFunction {
            func: func.to_string(),
            binary: located.display.clone(),
            suggestions: suggestions(),
        }
    }

    /// Lists probe-able functions like `bpftrace -l`: `pattern` is a glob over the
    /// main executable (default `*`) or `LIB:GLOB` for a library. To keep listing
    /// fast, `source` is filled in from DWARF only when the list is short, and a
    /// Go function's RET sites are left to [`Resolver::resolve`] ([`Exit::Deferred`]).
    pub fn list(
        &self,
        target: &Target,
        pattern: Option<&str>,
    ) -> Result<Vec<FunctionMatch>, Error> {
        let (lib, pat) = match pattern.map(str::trim) {
            None | Some("") => (None, "*"),
            Some(p) => {
                let (l, f) = split_spec(p);
                (l, if f.is_empty() { "*" } else { f })
            }
        };
        let scope = Scope::new(target)?;
        let located = match lib {
            None | Some("") => scope.main.clone(),
            Some(l) => scope.find_lib(l)?,
        };
        let bin = self.binary(&located.open, &located.display, &scope.root)?;
        if !bin.symbols().complete {
            if let Some(e) = bin.go_table_error(&located.display) {
                return Err(e);
            }
        }
        let hits = bin.find(pat, true);
        let detail = Detail::List {
            source: hits.len() <= 200,
        };
        let mut out: Vec<FunctionMatch> = hits
            .into_iter()
            .filter_map(|i| bin.function_match(i, &located, detail).ok())
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name).then(a.address.cmp(&b.address)));
        Ok(out)
    }
}

/// A name that is several functions, each shown with its symbol and address.
fn ambiguous(bin: &Binary, func: &str, hits: &[usize]) -> Error {
    let syms = bin.symbols();
    let names = syms.names();
    Error::Ambiguous {
        func: func.to_string(),
        matches: hits
            .iter()
            .map(|&i| {
                format!(
                    "{} ({} @ {:#x})",
                    names[i].display, syms.syms[i].raw, syms.syms[i].addr
                )
            })
            .collect(),
    }
}

/// Returns probed at their instructions instead of by uretprobes, where a uretprobe is
/// unsafe: the program switches stacks or throws.
fn guard_returns(scope: &Scope, located: &Located, bin: &Binary, found: &mut [FunctionMatch]) {
    // The file probed is judged too: a library named by its path may not be mapped
    // yet, so not among the program's files.
    let main = located.display == scope.main.display;
    let switches =
        scope.switches_stacks().is_some() || return_hazards::switch_of(&bin.elf, main).is_some();
    if switches || scope.throws().is_some() || return_hazards::thrower_of(&bin.elf, main).is_some()
    {
        for m in found.iter_mut().filter(|m| m.exit == Exit::Uretprobe) {
            bin.probe_returns_at_instructions(m);
            m.stacks_switch = switches;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_is_opened_once_and_again_when_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bin");
        std::fs::copy("/bin/true", &path).unwrap();
        let r = Resolver::new();
        let open = || r.binary(&path, "bin", Path::new("/")).unwrap();
        let first = open();
        assert!(Rc::ptr_eq(&first, &open()));
        // Replaced by another file under the same name: read again.
        std::fs::remove_file(&path).unwrap();
        std::fs::copy("/bin/false", &path).unwrap();
        assert!(!Rc::ptr_eq(&first, &open()));
    }
}
