//! `--draws` and `--interval-seed`: the Monte Carlo intervals the answering commands add.

use crate::error::{Error, Result};
use crate::whatif::uncertainty::{DEFAULT_DRAWS, DEFAULT_SEED, MIN_DRAWS};

/// Most draws one interval may take (p5 and p95 are steady well before).
const MAX_DRAWS: usize = 100_000;

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct IntervalArgs {
    /// Monte Carlo draws behind the p5/p50/p95 intervals (fitted factors' intervals, table
    /// interpolation error, routing); 0 turns intervals off.
    #[arg(long, default_value_t = DEFAULT_DRAWS, value_name = "N")]
    draws: usize,
    /// Seed of the interval draws (same seed, same intervals).
    #[arg(long, default_value_t = DEFAULT_SEED, value_name = "SEED")]
    pub(crate) interval_seed: u64,
}

impl IntervalArgs {
    /// The draw count, checked: 0 (no intervals) or 50 to 100,000.
    pub(crate) fn draws(&self) -> Result<usize> {
        if self.draws > MAX_DRAWS || (self.draws > 0 && self.draws < MIN_DRAWS) {
            return Err(Error::ScenarioRange {
                flag: "--draws",
                value: self.draws.to_string(),
                expected: format!(
                    "expected 0 (no intervals) or {MIN_DRAWS} to {MAX_DRAWS} draws (fewer than {MIN_DRAWS} cannot place p5 and p95)"
                ),
            });
        }
        Ok(self.draws)
    }

    /// The draw count where an interval is asked for (`sweep --intervals`): 0 is refused too.
    pub(crate) fn draws_for_interval(&self, asked_by: &str) -> Result<usize> {
        let n = self.draws()?;
        if n == 0 {
            return Err(Error::ScenarioRange {
                flag: "--draws",
                value: "0".into(),
                expected: format!(
                    "expected {MIN_DRAWS} to {MAX_DRAWS} draws: {asked_by} asks for intervals, which rest on at least {MIN_DRAWS} draws (leave out {asked_by} for points)"
                ),
            });
        }
        Ok(n)
    }
}

/// A what-if's intervals, or its points where the fast path the draws run on cannot price one
/// of its scenarios (`Error::NoIntervals`): the timeline's answer stands, so the refusal is a
/// warning that names why, and `answer(0)` gives the points. Returns the draws taken.
pub(crate) fn or_points<T>(
    draws: usize,
    mut answer: impl FnMut(usize) -> Result<T>,
) -> Result<(T, usize)> {
    if draws == 0 {
        return Ok((answer(0)?, 0));
    }
    match answer(draws) {
        Err(Error::NoIntervals { why }) => {
            super::output::warn(&format!("{why}; the answers below are points"));
            Ok((answer(0)?, 0))
        }
        other => Ok((other?, draws)),
    }
}
