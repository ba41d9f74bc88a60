//! USDT probes against `readelf -n` on a fixture built with <sys/sdt.h> and
//! on Debian's python3.11.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::{file_offset, run};
use symbolizer::{
    list_usdt, parse_stapsdt_notes, resolve_usdt, Error, Target, UsdtArg, UsdtLocation, UsdtProbe,
};

/// A note as `readelf -n` prints it.
#[derive(Debug, Clone, PartialEq)]
struct Note {
    provider: String,
    name: String,
    location: u64,
    base: u64,
    semaphore: u64,
    args: String,
}

fn readelf_notes(bin: &Path) -> Vec<Note> {
    let out = run(Command::new("readelf").arg("-n").arg(bin));
    let mut notes = Vec::new();
    let mut cur: Option<Note> = None;
    let hex = |s: &str| u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap();
    for l in out.lines() {
        let l = l.trim();
        // Older readelf prints the provider on the note's own line.
        if let Some(p) = l.split_once("Provider: ").map(|x| x.1) {
            notes.extend(cur.take());
            cur = Some(Note {
                provider: p.to_string(),
                name: String::new(),
                location: 0,
                base: 0,
                semaphore: 0,
                args: String::new(),
            });
        } else if let Some(c) = cur.as_mut() {
            if let Some(n) = l.strip_prefix("Name: ") {
                c.name = n.to_string();
            } else if let Some(rest) = l.strip_prefix("Location: ") {
                let f: Vec<&str> = rest.split(", ").collect();
                c.location = hex(f[0]);
                c.base = hex(f[1].trim_start_matches("Base: "));
                c.semaphore = hex(f[2].trim_start_matches("Semaphore: "));
            } else if let Some(a) = l.strip_prefix("Arguments:") {
                c.args = a.trim().to_string();
            }
        }
    }
    notes.extend(cur);
    notes
}

fn fixture() -> &'static PathBuf {
    static F: OnceLock<PathBuf> = OnceLock::new();
    F.get_or_init(|| {
        assert!(
            Path::new("/usr/include/x86_64-linux-gnu/sys/sdt.h").exists(),
            "sys/sdt.h is missing; the USDT tests need it (Debian package systemtap-sdt-dev)"
        );
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("usdt-fixture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/usdt.c");
        let obj = dir.join("sema.o");
        let bin = dir.join("usdt");
        run(Command::new("gcc")
            .args(["-O2", "-g", "-c", "-DUSDT_SEMAPHORE_PART"])
            .arg(&src)
            .arg("-o")
            .arg(&obj));
        run(Command::new("gcc")
            .args(["-O2", "-g"])
            .arg(&src)
            .arg(&obj)
            .arg("-o")
            .arg(&bin));
        bin
    })
}

fn target(p: &Path) -> Target {
    Target::Path(p.to_path_buf())
}

/// Every field of every probe equals readelf's note; offsets are the
/// addresses mapped through readelf's program headers.
fn assert_probes_match(bin: &Path, probes: &[UsdtProbe]) -> usize {
    let mut notes = readelf_notes(bin);
    notes.sort_by(|a, b| {
        (&a.provider, &a.name, a.location).cmp(&(&b.provider, &b.name, b.location))
    });
    assert_eq!(probes.len(), notes.len(), "{}", bin.display());
    for (p, n) in probes.iter().zip(&notes) {
        assert_eq!((&p.provider, &p.name), (&n.provider, &n.name));
        // Not prelinked: `.stapsdt.base` is where the notes say.
        assert_eq!(p.address, n.location, "{}:{}", p.provider, p.name);
        assert_eq!(p.file_offset, file_offset(bin, n.location));
        assert_eq!(p.semaphore, n.semaphore);
        let sema_off = if n.semaphore == 0 {
            0
        } else {
            file_offset(bin, n.semaphore)
        };
        assert_eq!(p.semaphore_offset, sema_off);
        assert_eq!(p.args_spec, n.args);
        assert_eq!(p.display_binary, bin.to_string_lossy());
        if p.unsupported.is_none() {
            // Sizes as written, one parsed argument per spec.
            let sizes: Vec<i8> = n
                .args
                .split_whitespace()
                .map(|a| a.split('@').next().unwrap().parse().unwrap())
                .collect();
            assert_eq!(p.args.iter().map(|a| a.size).collect::<Vec<_>>(), sizes);
        }
    }
    notes.len()
}

