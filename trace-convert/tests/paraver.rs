//! The Paraver writer: golden files for small scenarios, conformance of every output,
//! and the checker's negative cases.

use std::path::{Path, PathBuf};

use trace_convert::paraver::{self, Tuning};
use trace_convert::Error;
use trace_file::Event;
use trace_merge::MergeOptions;
use trace_testkit::builder::*;
use trace_testkit::check::paraver::{check, check_tiling};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Converts `traces` and compares the three outputs with `tests/golden/NAME.*`
/// (`UPDATE_GOLDEN=1` rewrites them).
fn golden(name: &str, traces: &[TraceBuilder]) -> paraver::ConvertReport {
    let dir = tempfile::tempdir().unwrap();
    let inputs: Vec<PathBuf> = (traces.iter().enumerate())
        .map(|(i, t)| {
            let p = dir.path().join(format!("in{i}.trace"));
            t.write(&p);
            p
        })
        .collect();
    let stem = dir.path().join(name);
    let report = paraver::convert(&inputs, &stem, &opts(false)).unwrap();
    if let Err(v) = check(&stem) {
        panic!("{name} is not conformant:\n{v}");
    }
    if let Err(v) = check_tiling(&stem) {
        panic!("{name} does not tile:\n{v}");
    }
    for ext in ["prv", "pcf", "row"] {
        let got = std::fs::read_to_string(stem.with_extension(ext)).unwrap();
        let path = golden_dir().join(format!("{name}.{ext}"));
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display()));
        assert_eq!(got, want, "{name}.{ext} differs from the golden file");
    }
    report
}

#[test]
fn golden_server() {
    let r = golden("server", &[server_scenario()]);
    assert_eq!(r.input.records_in, 23);
    assert_eq!(r.threads, 3);
    assert_eq!(r.processes, 1);
    assert_eq!(
        r.comms, 2,
        "one wakeup (helper's waker is an interrupt) and one hand-off"
    );
    assert_eq!(r.input.lost_by_kernel, 2);
    assert_eq!(r.input.out_of_order, 0);
    assert!(r.input.truncated.is_empty() && r.input.without_trailer.is_empty());
    assert_eq!(r.duration_ns, 3_000_000);
}

#[test]
fn golden_two_hosts() {
    let mut a = TraceBuilder::new("web1", 1);
    a.process(10, "/bin/front").thread(10, 10, "front", 'R');
    a.at(10, 0, 0, sw(10, 0))
        .at(20, 0, 10, enter(42, 7, 0))
        .at(30, 0, 10, exit(42, 0))
        .at(40, 0, 10, sw(0, 1))
        .stop(100);
    let mut b = TraceBuilder::new("db1", 2);
    // Started 50 us later, on a host whose monotonic clock is 1 s ahead.
    b.header.start_ns = START + 1_000_000_000 + 50_000;
    b.header.monotonic_to_realtime_ns = M2R - 1_000_000_000;
    b.process(20, "/bin/db").thread(20, 20, "db", 'D');
    let base = START + 1_000_000_000;
    b.at_ns(base + 60_000, 1, 0, sw(20, 0))
        .at_ns(base + 70_000, 1, 20, enter(0, 3, 10))
        .at_ns(base + 80_000, 1, 20, exit(0, 10))
        .at_ns(base + 90_000, 1, 20, sw(0, 2));
    b.trailer = None;
    let r = golden("two_hosts", &[a, b]);
    assert_eq!(r.processes, 2);
    assert_eq!(r.input.without_trailer.len(), 1);
}

fn convert_to(
    dir: &Path,
    b: &TraceBuilder,
    merge: &MergeOptions,
    tuning: &Tuning,
) -> paraver::ConvertReport {
    let input = dir.join("in.trace");
    b.write(&input);
    let o = trace_convert::Options {
        force: true,
        merge: merge.clone(),
        ..Default::default()
    };
    paraver::convert_tuned(&[input], &dir.join("out"), &o, tuning).unwrap()
}

