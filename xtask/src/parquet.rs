//! `cargo xtask bench --only parquet`: the Parquet writer's rate and size on the synthetic
//! traces of the other converters' benchmarks, then the distributed path shown: Spark in
//! local mode (pyspark from PyPI on Debian's JRE, both installed here, by the bench only)
//! and DuckDB running the per-function query of docs/sql.md over the partitioned tables
//! of 8 simulated hosts, with their times and the same answer.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{ensure, Context, Result};

use crate::setup::{ensure_commands, ensure_venv, status, workspace};

/// Hosts of the fleet and records per host.
const HOSTS: usize = 8;
const RECORDS_PER_HOST: &str = "2000000";

/// pyspark 4 runs on Java 17, Debian 12's default JRE.
const BENCH_PYTHON: &[&str] = &["pyspark==4.0.1", "duckdb==1.4.4"];

fn example(args: &[&str]) -> Result<()> {
    status(
        Command::new("cargo")
            .args(["run", "--release", "--quiet", "-p", "trace-parquet"])
            .args(["--example", "parquet_bench", "--"])
            .args(args)
            .current_dir(workspace()),
    )
}

/// The SQL block of docs/sql.md whose first line is `-- NAME`.
fn sql_block(name: &str) -> Result<String> {
    let doc = std::fs::read_to_string(workspace().join("docs/sql.md"))?;
    let start = doc
        .find(&format!("```sql\n-- {name}\n"))
        .with_context(|| format!("docs/sql.md has no block `-- {name}`"))?;
    let body = &doc[start + 7..];
    let body = &body[body.find('\n').unwrap() + 1..];
    Ok(body[..body.find("```").unwrap()].to_string())
}

const SCRIPT: &str = r#"
import json, sys, time
job = json.load(open(sys.argv[1]))
t0 = time.time()
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").appName("tracer-parquet-bench")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.memory", "2g")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
started = time.time() - t0
for stmt in job["spark_tables"].split(";"):
    if stmt.strip():
        spark.sql(stmt)
t1 = time.time()
rows = spark.sql(job["query"]).collect()
spark_s = time.time() - t1
t2 = time.time()
rows2 = spark.sql(job["query"]).collect()
spark_warm_s = time.time() - t2
spark_calls = {r["name"]: int(r["calls"]) for r in rows}
spark_inclusive = {r["name"]: int(r["inclusive_ns"]) for r in rows}
spark.stop()

import duckdb
con = duckdb.connect()
con.execute("CREATE VIEW calls AS SELECT * FROM read_parquet('fleet/calls/*/*/*.parquet', hive_partitioning = true)")
t3 = time.time()
cur = con.execute(job["query"])
cols = [d[0] for d in cur.description]
drows = [dict(zip(cols, r)) for r in cur.fetchall()]
duck_s = time.time() - t3
duck_calls = {r["name"]: int(r["calls"]) for r in drows}
duck_inclusive = {r["name"]: int(r["inclusive_ns"]) for r in drows}
total = con.execute("SELECT count(*), count(DISTINCT host), count(DISTINCT date) FROM calls").fetchone()
print(f"spark: session start {started:.1f} s; per-function query {spark_s:.2f} s (again: {spark_warm_s:.2f} s), {len(rows)} functions over {total[0]} calls rows, {total[1]} hosts, {total[2]} days")
print(f"duckdb: the same query {duck_s:.2f} s")
same = spark_calls == duck_calls and spark_inclusive == duck_inclusive
print(f"spark and duckdb agree on every function's calls and inclusive time: {same}")
sys.exit(0 if same else 1)
"#;

pub fn bench(dir: &Path) -> Result<()> {
    example(&[])?;

    println!("\n== Parquet across a fleet: {HOSTS} hosts, Spark (local mode) and DuckDB");
    let work = dir.join("parquet");
    std::fs::create_dir_all(&work)?;
    example(&[
        "fleet",
        work.to_str().context("path")?,
        &HOSTS.to_string(),
        RECORDS_PER_HOST,
    ])?;
    let t0 = Instant::now();
    ensure_commands(&[("java", "default-jre-headless")])?;
    let python = ensure_venv(&workspace().join("target/venv-bench"), BENCH_PYTHON)?;
    println!(
        "pyspark, duckdb and a JRE in place in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let job = serde_json::json!({
        "spark_tables": sql_block("tables: spark")?,
        "query": sql_block("tracer summary --by function")?,
    });
    std::fs::write(work.join("job.json"), job.to_string())?;
    std::fs::write(work.join("spark_bench.py"), SCRIPT)?;
    let st = Command::new(&python)
        .args(["spark_bench.py", "job.json"])
        .current_dir(&work)
        .status()?;
    ensure!(st.success(), "the Spark/DuckDB run failed ({st})");
    Ok(())
}
