//! Shell-style globbing for function and probe names (globset) and "did you
//! mean" suggestions (strsim's Levenshtein distance).

/// True if `s` contains glob metacharacters.
pub(crate) fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// A compiled glob (`*`, `?`, `[abc]`, `[a-z]`, `[!x]`/`[^x]`) over function
/// and probe names. `*` crosses `/` (Go package paths) and braces are
/// literal (Go's `interface {}`); an unclosed `[` is literal too. A name
/// equal to the pattern always matches, so a Go generic such as
/// `main.Map[go.shape.int]` can be given as it is spelled.
pub(crate) struct Matcher {
    literal: String,
    glob: Option<globset::GlobMatcher>,
}

impl Matcher {
    pub fn new(pat: &str) -> Matcher {
        let glob = is_glob(pat)
            .then(|| {
                globset::GlobBuilder::new(&escape_braces(pat))
                    .literal_separator(false)
                    .backslash_escape(false)
                    .allow_unclosed_class(true)
                    .build()
                    .ok()
            })
            .flatten()
            .map(|g| g.compile_matcher());
        Matcher {
            literal: pat.to_string(),
            glob,
        }
    }

    pub fn matches(&self, text: &str) -> bool {
        text == self.literal
            || self
                .glob
                .as_ref()
                .is_some_and(|g| g.is_match(std::path::Path::new(text)))
    }
}

/// `{a,b}` alternation is not part of the syntax here: braces outside a
/// class become one-character classes.
fn escape_braces(pat: &str) -> String {
    let mut out = String::with_capacity(pat.len());
    let mut in_class = false;
    for c in pat.chars() {
        match c {
            '[' if !in_class => {
                in_class = true;
                out.push(c);
            }
            ']' if in_class => {
                in_class = false;
                out.push(c);
            }
            '{' | '}' if !in_class => {
                out.push('[');
                out.push(c);
                out.push(']');
            }
            _ => out.push(c),
        }
    }
    out
}

/// Matches `text` against a glob (see [`Matcher`]).
#[cfg(test)]
pub(crate) fn glob_match(pat: &str, text: &str) -> bool {
    Matcher::new(pat).matches(text)
}

/// Up to `n` names closest to `want`: substring hits first, then by edit distance.
pub(crate) fn suggest<'a>(
    want: &str,
    names: impl Iterator<Item = &'a str>,
    n: usize,
) -> Vec<String> {
    let lw = want.to_lowercase();
    let max_dist = (want.chars().count() / 3).max(2);
    let mut scored: Vec<(usize, usize, &str)> = Vec::new();
    for name in names {
        let ln = name.to_lowercase();
        let score = if ln.contains(&lw) || (lw.len() >= 4 && lw.contains(&ln) && ln.len() >= 4) {
            Some(0)
        } else if name.len().abs_diff(want.len()) <= max_dist {
            let d = strsim::levenshtein(&lw, &ln);
            (d <= max_dist).then_some(d + 1)
        } else {
            None
        };
        if let Some(s) = score {
            scored.push((s, name.len(), name));
        }
    }
    scored.sort();
    let mut out: Vec<String> = Vec::new();
    for (_, _, name) in scored {
        if !out.iter().any(|o| o == name) {
            out.push(name.to_string());
            if out.len() == n {
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("foo*", "foobar"));
        assert!(glob_match("*bar", "foobar"));
        assert!(glob_match("f?o", "foo"));
        assert!(!glob_match("f?o", "fooo"));
        assert!(glob_match("[a-c]x", "bx"));
        assert!(!glob_match("[!a-c]x", "bx"));
        assert!(glob_match("*a*a*", "banana"));
        assert!(!glob_match("*z*", "banana"));
        assert!(glob_match("ns::*", "ns::Class::method(int)"));
        // Go names: `*` crosses package paths, brackets and braces as spelled.
        assert!(glob_match("net/*.serve", "net/http.(*conn).serve"));
        assert!(glob_match(
            "main.Map[go.shape.int_0]",
            "main.Map[go.shape.int_0]"
        ));
        assert!(glob_match("type:.eq.*{}", "type:.eq.interface {}"));
        assert!(!glob_match("a{b,c}", "ab"));
        assert!(glob_match("a[b", "a[b"));
        assert!(glob_match("[^a]x", "bx"));
        assert!(glob_match("a\\*", "a\\b"));
    }

    #[test]
    fn suggestions() {
        let names = ["compute_sum", "compute_prod", "main", "helper"];
        let s = suggest("compute_sun", names.iter().copied(), 5);
        assert_eq!(s[0], "compute_sum");
        assert!(suggest("zzzzzzzz", names.iter().copied(), 5).is_empty());
    }
}
