//! Shell-style globbing for function names and "did you mean" suggestions.

/// True if `s` contains glob metacharacters.
pub(crate) fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Matches `text` against a glob with `*`, `?`, `[abc]`, `[a-z]` and `[!x]`/`[^x]`.
pub(crate) fn glob_match(pat: &str, text: &str) -> bool {
    let p: Vec<char> = pat.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // Iterative matcher with single-star backtracking: linear in practice,
    // no recursion blow-up on patterns like `*a*a*a*`.
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, ti));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    ti += 1;
                    continue;
                }
                '[' => {
                    if let Some((matched, next)) = class_match(&p, pi, t[ti]) {
                        if matched {
                            pi = next;
                            ti += 1;
                            continue;
                        }
                    } else if t[ti] == '[' {
                        // Unterminated class: treat `[` literally.
                        pi += 1;
                        ti += 1;
                        continue;
                    }
                }
                c => {
                    if c == t[ti] {
                        pi += 1;
                        ti += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((sp, st)) => {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Returns (matched, index after the class), or None if the class is unterminated.
fn class_match(p: &[char], start: usize, c: char) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negate = i < p.len() && (p[i] == '!' || p[i] == '^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    while i < p.len() && (p[i] != ']' || first) {
        first = false;
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            if p[i] <= c && c <= p[i + 2] {
                matched = true;
            }
            i += 3;
        } else {
            if p[i] == c {
                matched = true;
            }
            i += 1;
        }
    }
    if i >= p.len() {
        return None;
    }
    Some((matched != negate, i + 1))
}

/// Levenshtein distance, bounded to keep suggestion search cheap on huge tables.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
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
            let d = edit_distance(&lw, &ln);
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
    }

    #[test]
    fn suggestions() {
        let names = ["compute_sum", "compute_prod", "main", "helper"];
        let s = suggest("compute_sun", names.iter().copied(), 5);
        assert_eq!(s[0], "compute_sum");
        assert!(suggest("zzzzzzzz", names.iter().copied(), 5).is_empty());
    }
}
