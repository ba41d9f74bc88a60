//! `tracer convert --to parquet` read by an engine no one here wrote: DuckDB (its Python
//! package, in the venv `cargo xtask setup` makes under target/) runs the SQL of
//! docs/sql.md over the Parquet tables of a real recording of the fixture server under
//! load, and every figure of `tracer summary --by function`, `--by thread` and
//! `--by syscall` (`--format json`) comes out the same: counts exactly, times to the
//! nanosecond. Needs root.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tracer_tests::*;

/// The venv's python (`cargo xtask setup`), or `$TRACER_PYTHON`.
fn python() -> PathBuf {
    let p = match std::env::var_os("TRACER_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => workspace_dir().join("target/venv/bin/python"),
    };
    assert!(
        p.exists(),
        "{} is missing: `cargo xtask setup` (or `cargo xtask test`) creates it with DuckDB",
        p.display()
    );
    p
}

/// The SQL blocks of docs/sql.md, by their first line (`-- NAME`).
fn sql_blocks() -> BTreeMap<String, String> {
    let doc = std::fs::read_to_string(workspace_dir().join("docs/sql.md")).unwrap();
    let mut blocks = BTreeMap::new();
    let mut cur: Option<Vec<&str>> = None;
    for line in doc.lines() {
        match (&mut cur, line.trim_end()) {
            (None, "```sql") => cur = Some(vec![]),
            (Some(b), "```") => {
                let name = b[0].trim_start_matches("--").trim().to_string();
                blocks.insert(name, b[1..].join("\n"));
                cur = None;
            }
            (Some(b), l) => b.push(l),
            _ => {}
        }
    }
    blocks
}

