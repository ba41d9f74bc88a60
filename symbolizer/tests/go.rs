//! Go binaries: functions, probe placement and lines from `.gopclntab`,
//! checked against the Go toolchain's own tools (`go tool nm`, `go tool
//! addr2line`) and binutils (`objdump`, `addr2line` on the DWARF of the
//! unstripped build).

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use common::gofix::*;
use common::run;
use symbolizer::{
    list, resolve, Error, Exit, FunctionMatch, Language, Options, Symbolizer, Target,
};

fn path(p: &Path) -> Target {
    Target::Path(p.to_path_buf())
}

/// Go's runtime (before 1.21) names instantiated generics with `[...]` for
/// the type arguments where the symbol table spells them out; ABI0 assembly
/// functions have an `.abi0` suffix in the symbol table only; `go tool nm`
/// prints the `·` of some compiler-made names as `.`.
fn same_go_name(ours: &str, nm: &str) -> bool {
    let nm = nm.strip_suffix(".abi0").unwrap_or(nm);
    let ours = ours.replace('·', ".");
    if ours == nm {
        return true;
    }
    let mut short = String::new();
    let mut depth = 0;
    for c in nm.chars() {
        match c {
            '[' => {
                if depth == 0 {
                    short.push_str("[...]");
                }
                depth += 1;
            }
            ']' if depth > 0 => depth -= 1,
            _ if depth == 0 => short.push(c),
            _ => {}
        }
    }
    ours == short
}

/// Every function listed in the stripped build (from its pclntab alone) is
/// the `go tool nm` symbol of the unstripped one at that address, with its
/// name and size; every sized text symbol of `go tool nm` is listed.
#[test]
fn stripped_go_functions_equal_go_tool_nm() {
    for b in go_builds() {
        let nm = go_nm(b, &b.full);
        let by_addr: HashMap<u64, Vec<&(u64, u64, String)>> =
            nm.iter().fold(HashMap::new(), |mut m, s| {
                m.entry(s.0).or_default().push(s);
                m
            });
        let ours = list(&path(&b.stripped), None).unwrap();
        let (mut go, mut native) = (0, 0);
        for m in &ours {
            let syms = by_addr.get(&m.address).unwrap_or_else(|| {
                panic!(
                    "{}: {} {:#x} not in go tool nm",
                    b.version, m.name, m.address
                )
            });
            match m.language {
                Language::Go => {
                    go += 1;
                    let s = syms
                        .iter()
                        .find(|s| same_go_name(&m.name, &s.2))
                        .unwrap_or_else(|| {
                            panic!("{}: {} named {syms:?} by nm", b.version, m.name)
                        });
                    assert_eq!(m.size, s.1, "{}: size of {}", b.version, m.name);
                }
                Language::Native => {
                    // C code of cgo: the table has its entry, not its end,
                    // which is the next entry (alignment padding included).
                    native += 1;
                    assert!(
                        syms.iter().any(|s| m.size >= s.1 && m.size < s.1 + 64),
                        "{}: {} {} vs {syms:?}",
                        b.version,
                        m.name,
                        m.size
                    );
                }
            }
        }
        let listed: std::collections::HashSet<u64> = ours.iter().map(|m| m.address).collect();
        let unlisted: Vec<_> = nm
            .iter()
            .filter(|s| s.1 > 0 && !listed.contains(&s.0))
            .collect();
        assert!(
            unlisted.is_empty(),
            "{}: not listed: {unlisted:?}",
            b.version
        );
        assert!(
            go > 3000 && native > 5,
            "{}: {go} Go, {native} C",
            b.version
        );
        eprintln!(
            "{}: {go} Go and {native} C functions of the stripped build equal go tool nm's ({} text symbols)",
            b.version,
            nm.len()
        );
        // Without cgo (internal linking), every function is Go.
        let st = list(&path(&b.static_stripped), None).unwrap();
        assert!(st.iter().all(|m| m.language == Language::Go));
        assert!(st.iter().any(|m| m.name == "main.handler"));
    }
}

