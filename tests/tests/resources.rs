//! `tracer record` under long and hostile runs (#13): a disk that fills, days of thread
//! churn, a thousand threads, a fork storm, an exec, a target killed with SIGKILL. The
//! tracer never harms the traced process, loses nothing silently, and says every failure
//! in one line with a non-zero exit. Ground truth is the fixtures' own counters.
//! Needs root: these load eBPF programs (and mount a tmpfs).

use std::{fs::File, time::Duration};

use trace_file::{ChunkKind, End, EventChunkDecoder, Reader};
use tracer_tests::*;

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// The state letter of process `pid` (R, S, Z, ...), if it exists.
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The disk fills while recording: the recorder stops with one line that names the file
/// and what it holds, exits non-zero, and leaves a file whose every chunk checks (its end
/// torn at most). The traced process goes on unharmed.
#[test]
fn a_disk_that_fills_up_ends_the_recording_in_one_line_and_a_readable_file() {
    let _serial = serial();
    let dir = tmp();
    let _fs = Tmpfs::mount(dir.path(), "4m");
    // Two threads of getppid() for 8 s: millions of records a second, 4 MiB of them in
    // well under one; it is still running when the recorder fails.
    let mut fx = Piped::spawn(&build_fixture("storm"), &["2", "8"]);
    let out = dir.path().join("t.trace");
    let rec = start_tracer("record", fx.pid(), &out, &[]);
    fx.send(b"g");
    let output = wait_output(rec, Duration::from_secs(20));
    let state = process_state(fx.pid());
    assert!(
        !matches!(state, Some('T' | 't' | 'Z' | 'X')),
        "the traced process is {state:?} after the recorder failed"
    );

    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "a full disk exited 0: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    assert!(err.contains("disk is full"), "{err}");
    assert!(err.contains(out.to_str().unwrap()), "which file? {err}");
    let on_disk = std::fs::metadata(&out).unwrap().len();
    assert!(
        err.contains(&format!("{on_disk} bytes")),
        "the file holds {on_disk} bytes: {err}"
    );
    eprintln!("{}", err.trim_end());

    // Strictly read: any damage is an error; only the end may be torn.
    let mut reader = Reader::new(File::open(&out).unwrap()).unwrap();
    let (mut kinds, mut records) = (vec![], 0u64);
    while let Some(c) = reader.next_chunk().unwrap() {
        if c.kind == ChunkKind::Events {
            for r in EventChunkDecoder::new(&c.payload, c.offset).unwrap() {
                r.unwrap();
                records += 1;
            }
        }
        kinds.push(c.kind);
    }
    let end = reader.end().unwrap();
    match end {
        End::Complete => {}
        End::Torn { offset } => assert!(offset <= on_disk),
    }
    assert_eq!(
        kinds[..4],
        [
            ChunkKind::Header,
            ChunkKind::Process,
            ChunkKind::Threads,
            ChunkKind::Probes
        ]
    );
    assert!(records > 10_000, "only {records} records read back");
    eprintln!("{on_disk} bytes on a full 4 MiB disk: {records} records read back, end {end:?}");

    // Unharmed: it runs to its end and reports its calls.
    assert!(fx.wait(Duration::from_secs(20)).success());
    let calls = fx.numbers("CALLS", Duration::from_secs(5))[0];
    assert!(calls > 0);
}