/// Runs `queries` (name -> SQL) in DuckDB in `dir` after the statements of `setup`;
/// returns each query's rows as JSON objects.
fn duckdb(dir: &Path, setup: &str, queries: &BTreeMap<&str, &str>) -> BTreeMap<String, Vec<Value>> {
    let script = r#"
import json, sys, duckdb
con = duckdb.connect()
job = json.load(open(sys.argv[1]))
for stmt in job["setup"].split(";"):
    if stmt.strip():
        con.execute(stmt)
out = {}
for name, sql in job["queries"].items():
    cur = con.execute(sql)
    cols = [d[0] for d in cur.description]
    out[name] = [dict(zip(cols, row)) for row in cur.fetchall()]
json.dump(out, sys.stdout, default=str)
"#;
    let job = serde_json::json!({ "setup": setup, "queries": queries });
    std::fs::write(dir.join("job.json"), job.to_string()).unwrap();
    std::fs::write(dir.join("run.py"), script).unwrap();
    let out = Command::new(python())
        .arg("run.py")
        .arg("job.json")
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "duckdb: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A number of either side (DuckDB's floor() is a double).
fn num(v: &Value) -> i128 {
    match v {
        Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
            .unwrap_or_else(|| n.as_f64().unwrap() as i128),
        Value::Null => 0,
        other => panic!("not a number: {other}"),
    }
}

/// Compares `fields` of the summary's rows with the SQL rows of the same key.
fn compare(what: &str, summary: &[Value], sql: &[Value], key: &[&str], fields: &[&str]) -> usize {
    let k = |v: &Value| -> Vec<String> { key.iter().map(|f| v[*f].to_string()).collect() };
    let by_key: BTreeMap<Vec<String>, &Value> = sql.iter().map(|r| (k(r), r)).collect();
    assert_eq!(sql.len(), by_key.len(), "{what}: keys are unique");
    assert_eq!(summary.len(), sql.len(), "{what}: as many rows");
    for s in summary {
        let r = by_key
            .get(&k(s))
            .unwrap_or_else(|| panic!("{what}: no SQL row for {:?}", k(s)));
        for f in fields {
            assert_eq!(num(&s[*f]), num(&r[*f]), "{what} {:?}: {f}", k(s));
        }
    }
    summary.len() * fields.len()
}

#[test]
fn duckdb_over_the_parquet_of_a_recording_gives_the_summary() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("run.trace");
    let server = Server::start(&ServerOptions {
        workers: 4,
        sleep_us: 500,
        ..Default::default()
    })
    .unwrap();
    let rec = start_tracer(
        "record",
        server.pid(),
        &trace,
        &["-u", "handle_request", "-u", "render_response"],
    );
    let report = load(server.port(), 16, 200, 2000, 4, Duration::from_secs(30));
    assert_eq!(report.errors, 0);
    stop_tracer(rec);
    let stats = server.stop().unwrap();

    let out = dir.path().join("run.parquet");
    tracer_ok(&[
        "convert".as_ref(),
        "--to".as_ref(),
        "parquet".as_ref(),
        trace.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    // Converting again over it is refused without --force.
    let again = Command::new(tracer_bin())
        .args(["convert", "--to", "parquet"])
        .arg(&trace)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains("already exists") && err.trim().lines().count() == 1,
        "{err}"
    );

    let json = tracer_ok(&[
        "summary".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        trace.as_os_str(),
    ]);
    let summary: Value = serde_json::from_slice(&json.stdout).unwrap();

    let blocks = sql_blocks();
    let queries: BTreeMap<&str, &str> = [
        ("functions", "tracer summary --by function"),
        ("threads", "tracer summary --by thread"),
        ("syscalls", "tracer summary --by syscall"),
    ]
    .into_iter()
    .map(|(k, b)| (k, blocks[b].as_str()))
    .collect();
    let rows = duckdb(dir.path(), &blocks["tables: duckdb"], &queries);

    // The ground truth first: every request's handler call is a row.
    let handle = (rows["functions"].iter())
        .find(|r| r["name"] == "handle_request")
        .unwrap();
    assert_eq!(num(&handle["calls"]), stats.handle_request as i128);

    let as_list = |k: &str| summary[k].as_array().unwrap().clone();
    let mut checked = compare(
        "function",
        &as_list("functions"),
        &rows["functions"],
        &["name", "binary"],
        &[
            "calls",
            "errors",
            "unfinished",
            "inclusive_ns",
            "self_ns",
            "running_ns",
            "ready_ns",
            "blocked_ns",
            "io_ns",
            "mean_ns",
            "min_ns",
            "max_ns",
        ],
    );
    checked += compare(
        "thread",
        &as_list("threads"),
        &rows["threads"],
        &["tgid", "tid"],
        &[
            "running_ns",
            "ready_ns",
            "blocked_ns",
            "io_ns",
            "unknown_ns",
            "not_created_ns",
            "exited_ns",
            "voluntary_switches",
            "involuntary_switches",
            "wakeups_sent",
            "wakeups_received",
            "migrations",
            "syscalls",
            "syscall_errors",
            "syscall_ns",
            "function_calls",
            "ready_waits",
            "ready_max_ns",
        ],
    );
    checked += compare(
        "syscall",
        &as_list("syscalls"),
        &rows["syscalls"],
        &["name"],
        &[
            "calls",
            "errors",
            "unfinished",
            "total_ns",
            "mean_ns",
            "max_ns",
            "bytes_read",
            "bytes_written",
        ],
    );
    eprintln!("{checked} figures equal");
}

/// The fleet recipe of docs/sql.md on a real `tracer stat` file: converted with
/// `--partition host,date`, its query gives the stat summary's calls and time per
/// function, and the fixture's own count of requests; its percentiles query over the
/// `latencies` table gives the summary's p50, p99 and max within 1/32.
#[test]
fn the_fleet_recipe_over_a_stat_file_gives_its_summary() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&ServerOptions {
        workers: 2,
        sleep_us: 500,
        ..Default::default()
    })
    .unwrap();
    let stat = dir.path().join("prod.stat");
    let st = start_tracer(
        "stat",
        server.pid(),
        &stat,
        &["-u", "handle_request", "-i", "300ms"],
    );
    let report = load(server.port(), 8, 100, 1000, 2, Duration::from_secs(30));
    assert_eq!(report.errors, 0);
    stop_tracer(st);
    let stats = server.stop().unwrap();

    let fleet = dir.path().join("fleet");
    tracer_ok(&[
        "convert".as_ref(),
        "--to".as_ref(),
        "parquet".as_ref(),
        "--partition".as_ref(),
        "host,date".as_ref(),
        stat.as_os_str(),
        "-o".as_ref(),
        fleet.as_os_str(),
    ]);
    let json = tracer_ok(&[
        "summary".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        stat.as_os_str(),
    ]);
    let summary: Value = serde_json::from_slice(&json.stdout).unwrap();
    let blocks = sql_blocks();
    let query = blocks["fleet: per function, every host and day (DuckDB)"].as_str();
    let rows = duckdb(dir.path(), "", &[("fleet", query)].into_iter().collect());
    let mut by_function: BTreeMap<String, (i128, i128)> = BTreeMap::new();
    for r in &rows["fleet"] {
        let f = by_function
            .entry(r["function"].as_str().unwrap().to_string())
            .or_default();
        f.0 += num(&r["calls"]);
        f.1 += num(&r["total_ns"]);
    }
    let functions = summary["functions"].as_array().unwrap();
    assert_eq!(functions.len(), by_function.len());
    for f in functions {
        let name = f["name"].as_str().unwrap();
        let (calls, total) = by_function[name];
        assert_eq!(calls, num(&f["calls"]), "{name}: calls");
        assert_eq!(total, num(&f["inclusive_ns"]), "{name}: time");
    }
    assert_eq!(
        by_function["handle_request"].0,
        stats.handle_request as i128
    );

    let query = blocks["fleet: latency percentiles per function (DuckDB)"].as_str();
    let rows = duckdb(dir.path(), "", &[("p", query)].into_iter().collect());
    assert_eq!(rows["p"].len(), functions.len());
    for r in &rows["p"] {
        let name = r["function"].as_str().unwrap();
        let f = (functions.iter())
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in the summary"));
        assert_eq!(num(&r["timed_calls"]), num(&f["timed_calls"]), "{name}");
        for (sql, summary) in [
            ("p50_ns", "p50_ns"),
            ("p99_ns", "p99_ns"),
            ("max_ns", "max_ns"),
        ] {
            let (q, s) = (num(&r[sql]), num(&f[summary]));
            assert!(
                q <= s && s <= q + q / 32,
                "{name}: {sql} {q} by SQL, {s} by the summary"
            );
        }
    }
}
