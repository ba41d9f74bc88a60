//! `cargo xtask bench --only sampling`: the latencies `tracer stat` estimates from one
//! call in 64 against those of every call, taken from the same server at the same time by
//! two counters side by side, so both see the same calls.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use tracer_tests::{load, wait_until, Server, ServerOptions};

use crate::bench::{file_len, interrupt};

/// Seconds of load: enough calls for a p99 from one call in 64 (a few thousand timed).
const SECS: u64 = 12;

pub(crate) fn sampled_vs_exact(tracer: &Path, dir: &Path) -> Result<()> {
    for (what, opts) in [
        ("handler on the CPU", ServerOptions::default()),
        (
            "handler sleeping 200 us",
            ServerOptions {
                sleep_us: 200,
                ..ServerOptions::default()
            },
        ),
    ] {
        let server = Server::start(&opts)?;
        let pid = server.pid().to_string();
        let modes: [(&str, &[&str]); 2] = [
            ("exact", &["--exact-latency"]),
            ("sampled", &["--time-every", "64"]),
        ];
        let mut tracers = vec![];
        for (name, extra) in modes {
            let out = dir.join(format!("{name}.stat"));
            let _ = std::fs::remove_file(&out);
            let child = Command::new(tracer)
                .args(["stat", "--quiet", "-p", &pid, "-i", "1s"])
                .args(["-u", "handle_request", "-u", "render_response"])
                .args(extra)
                .arg("-o")
                .arg(&out)
                .stderr(Stdio::piped())
                .spawn()?;
            wait_until(Duration::from_secs(20), || file_len(&out) > 200);
            tracers.push((out, child));
        }
        let report = load(
            server.port(),
            16,
            1_000_000,
            1024,
            8,
            Duration::from_secs(SECS),
        );
        let mut found = vec![];
        for (out, child) in tracers {
            interrupt(child)?;
            let s = trace_summary::summarize(std::slice::from_ref(&out))
                .with_context(|| format!("summarizing {}", out.display()))?;
            found.push(s);
        }
        server.stop()?;
        println!("{what}: {} requests", report.requests);
        for func in ["handle_request", "render_response"] {
            let get = |i: usize| {
                found[i]
                    .function(func)
                    .cloned()
                    .with_context(|| format!("no {func} in the stat file"))
            };
            let (exact, sampled) = (get(0)?, get(1)?);
            let ci = |c: Option<[u64; 2]>| {
                c.map_or("-".into(), |[lo, hi]| {
                    format!("[{:.1}, {:.1}]", lo as f64 / 1e3, hi as f64 / 1e3)
                })
            };
            println!(
                "  {func:<15} calls {} / {} (exact / sampled), timed {} / {}; p50 {:.2} / {:.2} us ({:.3}, 95% interval {} us), p99 {:.2} / {:.2} us ({:.3}, 95% interval {} us)",
                exact.calls,
                sampled.calls,
                exact.timed_calls,
                sampled.timed_calls,
                exact.p50_ns as f64 / 1e3,
                sampled.p50_ns as f64 / 1e3,
                sampled.p50_ns as f64 / exact.p50_ns.max(1) as f64,
                ci(sampled.p50_ci_ns),
                exact.p99_ns as f64 / 1e3,
                sampled.p99_ns as f64 / 1e3,
                sampled.p99_ns as f64 / exact.p99_ns.max(1) as f64,
                ci(sampled.p99_ci_ns),
            );
        }
    }
    Ok(())
}
