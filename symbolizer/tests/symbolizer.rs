//! Integration tests: every answer is checked against binutils (readelf, nm,
//! objdump, addr2line) run on the same freshly built fixtures.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use symbolizer::{list, resolve, Error, Exit, FunctionMatch, Options, Symbolizer, Target};

fn path(p: &Path) -> Target {
    Target::Path(p.to_path_buf())
}

fn one(target: &Target, spec: &str) -> FunctionMatch {
    let mut v =
        resolve(target, spec, &Options::default()).unwrap_or_else(|e| panic!("{spec}: {e}"));
    assert_eq!(v.len(), 1, "{spec}: {v:?}");
    v.pop().unwrap()
}

fn build_id(bin: &Path) -> Option<String> {
    let out = run(std::process::Command::new("readelf").args(["-n", &bin.to_string_lossy()]));
    out.lines().find_map(|l| {
        l.trim()
            .strip_prefix("Build ID: ")
            .map(|s| s.trim().to_string())
    })
}

fn norm(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Checks one match against readelf (symbols from `sym_file`, segments from
/// the binary), objdump (first instruction) and addr2line (source line).
fn check_match(m: &FunctionMatch, bin: &Path, sym_file: &Path, raw: &str) {
    let rs = readelf_sym(sym_file, raw);
    assert_eq!(m.symbol, raw);
    assert_eq!(m.address, rs.value, "{raw} address");
    assert_eq!(m.size, rs.size, "{raw} size");
    assert_eq!(m.build_id, build_id(bin), "{raw} build-id");
    let insns = first_insns(bin, m.address);
    let endbr = insns.first().is_some_and(|i| i.1.starts_with("endbr64"));
    assert_eq!(
        m.file_offset,
        file_offset(bin, m.address) + m.skipped,
        "{raw} file offset"
    );
    // What x86 uprobes emulate instead of single-stepping: push, nop, call/jmp/jcc rel.
    let emulated = |i: &str| {
        i.starts_with("push")
            || i.starts_with("nop")
            || i.starts_with("xchg %ax,%ax")
            || i.starts_with("call")
            || i.starts_with('j')
    };
    let first = usize::from(endbr);
    let next = norm(&insns[first].1);
    // The probe is on an instruction objdump decodes, and on the first after an endbr64
    // unless that one is single-stepped: then on an emulated one a few further, past
    // instructions that leave the stack pointer and the flow of control alone.
    let at = (insns.iter())
        .position(|i| i.0 == m.skipped)
        .unwrap_or_else(|| panic!("{raw}: probed at +{}: {insns:?}", m.skipped));
    assert!(at >= first && at <= first + 4, "{raw}: {insns:?}");
    if at > first {
        assert!(emulated(&norm(&insns[at].1)), "{raw}: {insns:?}");
        for (_, i) in &insns[first..at] {
            let i = norm(i);
            assert!(
                !emulated(&i) && !i.starts_with("ret") && !i.starts_with("pop"),
                "{raw}: {insns:?}"
            );
            assert!(
                !i.ends_with(",%rsp") && !i.ends_with(",%esp"),
                "{raw}: {insns:?}"
            );
        }
    }
    match &m.warning {
        None => assert!(
            emulated(&norm(&insns[at].1)),
            "{raw}: no warning, probe on `{:?}`",
            insns[at]
        ),
        Some(w) => {
            assert!(
                !emulated(&next) && at == first,
                "{raw}: warning {w:?} for `{next}`"
            );
            assert!(
                w.contains("single-stepped by uprobes (a second trap per hit)"),
                "{w}"
            );
            let quoted = w.split('`').nth(1).unwrap();
            if !quoted.starts_with("bytes ") && quoted.contains(' ') {
                assert_eq!(quoted, next, "{raw}: mnemonic");
            }
        }
    }
    // Source: file from addr2line at the entry, line from the DIE's DW_AT_decl_line.
    let a2l = addr2line(bin, &[m.address]);
    let outer = a2l[0].last().unwrap();
    let line = decl_line(sym_file, m.address).expect("decl_line in DWARF");
    let want = format!("{}:{}", outer.file.clone().unwrap(), line);
    assert_eq!(m.source.as_deref(), Some(want.as_str()), "{raw} source");
}

const PROG_FUNCS: &[&str] = &[
    "compute_sum",
    "compute_product",
    "uses_inline",
    "call_through",
    "local_helper",
    "main",
];

#[test]
fn resolve_pie_with_endbr64_matches_binutils() {
    let f = fixtures();
    let t = path(&f.prog_pie);
    for func in PROG_FUNCS {
        let m = one(&t, func);
        check_match(&m, &f.prog_pie, &f.prog_pie, func);
        assert_eq!(m.name, *func);
        assert_eq!(m.binary, f.prog_pie);
        assert_eq!(m.display_binary, f.prog_pie.to_string_lossy());
        // GCC leaves endbr64 out of local functions whose address is never taken.
        if *func != "local_helper" {
            assert!(
                m.skipped >= 4,
                "-fcf-protection puts endbr64 first in {func}"
            );
        }
    }
}

#[test]
fn resolve_non_pie_without_endbr64_matches_binutils() {
    let f = fixtures();
    let t = path(&f.prog_nopie);
    let (mut warned, mut moved) = (0, 0);
    for func in PROG_FUNCS {
        let m = one(&t, func);
        check_match(&m, &f.prog_nopie, &f.prog_nopie, func);
        // ET_EXEC: addresses are absolute, so offset != address.
        assert_ne!(m.file_offset, m.address);
        warned += usize::from(m.warning.is_some());
        moved += usize::from(m.skipped > 0);
    }
    assert!(
        warned > 0 && moved > 0,
        "fixture should contain prologues uprobes would single-step: one the probe moves past ({moved}), one it cannot ({warned})"
    );
}

#[test]
fn compressed_dwarf4_source_lines() {
    let f = fixtures();
    for func in PROG_FUNCS {
        let m = one(&path(&f.prog_dw4z), func);
        check_match(&m, &f.prog_dw4z, &f.prog_dw4z, func);
    }
}

#[test]
fn shared_library_by_short_name_and_path() {
    let f = fixtures();
    let t = path(&f.prog_pie);
    let m = one(&t, "libfix:fixlib_add");
    assert_eq!(m.binary, f.libfix);
    check_match(&m, &f.libfix, &f.libfix, "fixlib_add");
    let spec = format!("{}:fixlib_internal", f.libfix.display());
    let m = one(&t, &spec);
    check_match(&m, &f.libfix, &f.libfix, "fixlib_internal");
    let m = one(&t, "libfix.so:fixlib_mul");
    check_match(&m, &f.libfix, &f.libfix, "fixlib_mul");
    // libc through DT_NEEDED of libfix/prog and the loader's search path.
    let m = one(&t, "libc:malloc");
    assert!(m.display_binary.contains("libc.so"), "{}", m.display_binary);
    let rs = readelf_sym(&m.binary, "malloc");
    assert_eq!(m.address, rs.value);
}

#[test]
fn function_only_in_library_suggests_lib_spec() {
    let f = fixtures();
    let e = resolve(&path(&f.prog_pie), "fixlib_add", &Options::default()).unwrap_err();
    assert!(matches!(e, Error::FoundInLibrary { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("use libfix:fixlib_add"), "{msg}");
    assert!(!msg.contains('\n'));
}

#[test]
fn unknown_function_suggests_close_names() {
    let f = fixtures();
    let e = resolve(&path(&f.prog_pie), "compute_sun", &Options::default()).unwrap_err();
    match &e {
        Error::NoSuchFunction { suggestions, .. } => {
            assert!(suggestions.len() <= 5);
            assert_eq!(
                suggestions.first().map(String::as_str),
                Some("compute_sum"),
                "{suggestions:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains("did you mean") && msg.contains("compute_sum"),
        "{msg}"
    );
    assert!(!msg.contains('\n'));
}

#[test]
fn globs_and_ambiguous_names() {
    let f = fixtures();
    let t = path(&f.prog_pie);
    let mut v = resolve(&t, "compute_*", &Options::default()).unwrap();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<_> = v.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["compute_product", "compute_sum"]);
    assert_eq!(
        resolve(&t, "[c]ompute_su?", &Options::default())
            .unwrap()
            .len(),
        1
    );

    let cpp = path(&f.cpp);
    let e = resolve(&cpp, "ns::over", &Options::default()).unwrap_err();
    match &e {
        Error::Ambiguous { matches, .. } => assert_eq!(matches.len(), 2, "{matches:?}"),
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("ns::over(int)") && e.to_string().contains("ns::over(double)"));
    let opts = Options {
        allow_multiple: true,
        ..Default::default()
    };
    let mut v = resolve(&cpp, "ns::over", &opts).unwrap();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<_> = v.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["ns::over(double)", "ns::over(int)"]);
    for m in &v {
        check_match(m, &f.cpp, &f.cpp, &m.symbol.clone());
    }
}

#[test]
fn cpp_method_demangled_like_nm() {
    let f = fixtures();
    let t = path(&f.cpp);
    let m = one(&t, "ns::Class::method(int)");
    assert_eq!(m.name, "ns::Class::method(int)");
    assert_eq!(m.symbol, "_ZN2ns5Class6methodEi");
    assert!(nm_demangled(&f.cpp)[&m.address].contains(&m.name));
    check_match(&m, &f.cpp, &f.cpp, "_ZN2ns5Class6methodEi");
    assert_eq!(one(&t, "ns::Class::method").address, m.address);
    assert_eq!(one(&t, "_ZN2ns5Class6methodEi").address, m.address);
    assert_eq!(one(&t, "ns::Class::*").address, m.address);
}

#[test]
fn rust_symbols_demangled_without_hash() {
    let f = fixtures();
    let mut bins = vec![(f.rust_legacy.clone(), "_ZN")];
    if let Some(v0) = &f.rust_v0 {
        bins.push((v0.clone(), "_R"));
    }
    for (bin, prefix) in bins {
        let t = path(&bin);
        let m = one(&t, "rfix::worker::compute");
        assert!(m.symbol.starts_with(prefix), "{}", m.symbol);
        assert_eq!(m.name, "rfix::worker::compute");
        assert!(nm_demangled(&bin)[&m.address].contains(&m.name));
        check_match(&m, &bin, &bin, &m.symbol.clone());
        assert_eq!(one(&t, &m.symbol).address, m.address);
        assert_eq!(one(&t, "rfix::*::compute").address, m.address);
    }
}

#[test]
fn stripped_binary_uses_debuglink_file() {
    let f = fixtures();
    let t = path(&f.prog_stripped);
    assert!(
        readelf_funcs(&f.prog_stripped, false).is_empty(),
        "fixture must be stripped"
    );
    let debug = f.prog_stripped.with_file_name("prog_stripped.debug");
    for func in PROG_FUNCS {
        let m = one(&t, func);
        check_match(&m, &f.prog_stripped, &debug, func);
    }
}

#[test]
fn stripped_binary_without_debug_file_says_so() {
    let f = fixtures();
    let e = resolve(
        &path(&f.prog_stripped_alone),
        "local_helper",
        &Options::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::Stripped { .. }), "{e:?}");
    let msg = e.to_string();
    let id = build_id(&f.prog_stripped_alone).unwrap();
    assert!(
        msg.contains("stripped") && msg.contains("debug symbols") && msg.contains("non-stripped"),
        "{msg}"
    );
    assert!(
        msg.contains(&format!(".build-id/{}/{}.debug", &id[..2], &id[2..])),
        "{msg}"
    );
    assert!(!msg.contains('\n'));
}

/// A stripped binary's `.dynsym` names its exported functions, and only the addresses
/// inside them: a static function between two exported ones stays unnamed, not named
/// after the exported one before it.
#[test]
fn exported_symbols_name_only_their_own_addresses() {
    let f = fixtures();
    let full = f.prog_exported.with_file_name("prog_exported.full");
    let sections = std::process::Command::new("readelf")
        .args(["-SW".as_ref(), f.prog_exported.as_os_str()])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&sections.stdout).contains(".symtab"),
        "stripped"
    );
    let mut s = Symbolizer::new();
    let name = |s: &mut Symbolizer, addr: u64| {
        let frames = s.symbolize(&f.prog_exported, addr).unwrap();
        frames
            .last()
            .and_then(|fr| fr.function.as_deref().map(str::to_string))
    };
    for func in ["compute_sum", "call_through"] {
        let rs = readelf_sym(&full, func);
        assert_eq!(name(&mut s, rs.value).as_deref(), Some(func));
        assert_eq!(name(&mut s, rs.value + rs.size - 1).as_deref(), Some(func));
    }
    let local = readelf_sym(&full, "local_helper");
    let below = readelf_funcs(&full, false)
        .into_iter()
        .filter(|x| x.value < local.value && x.size > 0)
        .max_by_key(|x| x.value)
        .expect("a function below local_helper");
    assert_eq!(name(&mut s, local.value), None, "after {}", below.name);
    // Its start, from the unwind table, for any of its addresses.
    let offset = |vaddr: u64| file_offset(&f.prog_exported, vaddr);
    for inside in [0, local.size / 2, local.size - 1] {
        let start = s
            .function_start_offset(&f.prog_exported, offset(local.value + inside))
            .unwrap();
        assert_eq!(start, Some(offset(local.value)), "+{inside}");
    }
}

#[test]
fn minidebuginfo_symbols() {
    let f = fixtures();
    let full = f.prog_mini.with_file_name("prog_mini.full");
    assert!(
        readelf_funcs(&f.prog_mini, false).is_empty(),
        "fixture must be stripped"
    );
    for func in PROG_FUNCS {
        let m = one(&path(&f.prog_mini), func);
        let rs = readelf_sym(&full, func);
        assert_eq!((m.address, m.size), (rs.value, rs.size), "{func}");
        assert_eq!(
            m.file_offset,
            file_offset(&f.prog_mini, m.address) + m.skipped
        );
        assert_eq!(m.source, None, "MiniDebugInfo has no DWARF");
    }
}

/// Addresses spread over every function of `sym_file`, up to `max`.
fn sample_addresses(sym_file: &Path, max: usize) -> Vec<u64> {
    let mut funcs = readelf_funcs(sym_file, false);
    funcs.sort_by_key(|s| s.value);
    funcs.dedup_by_key(|s| s.value);
    let total: u64 = funcs.iter().map(|s| s.size).sum();
    let step = (total / max as u64).max(1);
    let mut out = Vec::new();
    for s in &funcs {
        let mut a = s.value;
        out.push(a);
        while a + step < s.value + s.size {
            a += step;
            out.push(a);
        }
    }
    out
}

/// binutils names the CU file for code without line info (crtstuff.c); that
/// carries no line, so only the function is compared there.
fn normalize(frames: Vec<A2lFrame>) -> Vec<A2lFrame> {
    frames
        .into_iter()
        .map(|mut f| {
            f.line = f.line.filter(|&l| l != 0);
            if f.line.is_none() {
                f.file = None;
            }
            f
        })
        .collect()
}

fn compare_with_addr2line(bin: &Path, sym_file: &Path, max: usize) {
    compare_with_oracle(bin, bin, sym_file, max)
}

/// Symbolizes `bin` and compares with binutils addr2line run on `oracle_bin`
/// (the same file, or an identical build when binutils cannot read `bin`).
fn compare_with_oracle(bin: &Path, oracle_bin: &Path, sym_file: &Path, max: usize) {
    let addrs = sample_addresses(sym_file, max);
    assert!(!addrs.is_empty());
    let theirs: Vec<Vec<A2lFrame>> = addr2line(oracle_bin, &addrs)
        .into_iter()
        .map(normalize)
        .collect();
    assert_eq!(theirs.len(), addrs.len());
    let mut s = Symbolizer::new();
    let mut mismatches = Vec::new();
    let mut with_lines = 0;
    for (a, t) in addrs.iter().zip(&theirs) {
        let ours = s.symbolize(bin, *a).unwrap();
        let ours = normalize(
            ours.into_iter()
                .map(|f| A2lFrame {
                    function: f.function.map(|s| s.to_string()),
                    file: f.file.map(|s| s.to_string()),
                    line: f.line,
                })
                .collect(),
        );
        with_lines += usize::from(ours.last().is_some_and(|f| f.line.is_some()));
        if &ours != t {
            mismatches.push(format!("{a:#x}: ours {ours:?} addr2line {t:?}"));
        }
    }
    assert!(
        with_lines * 2 > addrs.len(),
        "{}: most addresses should have lines",
        bin.display()
    );
    assert!(
        mismatches.is_empty(),
        "{}: {} of {} differ, first: {:#?}",
        bin.display(),
        mismatches.len(),
        addrs.len(),
        &mismatches[..mismatches.len().min(5)]
    );
}

#[test]
fn symbolize_matches_addr2line_c() {
    let f = fixtures();
    compare_with_addr2line(&f.prog_pie, &f.prog_pie, 2000);
    compare_with_addr2line(&f.prog_nopie, &f.prog_nopie, 2000);
    compare_with_addr2line(&f.libfix, &f.libfix, 500);
}

/// Where DWARF has no function, the name comes from the symbol table, and of
/// several aliases at one address it must be the one binutils picks.
#[test]
fn symbol_table_aliases_named_like_addr2line() {
    let f = fixtures();
    let bin = &f.aliases;
    let defined = readelf_defined(bin);
    let sym = |name: &str| {
        let s = defined.iter().find(|s| s.0 == name);
        s.unwrap_or_else(|| panic!("no {name}")).clone()
    };
    let text = sym("a_global").2;
    let mut addrs: Vec<u64> = defined
        .iter()
        .filter(|s| s.2 == text)
        .flat_map(|s| [s.1 - 1, s.1, s.1 + 1, s.1 + 4, s.1 + 9, s.1 + 20])
        .collect();
    addrs.sort_unstable();
    addrs.dedup();
    // Highest first: binutils reuses its previous answer for any address
    // within that symbol's size, so in ascending order a symbol starting
    // inside another (e_label in d_func) would be named after its predecessor.
    addrs.reverse();
    let theirs = addr2line(bin, &addrs);
    let mut s = Symbolizer::new();
    let name = |s: &mut Symbolizer, a: u64| {
        let fr = s.symbolize(bin, a).unwrap();
        fr.iter()
            .map(|f| f.function.as_deref().unwrap_or("??").to_string())
            .collect::<Vec<_>>()
    };
    for (a, t) in addrs.iter().zip(&theirs) {
        let t: Vec<String> = t
            .iter()
            .map(|f| f.function.clone().unwrap_or_else(|| "??".into()))
            .collect();
        assert_eq!(name(&mut s, *a), t, "{a:#x}");
    }
    // What that means, independent of the symbol order the assembler chose.
    let sym = |name: &str| sym(name).1;
    let a = sym("a_global");
    // Locals precede globals in .symtab, and a full tie goes to the first.
    let got = name(&mut s, a + 4);
    assert!(got == ["__a_local"] || got == ["a_local2"], "{got:?}");
    // The larger of two symbols at one address wins, even where both cover it.
    assert_eq!(name(&mut s, sym("b_small") + 4), ["b_big"]);
    // Code past a symbol's size still belongs to it, up to the next symbol.
    assert_eq!(name(&mut s, sym("c_short") + 20), ["c_short"]);
    // Hidden local markers and objects do not count; other labels do.
    assert_eq!(name(&mut s, sym("d_func") + 20), ["d_func"]);
    assert_eq!(name(&mut s, sym("e_object") + 4), ["e_label"]);
    // A sized function beats an unsized untyped symbol at its address.
    assert_eq!(name(&mut s, sym("f_func_local") + 4), ["f_func_local"]);
    // DWARF names a C function; its symbol-table aliases do not matter.
    assert_eq!(name(&mut s, sym("real_fn")), ["real_fn"]);

    // In C++, only a function with a linkage name is named from DWARF.
    let cxx = &f.aliases_cxx;
    let c_entry = readelf_sym(cxx, "c_entry").value;
    let mangled = readelf_sym(cxx, "_ZN2ns7mangledEi").value;
    let addrs = [mangled + 2, mangled, c_entry + 2, c_entry];
    for (a, t) in addrs.iter().zip(addr2line(cxx, &addrs)) {
        let ours = s.symbolize(cxx, *a).unwrap();
        let ours: Vec<_> = ours.iter().map(|f| f.function.as_deref()).collect();
        let t: Vec<_> = t.iter().map(|f| f.function.as_deref()).collect();
        assert_eq!(ours, t, "{a:#x}");
        let want = if *a >= mangled && *a < mangled + 3 {
            "ns::mangled(int)"
        } else {
            "__GI_c_entry"
        };
        assert_eq!(ours, [Some(want)], "{a:#x}");
    }
}

#[test]
fn symbolize_matches_addr2line_dwarf4_compressed() {
    let f = fixtures();
    compare_with_addr2line(&f.prog_dw4z, &f.prog_dw4z, 2000);
}

#[test]
fn symbolize_matches_addr2line_debuglink() {
    let f = fixtures();
    let debug = f.prog_stripped.with_file_name("prog_stripped.debug");
    compare_with_addr2line(&f.prog_stripped, &debug, 2000);
}

#[test]
fn symbolize_matches_addr2line_split_dwarf() {
    let f = fixtures();
    // binutils 2.40 does not follow .dwo files: use an identical non-split build
    // as the oracle, after checking that the code is the same.
    let nm = |p: &Path| run(std::process::Command::new("nm").arg(p));
    assert_eq!(nm(&f.prog_split), nm(&f.prog_plain));
    compare_with_oracle(&f.prog_split, &f.prog_plain, &f.prog_split, 2000);
}

#[test]
fn symbolize_matches_addr2line_cpp_and_rust() {
    let f = fixtures();
    compare_with_addr2line(&f.cpp, &f.cpp, 2000);
    compare_with_addr2line(&f.rust_legacy, &f.rust_legacy, 3000);
}

#[test]
fn symbolize_reports_inlined_frames() {
    let f = fixtures();
    let m = one(&path(&f.prog_pie), "uses_inline");
    let mut s = Symbolizer::new();
    let inlined = (m.address..m.address + m.size)
        .map(|a| s.symbolize(&f.prog_pie, a).unwrap())
        .find(|fr| fr.len() >= 2)
        .expect("uses_inline has inlined frames");
    assert_eq!(
        inlined.last().unwrap().function.as_deref(),
        Some("uses_inline")
    );
    assert!(
        inlined[0].function.as_deref() == Some("square")
            || inlined[0].function.as_deref() == Some("twice_square")
    );
}

#[test]
fn symbolize_batch_answers_like_single_calls() {
    let f = fixtures();
    let addrs = sample_addresses(&f.prog_pie, 300);
    let mut s = Symbolizer::new();
    let batch = s.symbolize_batch(&f.prog_pie, &addrs).unwrap();
    let single: Vec<_> = addrs
        .iter()
        .map(|&a| Symbolizer::new().symbolize(&f.prog_pie, a).unwrap())
        .collect();
    assert_eq!(batch, single);
    assert!(s
        .symbolize_batch(Path::new("/nonexistent"), &addrs)
        .is_err());
}

#[test]
fn pid_target_exe_and_mapped_libraries() {
    let f = fixtures();
    let p = start_sleeper(&f.prog_pie);
    let pid = p.pid();
    let t = Target::Pid(pid);
    let m = one(&t, "compute_sum");
    assert_eq!(
        m.binary,
        PathBuf::from(format!("/proc/{pid}/root{}", f.prog_pie.display()))
    );
    assert_eq!(m.display_binary, f.prog_pie.to_string_lossy());
    check_match(&m, &f.prog_pie, &f.prog_pie, "compute_sum");

    let m = one(&t, "libfix:fixlib_mul");
    assert_eq!(m.display_binary, f.libfix.to_string_lossy());
    check_match(&m, &f.libfix, &f.libfix, "fixlib_mul");

    let m = one(&t, "libc:malloc");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(
        maps.contains(&m.display_binary),
        "{} not in maps",
        m.display_binary
    );
    assert!(m.binary.starts_with(format!("/proc/{pid}/root")));
    assert_eq!(m.address, readelf_sym(&m.binary, "malloc").value);

    let e = resolve(&t, "fixlib_add", &Options::default()).unwrap_err();
    assert!(e.to_string().contains("use libfix:fixlib_add"), "{e}");
    let e = resolve(&t, "libnotthere:foo", &Options::default()).unwrap_err();
    assert!(matches!(e, Error::LibraryNotFound { .. }), "{e:?}");
    assert!(
        e.to_string().contains("libfix.so"),
        "lists loaded libraries: {e}"
    );
}

/// Runtime address of `vaddr` in `file` for a process, from /proc/PID/maps.
fn runtime_addr(pid: u32, file: &Path, vaddr: u64) -> u64 {
    let off = file_offset(file, vaddr);
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    for l in maps.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 6 || Path::new(f[5]) != file {
            continue;
        }
        let (start, end) = f[0].split_once('-').unwrap();
        let (start, end) = (
            u64::from_str_radix(start, 16).unwrap(),
            u64::from_str_radix(end, 16).unwrap(),
        );
        let moff = u64::from_str_radix(f[2], 16).unwrap();
        if off >= moff && off < moff + (end - start) {
            return start + off - moff;
        }
    }
    panic!("{vaddr:#x} of {} not mapped", file.display());
}

