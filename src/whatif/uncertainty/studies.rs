//! Intervals of the studies: a what-if's arms against the base, speculative decoding, a sweep's
//! rows and a throughput target.

use super::draws::{Drawn, Intervals};
use super::scenario::{
    drawn_or_hint, scenario_intervals, speedup_interval, timeline_spec_ratios, timeline_step_ratios,
};
use super::{Interval, Uncertainty, Verdict};
use crate::cost::CalibrationProfile;
use crate::error::Result;
use crate::scenario::Scenario;
use crate::sim::fast::{Collectives, Launch};

/// One what-if arm's intervals and its speedup against the base from paired draws.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArmIntervals {
    pub(crate) intervals: Intervals,
    pub speedup: Interval,
}

impl ArmIntervals {
    pub fn verdict(&self) -> Verdict {
        Verdict::of(&self.speedup)
    }

    /// `{"step_time_us": {p5,p50,p95}, "tokens_per_s": {..}, "speedup": {..}, "verdict": ..}`.
    pub(crate) fn json(&self) -> serde_json::Value {
        let mut v = self.intervals.json();
        v["speedup"] = self.speedup.json();
        v["verdict"] = serde_json::json!(self.verdict().name());
        v
    }
}

/// Intervals of `whatif --vary`: the base's, then each variant's (in `study.variants` order)
/// with its speedup over the base, paired draws.
pub fn vary_intervals(
    req: &crate::whatif::vary::VaryRequest,
    study: &crate::whatif::vary::VaryStudy,
    n: usize,
    seed: u64,
) -> Result<(Intervals, Vec<ArmIntervals>)> {
    let b = &study.base;
    let (bs, bt) = (b.step_time_us(), b.tokens_per_s());
    if n == 0 {
        return Ok(vary_points(study));
    }
    // One fast path per distinct scenario up to the knobs it takes per call (batch, context,
    // NCCL protocol and algorithm, CUDA graphs): `--vary batch=...` fits once.
    let fit_key = |r: &crate::sim::ScenarioRequest| {
        let mut k = r.clone();
        k.batch = req.base.batch;
        k.context = req.base.context;
        k.proto = req.base.proto;
        k.algo = req.base.algo;
        k.cuda_graphs = req.base.cuda_graphs;
        k
    };
    let mut arms_in = Vec::with_capacity(study.variants.len());
    let mut keys = vec![fit_key(&req.base)];
    let mut loaded = vec![(b.scenario.clone(), b.profile.clone())];
    for v in &study.variants {
        let mut r = req.base.clone();
        for (k, x) in &v.settings {
            crate::whatif::vary::set(&mut r, k, x)?;
        }
        let (s, p) = r.load()?;
        let key = fit_key(&r);
        let i = match keys.iter().position(|k| *k == key) {
            Some(i) => i,
            None => {
                keys.push(key);
                loaded.push((s.clone(), p.clone()));
                keys.len() - 1
            }
        };
        arms_in.push((i, s, p, v.step_time_us, v.tokens_per_s));
    }
    let fits = fit_each(&loaded, n, seed)?;
    let ratios_of = |i: usize, s: &Scenario, p: &CalibrationProfile| -> Result<Vec<f64>> {
        match &fits[i] {
            Some(d) => d.step_ratios_of(s, p),
            None => {
                let u = Uncertainty::from_profile(p, s)?;
                timeline_step_ratios(s, p, &u, n, seed)
            }
        }
    };
    let base_ratios = ratios_of(0, &b.scenario, &b.profile)?;
    let mut arms = Vec::with_capacity(arms_in.len());
    for (i, s, p, vs, vt) in arms_in {
        let ratios = ratios_of(i, &s, &p)?;
        // tokens/s per draw ∝ tokens per step / step time: speedup_i = point × base_i / var_i.
        arms.push(ArmIntervals {
            intervals: Intervals::from_ratios(&ratios, vs, vt),
            speedup: speedup_interval(vt / bt, &base_ratios, &ratios),
        });
    }
    Ok((Intervals::from_ratios(&base_ratios, bs, bt), arms))
}

/// `vary_intervals` without draws: each answer a point.
fn vary_points(study: &crate::whatif::vary::VaryStudy) -> (Intervals, Vec<ArmIntervals>) {
    let b = &study.base;
    let (bs, bt) = (b.step_time_us(), b.tokens_per_s());
    let base = Intervals::from_ratios(&[], bs, bt);
    let arms = study
        .variants
        .iter()
        .map(|v| ArmIntervals {
            intervals: Intervals::from_ratios(&[], v.step_time_us, v.tokens_per_s),
            speedup: Interval::point(v.tokens_per_s / bt),
        })
        .collect();
    (base, arms)
}

