//! `--draws` and `--interval-seed`: the Monte Carlo intervals the answering commands add.

use crate::error::{Error, Result};
use crate::whatif::uncertainty::{DEFAULT_DRAWS, DEFAULT_SEED};

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
    /// The draw count, checked.
    pub(crate) fn draws(&self) -> Result<usize> {
        if self.draws > MAX_DRAWS {
            return Err(Error::ScenarioRange {
                flag: "--draws",
                value: self.draws.to_string(),
                expected: format!("expected 0 (no intervals) to {MAX_DRAWS}"),
            });
        }
        Ok(self.draws)
    }

    /// The draws of a what-if: none where expert parallelism makes ranks play differently (the
    /// fast path the draws run on needs every rank alike), with a warning saying so; the answer
    /// is then the point, as `simulate` gives it.
    pub(crate) fn draws_for_whatif(&self, ep: Option<u32>, ep_varied: bool) -> Result<usize> {
        let n = self.draws()?;
        if n > 0 && (ep.is_some_and(|e| e > 1) || ep_varied) {
            super::output::warn(
                "no intervals: expert parallelism loads ranks unevenly, and the fast path the Monte Carlo draws run on needs every rank alike; the answers below are points",
            );
            return Ok(0);
        }
        Ok(n)
    }
}
