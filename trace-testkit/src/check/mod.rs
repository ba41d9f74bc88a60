//! Conformance checkers of the writers' outputs.

pub mod chrome;
pub mod paraver;
