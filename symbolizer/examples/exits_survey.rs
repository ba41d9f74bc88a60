//! How the returns of every function of a program that throws would be probed: at their
//! instructions, or refused and why (`cargo run --release -p symbolizer --example
//! exits_survey -- BINARY [LIB:GLOB]`). A survey of the decoder on real binaries.

use std::collections::BTreeMap;

use symbolizer::{resolve, Exit, Options, Target};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(bin) = args.next() else {
        eprintln!("usage: exits_survey BINARY [LIB:GLOB]");
        std::process::exit(2);
    };
    let spec = args.next().unwrap_or_else(|| "*".into());
    let opts = Options {
        allow_multiple: true,
        ..Default::default()
    };
    let found = match resolve(&Target::Path(bin.into()), &spec, &opts) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("exits_survey: {e}");
            std::process::exit(1);
        }
    };
    let (mut at_instructions, mut rets, mut tails) = (0, 0, 0);
    let mut refused: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut other = 0;
    for m in &found {
        let why = match (&m.unprobeable, &m.exit) {
            (Some(why), _) => why.clone(),
            (None, Exit::Refused(why)) => why.clone(),
            (None, Exit::Returns { rets: r, tails: t }) => {
                at_instructions += 1;
                rets += r.len();
                tails += t.len();
                continue;
            }
            _ => {
                other += 1;
                continue;
            }
        };
        // Group by the reason without its offset and instruction (between backticks).
        let kind: String = why.split('`').step_by(2).collect::<Vec<_>>().join("_");
        let e = refused.entry(kind).or_insert((0, String::new()));
        e.0 += 1;
        if e.1.is_empty() {
            e.1 = format!("{}: {why}", m.name);
        }
    }
    println!(
        "{} functions: {at_instructions} with returns at instructions ({rets} returns, {tails} tail jumps), {} refused, {other} otherwise",
        found.len(),
        refused.values().map(|v| v.0).sum::<usize>()
    );
    for (n, example) in refused.values() {
        println!("  {n:>6}  e.g. {example}");
    }
}