/// The `loaded` scenarios' fast paths with their draws. The fits are independent: one per core.
/// A scenario the fast path refuses is none here, drawn through the timeline instead, arm by
/// arm (the same seeded draws: still paired).
fn fit_each(
    loaded: &[(Scenario, CalibrationProfile)],
    n: usize,
    seed: u64,
) -> Result<Vec<Option<Drawn>>> {
    use rayon::prelude::*;
    loaded
        .par_iter()
        .map(|(s, p)| match Drawn::new(s, p, None, n, seed) {
            Ok(d) => Ok(Some(d)),
            Err(_) => {
                // A malformed interval in the profile is its own error, by file and field;
                // else the fast path refused the scenario.
                Uncertainty::from_profile(p, s)?;
                Ok(None)
            }
        })
        .collect()
}

/// Intervals of `whatif spec-decode` per k (in `study.variants` order) at the scenario's batch:
/// the speculative step's, and its speedup over the plain step under the same draws.
pub(crate) fn spec_decode_intervals(
    req: &crate::whatif::spec_decode::SpecDecodeRequest,
    study: &crate::whatif::spec_decode::SpecDecodeStudy,
    n: usize,
    seed: u64,
) -> Result<Vec<ArmIntervals>> {
    let point = |v: &crate::whatif::spec_decode::Variant| ArmIntervals {
        intervals: Intervals::from_ratios(&[], v.step_time_us, v.tokens_per_s),
        speedup: Interval::point(v.speedup),
    };
    if n == 0 {
        return Ok(study.variants.iter().map(point).collect());
    }
    let s = &study.baseline.scenario;
    let p = &study.baseline.profile;
    let draft = crate::whatif::draft::Draft::load(req.method, req.draft.as_deref(), &s.model)?;
    let d = match Drawn::new(s, p, Some(&draft), n, seed) {
        Ok(d) => d,
        Err(_) => {
            // The fast path refuses (decode-context parallelism): every window on the timeline,
            // under the same seeded draws (paired with the plain step's).
            let u = Uncertainty::from_profile(p, s)?;
            let base = timeline_step_ratios(s, p, &u, n, seed)?;
            return study
                .variants
                .iter()
                .map(|v| {
                    let ratios = timeline_spec_ratios(s, p, &draft, &u, v.draft_tokens, n, seed)?;
                    Ok(ArmIntervals {
                        intervals: Intervals::from_ratios(&ratios, v.step_time_us, v.tokens_per_s),
                        speedup: speedup_interval(v.speedup, &base, &ratios),
                    })
                })
                .collect();
        }
    };
    let base = d.step_ratios(s.batch, s.context);
    let mut out = Vec::with_capacity(study.variants.len());
    for v in &study.variants {
        let Some(ratios) = d.spec_step_ratios(s.batch, s.context, v.draft_tokens) else {
            out.push(point(v));
            continue;
        };
        out.push(ArmIntervals {
            intervals: Intervals::from_ratios(&ratios, v.step_time_us, v.tokens_per_s),
            speedup: speedup_interval(v.speedup, &base, &ratios),
        });
    }
    Ok(out)
}

/// Tokens/s intervals of every sweep row (in `rows` order), one fast path fitted for the grid
/// as the sweep fits it (one per layout: pipeline and data-parallel size, layout settings),
/// each row's draws replayed on its memo (`sweep --intervals`).
pub(crate) fn sweep_intervals(
    req: &crate::whatif::sweep::SweepRequest,
    rows: &[crate::whatif::sweep::Row],
    n: usize,
    seed: u64,
) -> Result<Vec<Interval>> {
    if n == 0 {
        return Ok(rows
            .iter()
            .map(|r| Interval::point(r.tokens_per_s))
            .collect());
    }
    let mut out = vec![Interval::point(f64::NAN); rows.len()];
    let requests = req.layout_requests();
    let mut layouts: Vec<u32> = rows.iter().map(|r| r.layout).collect();
    layouts.sort_unstable();
    layouts.dedup();
    for lay in layouts {
        let (idx, sub): (Vec<usize>, Vec<crate::whatif::sweep::Row>) = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.layout == lay)
            .map(|(i, r)| (i, *r))
            .unzip();
        let base = &requests[lay as usize];
        for (i, v) in idx
            .into_iter()
            .zip(sweep_intervals_at(req, base, &sub, n, seed)?)
        {
            out[i] = v;
        }
    }
    Ok(out)
}