#[test]
fn symbolize_pid_matches_addr2line() {
    let f = fixtures();
    let p = start_sleeper(&f.prog_pie);
    let pid = p.pid();
    let mut s = Symbolizer::new();
    for (file, func) in [
        (&f.prog_pie, "compute_sum"),
        (&f.prog_pie, "uses_inline"),
        (&f.libfix, "fixlib_add"),
    ] {
        let sym = readelf_sym(file, func);
        let vaddrs: Vec<u64> = (0..sym.size).step_by(3).map(|o| sym.value + o).collect();
        let theirs = addr2line(file, &vaddrs);
        for (v, t) in vaddrs.iter().zip(theirs) {
            let rt = runtime_addr(pid, file, *v);
            let ours = s.symbolize_pid(pid, rt).unwrap();
            let ours = normalize(
                ours.into_iter()
                    .map(|f| A2lFrame {
                        function: f.function.map(|s| s.to_string()),
                        file: f.file.map(|s| s.to_string()),
                        line: f.line,
                    })
                    .collect(),
            );
            assert_eq!(ours, normalize(t), "{func}+{:#x}", v - sym.value);
        }
    }
    let e = s.symbolize_pid(pid, 0x10).unwrap_err();
    assert!(matches!(e, Error::AddressNotMapped { .. }), "{e:?}");
}