/// Addresses spread over every Go function of `fns`, about `n` of them.
fn spread(fns: &[FunctionMatch], n: usize) -> Vec<u64> {
    let go: Vec<&FunctionMatch> = fns.iter().filter(|m| m.language == Language::Go).collect();
    let total: u64 = go.iter().map(|m| m.size).sum();
    let step = (total / n as u64).max(1);
    let mut out = Vec::new();
    for m in go {
        let mut a = m.address;
        while a < m.address + m.size {
            out.push(a);
            a += step;
        }
    }
    out
}

/// File and line of the innermost frame, and the outer function, equal what
/// `go tool addr2line` (the Go toolchain's pclntab reader) says.
#[test]
fn stripped_go_lines_equal_go_tool_addr2line() {
    for b in go_builds() {
        for bin in [&b.stripped, &b.static_stripped] {
            let fns = list(&path(bin), None).unwrap();
            let addrs = spread(&fns, 4000);
            let theirs = go_addr2line(b, bin, &addrs);
            assert_eq!(theirs.len(), addrs.len());
            let mut s = Symbolizer::new();
            let mut inlined = 0;
            for (a, (func, file, line)) in addrs.iter().zip(&theirs) {
                let fr = s.symbolize(bin, *a).unwrap();
                let outer = fr.last().unwrap();
                assert_eq!(
                    outer.function.as_deref(),
                    Some(func.as_str()),
                    "{a:#x}: {fr:?}"
                );
                let inner = &fr[0];
                assert_eq!(
                    (
                        inner.file.as_deref().unwrap_or("?"),
                        inner.line.unwrap_or(0)
                    ),
                    (file.as_str(), *line),
                    "{a:#x}: {fr:?}"
                );
                inlined += usize::from(fr.len() > 1);
            }
            assert!(inlined > 100, "{}: only {inlined} inlined", b.version);
            eprintln!(
                "{} {}: {} addresses equal go tool addr2line ({inlined} with inlined frames)",
                b.version,
                bin.file_name().unwrap().to_string_lossy(),
                addrs.len()
            );
        }
    }
}

type Fr = (Option<String>, Option<String>, Option<u32>);

fn frames(s: &mut Symbolizer, bin: &Path, a: u64) -> Vec<Fr> {
    s.symbolize(bin, a)
        .unwrap()
        .into_iter()
        .map(|f| {
            let file = f.file.map(|x| x.trim_start_matches("./").to_string());
            (f.function.map(|x| x.to_string()), file, f.line)
        })
        .collect()
}

/// Inlined frames from the pclntab's inline trees against the DWARF of the
/// unstripped build: the depth and every frame's file and line equal binutils
/// `addr2line -i`'s; every frame's function equals the DWARF DIE's name
/// (read through this crate's DWARF path: binutils 2.40 names an inlined Go
/// frame after its caller).
#[test]
fn stripped_go_inlined_frames_equal_dwarf() {
    for b in go_builds() {
        let fns = list(&path(&b.stripped), None).unwrap();
        let addrs = spread(&fns, 3000);
        let theirs = common::addr2line(&b.full, &addrs);
        let mut s = Symbolizer::new();
        let mut deep = 0;
        for (a, t) in addrs.iter().zip(&theirs) {
            let ours = frames(&mut s, &b.stripped, *a);
            // binutils names the unit's file, with no line, for Go 1.23's
            // `<autogenerated>` wrappers: only the depth is compared there.
            let lines = |v: &[Fr], t: &[Fr]| {
                v.iter()
                    .zip(t)
                    .map(|(x, y)| y.2.map(|_| (x.1.clone(), x.2)))
                    .collect::<Vec<_>>()
            };
            let t: Vec<Fr> = t
                .iter()
                .map(|f| {
                    let file = f
                        .file
                        .as_deref()
                        .map(|x| x.trim_start_matches("./").to_string());
                    (f.function.clone(), file, f.line)
                })
                .collect();
            assert_eq!(ours.len(), t.len(), "{a:#x}: ours {ours:?} binutils {t:?}");
            assert_eq!(
                lines(&ours, &t),
                lines(&t, &t),
                "{a:#x}: ours {ours:?} binutils {t:?}"
            );
            let dw = frames(&mut s, &b.full, *a);
            assert_eq!(ours.len(), dw.len(), "{a:#x}: ours {ours:?} DWARF {dw:?}");
            for (o, d) in ours.iter().zip(&dw) {
                let (o, d) = (o.0.as_deref().unwrap(), d.0.as_deref().unwrap());
                assert!(same_go_name(o, d), "{a:#x}: ours {ours:?} DWARF {dw:?}");
            }
            deep += usize::from(ours.len() > 1);
        }
        assert!(deep > 100, "{}: {deep} inlined", b.version);
        eprintln!(
            "{}: {} addresses' frames equal the unstripped build's DWARF ({deep} with inlined frames)",
            b.version,
            addrs.len()
        );
    }
}