/// [`sweep_intervals`] of rows of one layout, `base` the grid's base at that layout.
pub(super) fn sweep_intervals_at(
    req: &crate::whatif::sweep::SweepRequest,
    base: &crate::sim::ScenarioRequest,
    rows: &[crate::whatif::sweep::Row],
    n: usize,
    seed: u64,
) -> Result<Vec<Interval>> {
    use rayon::prelude::*;
    let (scenario, profile) = base.load()?;
    let draft = if rows.iter().any(|r| r.draft_tokens > 0) {
        Some(crate::whatif::draft::Draft::load(
            req.method,
            req.draft.as_deref(),
            &scenario.model,
        )?)
    } else {
        None
    };
    let d = drawn_or_hint(&scenario, &profile, draft.as_ref(), n, seed)?;
    let settings = row_settings(&scenario, &profile, rows)?;
    Ok(rows
        .par_iter()
        .map(|r| {
            let Some((_, _, _, l, c)) = settings
                .iter()
                .find(|x| (x.0, x.1, x.2) == (r.proto, r.algo, r.cuda_graphs))
            else {
                return Interval::point(f64::NAN);
            };
            let f = &d.fast;
            let tps: Vec<f64> = if r.draft_tokens == 0 {
                let base = f.step_us(r.batch, r.context, l, c);
                d.draws
                    .iter()
                    .enumerate()
                    .map(|(i, dr)| {
                        r.tokens_per_s * base
                            / (f.step_us_drawn(r.batch, r.context, l, c, dr)
                                * d.step_factor(i, r.batch as f64))
                    })
                    .collect()
            } else {
                let k = r.draft_tokens;
                let Some(base) = f.spec_step_us(r.batch, r.context, k, l, c) else {
                    return Interval::point(r.tokens_per_s);
                };
                let tokens = r.batch as f64 * (k + 1) as f64;
                d.draws
                    .iter()
                    .enumerate()
                    .filter_map(|(i, dr)| {
                        f.spec_step_us_drawn(r.batch, r.context, k, l, c, dr)
                            .map(|x| (i, x))
                    })
                    .map(|(i, x)| r.tokens_per_s * base.2 / (x.2 * d.step_factor(i, tokens)))
                    .collect()
            };
            Interval::of(&tps)
        })
        .collect())
}

/// A sweep row's NCCL protocol, algorithm and CUDA-graph setting, with its launch parameters
/// and collectives.
type RowSetting = (
    crate::scenario::Proto,
    crate::scenario::Algo,
    bool,
    Launch,
    Collectives,
);

/// Each distinct setting of `rows`, in order of first appearance.
fn row_settings(
    scenario: &Scenario,
    profile: &CalibrationProfile,
    rows: &[crate::whatif::sweep::Row],
) -> Result<Vec<RowSetting>> {
    let mut settings: Vec<RowSetting> = Vec::new();
    for r in rows {
        if !settings
            .iter()
            .any(|x| (x.0, x.1, x.2) == (r.proto, r.algo, r.cuda_graphs))
        {
            let mut s = scenario.clone();
            s.nccl.proto = r.proto;
            s.nccl.algo = r.algo;
            s.cuda_graphs = r.cuda_graphs;
            let c = Collectives::new(&s, profile)?;
            let l = Launch::new(profile, r.cuda_graphs);
            settings.push((r.proto, r.algo, r.cuda_graphs, l, c));
        }
    }
    Ok(settings)
}

/// Tokens/s interval of `concurrency` users at `context` whose time per output token is the
/// decode step (`step_us`, drawn) plus `extra_us` not drawn (e.g. prefill's share): the
/// throughput at the point `capacity` chooses. Inner error as in [`scenario_intervals`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn throughput_interval(
    s: &Scenario,
    p: &CalibrationProfile,
    concurrency: u32,
    context: u64,
    step_us: f64,
    extra_us: f64,
    n: usize,
    seed: u64,
) -> Result<std::result::Result<Interval, String>> {
    let mut s = s.clone();
    s.batch = concurrency;
    s.context = context;
    let tps = concurrency as f64 / (step_us + extra_us) * 1e6;
    let (iv, _) = scenario_intervals(&s, p, step_us, tps, n, seed)?;
    let iv = match iv {
        Ok(iv) => iv,
        Err(why) => return Ok(Err(why)),
    };
    if extra_us == 0.0 {
        return Ok(Ok(iv.tokens_per_s));
    }
    // tokens/s = users / (step + extra): from the step's quantiles (monotone in the step).
    let t = |step: f64| concurrency as f64 / (step + extra_us) * 1e6;
    Ok(Ok(Interval {
        p5: t(iv.step_time_us.p95),
        p50: t(iv.step_time_us.p50),
        p95: t(iv.step_time_us.p5),
    }))
}