fn reg(size: i8, name: &str, offset: u16) -> UsdtArg {
    UsdtArg {
        size,
        location: UsdtLocation::Register {
            name: name.into(),
            offset,
        },
    }
}

#[test]
fn fixture_probes_equal_readelf() {
    let bin = fixture();
    let all = list_usdt(&target(bin), None).unwrap();
    let n = assert_probes_match(bin, &all);
    assert_eq!(n, 9);
    // Argument kinds, as this gcc compiled them (the specs are checked
    // against readelf above; their meaning is pinned here).
    let get = |name: &str| all.iter().find(|p| p.name == name).unwrap();
    assert!(get("zero").args.is_empty());
    for p in &all {
        assert!(p.unsupported.is_none(), "{p:?}");
        for (arg, spec) in p.args.iter().zip(p.args_spec.split_whitespace()) {
            let loc = spec.split_once('@').unwrap().1;
            match &arg.location {
                UsdtLocation::Register { name, .. } => assert_eq!(format!("%{name}"), loc),
                UsdtLocation::Memory {
                    name, displacement, ..
                } => {
                    let d = if *displacement == 0 {
                        String::new()
                    } else {
                        displacement.to_string()
                    };
                    assert_eq!(format!("{d}(%{name})"), loc)
                }
                UsdtLocation::Constant(c) => assert_eq!(format!("${c}"), loc),
                UsdtLocation::Indexed { .. } => {}
                UsdtLocation::Static { symbol, addend, .. } => {
                    assert_eq!((format!("{symbol}(%rip)"), *addend), (loc.to_string(), 0))
                }
            }
        }
    }
    let kinds = |f: fn(&UsdtLocation) -> bool| {
        all.iter()
            .flat_map(|p| &p.args)
            .filter(|a| f(&a.location))
            .count()
    };
    assert!(kinds(|l| matches!(l, UsdtLocation::Register { .. })) >= 10);
    assert!(kinds(|l| matches!(l, UsdtLocation::Memory { .. })) >= 2);
    assert!(kinds(|l| matches!(l, UsdtLocation::Constant(_))) >= 2);
    assert_eq!(get("six").args.len(), 6);
    assert_eq!(get("guarded").args, vec![reg(-8, "rdi", 112)]);
    assert_ne!(get("guarded").semaphore, 0);
    // The global is read through its symbol, at the address the symbol table gives.
    match &get("global").args[0].location {
        UsdtLocation::Static {
            symbol, address, ..
        } => assert_eq!(Some(*address), nm_address(bin, symbol), "{symbol}"),
        other => panic!("global read as {other:?}"),
    }
}

/// A symbol's address as `nm` gives it.
fn nm_address(bin: &Path, symbol: &str) -> Option<u64> {
    run(Command::new("nm").arg(bin)).lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (addr, _, name) = (f.next()?, f.next()?, f.next()?);
        (name == symbol).then(|| u64::from_str_radix(addr, 16).ok())?
    })
}

