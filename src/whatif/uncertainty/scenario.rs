//! Intervals of one scenario: its step time over the draws, priced on the timeline engine or the
//! fast path.

use super::draws::{Drawn, Intervals};
use super::model_error::ModelError;
use super::{Interval, Uncertainty};
use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::scenario::Scenario;
use crate::sim::fast::Draw;

/// The speedup's interval from paired draws: draw i of the base and of the variant share every
/// source, so `speedup_i = point × base_ratio_i / variant_ratio_i`.
pub fn speedup_interval(point: f64, base_ratios: &[f64], variant_ratios: &[f64]) -> Interval {
    if base_ratios.is_empty() {
        return Interval::point(point);
    }
    let v: Vec<f64> = base_ratios
        .iter()
        .zip(variant_ratios)
        .map(|(b, v)| point * b / v)
        .collect();
    Interval::of(&v)
}

/// The step-time and tokens/s intervals of one scenario at its own batch and context around
/// a point estimate (from the timeline), with `n` draws (0: the point), and what was drawn.
/// The inner error says why the fast path cannot draw this scenario (expert parallelism): the
/// caller reports the point without an interval, and why.
pub fn scenario_intervals(
    s: &Scenario,
    p: &CalibrationProfile,
    step_us: f64,
    tokens_per_s: f64,
    n: usize,
    seed: u64,
) -> Result<(std::result::Result<Intervals, String>, Uncertainty)> {
    if n == 0 {
        let point = Intervals::from_ratios(&[], step_us, tokens_per_s);
        return Ok((Ok(point), Uncertainty::default()));
    }
    scenario_intervals_with(
        s,
        p,
        step_us,
        tokens_per_s,
        n,
        seed,
        &ModelError::bundled()?,
    )
}

/// [`scenario_intervals`] with a model-form error of the caller's (none: `ModelError::default()`).
#[allow(clippy::too_many_arguments)]
pub fn scenario_intervals_with(
    s: &Scenario,
    p: &CalibrationProfile,
    step_us: f64,
    tokens_per_s: f64,
    n: usize,
    seed: u64,
    model: &ModelError,
) -> Result<(std::result::Result<Intervals, String>, Uncertainty)> {
    let point = Intervals::from_ratios(&[], step_us, tokens_per_s);
    if n == 0 {
        return Ok((Ok(point), Uncertainty::default()));
    }
    let u = Uncertainty::from_profile_with(p, s, model)?;
    if u.is_empty() {
        return Ok((Ok(point), u));
    }
    match Drawn::with_uncertainty(s, p, None, u.clone(), n, seed) {
        Ok(d) => {
            let iv =
                Intervals::from_ratios(&d.step_ratios(s.batch, s.context), step_us, tokens_per_s);
            Ok((Ok(iv), d.uncertainty))
        }
        // The fast path refuses: draw through the timeline.
        Err(e) => match timeline_step_ratios(s, p, &u, n, seed) {
            Ok(r) => Ok((Ok(Intervals::from_ratios(&r, step_us, tokens_per_s)), u)),
            Err(Error::NoIntervals { why }) => Ok((Err(format!("{why}; {}", unavailable(&e))), u)),
            Err(e2) => Err(e2),
        },
    }
}

/// Per draw of `u`, the timeline's drawn step over its undrawn step at `s`'s own batch and
/// context: each draw scales the op prices the timeline plays (a collective's latency term by the
/// latency draw, its bytes term by its family's), the engine plays the step, and a draw's idle is
/// added to it. Where the fast path refuses a scenario (decode-context parallelism, expert
/// parallelism inside a pipeline), intervals come from here; a pipeline (`--pp`) is composed of
/// stage plays this does not draw, and is refused.
pub fn timeline_step_ratios(
    s: &Scenario,
    p: &CalibrationProfile,
    u: &Uncertainty,
    n: usize,
    seed: u64,
) -> Result<Vec<f64>> {
    if s.layout.pp_size() > 1 {
        return Err(Error::NoIntervals {
            why: "no interval: neither the fast path nor the timeline's draws price this pipeline (--pp) scenario".into(),
        });
    }
    let w = crate::workload::build(s);
    let pricing = crate::cost::price_quiet(&w, s, p)?;
    let cfg = crate::sim::simulate::engine_config(s, p);
    let mut engine = crate::sim::Engine::new();
    let mut tl = crate::sim::Timeline::default();
    engine.run(&w, &pricing.base_us, &cfg, &mut tl);
    let point = tl.step_time_us();
    if !(point > 0.0) {
        return Ok(Vec::new());
    }
    let mut prices = vec![0.0; w.ops.len()];
    let knots = u.step_knots(n, seed);
    Ok(u.draws(n, seed)
        .iter()
        .enumerate()
        .map(|(i, d)| {
            drawn_prices(&w, &pricing, d, &mut prices);
            engine.run(&w, &prices, &cfg, &mut tl);
            let m = u.step_factor(&knots, i, s.batch as f64);
            ((tl.step_time_us() + d.step_overhead_us) / point * m).max(0.0)
        })
        .collect())
}

