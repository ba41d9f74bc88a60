//! `cargo xtask`: everything beyond plain cargo, one file per task.

mod bench;
mod bench_sampling;
mod bench_stacks;
mod build;
mod containers;
mod demo;
mod fuzz;
mod golden;
mod parquet;
mod progcost;
mod setup;
mod test;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install the eBPF toolchain (pinned nightly, rust-src, bpf-linker), the tests' Debian
    /// packages and Python environment (target/venv: DuckDB), podman and its base image (the
    /// container tests), and mount tracefs.
    Setup,
    /// Build the eBPF programs and the `tracer` binary (release).
    Build,
    /// Build, then run every test (end-to-end tests need root).
    Test {
        /// Extra arguments for `cargo test` (e.g. a test name filter).
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Trace the fixture server under load, then convert and summarize the trace.
    Demo,
    /// Measure overheads and throughputs side by side.
    Bench {
        /// Run some sections only (comma-separated): server, stat, classes, sampling, probe,
        /// stacks, rate, convert, parquet, symbolizer, merge.
        #[arg(long)]
        only: Option<String>,
    },
    /// Write every output of the converters and summaries for synthetic traces into DIR,
    /// to compare two builds byte for byte.
    Golden {
        /// Output directory.
        dir: std::path::PathBuf,
        /// Records of the synthetic trace.
        #[arg(default_value_t = 2_000_000)]
        records: u64,
    },
    /// Run the fuzz targets of fuzz/ (cargo-fuzz, pinned nightly) and report what they found.
    Fuzz(fuzz::Args),
}

fn main() {
    let cli = Cli::parse();
    let result: Result<()> = match cli.task {
        Task::Setup => setup::run(),
        Task::Build => build::run().map(|_| ()),
        Task::Test { args } => test::run(&args),
        Task::Demo => demo::run(),
        Task::Bench { only } => bench::run(only.as_deref()),
        Task::Golden { dir, records } => golden::run(&dir, records),
        Task::Fuzz(args) => fuzz::run(&args),
    };
    if let Err(e) = result {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}