#[test]
fn resolve_globs_refusals_and_suggestions() {
    let bin = fixture();
    let t = target(bin);
    let one = resolve_usdt(&t, None, "fix", "one").unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].args, vec![reg(-4, "eax", 80)]);
    let g = resolve_usdt(&t, None, "fix", "t*").unwrap();
    let mut names: Vec<&str> = g.iter().map(|p| p.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["three", "two"]);
    let sema = resolve_usdt(&t, Some(&bin.to_string_lossy()), "fix", "guarded").unwrap();
    assert_eq!(
        sema[0].semaphore_offset,
        file_offset(bin, sema[0].semaphore)
    );

    let e = resolve_usdt(&t, None, "fix", "tow").unwrap_err();
    match &e {
        Error::NoSuchUsdtProbe { suggestions, .. } => {
            assert!(
                suggestions.iter().any(|s| s == "fix:two"),
                "{suggestions:?}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(!e.to_string().contains('\n'));

    let none = common::fixtures().prog_pie.clone();
    let e = resolve_usdt(&target(&none), None, "*", "*").unwrap_err();
    assert!(matches!(e, Error::NoUsdtProbes { .. }), "{e:?}");

    // LIB:PROVIDER:NAME in a listing pattern.
    let l = list_usdt(&t, Some(&format!("{}:fix:f*", bin.display()))).unwrap();
    assert_eq!(
        l.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["five", "four"]
    );
    assert_eq!(list_usdt(&t, Some("fix:s*")).unwrap().len(), 1);
}

/// Debian 12's python3.11 has 8 probes, all with semaphores.
#[test]
fn python311_probes_equal_readelf() {
    let py = Path::new("/usr/bin/python3.11");
    assert!(
        py.is_file(),
        "/usr/bin/python3.11 is missing (Debian package python3.11-minimal)"
    );
    let all = list_usdt(&target(py), None).unwrap();
    let n = assert_probes_match(py, &all);
    assert!(n >= 8, "{n}");
    assert!(
        all.iter()
            .all(|p| p.unsupported.is_none() && p.semaphore != 0),
        "{all:?}"
    );
    let fe = resolve_usdt(&target(py), None, "python", "function__entry").unwrap();
    assert_eq!(fe.len(), 1);
    assert_eq!(fe[0].args.len(), 3);
    eprintln!("python3.11: {n} probes equal readelf -n");
}

/// A prelinked binary's notes keep link-time addresses; `.stapsdt.base`
/// has moved with the code, and the probe moves with it.
#[test]
fn prelink_adjustment_follows_stapsdt_base() {
    let bin = fixture();
    let moved = bin.with_file_name("usdt_moved");
    run(Command::new("objcopy")
        .arg("--change-section-address")
        .arg(".stapsdt.base+0x1000")
        .arg(bin)
        .arg(&moved)
        .stderr(std::process::Stdio::null()));
    let before = list_usdt(&target(bin), Some("fix:one")).unwrap();
    match list_usdt(&target(&moved), Some("fix:one")) {
        Ok(after) => assert_eq!(after[0].address, before[0].address + 0x1000),
        // The shifted address may leave every segment: refused, not misplaced.
        Err(e) => assert!(matches!(e, Error::NotLoadable { .. }), "{e:?}"),
    }
}

/// Truncated and bit-flipped copies of real binaries: errors or answers, never a panic.
#[test]
fn garbage_notes_do_not_panic() {
    for bin in [fixture().clone(), PathBuf::from("/usr/bin/python3.11")] {
        let real = std::fs::read(&bin).unwrap();
        let good = parse_stapsdt_notes(&real).unwrap();
        assert_eq!(good.len(), readelf_notes(&bin).len());
        let notes_at = real.windows(8).position(|w| w == b"stapsdt\0").unwrap();
        for cut in (0..real.len())
            .step_by(real.len() / 50)
            .chain(notes_at..notes_at + 200)
        {
            let _ = parse_stapsdt_notes(&real[..cut]);
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..300 {
            let mut b = real.clone();
            for _ in 0..8 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Most flips where the notes and headers are.
                let at = if x & 1 == 0 {
                    notes_at.saturating_sub(64) + (x as usize >> 8) % 512
                } else {
                    (x as usize >> 8) % b.len()
                };
                if at < b.len() {
                    b[at] ^= 1 << ((x >> 3) & 7);
                }
            }
            let _ = parse_stapsdt_notes(&b);
        }
    }
}
