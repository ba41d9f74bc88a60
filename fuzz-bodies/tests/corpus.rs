//! Every committed input of every fuzz target (`fuzz/corpus/NAME/`) through the target's
//! body: an input once found to break something fails the suite on stable, without
//! libFuzzer.

use std::path::Path;

#[test]
fn every_committed_input_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    for &(name, body) in fuzz_bodies::TARGETS {
        let dir = root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{} has no input", dir.display());
        for f in files {
            let data = std::fs::read(&f).unwrap();
            let run = std::panic::catch_unwind(|| body(&data));
            assert!(run.is_ok(), "{name}: {} fails", f.display());
        }
    }
}

#[test]
fn the_targets_are_the_fuzz_crates() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/Cargo.toml");
    let text = std::fs::read_to_string(manifest).unwrap();
    let bins: Vec<&str> = (text.lines())
        .filter_map(|l| l.trim().strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .filter(|&n| n != "tracer-fuzz")
        .collect();
    let names: Vec<&str> = fuzz_bodies::TARGETS.iter().map(|t| t.0).collect();
    assert_eq!(bins, names);
}
