//! Synthetic pclntabs of every layout, whole, truncated and bit-flipped,
//! through the public parser.

use super::pclntab::GoPclnVersion;
use super::public::parse_gopclntab;

fn put_uvarint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A pc-value table: runs of (value, length in bytes).
fn pctable(out: &mut Vec<u8>, runs: &[(i32, u32)]) -> u32 {
    let off = out.len() as u32;
    let mut prev = -1;
    for &(v, len) in runs {
        let d = v - prev;
        let u = if d < 0 {
            ((!d as u32) << 1) | 1
        } else {
            (d as u32) << 1
        };
        put_uvarint(out, u);
        put_uvarint(out, len);
        prev = v;
    }
    out.push(0);
    off
}

struct Fake {
    name: &'static str,
    /// Offset from the text start.
    entry: u64,
    /// (line, length) runs; their sum is the function's size.
    lines: &'static [(i32, u32)],
    file: u32,
}

const TEXT: u64 = 0x40_1000;
const FUNCS: &[Fake] = &[
    Fake {
        name: "main.main",
        entry: 0,
        lines: &[(10, 4), (11, 12), (10, 4)],
        file: 0,
    },
    Fake {
        name: "main.(*s).handle",
        entry: 0x20,
        lines: &[(20, 8), (25, 3)],
        file: 1,
    },
    Fake {
        name: "net/http.(*conn).serve",
        entry: 0x40,
        lines: &[(1800, 0x30)],
        file: 2,
    },
];
const FILES: &[&str] = &["/src/main.go", "/src/s.go", "/go/src/net/http/server.go"];
const END: u64 = 0x80;

/// A pclntab laid out as the Go linker of `v` writes one.
fn synthetic(v: GoPclnVersion) -> Vec<u8> {
    let words = if v == GoPclnVersion::Go116 { 7 } else { 8 };
    let hdr = 8 + words * 8;
    let mut names = Vec::new();
    let name_offs: Vec<u32> = FUNCS
        .iter()
        .map(|f| {
            let o = names.len() as u32;
            names.extend_from_slice(f.name.as_bytes());
            names.push(0);
            o
        })
        .collect();
    let mut filetab = Vec::new();
    let mut cutab = Vec::new();
    for f in FILES {
        cutab.extend_from_slice(&(filetab.len() as u32).to_le_bytes());
        filetab.extend_from_slice(f.as_bytes());
        filetab.push(0);
    }
    let mut pctab = vec![0u8];
    let tabs: Vec<(u32, u32, u32)> = FUNCS
        .iter()
        .map(|f| {
            let size: u32 = f.lines.iter().map(|r| r.1).sum();
            let sp = pctable(&mut pctab, &[(0, size)]);
            let file = pctable(&mut pctab, &[(f.file as i32, size)]);
            let ln = pctable(&mut pctab, f.lines);
            (sp, file, ln)
        })
        .collect();
    let pcln = functab(v, &name_offs, &tabs);

    let names_off = hdr;
    let cu_off = names_off + names.len();
    let files_off = cu_off + cutab.len();
    let pctab_off = files_off + filetab.len();
    let mut pcln_off = pctab_off + pctab.len();
    let pad = (8 - pcln_off % 8) % 8;
    pcln_off += pad;
    let magic: u32 = match v {
        GoPclnVersion::Go116 => 0xffff_fffa,
        GoPclnVersion::Go118 => 0xffff_fff0,
        GoPclnVersion::Go120 => 0xffff_fff1,
    };
    let mut out = Vec::new();
    out.extend_from_slice(&magic.to_le_bytes());
    out.extend_from_slice(&[0, 0, 1, 8]);
    let mut w = vec![FUNCS.len() as u64, FILES.len() as u64];
    if v != GoPclnVersion::Go116 {
        w.push(TEXT);
    }
    w.extend([names_off, cu_off, files_off, pctab_off, pcln_off].map(|x| x as u64));
    for x in w {
        out.extend_from_slice(&x.to_le_bytes());
    }
    assert_eq!(out.len(), hdr);
    for part in [&names, &cutab, &filetab, &pctab] {
        out.extend_from_slice(part);
    }
    out.extend(std::iter::repeat_n(0, pad));
    out.extend_from_slice(&pcln);
    out
}