/// `objdump -d` of [start, end) as (address, instruction text).
fn objdump(bin: &Path, start: u64, end: u64) -> Vec<(u64, String)> {
    let out = run(Command::new("objdump").args([
        "-d",
        "--no-show-raw-insn",
        &format!("--start-address={start:#x}"),
        &format!("--stop-address={end:#x}"),
        &bin.to_string_lossy(),
    ]));
    out.lines()
        .filter_map(|l| {
            let (addr, rest) = l.split_once(":\t")?;
            let a = u64::from_str_radix(addr.trim(), 16).ok()?;
            Some((a, rest.split_whitespace().collect::<Vec<_>>().join(" ")))
        })
        .collect()
}

fn one(t: &Target, spec: &str) -> FunctionMatch {
    let mut v = resolve(t, spec, &Options::default()).unwrap_or_else(|e| panic!("{spec}: {e}"));
    assert_eq!(v.len(), 1, "{spec}: {v:?}");
    v.pop().unwrap()
}

/// The entry probe goes after the stack-bound check when objdump shows one
/// (`cmp 0x10(%r14),...; jbe` to a block that calls runtime.morestack and
/// jumps back to the entry), at +0 otherwise; the exit probes go on every
/// `ret` objdump shows in the function. Checked on the stripped build, with
/// objdump reading the unstripped one (same code, and names for the calls).
#[test]
fn go_probe_placement_matches_objdump() {
    for b in go_builds() {
        let t = path(&b.stripped);
        let mut grown = 0;
        for spec in [
            "main.depth",
            "main.handler",
            "main.(*server).handle",
            "main.main",
            "net/http.(*conn).serve",
            "runtime.mallocgc",
            "runtime.memmove",
        ] {
            let m = one(&t, spec);
            assert_eq!(m.language, Language::Go, "{spec}");
            let code = objdump(&b.full, m.address, m.address + m.size);
            assert_eq!(code[0].0, m.address, "{spec}");
            // The stack check, as the compiler writes it.
            let mut want_skip = 0;
            for (i, (_, ins)) in code.iter().enumerate().take(8) {
                if !ins.starts_with("jbe ") {
                    continue;
                }
                let guard = i > 0 && code[i - 1].1.starts_with("cmp 0x10(%r14),");
                let target =
                    u64::from_str_radix(ins.split_whitespace().nth(1).unwrap(), 16).unwrap();
                let block: Vec<&String> = code
                    .iter()
                    .filter(|c| c.0 >= target)
                    .map(|c| &c.1)
                    .collect();
                let calls = block
                    .iter()
                    .position(|s| s.starts_with("call ") && s.contains("<runtime.morestack"));
                let back = block.iter().position(|s| {
                    s.starts_with("jmp ")
                        && s.ends_with(&format!("<{}>", spec_symbol(&b.full, m.address)))
                });
                if guard && calls.is_some() && back > calls {
                    // The probe goes on the branch itself.
                    want_skip = code[i].0 - m.address;
                }
                break;
            }
            assert_eq!(m.skipped, want_skip, "{} {spec}: {code:?}", b.version);
            assert_eq!(
                m.file_offset,
                common::file_offset(&b.full, m.address) + m.skipped
            );
            grown += usize::from(want_skip > 0);
            let rets: Vec<u64> = code
                .iter()
                .filter(|c| c.1 == "ret" || c.1.starts_with("ret "))
                .map(|c| common::file_offset(&b.full, c.0))
                .collect();
            if spec == "runtime.memmove" {
                assert_eq!(m.skipped, 0, "assembly, no stack check");
                assert!(
                    matches!(&m.exit, Exit::Refused(r) if r.contains("assembly")),
                    "{:?}",
                    m.exit
                );
                continue;
            }
            assert!(!rets.is_empty(), "{spec}");
            let want = Exit::Returns {
                rets: rets.clone(),
                tails: Vec::new(),
            };
            assert_eq!(m.exit, want, "{} {spec}", b.version);
            eprintln!(
                "{} {spec}: entry +{} ({}), {} ret(s)",
                b.version,
                m.skipped,
                code.iter()
                    .find(|c| c.0 == m.address + m.skipped)
                    .unwrap()
                    .1,
                rets.len()
            );
        }
        assert!(grown >= 5, "{}: stack checks found in {grown}", b.version);
    }
}

