//! For tests and benchmarks only, never in the product: synthetic traces and conformance
//! checkers.
//!
//! - [`builder`]: small trace files written record by record, named scenarios and random
//!   traces, for exact tests of the timeline, the writers and the aggregator;
//! - [`synth`]: the large synthetic trace of the benchmarks, and the resource readings
//!   they report;
//! - [`check`]: checkers of the outputs (Paraver's reader rules, the Trace Event Format's
//!   rules as importers apply them), written from the formats' documents and not from the
//!   writers, so that they are an independent judge;
//! - [`invariants`]: what every consumer may rely on in the timeline's item stream.
#![warn(missing_docs)]

pub mod builder;
pub mod check;
pub mod invariants;
pub mod synth;
