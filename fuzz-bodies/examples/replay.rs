//! Runs a fuzz target's body on inputs, as the fuzzer did, with the panic's message and
//! backtrace: `cargo run -p fuzz-bodies --example replay -- TARGET FILE...`. With
//! `--traces DIR` first, writes instead the trace files an input stands for (the targets
//! that read traces), to read with `tracer dump`.

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--traces") {
        let dir = std::path::PathBuf::from(&args[1]);
        std::fs::create_dir_all(&dir).unwrap();
        for input in &args[2..] {
            let data = std::fs::read(input).unwrap();
            let Some((files, knobs)) = fuzz_bodies::traces::files(&data) else {
                eprintln!("{input}: no trace file");
                continue;
            };
            eprintln!("{input}: {knobs:?}");
            for (i, f) in files.iter().enumerate() {
                let p = dir.join(format!("{i}.trace"));
                std::fs::write(&p, f).unwrap();
                eprintln!("  {}", p.display());
            }
        }
        return;
    }
    let name = args.remove(0);
    let Some(&(_, body)) = fuzz_bodies::TARGETS.iter().find(|t| t.0 == name) else {
        panic!("no fuzz target {name}");
    };
    for input in &args {
        eprintln!("{input}");
        body(&std::fs::read(input).unwrap());
    }
}
