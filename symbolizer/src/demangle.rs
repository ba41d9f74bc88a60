//! Symbol demangling shared by matching and symbolization.

use std::sync::Arc;

/// The names a raw symbol may be known by.
#[derive(Clone, Debug, Default)]
pub(crate) struct Names {
    /// Preferred display name: Rust without the hash, C++ with its parameter list.
    /// Shared, because symbolized frames hand it out for every address.
    pub display: Arc<str>,
    /// Full demangled form (Rust with hash); empty when identical to `display`.
    pub full: String,
    /// C++ name without parameters (`ns::Class::method`), empty if not C++.
    pub no_params: String,
}

/// Demangles `raw` (Rust legacy/v0 or C++ Itanium); plain C names come back as is.
pub(crate) fn demangle(raw: &str) -> Names {
    // Static symbol tables of versioned libraries keep the version in the
    // name (`xdr_uint32_t@GLIBC_2.2.5`); it is not part of the function name.
    match raw.find('@') {
        Some(i) if i > 0 => demangle_unversioned(&raw[..i]),
        _ => demangle_unversioned(raw),
    }
}

fn demangle_unversioned(raw: &str) -> Names {
    if raw.starts_with("_R") || raw.starts_with("_ZN") {
        if let Ok(d) = rustc_demangle::try_demangle(raw) {
            let display = format!("{d:#}");
            let full = d.to_string();
            // rustc-demangle also accepts many C++ `_ZN...E` names; only Rust
            // legacy symbols carry the `::h<hash>` that `{:#}` drops.
            if raw.starts_with("_ZN") && full == display {
                return demangle_cpp(raw).unwrap_or_else(|| Names {
                    display: display.into(),
                    ..Names::default()
                });
            }
            return Names {
                full: if full != display { full } else { String::new() },
                display: display.into(),
                no_params: String::new(),
            };
        }
    }
    if raw.starts_with("_Z") {
        if let Some(n) = demangle_cpp(raw) {
            return n;
        }
    }
    Names {
        display: raw.into(),
        ..Names::default()
    }
}

fn demangle_cpp(raw: &str) -> Option<Names> {
    {
        // GCC clones (`foo.cold`, `_Z3fooi.constprop.0`) carry suffixes cpp_demangle rejects.
        let (base, suffix) = match raw.find('.') {
            Some(i) => (&raw[..i], &raw[i..]),
            None => (raw, ""),
        };
        if let Ok(sym) = cpp_demangle::Symbol::new(base) {
            let opts = cpp_demangle::DemangleOptions::new();
            if let Ok(full) = sym.demangle_with_options(&opts) {
                let no_params = sym
                    .demangle_with_options(&opts.no_params())
                    .unwrap_or_default();
                return Some(Names {
                    display: format!("{full}{suffix}").into(),
                    full: String::new(),
                    no_params: if no_params != full {
                        format!("{no_params}{suffix}")
                    } else {
                        String::new()
                    },
                });
            }
        }
    }
    None
}

/// Demangled display name for a name found in DWARF or a symbol table.
pub(crate) fn display_name(raw: &str) -> Arc<str> {
    demangle(raw).display
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_legacy_drops_hash() {
        let n = demangle("_ZN4core3fmt5write17h0123456789abcdefE");
        assert_eq!(&*n.display, "core::fmt::write");
        assert_eq!(n.full, "core::fmt::write::h0123456789abcdef");
    }

    #[test]
    fn cpp_keeps_params_and_no_params_alias() {
        let n = demangle("_ZN2ns5Class6methodEi");
        assert_eq!(&*n.display, "ns::Class::method(int)");
        assert_eq!(n.no_params, "ns::Class::method");
    }

    #[test]
    fn rust_legacy_with_escapes() {
        let n = demangle("_ZN86_$LT$alloc..vec..into_iter..IntoIter$LT$T$C$A$GT$$u20$as$u20$core..ops..drop..Drop$GT$4drop17hfd85ef82cd8083e0E");
        assert_eq!(
            &*n.display,
            "<alloc::vec::into_iter::IntoIter<T,A> as core::ops::drop::Drop>::drop"
        );
    }

    #[test]
    fn c_passthrough() {
        assert_eq!(&*demangle("malloc").display, "malloc");
        assert_eq!(&*demangle("xdr_long@GLIBC_2.2.5").display, "xdr_long");
        assert_eq!(&*demangle("_Zbogus").display, "_Zbogus");
    }
}
