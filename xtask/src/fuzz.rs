//! `cargo xtask fuzz`: runs the cargo-fuzz targets of `fuzz/` with the pinned nightly and
//! reports, per target, executions, crashes, timeouts and out-of-memory stops.
//!
//! Each target reads its committed seed corpus `fuzz/corpus/NAME/` and writes what it finds
//! new to `target/fuzz-corpus/NAME/` (kept between runs), so the committed corpus changes
//! only with `--grow`. Findings go to `fuzz/artifacts/NAME/`, as cargo-fuzz puts them.
//!
//! The targets' bodies are the crate `fuzz-bodies`, whose test replays every committed
//! input on stable: `cargo test` fails on an input that once broke something.

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context, Result};

use crate::setup::{self, NIGHTLY};

/// What `cargo xtask fuzz` takes.
#[derive(clap::Args)]
pub struct Args {
    /// Seconds to run each target (default 60 when --runs is not given).
    #[arg(long)]
    time: Option<u64>,
    /// Inputs to run each target on, instead of a time.
    #[arg(long, conflicts_with = "time")]
    runs: Option<u64>,
    /// Run this target only (default: all in fuzz/Cargo.toml).
    #[arg(long)]
    target: Option<String>,
    /// Add what the run finds to the committed corpus (fuzz/corpus/NAME).
    #[arg(long)]
    grow: bool,
    /// cargo-fuzz's sanitizer: address (the default), or none, which runs several times
    /// as many inputs and suffices where the code under test has no unsafe code.
    #[arg(long, default_value = "address")]
    sanitizer: String,
    /// libFuzzer's limit on one input, in seconds of wall time. A run at low priority
    /// beside other work needs more than the default: an input starved of the CPU is
    /// reported as a timeout however little CPU it takes.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
    /// Regenerate the generated seed files first (trace-file's example `fuzz_seeds`);
    /// alone, do only that.
    #[arg(long)]
    seed: bool,
}

/// What one target's run came to.
struct Report {
    target: String,
    executions: Option<u64>,
    crashes: u32,
    timeouts: u32,
    ooms: u32,
    artifacts: Vec<String>,
    log: PathBuf,
    ok: bool,
}

pub fn run(args: &Args) -> Result<()> {
    let ws = setup::workspace();
    let fuzz_dir = ws.join("fuzz");
    if args.seed {
        setup::status(
            Command::new("cargo")
                .current_dir(&ws)
                .args([
                    "run",
                    "-q",
                    "-p",
                    "trace-file",
                    "--example",
                    "fuzz_seeds",
                    "--",
                ])
                .arg(fuzz_dir.join("corpus")),
        )?;
        if args.time.is_none() && args.runs.is_none() && args.target.is_none() {
            return Ok(());
        }
    }
    setup::install_nightly()?;
    let tools_bin = ensure_cargo_fuzz()?;
    let path = std::env::join_paths(std::iter::once(tools_bin).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))?;
    let mut targets = targets(&fuzz_dir.join("Cargo.toml"))?;
    if let Some(t) = &args.target {
        if !targets.contains(t) {
            bail!("no fuzz target {t} (there are: {})", targets.join(", "));
        }
        targets = vec![t.clone()];
    }

    let cargo_fuzz = |sub: &str| {
        let mut c = Command::new("cargo");
        c.current_dir(&ws)
            .env("PATH", &path)
            .arg(format!("+{}", *NIGHTLY))
            .args(["fuzz", sub, "--sanitizer", &args.sanitizer, "--fuzz-dir"])
            .arg(&fuzz_dir);
        c
    };
    for t in &targets {
        setup::status(cargo_fuzz("build").arg(t))?;
    }

    let limit = match (args.runs, args.time) {
        (Some(n), _) => format!("-runs={n}"),
        (None, t) => format!("-max_total_time={}", t.unwrap_or(60)),
    };
    let logs = ws.join("target/fuzz-logs");
    std::fs::create_dir_all(&logs)?;
    let mut reports = vec![];
    for t in &targets {
        let seeds = fuzz_dir.join("corpus").join(t);
        std::fs::create_dir_all(&seeds)?;
        // libFuzzer writes new inputs to the first directory it is given.
        let mut dirs = vec![];
        if !args.grow {
            let scratch = ws.join("target/fuzz-corpus").join(t);
            std::fs::create_dir_all(&scratch)?;
            dirs.push(scratch);
        }
        dirs.push(seeds);
        let log = logs.join(format!("{t}.log"));
        eprintln!(
            "xtask: fuzzing {t} ({limit}); libFuzzer's output: {}",
            log.display()
        );
        let out = File::create(&log)?;
        let status = cargo_fuzz("run")
            .arg(t)
            .args(&dirs)
            .args(["--", &limit, "-rss_limit_mb=2048"])
            .arg(format!("-timeout={}", args.timeout))
            .arg("-print_final_stats=1")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .status()
            .context("cannot run cargo fuzz")?;
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        reports.push(report(t, &text, log, status.success()));
    }

    println!(
        "{:<12} {:>14} {:>8} {:>9} {:>5}",
        "target", "executions", "crashes", "timeouts", "OOMs"
    );
    for r in &reports {
        let execs = r.executions.map_or("?".into(), |n| n.to_string());
        println!(
            "{:<12} {:>14} {:>8} {:>9} {:>5}",
            r.target, execs, r.crashes, r.timeouts, r.ooms
        );
    }
    let failed: Vec<&Report> = reports.iter().filter(|r| !r.ok).collect();
    for r in &failed {
        eprintln!("xtask: {} failed; log: {}", r.target, r.log.display());
        for a in &r.artifacts {
            eprintln!("xtask:   input: {a}");
        }
    }
    if !failed.is_empty() {
        bail!("{} of {} fuzz targets failed", failed.len(), reports.len());
    }
    Ok(())
}