#[test]
fn no_such_process() {
    let t = Target::Pid(999_999_999);
    let e = resolve(&t, "main", &Options::default()).unwrap_err();
    assert!(matches!(e, Error::NoSuchProcess(999_999_999)), "{e:?}");
    assert_eq!(e.to_string(), "no such process: 999999999");
    assert!(matches!(
        list(&t, None).unwrap_err(),
        Error::NoSuchProcess(_)
    ));
    assert!(matches!(
        Symbolizer::new()
            .symbolize_pid(999_999_999, 0x1000)
            .unwrap_err(),
        Error::NoSuchProcess(_)
    ));
}

#[test]
fn library_not_loaded_by_executable() {
    let f = fixtures();
    let e = resolve(&path(&f.prog_pie), "libnotthere:foo", &Options::default()).unwrap_err();
    assert!(matches!(e, Error::LibraryNotFound { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("libnotthere") && msg.contains("libfix.so"),
        "{msg}"
    );
}

#[test]
fn bad_files_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "hello\n").unwrap();
    let e = resolve(&path(&text), "main", &Options::default()).unwrap_err();
    assert!(matches!(e, Error::NotElf { .. }), "{e:?}");
    assert!(e.to_string().contains("not an ELF file"));
    assert!(matches!(
        Symbolizer::new().symbolize(&text, 0).unwrap_err(),
        Error::NotElf { .. }
    ));

    let empty = dir.path().join("empty");
    std::fs::write(&empty, "").unwrap();
    assert!(matches!(
        resolve(&path(&empty), "main", &Options::default()).unwrap_err(),
        Error::NotElf { .. }
    ));

    let e = resolve(
        &Target::Path(dir.path().to_path_buf()),
        "main",
        &Options::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::NotElf { .. }), "{e:?}");

    let missing = dir.path().join("missing");
    let e = resolve(&path(&missing), "main", &Options::default()).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    assert!(e.to_string().contains("missing"));

    // Truncated and corrupted copies of a real ELF file.
    let real = std::fs::read(&fixtures().prog_pie).unwrap();
    for (i, len) in [4usize, 64, 200, 1000, real.len() / 2]
        .into_iter()
        .enumerate()
    {
        let p = dir.path().join(format!("trunc{i}"));
        std::fs::write(&p, &real[..len]).unwrap();
        let _ = resolve(&path(&p), "main", &Options::default());
        let _ = list(&path(&p), None);
        let _ = Symbolizer::new().symbolize(&p, 0x1139);
    }
    let mut corrupt = real.clone();
    for b in corrupt.iter_mut().skip(64).step_by(97) {
        *b ^= 0x5a;
    }
    let p = dir.path().join("corrupt");
    std::fs::write(&p, &corrupt).unwrap();
    let _ = resolve(&path(&p), "main", &Options::default());
    let _ = Symbolizer::new().symbolize(&p, 0x1139);

    let e = resolve(&path(&fixtures().prog_pie), "libfix:", &Options::default()).unwrap_err();
    assert!(matches!(e, Error::BadSpec { .. }), "{e:?}");
}