/// The symbol objdump prints for `addr` in its `<...>` annotations.
/// The goroutine status probe of a Go binary is inside `runtime.casgstatus`, on the
/// first instruction objdump shows there that uprobes emulate (a nop or a branch), with
/// no instruction before it writing RAX, RBX or RCX (its arguments).
#[test]
fn the_goroutine_status_probe_is_in_casgstatus_before_its_arguments_change() {
    for b in go_builds() {
        let t = path(&b.stripped);
        let handler = one(&t, "main.handler");
        let casg = one(&t, "runtime.casgstatus");
        let at = handler
            .go_status
            .expect("a status probe in a Go 1.17+ binary");
        let func_off = casg.file_offset - casg.skipped;
        assert!((func_off..func_off + casg.size).contains(&at), "{at:#x}");
        let code = objdump(&b.full, casg.address, casg.address + casg.size);
        let probe_addr = casg.address + (at - func_off);
        let i = code
            .iter()
            .position(|(a, _)| *a == probe_addr)
            .expect("on an instruction");
        let ins = &code[i].1;
        assert!(ins.starts_with("nop") || ins.starts_with('j'), "{ins}");
        for (_, before) in &code[..i] {
            // AT&T: the destination is last; bt, cmp and test only read theirs.
            let reads_only = ["bt", "cmp", "test"].iter().any(|m| before.starts_with(m));
            let dest = if reads_only {
                ""
            } else {
                before.rsplit(',').next().unwrap_or("")
            };
            for r in ["%rax", "%eax", "%rbx", "%ebx", "%rcx", "%ecx"] {
                assert!(!(before.contains(',') && dest == r), "{before} writes {r}");
            }
        }
    }
}

fn spec_symbol(bin: &Path, addr: u64) -> String {
    let l = run(Command::new("objdump").args([
        "-d",
        &format!("--start-address={addr:#x}"),
        &format!("--stop-address={:#x}", addr + 1),
        &bin.to_string_lossy(),
    ]));
    l.lines()
        .find_map(|l| {
            l.strip_suffix(">:")
                .and_then(|x| x.split_once(" <"))
                .map(|x| x.1.to_string())
        })
        .unwrap()
}