/// The function table of `v`'s layout: (entry, `_func` offset) pairs, the
/// end entry, then each `_func` with the given name offsets and pc-value
/// tables (pcsp, pcfile, pcln).
fn functab(v: GoPclnVersion, name_offs: &[u32], tabs: &[(u32, u32, u32)]) -> Vec<u8> {
    let fsz = if v == GoPclnVersion::Go116 { 8 } else { 4 };
    let put = |out: &mut Vec<u8>, x: u64| {
        if fsz == 8 {
            out.extend_from_slice(&x.to_le_bytes())
        } else {
            out.extend_from_slice(&(x as u32).to_le_bytes())
        }
    };
    let abs = |x: u64| {
        if v == GoPclnVersion::Go116 {
            TEXT + x
        } else {
            x
        }
    };
    let ftab_len = (FUNCS.len() * 2 + 1) * fsz;
    let mut structs = Vec::new();
    let mut foffs = Vec::new();
    for (i, f) in FUNCS.iter().enumerate() {
        while !(ftab_len + structs.len()).is_multiple_of(8) {
            structs.push(0);
        }
        foffs.push((ftab_len + structs.len()) as u64);
        put(&mut structs, abs(f.entry));
        let (sp, file, ln) = tabs[i];
        let mut fields = vec![name_offs[i], 0, 0, sp, file, ln, 0, 0];
        if v == GoPclnVersion::Go120 {
            fields.push(f.lines[0].0 as u32);
        }
        for x in fields {
            structs.extend_from_slice(&x.to_le_bytes());
        }
        structs.extend_from_slice(&[0, 0, 0, 0]);
    }
    let mut pcln = Vec::new();
    for (i, f) in FUNCS.iter().enumerate() {
        put(&mut pcln, abs(f.entry));
        put(&mut pcln, foffs[i]);
    }
    put(&mut pcln, abs(END));
    pcln.extend_from_slice(&structs);
    pcln
}

const ALL: [GoPclnVersion; 3] = [
    GoPclnVersion::Go116,
    GoPclnVersion::Go118,
    GoPclnVersion::Go120,
];

#[test]
fn synthetic_tables_of_every_layout() {
    for v in ALL {
        let bytes = synthetic(v);
        let t = parse_gopclntab(&bytes, 0).unwrap_or_else(|e| panic!("{v:?}: {e}"));
        assert_eq!(t.version(), v);
        let fns = t.functions();
        assert_eq!(fns.len(), FUNCS.len());
        for (got, want) in fns.iter().zip(FUNCS) {
            let size: u64 = want.lines.iter().map(|r| u64::from(r.1)).sum();
            assert_eq!(got.name, want.name, "{v:?}");
            assert_eq!(
                (got.entry, got.end),
                (TEXT + want.entry, TEXT + want.entry + size),
                "{v:?}"
            );
            assert!(!got.foreign);
            let mut pc = got.entry;
            for &(line, len) in want.lines {
                for a in pc..pc + u64::from(len) {
                    let f = t.lookup(a).unwrap();
                    assert_eq!(f.function.as_deref(), Some(want.name), "{v:?} {a:#x}");
                    assert_eq!(f.file.as_deref(), Some(FILES[want.file as usize]));
                    assert_eq!(f.line, Some(line as u32), "{v:?} {a:#x}");
                }
                pc += u64::from(len);
            }
        }
        // Padding up to the next function belongs to the one before, as
        // the runtime's findfunc has it; past the table, nothing.
        assert_eq!(
            t.lookup(TEXT + 0x1f).unwrap().function.as_deref(),
            Some("main.main")
        );
        assert!(t.lookup(TEXT + END).is_none());
        assert!(t.lookup(TEXT - 1).is_none());
    }
}

#[test]
fn unsupported_and_corrupt_headers_say_why() {
    let mut b = synthetic(GoPclnVersion::Go118);
    b[..4].copy_from_slice(&0xffff_fffbu32.to_le_bytes());
    let e = parse_gopclntab(&b, 0).err().unwrap().to_string();
    assert!(
        e.contains("Go 1.2-1.15") && e.contains("not supported"),
        "{e}"
    );
    b[..4].copy_from_slice(&0xffff_fff2u32.to_le_bytes());
    let e = parse_gopclntab(&b, 0).err().unwrap().to_string();
    assert!(e.contains("unknown pclntab magic 0xfffffff2"), "{e}");
    let mut b = synthetic(GoPclnVersion::Go120);
    b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let e = parse_gopclntab(&b, 0).err().unwrap().to_string();
    assert!(e.contains("functions"), "{e}");
    assert!(!e.contains('\n'));
}

/// Every truncation and many bit flips of each layout: an error or an
/// answer, never a panic, and no allocation sized by garbage.
#[test]
fn truncated_and_flipped_tables_do_not_panic() {
    for v in ALL {
        let good = synthetic(v);
        for len in 0..good.len() {
            if let Ok(t) = parse_gopclntab(&good[..len], TEXT) {
                let _ = t.functions();
                for a in TEXT..TEXT + END {
                    let _ = t.lookup(a);
                }
            }
        }
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..3000 {
            let mut b = good.clone();
            for _ in 0..1 + (x % 4) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let at = (x >> 8) as usize % b.len();
                b[at] ^= 1 << (x & 7);
            }
            if let Ok(t) = parse_gopclntab(&b, TEXT) {
                assert!(t.functions().len() <= FUNCS.len() * 2);
                for a in (TEXT..TEXT + END).step_by(3) {
                    let _ = t.lookup(a);
                }
            }
        }
    }
}
