//! What each eBPF program costs on its own: the kernel's run count and run time per
//! program (`BPF_ENABLE_STATS`, read through bpftool), over a stretch of load.
//!
//! The statistics add two clock reads to every run of every program, so throughput is
//! never measured while they are on: they are a separate run's.

use std::collections::{BTreeMap, HashSet};
use std::os::fd::OwnedFd;
use std::process::Command;

use anyhow::{bail, Context, Result};

/// One program's runs and their time over the measured stretch.
#[derive(Clone, Debug, Default)]
pub struct Cost {
    pub runs: u64,
    pub ns: u64,
}

/// The statistics switched on, and the programs loaded before (which are not ours).
pub struct Stats {
    _on: OwnedFd,
    before: HashSet<u32>,
}

/// Per program name (programs of one name added up), their runs and time.
pub type Costs = BTreeMap<String, Cost>;

impl Stats {
    /// Switches the statistics on until drop; programs loaded from now on are measured.
    pub fn on() -> Result<Stats> {
        let on = aya::sys::enable_stats(aya::sys::Stats::RunTime)
            .context("switching the kernel's BPF statistics on")?;
        let before = programs()?.into_keys().collect();
        Ok(Stats { _on: on, before })
    }

    /// The counters of the programs loaded since [`Stats::on`], now.
    pub fn now(&self) -> Result<BTreeMap<u32, (String, Cost)>> {
        let mut p = programs()?;
        p.retain(|id, _| !self.before.contains(id));
        Ok(p)
    }
}

/// What ran between two readings of [`Stats::now`], per program name.
pub fn between(
    start: &BTreeMap<u32, (String, Cost)>,
    end: &BTreeMap<u32, (String, Cost)>,
) -> Costs {
    let mut out = Costs::new();
    for (id, (name, c)) in end {
        let (runs0, ns0) = start.get(id).map_or((0, 0), |(_, s)| (s.runs, s.ns));
        let e = out.entry(name.clone()).or_default();
        e.runs += c.runs.saturating_sub(runs0);
        e.ns += c.ns.saturating_sub(ns0);
    }
    out.retain(|_, c| c.runs > 0);
    out
}

/// Every loaded program's id, name and counters.
fn programs() -> Result<BTreeMap<u32, (String, Cost)>> {
    let out = Command::new("bpftool")
        .args(["prog", "show", "--json"])
        .output()
        .context("running bpftool")?;
    if !out.status.success() {
        bail!(
            "bpftool prog show: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let list: Vec<serde_json::Value> =
        serde_json::from_slice(&out.stdout).context("reading bpftool's JSON")?;
    Ok(list
        .iter()
        .filter_map(|p| {
            let id = p["id"].as_u64()? as u32;
            let name = p["name"].as_str().unwrap_or("?").to_string();
            let cost = Cost {
                runs: p["run_cnt"].as_u64().unwrap_or(0),
                ns: p["run_time_ns"].as_u64().unwrap_or(0),
            };
            Some((id, (name, cost)))
        })
        .collect())
}
