//! A real recording damaged as disks and crashes damage files, read by every command:
//! damage is a one-line error, a torn tail a warning with everything before it read, and
//! `--salvage` reads past damage and says so in every output. Needs root (it records).

use std::{path::Path, process::Command, time::Duration};

use trace_file::{ChunkKind, EventChunkDecoder, Reader, CHUNK_HEADER_LEN};
use tracer_tests::*;

/// What a command did: success, stdout, stderr.
fn run(args: &[&std::ffi::OsStr]) -> (bool, String, String) {
    let out = Command::new(tracer_bin()).args(args).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// Records of a `tracer dump` (its other lines start with '#').
fn records(dump: &str) -> usize {
    dump.lines().filter(|l| !l.starts_with('#')).count()
}

/// Every reading command fails on `file` with one line holding `what`.
fn all_fail(file: &Path, what: &str, dir: &Path) {
    let out = dir.join("out");
    let commands: [Vec<&std::ffi::OsStr>; 5] = [
        vec!["dump".as_ref(), file.as_ref()],
        vec!["summary".as_ref(), file.as_ref()],
        vec!["diff".as_ref(), file.as_ref(), file.as_ref()],
        vec![
            "convert".as_ref(),
            file.as_ref(),
            "-o".as_ref(),
            out.as_ref(),
        ],
        vec![
            "convert".as_ref(),
            "--to".as_ref(),
            "chrome".as_ref(),
            file.as_ref(),
            "-o".as_ref(),
            out.as_ref(),
        ],
    ];
    for args in commands {
        let (ok, _, err) = run(&args);
        assert!(!ok, "{args:?} succeeded on {}", file.display());
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains(what) && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
    assert!(!out.with_extension("prv").exists() && !out.with_extension("json").exists());
}

/// A JUnit document whose suite has one `salvaged` property, naming `file`.
fn assert_salvaged_property(xml: &str, file: &Path) {
    let doc = roxmltree::Document::parse(xml).unwrap_or_else(|e| panic!("{e}: {xml}"));
    let suite = (doc.descendants())
        .find(|n| n.has_tag_name("testsuite"))
        .unwrap();
    let props: Vec<&str> = (suite.children())
        .filter(|n| n.has_tag_name("properties"))
        .flat_map(|p| p.children().filter(|n| n.has_tag_name("property")))
        .filter(|p| p.attribute("name") == Some("salvaged"))
        .map(|p| p.attribute("value").unwrap())
        .collect();
    assert_eq!(props.len(), 1, "{xml}");
    let file = file.display().to_string();
    assert!(
        props[0].starts_with(&file) && props[0].contains("bytes skipped"),
        "{}",
        props[0]
    );
}

#[test]
fn damage_is_an_error_a_torn_tail_a_warning_and_salvage_reads_past_damage() {
    let _serial = serial();
    // About 1.5 s of requests: the recorder writes a chunk per CPU at least twice a second.
    let server = Server::start(&ServerOptions {
        sleep_us: 5000,
        ..Default::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = d.join("good.trace");
    let rec = start_tracer("record", server.pid(), &good, &["-u", "handle_request"]);
    let report = load(server.port(), 4, 300, 100, 4, Duration::from_secs(30));
    stop_tracer(rec);
    server.stop().unwrap();
    assert_eq!(report.errors, 0);
    let bytes = std::fs::read(&good).unwrap();

    // The Events chunks, found with the reader: offset, payload length, records.
    let mut reader = Reader::new(&bytes[..]).unwrap();
    let mut events = vec![];
    while let Some(c) = reader.next_chunk().unwrap() {
        if c.kind == ChunkKind::Events {
            let n = EventChunkDecoder::new(&c.payload, c.offset)
                .unwrap()
                .count();
            events.push((c.offset as usize, c.payload.len(), n));
        }
    }
    assert!(events.len() >= 3, "{} Events chunks", events.len());
    let total: usize = events.iter().map(|e| e.2).sum();
    let (_, whole, _) = run(&["dump".as_ref(), good.as_ref()]);
    assert_eq!(records(&whole), total);
    let (at, len, held) = events[events.len() / 2];

    let write = |name: &str, f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = bytes.clone();
        f(&mut b);
        let p = d.join(name);
        std::fs::write(&p, b).unwrap();
        p
    };
    // A flipped byte inside an Events chunk's records, and one in its length.
    let payload = write("payload.trace", &|b| {
        b[at + CHUNK_HEADER_LEN + len / 2] ^= 0x10
    });
    let length = write("length.trace", &|b| b[at + 9] ^= 0x01);
    for damaged in [&payload, &length] {
        all_fail(damaged, &format!("corrupt chunk at byte {at}"), d);
        let (_, _, err) = run(&["dump".as_ref(), damaged.as_ref()]);
        assert!(err.contains("--salvage"), "{err}");

        let salvage = |args: &[&str]| {
            let mut v: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
            v.push("--salvage".as_ref());
            v.push(damaged.as_ref());
            let (ok, out, err) = run(&v);
            assert!(ok, "{args:?} --salvage {}: {err}", damaged.display());
            (out, err)
        };
        // Every record but the damaged chunk's, and a line that says what was skipped.
        let (dump, _) = salvage(&["dump"]);
        assert_eq!(records(&dump), total - held, "{}", damaged.display());
        let said: Vec<&str> = dump
            .lines()
            .filter(|l| l.starts_with("# damaged"))
            .collect();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].contains(&format!("at byte {at} skipped")),
            "{}",
            said[0]
        );

        let (json, _) = salvage(&["summary", "--format", "json"]);
        let s: serde_json::Value = serde_json::from_str(&json).unwrap();
        let regions = s["files"][0]["damaged"].as_array().unwrap();
        assert_eq!(regions.len(), 1);
        assert_eq!(regions[0]["offset"], at);
        assert!(
            s["notes"].to_string().contains("salvaged"),
            "{}",
            s["notes"]
        );

        let (table, _) = salvage(&["diff", good.to_str().unwrap()]);
        assert!(
            table.contains("note (B):") && table.contains("salvaged"),
            "{table}"
        );
        // JUnit: a `salvaged` property on the suite, the summary's flags and the gate's
        // verdicts alike; CSV cannot say it, stderr does.
        let (xml, _) = salvage(&["summary", "--format", "junit"]);
        assert_salvaged_property(&xml, damaged);
        let gate = [
            "diff",
            good.to_str().unwrap(),
            "--fail-if",
            "handle_request.calls < -100%",
        ];
        let (xml, _) = salvage(&[&gate[..], &["--format", "junit"]].concat());
        assert_salvaged_property(&xml, damaged);
        let junit = d.join("gate.xml");
        let junit_args = ["--junit", junit.to_str().unwrap(), "--force"];
        salvage(&[&gate[..], &junit_args].concat());
        assert_salvaged_property(&std::fs::read_to_string(&junit).unwrap(), damaged);
        // The summary by stack: a note in its table and JSON, a warning beside its CSV.
        let (table, _) = salvage(&["summary", "--by", "stack"]);
        assert!(table.contains("# salvaged: "), "{table}");
        let (json, _) = salvage(&["summary", "--by", "stack", "--format", "json"]);
        let s: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(s["salvaged"].as_array().map(Vec::len), Some(1), "{json}");
        for args in [
            &["summary", "--format", "csv"][..],
            &["diff", good.to_str().unwrap(), "--format", "csv"],
            &["summary", "--by", "stack", "--format", "csv"],
        ] {
            let (csv, err) = salvage(args);
            assert!(!csv.contains("salvaged"), "{csv}");
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
            assert!(
                err.starts_with("tracer: warning: the CSV comes from a salvaged file: ")
                    && err.contains(&damaged.display().to_string()),
                "{args:?}: {err}"
            );
        }

        let stem = d.join(format!(
            "{}-out",
            damaged.file_stem().unwrap().to_string_lossy()
        ));
        let (_, report) = salvage(&["convert", "-o", stem.to_str().unwrap()]);
        assert!(report.contains("damaged, skipped (--salvage)"), "{report}");
        let prv = std::fs::read_to_string(stem.with_extension("prv")).unwrap();
        assert!(
            prv.lines().nth(1).unwrap().starts_with("# salvaged: "),
            "header lines"
        );
        let json = stem.with_extension("json");
        salvage(&["convert", "-o", json.to_str().unwrap()]);
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(doc["otherData"]["salvaged"].as_array().unwrap().len(), 1);
    }

    // A damaged file header: nothing to salvage.
    let header = write("header.trace", &|b| b[2] ^= 0xff);
    all_fail(&header, "not a tracer trace file", d);
    let (ok, _, _) = run(&["dump".as_ref(), "--salvage".as_ref(), header.as_ref()]);
    assert!(!ok);

    // Zeros after the end, as a crash leaves on some filesystems, and a cut mid-chunk: a
    // torn tail, a warning with its offset, everything before it read.
    let zeros = write("zeros.trace", &|b| b.extend([0u8; 8192]));
    let (ok, dump, err) = run(&["dump".as_ref(), zeros.as_ref()]);
    assert!(ok, "{err}");
    assert_eq!(records(&dump), total);
    assert!(err.contains(&format!("at byte {}", bytes.len())), "{err}");
    let (last_at, _, last_held) = *events.last().unwrap();
    let cut = write("cut.trace", &|b| {
        b.truncate(last_at + CHUNK_HEADER_LEN + 10)
    });
    let (ok, dump, err) = run(&["dump".as_ref(), cut.as_ref()]);
    assert!(ok, "{err}");
    assert_eq!(records(&dump), total - last_held);
    assert!(err.contains(&format!("at byte {last_at}")), "{err}");
    for torn in [&zeros, &cut] {
        let (ok, out, err) = run(&["summary".as_ref(), torn.as_ref()]);
        assert!(ok, "{err}");
        assert!(out.contains("truncated"), "{out}");
    }
}
