//! Speculative decoding on the fast path: a drafter's passes fitted in closed form (one model
//! per `PassKind`), played in the windows of a `SpecStep` at any number of draft tokens.

use super::memo::Memo;
use super::{
    Busy, CalibrationProfile, Collectives, Draw, Error, FastScenario, Launch, Mode, PassAt,
    PassModel, Result, Scenario, Setting, SpecSplit, State, Workload, NCAT,
};
use crate::workload::spec_step::{Drafter, PassKind, Side, SpecMethod, SpecStep};

/// A drafter's passes in closed form: one model per `PassKind` (memo slot 1 + its index), and
/// the `SpecStep` they are played in.
#[derive(Debug, Clone)]
pub(super) struct SpecFit {
    method: SpecMethod,
    /// In `PassKind::ALL` order.
    pub(super) passes: Vec<PassModel>,
    /// The step at k = 1, 2, ... up to the method's limit, built once (a sweep plays it per row).
    steps: Vec<SpecStep>,
    pub(super) host_us: f64,
    pass_gap_us: f64,
}

impl SpecFit {
    /// Fits the plain step of `s` (by `build_target`) and, side by side, each kind of pass the
    /// drafter `d`'s steps run, each on the scenario it is built on.
    pub(super) fn fit(
        s: &Scenario,
        p: &CalibrationProfile,
        d: &Drafter,
        build_target: &(dyn Fn(&Scenario, u32) -> Workload + Sync),
    ) -> Result<(PassModel, Self)> {
        let sd = p.spec_decode.as_ref().ok_or_else(|| {
            Error::field(
                &p.path,
                "spec_decode",
                "missing: needed for draft tokens > 0",
            )
        })?;
        let ds = d.scenario(s)?;
        // Each kind of pass the step runs, fitted on the scenario it is built on.
        let fit = |(i, kind): (usize, &PassKind)| {
            let on = if kind.on_draft() { &ds } else { s };
            // Probed like the plain step under data-parallel attention (a batch per DP rank).
            let pass_dp = on.layout.dp_size();
            // A dense drafter under data-parallel attention runs on one DP rank's share.
            let share = if on.layout.dp_size() < s.layout.dp_size() {
                s.layout.dp_size()
            } else {
                1
            };
            let build = move |ps: &Scenario, q: u32| {
                if pass_dp > 1 {
                    let mut g = ps.clone();
                    g.batch = ps.batch * pass_dp;
                    kind.build(d, &g, q, kind.first_index())
                } else {
                    kind.build(d, ps, q, kind.first_index())
                }
            };
            let mut pm = PassModel::fit(on, &build, 1 + i, *kind == PassKind::Verify)?;
            pm.dp_share = share;
            Ok(pm)
        };
        let (target, passes) = rayon::join(
            || PassModel::fit(s, build_target, 0, false),
            || {
                use rayon::prelude::*;
                PassKind::ALL
                    .par_iter()
                    .enumerate()
                    .map(fit)
                    .collect::<Result<Vec<_>>>()
            },
        );
        let target = target?;
        let spec = SpecFit {
            method: d.method,
            passes: passes?,
            steps: (1..=d.max_draft_tokens)
                .map(|k| SpecStep::new(d.method, k))
                .collect(),
            host_us: sd.exposed_host_us,
            pass_gap_us: sd.pass_gap_us,
        };
        Ok((target, spec))
    }

    fn step(&self, k: u32) -> std::borrow::Cow<'_, SpecStep> {
        match self.steps.get((k as usize).wrapping_sub(1)) {
            Some(s) => std::borrow::Cow::Borrowed(s),
            None => std::borrow::Cow::Owned(SpecStep::new(self.method, k)),
        }
    }
}