/// Specs in Go's own names, globs over them and suggestions, on a stripped binary.
#[test]
fn go_specs_resolve_on_stripped_binaries() {
    for b in go_builds() {
        let t = path(&b.stripped);
        let mains = resolve(&t, "main.*", &Options::default()).unwrap();
        let names: Vec<&str> = mains.iter().map(|m| m.name.as_str()).collect();
        for want in [
            "main.main",
            "main.handler",
            "main.depth",
            "main.(*server).handle",
        ] {
            assert!(names.contains(&want), "{}: {names:?}", b.version);
        }
        assert!(mains.iter().all(|m| m.language == Language::Go));
        let serve = one(&t, "net/http.(*conn).serve");
        assert!(matches!(&serve.exit, Exit::Returns { rets, .. } if !rets.is_empty()));
        // A method's exact name is that method, though its `*` would glob others too
        // (`sync.(*RWMutex).Lock`); a pattern that names none is a glob.
        assert_eq!(one(&t, "sync.(*Mutex).Lock").name, "sync.(*Mutex).Lock");
        let locks = resolve(&t, "sync.(**).Lock", &Options::default()).unwrap();
        let locks: Vec<&str> = locks.iter().map(|m| m.name.as_str()).collect();
        assert!(locks.contains(&"sync.(*RWMutex).Lock"), "{locks:?}");
        assert!(locks.contains(&"sync.(*Mutex).Lock"), "{locks:?}");
        // A listing leaves RET sites to resolve, and places entries the same.
        let listed = list(&t, Some("net/http.(*conn).serve")).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].exit, Exit::Deferred);
        assert_eq!(
            (listed[0].file_offset, listed[0].language),
            (serve.file_offset, Language::Go)
        );
        let memmove = list(&t, Some("runtime.memmove")).unwrap();
        assert!(
            matches!(&memmove[0].exit, Exit::Refused(r) if r.contains("assembly")),
            "{:?}",
            memmove[0].exit
        );
        let src = serve.source.as_deref().unwrap();
        assert!(src.contains("/net/http/server.go:"), "{src}");
        let e = resolve(&t, "main.handlr", &Options::default()).unwrap_err();
        match &e {
            Error::NoSuchFunction { suggestions, .. } => {
                assert!(
                    suggestions.iter().any(|s| s == "main.handler"),
                    "{suggestions:?}"
                )
            }
            other => panic!("{other:?}"),
        }
        // The unstripped build: the same functions under the same names.
        let full = one(&path(&b.full), "main.(*server).handle");
        let stripped = one(&t, "main.(*server).handle");
        assert_eq!(
            (full.address, full.size, full.skipped, &full.exit),
            (
                stripped.address,
                stripped.size,
                stripped.skipped,
                &stripped.exit
            )
        );
    }
}

/// (file offset, size, address) of a section, from readelf.
fn section(bin: &Path, name: &str) -> (usize, usize, u64) {
    let out = run(Command::new("readelf").args(["-S", "-W"]).arg(bin));
    let l = out
        .lines()
        .find(|l| l.split_whitespace().any(|w| w == name))
        .unwrap();
    let f: Vec<&str> = l.split(']').nth(1).unwrap().split_whitespace().collect();
    let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
    (hex(f[3]) as usize, hex(f[4]) as usize, hex(f[2]))
}

