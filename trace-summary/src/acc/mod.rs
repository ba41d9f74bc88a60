//! The aggregation of traces: one streaming pass over the merged timeline into per-slot
//! accumulators, then the summary's rows built from them.
//!
//! [`run`] holds the hot loop: [`trace_merge::feed`] hands every item to `Pass::item`,
//! into which the per-item methods of [`pass`] are inlined (`#[inline(always)]`, because
//! the loop measured faster so).

mod build;
mod conn;
mod pass;
mod rows;
mod scope;

use trace_merge::timeline::Timeline;

use crate::{Error, SummarizeOptions, Summary};

/// Runs the pass over `tl` and builds the summary.
pub(crate) fn run(tl: Timeline, opts: &SummarizeOptions) -> Result<Summary, Error> {
    let mut p = pass::Pass::new(tl.merger().sources(), opts);
    let (tl, _) = trace_merge::feed(tl, u64::MAX, &mut p)?;
    let end = tl.end().unwrap_or(tl.now());
    p.finish(end);
    if let (true, Some(w)) = (p.past_windows, p.window_ns) {
        return Err(Error::Option(format!(
            "windows of {} cut the trace (to {:.3} s) into more than {} windows: take longer ones",
            crate::units::human_ns(w),
            end as f64 / 1e9,
            p.max_windows
        )));
    }
    Ok(build::build(&p, &tl, end, opts))
}