impl FastScenario {
    /// Plays the windows of the step at `k` (each window's passes on one state, `overhead` µs
    /// added to each window's end-of-step idle) at `W` contexts of one batch, the passes' lanes
    /// side by side (`play_lanes`): per context, (draft µs, verify µs, busy of both sides).
    fn play_spec<const W: usize>(
        &self,
        m: &mut Memo,
        spec: &SpecFit,
        (batch, contexts, k): (u32, [u64; W], u32),
        set: Setting<'_>,
        overhead: f64,
    ) -> [(f64, f64, Busy); W] {
        let Setting { launch, coll } = set;
        let step = spec.step(k);
        let mut out = [(0.0, 0.0, [0.0; NCAT]); W];
        for win in &step.windows {
            let mut sts = [State::new(launch); W];
            for st in &mut sts {
                st.step_overhead += overhead;
            }
            for run in &win.passes {
                let pm = &spec.passes[run.kind as usize];
                let at = PassAt {
                    batch,
                    queries: run.queries,
                    repeat: run.repeat,
                };
                self.play_lanes(m, pm, &mut sts, at, contexts, Setting { launch, coll });
            }
            for ((draft_us, verify_us, busy), st) in out.iter_mut().zip(&sts) {
                let us = st.window_us() + win.pass_gaps as f64 * spec.pass_gap_us;
                match win.side {
                    Side::Verify => *verify_us += us,
                    Side::Draft => *draft_us += us,
                }
                for (b, d) in busy.iter_mut().zip(st.busy) {
                    *b += d;
                }
            }
        }
        out
    }

    /// [`FastScenario::spec_step_us`] with the busy time per category of both sides.
    pub fn spec_step_us_busy(
        &self,
        batch: u32,
        context: u64,
        k: u32,
        launch: &Launch,
        coll: &Collectives,
    ) -> Option<((f64, f64, f64), Busy)> {
        self.spec_step_us_busy_lanes(batch, [context], k, launch, coll)
            .map(|[r]| r)
    }

    /// [`FastScenario::spec_step_us_busy`] at `W` contexts of one batch and setting, priced
    /// together (a sweep's rows along its context axis): the same figures, bit for bit.
    pub fn spec_step_us_busy_lanes<const W: usize>(
        &self,
        batch: u32,
        contexts: [u64; W],
        k: u32,
        launch: &Launch,
        coll: &Collectives,
    ) -> Option<[(SpecSplit, Busy); W]> {
        let Mode::Speculative(spec) = &self.mode else {
            return None;
        };
        Some(self.with_memo(|m| {
            let set = Setting { launch, coll };
            self.play_spec(m, spec, (batch, contexts, k), set, 0.0).map(
                |(draft_us, verify_us, busy)| {
                    (
                        (draft_us, verify_us, draft_us + verify_us + spec.host_us),
                        busy,
                    )
                },
            )
        }))
    }

    /// A speculative step with `k` draft tokens: (draft µs, verify µs, whole step µs), as
    /// `whatif spec-decode` composes them. None when no drafter was fitted.
    pub fn spec_step_us(
        &self,
        batch: u32,
        context: u64,
        k: u32,
        launch: &Launch,
        coll: &Collectives,
    ) -> Option<(f64, f64, f64)> {
        self.spec_step_us_busy(batch, context, k, launch, coll)
            .map(|x| x.0)
    }
    /// [`FastScenario::spec_step_us`] under a Monte Carlo draw (see `step_us_drawn`).
    pub fn spec_step_us_drawn(
        &self,
        batch: u32,
        context: u64,
        k: u32,
        launch: &Launch,
        coll: &Collectives,
        draw: &Draw,
    ) -> Option<(f64, f64, f64)> {
        let Mode::Speculative(spec) = &self.mode else {
            return None;
        };
        Some(self.with_memo(|m| {
            m.draw = Some(*draw);
            let [(draft_us, verify_us, _)] = self.play_spec(
                m,
                spec,
                (batch, [context], k),
                Setting { launch, coll },
                draw.step_overhead_us,
            );
            m.draw = None;
            (draft_us, verify_us, draft_us + verify_us + spec.host_us)
        }))
    }
}
