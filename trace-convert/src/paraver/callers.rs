//! Sampled stacks as caller events, in Extrae's manner: at each stack of a thread
//! (`tracer record --stacks`), one event per level of its frames, the function at that
//! level (level 1 is the innermost frame) and its source line, with their names in the
//! .pcf, so that Paraver's caller views and their "sampled function" histograms work.
//! Every level is given at every stack, 0 ("End") past its depth, so that no level keeps
//! the value of a deeper stack before it.
//! On-CPU samples and the stacks threads block in both give events; the thread's state at
//! that time tells them apart.

use std::collections::HashMap;
use std::io::Write;

use stack_names::StackNames;
use trace_merge::timeline::{Sample, Timeline};

use super::layout::clean;

/// Function at caller level L: this type + L, as Extrae's sampled callers.
pub const EV_CALLER: u32 = 30_000_000;
/// Source line at caller level L: this type + L.
pub const EV_CALLER_LINE: u32 = 30_000_100;
/// Levels given an event, innermost first (Extrae's default depth for sampling).
pub const CALLER_LEVELS: usize = 8;

/// The names of the functions and lines met so far, numbered from 1 (0 is "End").
#[derive(Default)]
pub(super) struct Callers {
    names: StackNames,
    functions: Interner,
    lines: Interner,
    /// Per (file, stack): (function, line) values, innermost first.
    stacks: HashMap<(u32, u32), Vec<(u32, u32)>>,
}

#[derive(Default)]
struct Interner {
    ids: HashMap<String, u32>,
    names: Vec<String>,
}

impl Interner {
    fn id(&mut self, name: String) -> u32 {
        if let Some(&id) = self.ids.get(&name) {
            return id;
        }
        self.names.push(name.clone());
        let id = self.names.len() as u32;
        self.ids.insert(name, id);
        id
    }
}

impl Callers {
    /// The (function, line) values of the sample's user frames (the program's code, as
    /// Extrae samples it), innermost first, at most [`CALLER_LEVELS`]; 0 for a line not
    /// known.
    pub(super) fn of(&mut self, tl: &Timeline, s: &Sample) -> &[(u32, u32)] {
        let key = (s.source, s.stack);
        if !self.stacks.contains_key(&key) {
            let mut values = Vec::new();
            let store = tl
                .merger()
                .sources()
                .get(s.source as usize)
                .map(|x| &x.stacks);
            if let Some((store, def)) = store.and_then(|st| Some((st, st.stack(s.stack)?))) {
                let frames = self.names.frames(store, s.source, def);
                let user = frames
                    .iter()
                    .rev()
                    .filter(|f| !f.kernel && !f.function.starts_with("[cut"));
                for f in user.take(CALLER_LEVELS) {
                    let func = self.functions.id(clean(&f.function));
                    let line = match (&f.file, f.line) {
                        (Some(file), Some(line)) => {
                            let base = file.rsplit('/').next().unwrap_or(file);
                            self.lines.id(clean(&format!("{line} ({base})")))
                        }
                        _ => 0,
                    };
                    values.push((func, line));
                }
            }
            self.stacks.insert(key, values);
        }
        &self.stacks[&key]
    }

    /// The caller event types and their values, for the .pcf (nothing without stacks).
    pub(super) fn write_pcf(&self, f: &mut impl Write) -> std::io::Result<()> {
        if self.functions.names.is_empty() {
            return Ok(());
        }
        writeln!(f, "\n\nEVENT_TYPE")?;
        for l in 1..=CALLER_LEVELS as u32 {
            writeln!(f, "0    {}    Sampled functions (level {l})", EV_CALLER + l)?;
        }
        writeln!(f, "VALUES\n0      End")?;
        for (i, n) in self.functions.names.iter().enumerate() {
            writeln!(f, "{}      {n}", i + 1)?;
        }
        writeln!(f, "\n\nEVENT_TYPE")?;
        for l in 1..=CALLER_LEVELS as u32 {
            writeln!(f, "0    {}    Sampled line (level {l})", EV_CALLER_LINE + l)?;
        }
        writeln!(f, "VALUES\n0      End")?;
        for (i, n) in self.lines.names.iter().enumerate() {
            writeln!(f, "{}      {n}", i + 1)?;
        }
        Ok(())
    }
}