#[test]
fn list_like_bpftrace() {
    let f = fixtures();
    let t = path(&f.prog_pie);
    let all = list(&t, None).unwrap();
    let mut want: Vec<ReadelfSym> = readelf_funcs(&f.prog_pie, false);
    want.sort_by_key(|s| s.value);
    want.dedup_by_key(|s| s.value);
    let mut got: Vec<u64> = all.iter().map(|m| m.address).collect();
    got.sort();
    assert_eq!(got, want.iter().map(|s| s.value).collect::<Vec<_>>());
    for func in PROG_FUNCS {
        assert!(all.iter().any(|m| m.name == *func), "{func} listed");
    }
    assert_eq!(list(&t, Some("compute_*")).unwrap().len(), 2);
    let lib = list(&t, Some("libfix:*")).unwrap();
    let mut names: Vec<_> = lib
        .iter()
        .map(|m| m.name.as_str())
        .filter(|n| n.starts_with("fixlib"))
        .collect();
    names.sort();
    assert_eq!(names, ["fixlib_add", "fixlib_internal", "fixlib_mul"]);
    for m in &lib {
        assert_eq!(m.file_offset, file_offset(&f.libfix, m.address) + m.skipped);
    }
}

/// binutils 2.40 gets the file wrong for code from an #included .c file, so
/// the oracle here is the source text itself: every reported file:line must
/// be a line of the right function.
#[test]
fn symbolize_code_from_included_file_against_source() {
    let f = fixtures();
    let sym = readelf_sym(&f.inc, "inc_outer");
    let body = std::fs::read_to_string(fixture_src("inc_body.c")).unwrap();
    let body_lines: Vec<&str> = body.lines().collect();
    let line_of =
        |marker: &str| body_lines.iter().position(|l| l.contains(marker)).unwrap() as u32 + 1;
    let (helper_line, call_line) = (line_of("HELPER_BODY"), line_of("CALL_SITE"));
    let outer_range = line_of("int inc_outer")..=call_line + 1;
    let mut s = Symbolizer::new();
    let mut saw_inlined = false;
    for a in sym.value..sym.value + sym.size {
        let frames = s.symbolize(&f.inc, a).unwrap();
        let outer = frames.last().unwrap();
        assert_eq!(outer.function.as_deref(), Some("inc_outer"));
        for fr in &frames {
            if fr.line.is_none_or(|l| l == 0) {
                continue;
            }
            assert!(
                fr.file.as_deref().unwrap().ends_with("inc_body.c"),
                "{a:#x}: {frames:?}"
            );
        }
        if frames.len() == 2 {
            saw_inlined = true;
            assert_eq!(frames[0].function.as_deref(), Some("inc_helper"));
            assert_eq!(frames[0].line, Some(helper_line), "{a:#x}: {frames:?}");
            assert_eq!(outer.line, Some(call_line), "{a:#x}: {frames:?}");
        } else if let Some(l) = outer.line.filter(|&l| l != 0) {
            assert!(outer_range.contains(&l), "{a:#x}: {frames:?}");
        }
    }
    assert!(saw_inlined, "inc_helper should be inlined into inc_outer");
    let m = one(&path(&f.inc), "inc_outer");
    assert_eq!(
        m.source
            .as_deref()
            .map(|s| s.rsplit_once(':').unwrap().1.parse::<u32>().unwrap()),
        Some(line_of("int inc_outer"))
    );
    assert!(m.source.unwrap().contains("inc_body.c"));
}

