//! Support library for the tracer's end-to-end tests.
//!
//! Everything here is ground truth that does not depend on the tracer: the
//! fixture programs in `tests/fixtures/` (built with gcc on demand), a
//! bounded load generator, and readers for `/proc`. There is no eBPF here.
//!
//! Pids and tids are `u32` throughout, like [`std::process::Child::id`].

mod containers;
mod env;
mod fixtures;
mod load;
mod piped;
mod procfs;
mod runclock;
mod server;
mod syscalls;
mod tracer;
mod traces;

pub use containers::*;
pub use env::*;
pub use fixtures::*;
pub use load::*;
pub use piped::*;
pub use procfs::*;
pub use runclock::*;
pub use server::*;
pub use syscalls::*;
pub use tracer::*;
pub use traces::*;
