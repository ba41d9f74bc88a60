//! A driver for instruction-count profiles (`valgrind --tool=callgrind`): the benches
//! synthesize their trace in the same process, which would dominate a profile.
//!
//! `profile_driver synth PATH N` writes the benches' synthetic trace of N records;
//! `profile_driver summary PATH`, `timeline PATH` and `convert PATH OUT` run one
//! consumer over it and print the record count.

use trace_testkit::synth;

use std::path::PathBuf;

use trace_merge::MergeOptions;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: profile_driver synth|summary|timeline|convert PATH [N|OUT]";
    let (mode, path) = match args.as_slice() {
        [m, p, ..] => (m.as_str(), PathBuf::from(p)),
        _ => panic!("{usage}"),
    };
    let input = std::slice::from_ref(&path);
    match mode {
        "synth" => {
            let n: u64 = args.get(2).expect(usage).parse().expect("N");
            synth::synthesize(&path, n).expect("write trace");
        }
        "summary" => {
            let s = trace_summary::summarize(input).expect("summarize");
            println!("records: {}", s.records);
        }
        "timeline" => {
            let mut tl = trace_merge::open(input, &MergeOptions::default()).expect("open");
            while tl.next_item().expect("timeline").is_some() {}
            println!("records: {}", tl.stats().records);
        }
        "convert" => {
            let out = PathBuf::from(args.get(2).expect(usage));
            let r = trace_convert::paraver::convert(input, &out, &force()).expect("convert");
            println!("records: {}", r.input.records_in);
        }
        _ => panic!("{usage}"),
    }
}

/// Conversions replace the previous round's outputs.
fn force() -> trace_convert::Options {
    trace_convert::Options {
        force: true,
        ..Default::default()
    }
}