/// `w`'s timeline prices under draw `d`: each op's price times its family's multiplier, a
/// collective's latency term (the pricing's split) times the latency multiplier.
pub(super) fn drawn_prices(
    w: &crate::workload::Workload,
    pricing: &crate::cost::Pricing,
    d: &Draw,
    out: &mut Vec<f64>,
) {
    out.clear();
    out.extend(w.ops.iter().enumerate().map(|(i, op)| {
        let b = pricing.base_us[i];
        let m = d.family[op.family as usize];
        if op.family.is_collective() {
            let lat = pricing.split_us[i].clamp(0.0, b.max(0.0));
            lat * d.collective_latency + (b - lat) * m
        } else {
            b * m
        }
    }));
}

/// [`timeline_step_ratios`] of the speculative step at `k` with `draft`: each window of the
/// step played under the draw as `whatif spec-decode` plays it (pass gaps and the exposed host
/// time undrawn, a draw's idle added per window, as the fast path adds it per pass window).
pub(super) fn timeline_spec_ratios(
    s: &Scenario,
    p: &CalibrationProfile,
    draft: &crate::whatif::draft::Draft,
    u: &Uncertainty,
    k: u32,
    n: usize,
    seed: u64,
) -> Result<Vec<f64>> {
    let (windows, host_us) = crate::whatif::spec_decode::step_windows(s, draft, p, k)?;
    let priced = windows
        .into_iter()
        .map(|(w, gap, _)| Ok((crate::cost::price_quiet(&w, s, p)?, w, gap)))
        .collect::<Result<Vec<_>>>()?;
    let cfg = crate::sim::simulate::engine_config(s, p);
    let mut engine = crate::sim::Engine::new();
    let mut tl = crate::sim::Timeline::default();
    let mut point = host_us;
    for (pricing, w, gap) in &priced {
        engine.run(w, &pricing.base_us, &cfg, &mut tl);
        point += tl.step_time_us() + gap;
    }
    if !(point > 0.0) {
        return Ok(Vec::new());
    }
    let mut prices = Vec::new();
    let knots = u.step_knots(n, seed);
    let tokens = s.batch as f64 * (k + 1) as f64;
    Ok(u.draws(n, seed)
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let mut step = host_us;
            for (pricing, w, gap) in &priced {
                drawn_prices(w, pricing, d, &mut prices);
                engine.run(w, &prices, &cfg, &mut tl);
                step += tl.step_time_us() + gap + d.step_overhead_us;
            }
            (step / point * u.step_factor(&knots, i, tokens)).max(0.0)
        })
        .collect())
}

/// Why a scenario has no interval: the fast path's refusal.
pub(super) fn unavailable(e: &Error) -> String {
    format!("no interval: the fast path the draws run on cannot price this scenario ({e})")
}

/// [`Drawn::new`] for a what-if, whose intervals are refused with the way out.
pub(super) fn drawn_or_hint(
    s: &Scenario,
    p: &CalibrationProfile,
    draft: Option<&crate::whatif::draft::Draft>,
    n: usize,
    seed: u64,
) -> Result<Drawn> {
    // A malformed interval in the profile is its own error, by file and field.
    Uncertainty::from_profile(p, s)?;
    Drawn::new(s, p, draft, n, seed).map_err(|e| Error::NoIntervals {
        why: unavailable(&e),
    })
}
