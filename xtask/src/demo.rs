//! The README's first command: a real server under real load, traced, converted, summarized.

use std::{process::Command, time::Duration};

use anyhow::{Context, Result};
use tracer_tests::{load, Server, ServerOptions};

use crate::setup::{status, workspace};

pub fn run() -> Result<()> {
    crate::setup::ensure()?;
    let tracer = crate::build::run()?;
    let out = workspace().join("target/demo");
    std::fs::create_dir_all(&out)?;
    let trace = out.join("demo.trace");

    let server = Server::start(&ServerOptions {
        workers: 4,
        sleep_us: 200,
        spin_us: 100,
        ..Default::default()
    })?;
    eprintln!(
        "demo: fixture server pid {} on port {}, 4 workers",
        server.pid(),
        server.port()
    );
    let mut recorder = Command::new(&tracer)
        .args(["record", "--pid", &server.pid().to_string()])
        .args(["--uprobe", "handle_request", "--uprobe", "render_response"])
        .args(["--duration", "4s", "--force", "-o"])
        .arg(&trace)
        .spawn()
        .context("cannot start the tracer")?;
    // Give the recorder time to attach before the load starts.
    std::thread::sleep(Duration::from_millis(700));
    let report = load(server.port(), 16, 200, 4096, 8, Duration::from_secs(3));
    let st = recorder.wait()?;
    anyhow::ensure!(st.success(), "tracer record failed ({st})");
    let stats = server.stop()?;
    eprintln!(
        "demo: load generator completed {} requests ({} bytes); the server counted {} handle_request calls",
        report.requests, report.bytes, stats.handle_request
    );
    let stem = out.join("demo");
    status(
        Command::new(&tracer)
            .args(["convert", "--force", "-o"])
            .arg(&stem)
            .arg(&trace),
    )?;
    for to in ["chrome", "folded"] {
        status(
            Command::new(&tracer)
                .args(["convert", "--to", to, "--force", "-o"])
                .arg(&stem)
                .arg(&trace),
        )?;
    }
    eprintln!(
        "demo: Paraver trace written to {0}.prv/.pcf/.row, Trace Event Format to {0}.json \
         (open it in https://ui.perfetto.dev), flame graph stacks to {0}.folded (speedscope, \
         inferno-flamegraph, flamegraph.pl)",
        stem.display()
    );
    // The summaries a developer reads first: where the handlers' time went, then the
    // threads' states.
    for by in ["function", "thread"] {
        eprintln!("\ndemo: tracer summary --by {by}");
        status(
            Command::new(&tracer)
                .args(["summary", "--by", by])
                .arg(&trace),
        )?;
    }
    Ok(())
}