/// Random scenarios, converted with the default buffering and with a tiny one (many
/// flushes, cuts and late records): both conformant, tiling, same records converted.
#[test]
fn random_traces_are_conformant() {
    let (mut comms, mut late) = (0, 0);
    for seed in 1..=12u64 {
        let b = random_scenario(
            seed * 7919,
            1 + (seed % 4) as u32,
            2 + (seed % 9) as u32,
            600,
        );
        let dir = tempfile::tempdir().unwrap();
        let small = Tuning {
            flush_every: 5,
            cut_age_ns: 0,
            link_horizon_ns: 3_000,
        };
        for tuning in [Tuning::default(), small] {
            let r = convert_to(dir.path(), &b, &MergeOptions::default(), &tuning);
            let stem = dir.path().join("out");
            if let Err(v) = check(&stem) {
                panic!("seed {seed}, flush_every {}:\n{v}", tuning.flush_every);
            }
            if let Err(v) = check_tiling(&stem) {
                panic!("seed {seed}, flush_every {}:\n{v}", tuning.flush_every);
            }
            let n: usize = b.cpus.values().map(Vec::len).sum();
            assert_eq!(r.input.records_in, n as u64);
            comms += r.comms;
            late += r.late_records;
        }
    }
    // The scenarios do exercise links and the late-record path.
    assert!(comms > 100 && late > 10, "comms {comms}, late {late}");
}

#[test]
fn refuses_to_overwrite_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.trace");
    server_scenario().write(&input);
    let stem = dir.path().join("out");
    std::fs::write(dir.path().join("out.row"), "mine").unwrap();
    let err = paraver::convert(std::slice::from_ref(&input), &stem, &opts(false)).unwrap_err();
    assert!(matches!(err, Error::Exists { .. }), "{err}");
    assert!(err.to_string().contains("out.row already exists"), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.row")).unwrap(),
        "mine"
    );
    paraver::convert(&[input], &stem, &opts(true)).unwrap();
    check(&stem).unwrap();
}

#[test]
fn corrupt_input_is_an_error_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.trace");
    let mut bytes = server_scenario().bytes();
    let n = bytes.len();
    bytes[n - 40] ^= 0x55;
    std::fs::write(&input, &bytes).unwrap();
    let stem = dir.path().join("out");
    let err = paraver::convert(&[input], &stem, &opts(false)).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("in.trace") && !msg.contains('\n'), "{msg}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "temporary or partial outputs left behind");

    std::fs::write(dir.path().join("text.trace"), "hello").unwrap();
    let err = paraver::convert(&[dir.path().join("text.trace")], &stem, &opts(false)).unwrap_err();
    assert!(err.to_string().contains("bad magic"), "{err}");
    let err = paraver::convert(&[], &stem, &opts(false)).unwrap_err();
    assert!(matches!(err, Error::Input(trace_merge::Error::NoInput)));
}

