//! The symbolizer over binaries it did not expect: users point it at files they do not
//! control, so it must answer or refuse in one line, never panic, hang or allocate
//! without bound.

use symbolizer::{Options, Symbolizer, Target};

/// Bytes starting like an ELF file are one, written to a file and read through the
/// public entry points as `tracer probes` and `tracer record` use them: listing, then one
/// of (chosen by the input's length, since each entry point reads the whole file again)
/// globs and resolving names; symbolizing addresses and Go's unwind table; USDT notes.
/// Other bytes are read as a Go pclntab and as USDT argument specifications.
pub fn symbolizer(data: &[u8]) {
    if !data.starts_with(b"\x7fELF") {
        return raw(data);
    }
    let dir = crate::scratch_dir();
    let path = dir.path().join("bin");
    std::fs::write(&path, data).expect("writing the binary");
    let target = Target::Path(path.clone());

    // One resolver an input, as one command resolves all its specs.
    let resolver = symbolizer::Resolver::new();
    let listed = ok(resolver.list(&target, None)).unwrap_or_default();
    match data.len() % 3 {
        0 => names(&resolver, &target, &listed, data.len() / 3),
        1 => addresses(data, &path, &listed),
        _ => usdt(data, &target),
    }
}

/// Globs and names resolved as `-u` resolves them.
fn names(
    resolver: &symbolizer::Resolver,
    target: &Target,
    listed: &[symbolizer::FunctionMatch],
    pick: usize,
) {
    ok(resolver.list(target, Some("*main*")));
    let all = Options {
        allow_multiple: true,
        ..Default::default()
    };
    if let Some(f) = listed.get(pick % listed.len().max(1)) {
        ok(resolver.resolve(target, &f.symbol, &all));
    }
    ok(resolver.resolve(target, "main", &Options::default()));
    // The free function, a resolver of its own.
    ok(symbolizer::resolve(target, "m[a-z]*n", &all));
}

/// Addresses symbolized, and Go's unwind table looked up.
fn addresses(data: &[u8], path: &std::path::Path, listed: &[symbolizer::FunctionMatch]) {
    // Each function's first byte, middle and last byte, and a few addresses around them.
    let mut addrs: Vec<u64> = (listed.iter().take(32))
        .flat_map(|f| {
            let last = f.size.saturating_sub(1);
            [0, f.size / 2, last].map(|d| f.address.wrapping_add(d))
        })
        .collect();
    addrs.extend([0, 1, 0x1000, 0x40_1000, u64::MAX]);
    let mut sym = Symbolizer::new();
    ok(sym.symbolize_batch(path, &addrs));
    for &a in addrs.iter().take(8) {
        ok(sym.function_start_offset(path, a));
    }
    // Go's unwind table, as the recorder's unwinder reads every binary a process maps.
    if let Some(t) = symbolizer::GoUnwindTable::from_elf(data) {
        for &a in &addrs {
            let _ = t.frame(a);
        }
    }
}

/// USDT probes listed, resolved, and their argument specifications parsed.
fn usdt(data: &[u8], target: &Target) {
    ok(symbolizer::list_usdt(target, None));
    ok(symbolizer::resolve_usdt(target, None, "*", "*"));
    if let Ok(notes) = symbolizer::parse_stapsdt_notes(data) {
        for n in notes.iter().take(16) {
            let _ = symbolizer::parse_usdt_args(&n.args);
        }
    }
}

/// The bytes as a pclntab (its functions, and lookups at their bounds) and as USDT
/// argument specifications.
fn raw(data: &[u8]) {
    if let Some(t) = ok(symbolizer::parse_gopclntab(data, 0x40_1000)) {
        let _ = t.version();
        for f in t.functions().iter().take(64) {
            for pc in [
                f.entry,
                f.entry.wrapping_add(1),
                f.end.wrapping_sub(1),
                f.end,
            ] {
                let _ = t.lookup(pc);
            }
        }
    }
    if let Ok(s) = std::str::from_utf8(data) {
        if let Err(e) = symbolizer::parse_usdt_args(s) {
            crate::one_line(&e);
        }
    }
}

/// The answer, its error checked to be one line.
fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> Option<T> {
    r.map_err(|e| crate::one_line(&e)).ok()
}