#[test]
fn symbolizer_cache_follows_file_identity() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::copy(&f.prog_pie, &a).unwrap();
    std::fs::copy(&f.prog_pie, &b).unwrap();
    let sym = readelf_sym(&f.prog_pie, "compute_sum");
    let mut s = Symbolizer::new();
    let fa = s.symbolize(&a, sym.value).unwrap();
    // Same build-id through another path: same answer from the shared entry.
    assert_eq!(s.symbolize(&b, sym.value).unwrap(), fa);
    assert_eq!(fa.last().unwrap().function.as_deref(), Some("compute_sum"));
    // A different binary replacing `a` must not be answered from the cache
    // once the identity read for the first call (trusted 1 ms) is stale.
    std::fs::remove_file(&a).unwrap();
    std::fs::copy(&f.cpp, &a).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let m = readelf_sym(&f.cpp, "_ZN2ns5Class6methodEi");
    let fr = s.symbolize(&a, m.value).unwrap();
    assert_eq!(
        fr.last().unwrap().function.as_deref(),
        Some("ns::Class::method(int)")
    );
    // Nor right away when the caller says files changed.
    std::fs::remove_file(&a).unwrap();
    std::fs::copy(&f.prog_pie, &a).unwrap();
    s.recheck_files();
    assert_eq!(s.symbolize(&a, sym.value).unwrap(), fa);
}