/// Installs cargo-fuzz under target/tools unless it is there; returns its bin directory.
fn ensure_cargo_fuzz() -> Result<PathBuf> {
    let root = setup::tools_dir();
    let bin = root.join("bin");
    if bin.join("cargo-fuzz").exists() {
        return Ok(bin);
    }
    eprintln!("xtask: installing cargo-fuzz under {}", root.display());
    setup::status(
        Command::new("cargo")
            .args(["install", "cargo-fuzz", "--locked", "--root"])
            .arg(&root)
            // A workspace-local target dir keeps the install's build out of ours.
            .env("CARGO_TARGET_DIR", root.join("build")),
    )?;
    Ok(bin)
}

/// The targets: the `[[bin]]` names of the fuzz crate's manifest.
fn targets(manifest: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(manifest)
        .with_context(|| format!("cannot read {}", manifest.display()))?;
    let mut in_bin = false;
    let mut names = vec![];
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if in_bin {
            if let Some(v) = line.strip_prefix("name") {
                let v = v.trim_start().trim_start_matches('=').trim();
                names.push(v.trim_matches('"').to_string());
            }
        }
    }
    if names.is_empty() {
        bail!("{} declares no fuzz target", manifest.display());
    }
    Ok(names)
}

/// Reads libFuzzer's output: the final stats line and what it stopped for.
fn report(target: &str, text: &str, log: PathBuf, success: bool) -> Report {
    let executions = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("stat::number_of_executed_units:"))
        .filter_map(|v| v.trim().parse().ok())
        .next_back();
    let count = |needle: &str| text.matches(needle).count() as u32;
    let timeouts = count("ERROR: libFuzzer: timeout");
    let ooms = count("ERROR: libFuzzer: out-of-memory") + count("ERROR: libFuzzer: malloc(");
    let crashes = count("ERROR: libFuzzer: deadly signal")
        + count("ERROR: AddressSanitizer")
        + count("ERROR: libFuzzer: fuzz target exited")
        + count("ERROR: libFuzzer: leak");
    let artifacts = text
        .lines()
        .filter_map(|l| l.split_once("Test unit written to "))
        .map(|(_, p)| p.trim().to_string())
        .collect();
    let mut r = Report {
        target: target.into(),
        executions,
        crashes,
        timeouts,
        ooms,
        artifacts,
        log,
        ok: success,
    };
    // A failure that none of the above names (a build error, say) still fails the run.
    if r.crashes + r.timeouts + r.ooms > 0 {
        r.ok = false;
    }
    r
}
