//! What playing steps costs, in the work units of `--max-work` (about 1 µs of CPU each on the
//! 2-core development machine, release build): the one estimate every bounded command counts
//! with, whatever path its layouts take. The measured constants are `crate::error::WORK_*`.
//!
//! - A full timeline (`simulate`, each step of `whatif spec-decode`, each point of a `capacity`
//!   curve) builds the workload of every rank, prices it, plays it and draws every routed
//!   token's experts: [`timeline_units`].
//! - The sweep's fast path fits each layout once and replays a row in about a microsecond;
//!   under expert parallelism each distinct batch draws every rank's expert loads again, the
//!   same draws a timeline makes: [`routing_units`].

use crate::error::{
    WORK_EP_BATCH_PER_RANK, WORK_EP_BATCH_PER_SEQ, WORK_EP_LAYOUT_PER_RANK, WORK_SWEEP_LAYOUT,
    WORK_TIMELINE_STEP, WORK_VARIANT_DRAW, WORK_VARIANT_DRAW_PER_RANK,
};
use crate::scenario::Scenario;

/// Drawing the expert loads of `tokens` routed tokens over `ranks` ranks: about 80 µs per rank
/// and 3 µs per token (measured on the fast path's EP fit and on full timelines alike: a TP8
/// timeline at 8,192 sequences takes about 25 ms more than one at 1, a DP128 one about 10 ms
/// more than DP16 at the same batch).
pub(crate) fn routing_units(ranks: f64, tokens: f64) -> f64 {
    WORK_EP_BATCH_PER_RANK * ranks + WORK_EP_BATCH_PER_SEQ * tokens
}

/// One full timeline of `layout` running `tokens` tokens in the step (the batch, times the
/// query tokens per sequence of a verify pass): each pipeline stage's workload built, priced
/// and played (about 2.5 ms a stage for the default scenario) and every token's experts drawn
/// on every rank. Two-batch overlap and DCP play the same ops in another order, at about the
/// same cost.
pub(crate) fn timeline_units(layout: TimelineLayout, tokens: u64) -> f64 {
    WORK_TIMELINE_STEP * layout.stages as f64 + routing_units(layout.ranks as f64, tokens as f64)
}

/// What a timeline's cost depends on besides its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimelineLayout {
    /// Every GPU of the layout (tp × pp × dp).
    pub(crate) ranks: u32,
    /// Pipeline stages, each built and played on its own.
    pub(crate) stages: u32,
}

impl TimelineLayout {
    pub(crate) fn of(s: &Scenario) -> Self {
        let stages = s.layout.pp_size();
        TimelineLayout {
            ranks: s
                .layout
                .tp
                .saturating_mul(stages)
                .saturating_mul(s.layout.dp_size()),
            stages,
        }
    }
}

/// The p5/p50/p95 intervals of a loaded scenario: `draws` draws of `plays` plays each (the
/// plain step is one play, a speculative step its verify and draft windows). Where the fast
/// path takes the scenario it is fitted first (as a sweep layout, every EP rank's expert loads
/// drawn) and each play is a replay over the EP ranks; where it refuses (DCP, expert
/// parallelism inside a pipeline) the timeline is built once and each play is the engine run
/// again over every rank. A play costs about 50 µs plus 4 µs per rank it replays (measured:
/// 200 draws of a TP8 step 10 ms, of DCP8 speculative windows 75 µs a play).
pub(crate) fn interval_units(s: &Scenario, draws: usize, plays: f64) -> f64 {
    if draws == 0 {
        return 0.0;
    }
    let ep = ep_ranks(s.layout.ep, s.layout.dp_size(), Some(s.layout.tp));
    let fast = s.layout.dcp.unwrap_or(1) <= 1 && !(s.layout.pp_size() > 1 && ep > 1);
    let (fit, replayed) = if fast {
        let ep_fit = if ep > 1 {
            WORK_EP_LAYOUT_PER_RANK * ep as f64
        } else {
            0.0
        };
        (WORK_SWEEP_LAYOUT + ep_fit, ep)
    } else {
        let layout = TimelineLayout::of(s);
        (timeline_units(layout, s.batch as u64), layout.ranks)
    };
    fit + draws as f64 * plays * (WORK_VARIANT_DRAW + WORK_VARIANT_DRAW_PER_RANK * replayed as f64)
}

/// The expert-parallel group a layout of `dp` data-parallel ranks draws routing over before
/// its system is read: `--ep` without DP attention, else `dp` × `--tp` (`--tp` 1 when not
/// given), else none (1).
pub(crate) fn ep_ranks(ep: Option<u32>, dp: u32, tp: Option<u32>) -> u32 {
    match ep {
        Some(ep) if dp <= 1 => ep.max(1),
        _ if dp > 1 => dp.saturating_mul(tp.unwrap_or(1).max(1)),
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeline_grows_with_its_ranks_and_tokens() {
        let tp8 = TimelineLayout {
            ranks: 8,
            stages: 1,
        };
        assert_eq!(timeline_units(tp8, 1), 2_500.0 + 80.0 * 8.0 + 3.0);
        // DP128 at 16,384 sequences: 2.5 ms + 10 ms of ranks + 49 ms of draws.
        let dp128 = TimelineLayout {
            ranks: 128,
            stages: 1,
        };
        assert_eq!(
            timeline_units(dp128, 16_384),
            2_500.0 + 80.0 * 128.0 + 3.0 * 16_384.0
        );
        // TP8 × PP2: each stage built and played.
        let pp2 = TimelineLayout {
            ranks: 16,
            stages: 2,
        };
        assert_eq!(timeline_units(pp2, 1), 5_000.0 + 80.0 * 16.0 + 3.0);
    }

    #[test]
    fn the_ep_group_is_ep_else_dp_times_tp() {
        assert_eq!(ep_ranks(None, 1, Some(8)), 1);
        assert_eq!(ep_ranks(Some(8), 1, Some(8)), 8);
        assert_eq!(ep_ranks(Some(8), 16, Some(2)), 32);
        assert_eq!(ep_ranks(None, 16, None), 16);
    }
}