/// Uses the system libc and, when libc6-dbg is installed, its debug file found
/// by build-id under /usr/lib/debug/.build-id.
#[test]
fn libc_with_build_id_debug_file() {
    let f = fixtures();
    let m = one(&path(&f.prog_pie), "libc:malloc");
    let id = m.build_id.clone().expect("libc has a build-id");
    let debug = PathBuf::from(format!(
        "/usr/lib/debug/.build-id/{}/{}.debug",
        &id[..2],
        &id[2..]
    ));
    if !debug.is_file() {
        eprintln!("skipping build-id part: {} not installed", debug.display());
        return;
    }
    assert!(m.source.is_some(), "source from the build-id debug file");
    // Only in .symtab of the debug file, not in libc's .dynsym.
    let local = readelf_funcs(&debug, false)
        .into_iter()
        .find(|s| {
            s.bind == "LOCAL"
                && s.size > 16
                && !readelf_funcs(&m.binary, true)
                    .iter()
                    .any(|d| d.value == s.value)
        })
        .expect("a local function");
    let spec = format!("libc:{}", local.name);
    let got = resolve(
        &path(&f.prog_pie),
        &spec,
        &Options {
            allow_multiple: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        got.iter().any(|g| g.address == local.value),
        "{spec}: {got:?}"
    );
    // Lines agree with binutils (which also follows the build-id link).
    let addrs: Vec<u64> = (0..m.size).step_by(7).map(|o| m.address + o).collect();
    let theirs = addr2line(&m.binary, &addrs);
    let mut s = Symbolizer::new();
    for (a, t) in addrs.iter().zip(theirs) {
        let ours = s.symbolize(&m.binary, *a).unwrap();
        assert_eq!(
            ours.last().unwrap().line,
            t.last().unwrap().line,
            "{a:#x}: {ours:?} vs {t:?}"
        );
    }
}

#[test]
fn bare_command_name_is_searched_in_path() {
    // `sh` is on every PATH this runs with; the answer must be the file exec would run.
    let shell = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join("sh"))
        .find(|p| p.is_file())
        .unwrap();
    // Distribution shells are usually stripped: either answer names the file.
    match resolve(
        &Target::Path(PathBuf::from("sh")),
        "main",
        &Options::default(),
    ) {
        Ok(v) => assert_eq!(v[0].binary, shell),
        Err(Error::Stripped { binary, .. }) => assert_eq!(binary, shell.to_string_lossy()),
        Err(e) => panic!("{e}"),
    }
}

