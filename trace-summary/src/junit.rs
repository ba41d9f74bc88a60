//! JUnit XML, the test report format CI systems show (GitHub Actions through report
//! actions, GitLab's `artifacts:reports:junit`, Jenkins): written by hand, it is a few
//! elements.

use std::io::Write;

/// One test case of a JUnit document.
pub struct JunitCase {
    pub classname: &'static str,
    pub name: String,
    pub outcome: Outcome,
}

/// How a JUnit test case came out, with its one-line message.
pub enum Outcome {
    Pass(String),
    Failure(String),
    Error(String),
}

/// Writes a JUnit XML document of one suite.
pub fn write_junit_cases(
    suite: &str,
    cases: &[JunitCase],
    out: &mut dyn Write,
) -> std::io::Result<()> {
    write_junit_suite(suite, &[], cases, out)
}

/// Writes a JUnit XML document of one suite with `properties` (name, value): what holds
/// for every case, such as inputs read past damage (`salvaged`).
pub fn write_junit_suite(
    suite: &str,
    properties: &[(&str, String)],
    cases: &[JunitCase],
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let failures = (cases.iter())
        .filter(|c| matches!(c.outcome, Outcome::Failure(_)))
        .count();
    let errors = (cases.iter())
        .filter(|c| matches!(c.outcome, Outcome::Error(_)))
        .count();
    let n = cases.len();
    let suite = xml_escape(suite);
    writeln!(out, r#"<?xml version="1.0" encoding="UTF-8"?>"#)?;
    writeln!(
        out,
        r#"<testsuites name="{suite}" tests="{n}" failures="{failures}" errors="{errors}">"#
    )?;
    writeln!(
        out,
        r#"  <testsuite name="{suite}" tests="{n}" failures="{failures}" errors="{errors}" skipped="0">"#
    )?;
    if !properties.is_empty() {
        writeln!(out, "    <properties>")?;
        for (name, value) in properties {
            let (name, value) = (xml_escape(name), xml_escape(value));
            writeln!(out, r#"      <property name="{name}" value="{value}"/>"#)?;
        }
        writeln!(out, "    </properties>")?;
    }
    for c in cases {
        let open = format!(
            r#"    <testcase classname="{}" name="{}""#,
            c.classname,
            xml_escape(&c.name)
        );
        match &c.outcome {
            Outcome::Pass(msg) => {
                writeln!(out, "{open}>")?;
                writeln!(out, "      <system-out>{}</system-out>", xml_escape(msg))?;
            }
            Outcome::Failure(msg) | Outcome::Error(msg) => {
                let tag = match c.outcome {
                    Outcome::Failure(_) => "failure",
                    _ => "error",
                };
                let msg = xml_escape(msg);
                writeln!(out, "{open}>")?;
                writeln!(out, r#"      <{tag} message="{msg}">{msg}</{tag}>"#)?;
            }
        }
        writeln!(out, "    </testcase>")?;
    }
    writeln!(out, "  </testsuite>")?;
    writeln!(out, "</testsuites>")?;
    Ok(())
}

/// `s` as XML text or attribute value; characters XML 1.0 cannot hold become U+FFFD.
fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_come_before_the_cases() {
        let cases = [JunitCase {
            classname: "c",
            name: "n".into(),
            outcome: Outcome::Pass("ok".into()),
        }];
        let props = [("salvaged", "a&b.trace: 1 region".to_string())];
        let mut out = Vec::new();
        write_junit_suite("s", &props, &cases, &mut out).unwrap();
        let xml = String::from_utf8(out).unwrap();
        let p = xml.find(r#"<property name="salvaged" value="a&amp;b.trace: 1 region"/>"#);
        let (p, c) = (p.expect(&xml), xml.find("<testcase").unwrap());
        assert!(xml.find("<properties>").unwrap() < p && p < c, "{xml}");
        let mut plain = Vec::new();
        write_junit_cases("s", &cases, &mut plain).unwrap();
        assert!(!String::from_utf8(plain).unwrap().contains("properties"));
    }

    #[test]
    fn escapes_what_xml_cannot_hold() {
        assert_eq!(xml_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
        assert_eq!(xml_escape("a\u{1}b\tc"), "a\u{FFFD}b\tc");
    }
}
