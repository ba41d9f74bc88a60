//! `cargo xtask bench`: overheads and throughputs, measured side by side in one run.

use anyhow::Result;

pub fn run() -> Result<()> {
    anyhow::bail!("bench is being written")
}