/// dwz supplementary files: names, inlined frames and declaration lines that
/// live in the shared file are read through `.gnu_debugaltlink`.
#[test]
fn dwz_supplementary_file_matches_addr2line() {
    let d = dwz_fixtures();
    let readelf = |args: &[&str], f: &Path| {
        run(std::process::Command::new("readelf")
            .args(args)
            .arg(f)
            .stderr(std::process::Stdio::null()))
    };
    let a_debug = d.dir.join("a.debug");
    assert!(readelf(&["-S", "-W"], &a_debug).contains(".gnu_debugaltlink"));
    // The fixture must really use the alternate forms, or this tests nothing.
    let info = readelf(&["--debug-dump=info"], &a_debug);
    assert!(
        info.contains("DW_AT_abstract_origin: <alt"),
        "no DW_FORM_GNU_ref_alt"
    );
    assert!(
        info.contains("(alt indirect string"),
        "no DW_FORM_GNU_strp_alt"
    );

    assert_dwz_matches(d);

    // A supplementary file with another build-id must not be used: names
    // would come out wrong silently. Lines still resolve without it, and the
    // outer function is named from the symbol table.
    let (bin, orig) = &d.pairs[0];
    let other = tempfile::tempdir().unwrap();
    for f in ["a", "a.debug"] {
        std::fs::copy(d.dir.join(f), other.path().join(f)).unwrap();
    }
    std::fs::copy(d.dir.join("c.debug"), other.path().join("common.debug")).unwrap();
    let moved = other.path().join("a");
    let mut s = Symbolizer::new();
    let inlined = one(&path(orig), "uses_inline");
    let mut saw_unnamed_inline = false;
    for a in inlined.address..inlined.address + inlined.size {
        let here = s.symbolize(&moved, a).unwrap();
        let there = s.symbolize(bin, a).unwrap();
        let lines = |fr: &[symbolizer::Frame]| fr.iter().map(|f| f.line).collect::<Vec<_>>();
        assert_eq!(lines(&here), lines(&there), "{a:#x}");
        assert_eq!(
            here.last().unwrap().function.as_deref(),
            Some("uses_inline")
        );
        saw_unnamed_inline |= here.len() > 1 && here[0].function.is_none();
    }
    assert!(saw_unnamed_inline, "the wrong supplementary file was used");
}