#[test]
fn every_truncation_converts_or_fails_cleanly() {
    let bytes = server_scenario().bytes();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.trace");
    let stem = dir.path().join("out");
    let mut converted = 0;
    for cut in (0..bytes.len()).step_by(7) {
        std::fs::write(&input, &bytes[..cut]).unwrap();
        match paraver::convert(std::slice::from_ref(&input), &stem, &opts(true)) {
            Ok(r) => {
                converted += 1;
                check(&stem).unwrap();
                check_tiling(&stem).unwrap();
                assert!(r.input.truncated.len() <= 1);
            }
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
    assert!(converted > 10);
}

#[test]
fn truncated_tail_is_reported() {
    let bytes = server_scenario().bytes();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.trace");
    std::fs::write(&input, &bytes[..bytes.len() - 5]).unwrap();
    let r = paraver::convert(
        std::slice::from_ref(&input),
        &dir.path().join("o"),
        &opts(false),
    )
    .unwrap();
    assert_eq!(r.input.truncated.len(), 1);
    assert_eq!(r.input.truncated[0].0, input);
    assert_eq!(r.input.without_trailer.len(), 1);
}

#[test]
fn late_chunk_beyond_window_is_counted_not_dropped() {
    let mut b = TraceBuilder::new("h", 2);
    b.process(7, "/x")
        .thread(7, 7, "a", 'R')
        .thread(7, 8, "b", 'R');
    for i in 0..200u64 {
        b.at(10 + i * 10, 0, 7, Event::FuncEntry { func: 1 });
        b.at(15 + i * 10, 0, 7, Event::FuncExit { func: 1, ret: 0 });
    }
    b.at(20, 1, 8, enter(39, 0, 0)).at(25, 1, 8, exit(39, 8));
    b.probe(1, "f");
    b.reverse_cpus = false;
    b.chunk_records = 50;
    b.stop(3000);
    let dir = tempfile::tempdir().unwrap();
    let merge = MergeOptions {
        window_ns: 100_000,
        jitter_ns: 0,
        ..Default::default()
    };
    let r = convert_to(dir.path(), &b, &merge, &Tuning::default());
    assert_eq!(r.input.records_in, 402);
    assert_eq!(r.input.out_of_order, 2);
    assert!(r.input.max_lateness_ns > 0);
    check(&dir.path().join("out")).unwrap();
    check_tiling(&dir.path().join("out")).unwrap();
}

// ---- The checker itself: the example of paraver-format.md and its negative cases. ----

const GOOD_PRV: &str = "\
#Paraver (20/05/2025 at 14:03):1500000_ns:1(4):1:1(3:1)
1:3:1:1:2:0:320000:0
1:0:1:1:3:0:1500000:2
1:2:1:1:1:0:200000:1
2:2:1:1:1:200000:60000019:3:40000000:1
1:2:1:1:1:200000:350000:12
3:2:1:1:1:300000:300000:3:1:1:2:320000:320000:0:1
1:3:1:1:2:320000:1500000:1
2:2:1:1:1:350000:40000000:0:60000019:0
1:2:1:1:1:350000:1500000:1
";

const GOOD_PCF: &str = "\
DEFAULT_OPTIONS

LEVEL               THREAD
UNITS               NANOSEC


STATES
0    Idle
1    Running
2    Not created
12   I/O

STATES_COLOR
0    {117,195,255}
1    {0,0,255}
2    {255,255,255}
12   {172,174,41}

EVENT_TYPE
0    60000019    User function
VALUES
0      End
3      handle_request

EVENT_TYPE
9    40000000    System call
VALUES
0      End
1      read
";

const GOOD_ROW: &str = "\
LEVEL CPU SIZE 4
1.myhost
2.myhost
3.myhost
4.myhost

LEVEL NODE SIZE 1
myhost

LEVEL THREAD SIZE 3
THREAD 1.1.1
THREAD 1.1.2
THREAD 1.1.3
";

fn write_set(dir: &Path, prv: &str, pcf: &str, row: &str) -> PathBuf {
    let stem = dir.join("t");
    std::fs::write(dir.join("t.prv"), prv).unwrap();
    std::fs::write(dir.join("t.pcf"), pcf).unwrap();
    std::fs::write(dir.join("t.row"), row).unwrap();
    stem
}

#[test]
fn checker_accepts_the_reference_example() {
    let dir = tempfile::tempdir().unwrap();
    let stem = write_set(dir.path(), GOOD_PRV, GOOD_PCF, GOOD_ROW);
    let r = check(&stem).unwrap();
    assert_eq!(
        (r.states, r.events, r.comms, r.threads, r.cpus),
        (6, 2, 1, 3, 4)
    );
    // The example's thread 2 starts at 0 and its states run to the end: it tiles;
    // thread 3 is "not created" throughout.
    check_tiling(&stem).unwrap();
}

#[test]
fn checker_rejects_each_broken_rule() {
    let dir = tempfile::tempdir().unwrap();
    let add = |line: &str| format!("{GOOD_PRV}{line}\n");
    let cases: Vec<(String, String, String, &str)> = vec![
        (
            add("1:3:1:1:4:1400000:1500000:1"),
            GOOD_PCF.into(),
            GOOD_ROW.into(),
            "thread 4 in task 1.1 of 3",
        ),
        (
            add("1:5:1:1:1:1400000:1500000:1"),
            GOOD_PCF.into(),
            GOOD_ROW.into(),
            "cpu 5 but the trace has 4",
        ),
        (
            add("2:2:1:1:1:1400000:60000019"),
            GOOD_PCF.into(),
            GOOD_ROW.into(),
            "type:value pairs",
        ),
        (
            add("2:2:1:1:1:-5:60000019:1"),
            GOOD_PCF.into(),
            GOOD_ROW.into(),
            "negative",
        ),
        (
            add("1:2:1:1:1:-5:10:1"),
            GOOD_PCF.into(),
            GOOD_ROW.into(),
            "negative",
        ),
        (
            add("1:2:1:1:1:100:200:1"),
            GOOD_PCF.into(),
            GOOD_ROW.into(),
            "not sorted",
        ),
        (
            add("1:2:1:1:2:1500000:1500000:1"),
            GOOD_PCF.into(),
            GOOD_ROW.into(),
            "empty state",
        ),
        (
            GOOD_PRV.replace(
                "2:2:1:1:1:350000:40000000:0:60000019:0",
                "2:2:1:1:1:350000:40000000:0\n2:2:1:1:1:350000:60000019:0",
            ),
            GOOD_PCF.into(),
            GOOD_ROW.into(),
            "must share a line",
        ),
        (
            GOOD_PRV
                .replace("3:2:1:1:1:300000:300000:3:1:1:2:320000:320000:0:1\n", "")
                .replace(
                    "1:3:1:1:2:320000",
                    "3:2:1:1:1:330000:330000:3:1:1:2:340000:340000:0:1\n1:3:1:1:2:320000",
                ),
            GOOD_PCF.into(),
            GOOD_ROW.into(),
            "not sorted",
        ),
        (
            GOOD_PRV.replace(
                "2:2:1:1:1:200000:60000019:3:40000000:1\n1:2:1:1:1:200000:350000:12",
                "1:2:1:1:1:200000:350000:12\n2:2:1:1:1:200000:60000019:3:40000000:1",
            ),
            GOOD_PCF.into(),
            GOOD_ROW.into(),
            "tie rank",
        ),
        (
            add("2:2:1:1:1:1400000:777:1"),
            GOOD_PCF.into(),
            GOOD_ROW.into(),
            "777 is used but not declared",
        ),
        (
            add("1:2:1:1:1:1400000:1500000:9"),
            GOOD_PCF.into(),
            GOOD_ROW.into(),
            "state 9 is used but has no label",
        ),
        (
            add("1:2:1:1:1:1400000:1600000:1"),
            GOOD_PCF.into(),
            GOOD_ROW.into(),
            "after the trace end",
        ),
        (
            add("new format"),
            GOOD_PCF.into(),
            GOOD_ROW.into(),
            "new format",
        ),
        (
            GOOD_PRV.replace(":1(3:1)", ":1(3:2)"),
            GOOD_PCF.into(),
            GOOD_ROW.into(),
            "node 2 of 1",
        ),
        (
            GOOD_PRV.replace(":1(3:1)", ":1(0:1)"),
            GOOD_PCF.into(),
            GOOD_ROW.into(),
            "0 threads",
        ),
        (
            GOOD_PRV.replace("#Paraver (", "#Paraver "),
            GOOD_PCF.into(),
            GOOD_ROW.into(),
            "#Paraver (",
        ),
        (
            GOOD_PRV.lines().next().unwrap().to_string() + "\n",
            GOOD_PCF.into(),
            GOOD_ROW.into(),
            "no records",
        ),
        (
            GOOD_PRV.into(),
            GOOD_PCF.replace("STATES_COLOR", "STATES_COLOUR"),
            GOOD_ROW.into(),
            "no STATES_COLOR",
        ),
        (
            GOOD_PRV.into(),
            GOOD_PCF.replace("0    60000019    User function", "60000019"),
            GOOD_ROW.into(),
            "bad EVENT_TYPE",
        ),
        (
            GOOD_PRV.into(),
            GOOD_PCF.into(),
            GOOD_ROW.replace("SIZE 3", "SIZE 4"),
            "LEVEL THREAD SIZE 4",
        ),
        (
            GOOD_PRV.into(),
            GOOD_PCF.into(),
            GOOD_ROW.replace("3.myhost\n", ""),
            "has 3 labels, not 4",
        ),
        (
            GOOD_PRV.into(),
            GOOD_PCF.into(),
            GOOD_ROW.replace("LEVEL NODE SIZE 1", "LEVEL NODES SIZE 1"),
            "unknown level",
        ),
    ];
    for (i, (prv, pcf, row, needle)) in cases.into_iter().enumerate() {
        let stem = write_set(dir.path(), &prv, &pcf, &row);
        match check(&stem) {
            Ok(_) => panic!("case {i} ({needle}) passed the checker"),
            Err(v) => assert!(v.mentions(needle), "case {i}: want {needle:?}, got:\n{v}"),
        }
    }
}

#[test]
fn tiling_checker_finds_gaps_and_overlaps() {
    let dir = tempfile::tempdir().unwrap();
    for (prv, needle) in [
        (
            GOOD_PRV.replace("1:3:1:1:2:0:320000:0", "1:3:1:1:2:0:310000:0"),
            "previous one ended at 310000",
        ),
        (
            GOOD_PRV.replace("1:2:1:1:1:350000:1500000:1", "1:2:1:1:1:350000:1400000:1"),
            "not the trace end",
        ),
    ] {
        let stem = write_set(dir.path(), &prv, GOOD_PCF, GOOD_ROW);
        let v = check_tiling(&stem).unwrap_err();
        assert!(v.mentions(needle), "want {needle:?}:\n{v}");
    }
}

/// Values out of any sane range (corrupt or hostile input) must not panic the writer.
#[test]
fn extreme_values_do_not_panic() {
    let mut b = TraceBuilder::new("h", 1);
    b.process(1, "/x").thread(1, 1, "a", 'R');
    b.probe(u32::MAX, "huge");
    b.at(1, 0, 1, Event::FuncEntry { func: u32::MAX })
        .at(2, 0, 1, enter(u32::MAX, u64::MAX, u64::MAX))
        .at(3, 0, 1, exit(u32::MAX, i64::MIN))
        .at(4, 0, 1, exit(43, i64::MAX))
        .at(5, 0, 1, sw(u32::MAX, u32::MAX))
        .at(
            6,
            0,
            1,
            Event::Wakeup {
                wakee: u32::MAX,
                target_cpu: u32::MAX,
                new: true,
            },
        )
        .at_ns(
            u64::MAX,
            0,
            1,
            Event::FuncExit {
                func: u32::MAX,
                ret: u64::MAX,
            },
        )
        .at_ns(0, 0, 1, Event::FuncExit { func: 7, ret: 0 });
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.trace");
    b.write(&input);
    let stem = dir.path().join("out");
    paraver::convert(&[input], &stem, &opts(false)).unwrap();
    check(&stem).unwrap();
    check_tiling(&stem).unwrap();
}

/// Conversion options: replace existing outputs or not.
fn opts(force: bool) -> trace_convert::Options {
    trace_convert::Options {
        force,
        ..Default::default()
    }
}

/// Go calls and USDT probes convert conformantly: function events on the thread that
/// entered the call, USDT events with their arguments, labelled in the .pcf.
#[test]
fn go_calls_and_usdt_probes_are_events() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("go.trace");
    go_scenario().write(&input);
    let stem = dir.path().join("go");
    paraver::convert(&[input], &stem, &opts(false)).unwrap();
    check(&stem).unwrap_or_else(|v| panic!("{v}"));
    let prv = std::fs::read_to_string(stem.with_extension("prv")).unwrap();
    let usdt: Vec<&str> = prv.lines().filter(|l| l.contains(":60000100:")).collect();
    assert_eq!(usdt.len(), 2, "{prv}");
    assert!(
        usdt[0].ends_with(":60000100:3:60000101:-7:60000102:42"),
        "{}",
        usdt[0]
    );
    let pcf = std::fs::read_to_string(stem.with_extension("pcf")).unwrap();
    assert!(pcf.contains("60000100    USDT probe") && pcf.contains("3      app:request"));
}