/// A real table, truncated and bit-flipped, through the pure parser and
/// through whole corrupted binaries: errors or answers, never a panic.
#[test]
fn corrupted_real_pclntabs_do_not_panic() {
    let b = &go_builds()[0];
    let real = std::fs::read(&b.stripped).unwrap();
    let (off, size, _) = section(&b.stripped, ".gopclntab");
    let (text, ..) = section(&b.stripped, ".text");
    let tab = &real[off..off + size];
    let t = symbolizer::parse_gopclntab(tab, text as u64).unwrap();
    let fns = t.functions();
    assert_eq!(
        fns.iter().filter(|f| !f.foreign).count(),
        list(&path(&b.stripped), None)
            .unwrap()
            .iter()
            .filter(|m| m.language == Language::Go)
            .count()
    );
    let pcs: Vec<u64> = fns.iter().step_by(97).map(|f| f.entry + 3).collect();
    for cut in (0..size).step_by(size / 40) {
        if let Ok(t) = symbolizer::parse_gopclntab(&tab[..cut], 0) {
            let _ = t.functions();
            pcs.iter().for_each(|&pc| drop(t.lookup(pc)));
        }
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rng = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..200 {
        let mut c = tab.to_vec();
        for _ in 0..4 {
            // Headers and function structs are near the start and the end.
            let r = rng();
            let at = if r & 1 == 0 {
                (r >> 8) as usize % 256
            } else {
                (r >> 8) as usize % size
            };
            c[at] ^= 1 << (r >> 3 & 7);
        }
        if let Ok(t) = symbolizer::parse_gopclntab(&c, 0) {
            let _ = t.functions();
            pcs.iter().for_each(|&pc| drop(t.lookup(pc)));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    for i in 0..12 {
        let mut c = real.clone();
        for _ in 0..6 {
            let r = rng();
            c[off + (r >> 8) as usize % if i % 2 == 0 { 512 } else { size }] ^= 1 << (r & 7);
        }
        let p = dir.path().join(format!("g{i}"));
        std::fs::write(&p, &c).unwrap();
        match list(&path(&p), Some("main.*")) {
            Ok(_) => {}
            Err(e) => assert!(!e.to_string().contains('\n'), "{e}"),
        }
        let _ = resolve(&path(&p), "main.handler", &Options::default());
        let mut s = Symbolizer::new();
        pcs.iter().for_each(|&pc| drop(s.symbolize(&p, pc)));
    }
}

/// On a running server: a uprobe at the entry of a function whose stack
/// grows fires once more per growth, and so does one on the stack check's
/// branch, where the probe goes (its program tells the passes apart by the
/// flags); one after the branch fires exactly once per call. Counted by the
/// kernel (tracefs uprobe_profile); needs root.
#[test]
fn go_entry_probe_on_the_stack_check_sees_every_pass() {
    use std::io::{BufRead, Read, Write};
    let tracing = Path::new("/sys/kernel/tracing");
    if !tracing.join("uprobe_events").exists() {
        eprintln!("skipping: no tracefs uprobe_events (not root?)");
        return;
    }
    let b = &go_builds()[0];
    let m = one(&path(&b.stripped), "main.depth");
    assert!(m.skipped > 0);
    let mut child = Command::new(&b.stripped)
        .args(["-addr", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().to_string();
    let group = format!("symtest{}", std::process::id());
    let events = |text: String| {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(tracing.join("uprobe_events"))
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    };
    let bin = m.binary.to_string_lossy();
    let entry = m.file_offset - m.skipped;
    let code = objdump(&b.full, m.address, m.address + m.size);
    let at = code
        .iter()
        .position(|c| c.0 == m.address + m.skipped)
        .unwrap();
    assert!(code[at].1.starts_with("jbe "), "{:?}", code[at]);
    let past = m.file_offset + (code[at + 1].0 - code[at].0);
    events(format!("p:{group}/at0 {bin}:{entry:#x}\n"));
    events(format!("p:{group}/branch {bin}:{:#x}\n", m.file_offset));
    events(format!("p:{group}/after {bin}:{past:#x}\n"));
    std::fs::write(tracing.join(format!("events/{group}/enable")), "1").unwrap();
    let n = 3000;
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    write!(s, "GET /work?n={n} HTTP/1.0\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let profile = std::fs::read_to_string(tracing.join("uprobe_profile")).unwrap();
    let hits = |ev: &str| -> u64 {
        profile
            .lines()
            .find(|l| {
                l.contains(&format!("{group}/{ev}")) || l.split_whitespace().nth(1) == Some(ev)
            })
            .and_then(|l| l.split_whitespace().last()?.parse().ok())
            .unwrap_or_else(|| panic!("{ev} not in {profile}"))
    };
    let (at0, branch, after) = (hits("at0"), hits("branch"), hits("after"));
    std::fs::write(tracing.join(format!("events/{group}/enable")), "0").unwrap();
    events(format!(
        "-:{group}/at0\n-:{group}/branch\n-:{group}/after\n"
    ));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(reply.contains("200 OK"), "{reply}");
    assert_eq!(after, n + 1, "one hit per call of main.depth");
    assert!(
        at0 > after,
        "the entry probe fires again after each stack growth: {at0} vs {after}"
    );
    assert_eq!(branch, at0, "the branch sees every pass through the entry");
    eprintln!(
        "{}: main.depth({n}): {after} calls, entry probe {at0} hits",
        b.version
    );
}