/// Our answers on dwz'd files equal addr2line's on the same builds before dwz, and
/// declarations are the same as there.
fn assert_dwz_matches(d: &DwzFixtures) {
    for (bin, orig) in &d.pairs {
        // binutils 2.40 names inlined frames wrongly through DW_FORM_GNU_ref_alt
        // (the caller's name for the callee), so the full chains are checked
        // against addr2line on the same build before dwz...
        compare_with_oracle(bin, orig, orig, 2000);
        // ...and the outer frames against addr2line on the dwz'd files themselves
        // (binutils 2.40 reads no DW_FORM_strp_sup: only the GNU forms).
        if d.dir.ends_with("dwz5") {
            continue;
        }
        let addrs = sample_addresses(orig, 500);
        let theirs = addr2line(bin, &addrs);
        let mut s = Symbolizer::new();
        for (a, t) in addrs.iter().zip(theirs) {
            let ours = s.symbolize(bin, *a).unwrap();
            let (o, t) = (ours.last().unwrap(), normalize(t).pop().unwrap());
            assert_eq!(o.function.as_deref(), t.function.as_deref(), "{a:#x}");
            if t.line.is_some() {
                assert_eq!(
                    (o.file.as_deref(), o.line),
                    (t.file.as_deref(), t.line),
                    "{a:#x}"
                );
            }
        }
        // Declarations (DW_AT_decl_file/line) of every function, some of them
        // reached through DW_AT_abstract_origin into the supplementary file.
        let sources = |b: &Path| {
            list(&path(b), None)
                .unwrap()
                .into_iter()
                .map(|m| (m.name, m.source))
                .collect::<Vec<_>>()
        };
        let ours = sources(bin);
        assert!(ours.iter().filter(|(_, s)| s.is_some()).count() >= 4);
        assert_eq!(ours, sources(orig), "{}", bin.display());
    }
}

/// DWARF 5 supplementary files (`dwz -5`: `.debug_sup`, DW_FORM_ref_sup4 and
/// DW_FORM_strp_sup), which binutils 2.40 does not read.
#[test]
fn dwarf5_supplementary_file_matches_the_build_before_dwz() {
    let d = dwz5_fixtures();
    let a_debug = d.dir.join("a.debug");
    let sections = run(std::process::Command::new("readelf")
        .args(["-S", "-W"])
        .arg(&a_debug));
    assert!(sections.contains(".debug_sup"), "no .debug_sup");
    let abbrevs = run(std::process::Command::new("readelf")
        .arg("--debug-dump=abbrev")
        .arg(&a_debug));
    assert!(abbrevs.contains("DW_FORM_strp_sup") && abbrevs.contains("DW_FORM_ref_sup4"));
    assert_dwz_matches(d);
}

/// What makes return probes unsafe, seen in a program's files: a C++ program that throws
/// (a warning: an exception leaving a probed call ends it), and one that switches stacks
/// with ucontext (its returns refused unless `unsafe_returns`); a plain C program has
/// neither.
#[test]
fn programs_that_throw_or_switch_stacks_are_known() {
    let dir = tempfile::tempdir().unwrap();
    let build = |name: &str, compiler: &str, ext: &str, src: &str| {
        let file = dir.path().join(format!("{name}.{ext}"));
        std::fs::write(&file, src).unwrap();
        let out = dir.path().join(name);
        run(Command::new(compiler)
            .args(["-O2", "-o"])
            .arg(&out)
            .arg(&file));
        out
    };
    let throws = build(
        "throws",
        "g++",
        "cc",
        "#include <stdexcept>\nint main(int c, char **) { if (c > 5) throw std::runtime_error(\"x\"); return 0; }\n",
    );
    let switches = build(
        "switches",
        "gcc",
        "c",
        "#include <ucontext.h>\nucontext_t a, b;\nint main(void) { return swapcontext(&a, &b); }\n",
    );
    let plain = build("plain", "gcc", "c", "int main(void) { return 0; }\n");
    let why = symbolizer::throws_exceptions(&Target::Path(throws.clone())).unwrap();
    assert!(why.ends_with("throws imports __cxa_throw"), "{why}");
    assert_eq!(
        symbolizer::throws_exceptions(&Target::Path(plain.clone())),
        None
    );

    let why = symbolizer::switches_stacks(&Target::Path(switches.clone())).unwrap();
    assert!(why.ends_with("switches imports swapcontext"), "{why}");
    assert_eq!(
        symbolizer::switches_stacks(&Target::Path(throws.clone())),
        None
    );

    // Their returns are probed at their instructions (`main` leaves by a tail call to
    // swapcontext, or returns), never by a uretprobe unless the user says so.
    let main = |bin: &Path, unsafe_returns: bool| {
        let opts = Options {
            unsafe_returns,
            ..Default::default()
        };
        resolve(&Target::Path(bin.to_owned()), "main", &opts).unwrap()[0].clone()
    };
    for (bin, switching) in [(&switches, true), (&throws, false)] {
        let m = main(bin, false);
        assert!(
            matches!(&m.exit, Exit::Returns { rets, tails } if !rets.is_empty() || !tails.is_empty()),
            "{:?}",
            m.exit
        );
        assert_eq!(m.stacks_switch, switching);
        assert_eq!(main(bin, true).exit, Exit::Uretprobe);
    }
    assert_eq!(main(&plain, false).exit, Exit::Uretprobe);
}
