//! A pass's durations for a sweep's lanes (the next contexts of one batch), through the
//! per-thread memo: the token-dependent ops priced once per (pass, batch, queries, padded rows)
//! (under expert parallelism, at the draws' expert loads, with the slowest rank's excess), the
//! collectives once per setting, the context ops once per context (`context_slot`); then
//! written op-major, lane by lane, with a Monte Carlo draw applied where one is set.

use super::basis::{
    busy_of, keep_or_nan, latency_fractions, price_layout_at, price_layout_in, price_layout_into,
    PassModel, Regime, Scratch,
};
use super::ep::{slowest_rank, Coupled, Tail};
use super::memo::{
    scratch_index, DurationsFrom, Entry, EntryMap, LatencyKey, Memo, CONTEXTS_PER_ENTRY,
};
use super::replay::{play_regime, Straggler};
use super::{
    Busy, CalibrationProfile, Coef, Draw, FastScenario, HashMap, PassAt, Scenario, Setting, State,
    NCAT,
};

/// Where a pass is priced: its sequences and query tokens per sequence, the sequences of the
/// DP rank each rank plays (`local`, the largest share under data-parallel attention) and
/// their rows after CUDA-graph padding, the padded rows of every DP rank together, and the
/// context the token-dependent and collective prices are read at (the first lane's).
#[derive(Clone, Copy)]
struct PassShape {
    batch: u32,
    queries: u32,
    local: u32,
    padded: u64,
    rows: u64,
    context: u64,
}

impl PassShape {
    /// Pass `pm` at `at`, the token-dependent prices read at `context`, under CUDA graphs or
    /// not (`graphs`: the padding).
    fn of(pm: &PassModel, at: PassAt, context: u64, graphs: bool) -> Self {
        let queries = at.queries.max(1);
        // With data-parallel attention every rank plays its DP rank's share, padded to the
        // largest (`ep`): shapes are read at that share, the experts touched at every DP rank's
        // rows together, prices under the whole scenario.
        let (dp, local) = dp_share(pm, at.batch);
        let padded = pm.padded(local, queries, graphs);
        PassShape {
            batch: at.batch,
            queries,
            local,
            padded,
            rows: padded * dp as u64,
            context,
        }
    }

    /// The basis of pass `pm` at this shape with `touched` experts touched.
    fn basis(&self, pm: &PassModel, touched: f64) -> Coef {
        pm.vars(self.local, self.queries, self.context, touched, self.padded)
            .basis()
    }

    /// What the memo's durations of pass slot `slot` (in its `high` regime or not) hold
    /// besides the context ops, played on `W` lanes under `set`.
    fn durations_from<const W: usize>(
        &self,
        slot: usize,
        high: bool,
        set: Setting<'_>,
    ) -> DurationsFrom {
        let (batch, queries, padded) = self.key();
        let (id, graphs) = (set.coll.id, set.launch.graphs);
        (slot, high, batch, queries, padded, id, graphs, W)
    }

    /// The memo's key of the pass's entry.
    fn key(&self) -> (u32, u32, u32) {
        (self.batch, self.queries, self.padded as u32)
    }

    /// Puts the batch and context on the memo's scenario before pricing.
    fn put(&self, scenario: &mut Scenario) {
        scenario.batch = self.batch;
        scenario.context = self.context;
    }
}

impl FastScenario {
    /// Plays `at.repeat` passes of `pm` at (batch, queries) and `W` contexts at once, each on its
    /// own state: the shapes that follow the tokens are looked up once, and the lanes' max-plus
    /// recursions run interleaved (`replay::play_regime`), so that their dependency chains
    /// overlap. Each lane does, bit for bit, what one lane alone does at its context.
    pub(super) fn play_lanes<const W: usize>(
        &self,
        memo: &mut Memo,
        pm: &PassModel,
        sts: &mut [State; W],
        at: PassAt,
        contexts: [u64; W],
        set: Setting<'_>,
    ) {
        let (launch, repeat) = (set.launch, at.repeat);
        self.price_lanes(
            memo,
            pm,
            sts,
            at,
            contexts,
            set,
            |regime, d, ex, sts, sg| play_regime(regime, d, ex, sts, launch, repeat, sg),
        )
    }

    /// [`FastScenario::play_lanes`]'s pricing: the pass's durations (op-major, `W` lanes), the
    /// expert-parallel excess and the straggler wait, handed to `then` with the states (busy
    /// time added), which plays them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn price_lanes<const W: usize, F>(
        &self,
        memo: &mut Memo,
        pm: &PassModel,
        sts: &mut [State; W],
        at: PassAt,
        contexts: [u64; W],
        set: Setting<'_>,
        then: F,
    ) where
        F: FnOnce(&Regime, &[f64], &[f64], &mut [State; W], &Straggler),
    {
        let shape = PassShape::of(pm, at, contexts[0], set.launch.graphs);
        // vLLM picks the shared expert's stream by the rows the pass runs (padded).
        let regime = pm.regime(shape.padded as f64);
        let Memo {
            scenario,
            passes,
            stored,
            durations,
            scratch,
            draw,
            latency,
            ..
        } = memo;
        let high = !std::ptr::eq(regime, &pm.low);
        let [w_tokens, w_context, w_coll] = scratch
            .get_disjoint_mut([0, 1, 2].map(|l| scratch_index(pm.slot, high, l)))
            .expect("distinct scratch slots");
        let (own, twin) = own_and_twin(passes, pm, high);
        let entry = own
            .entry(shape.key())
            .or_insert_with(|| self.price_tokens(pm, regime, &shape, scenario, w_tokens, stored));
        let coll_index =
            self.price_collectives(entry, (pm, regime), &shape, set, scenario, w_coll, stored);
        // The token-dependent and collective prices already in place (the last call's, at the
        // same batch and setting, undrawn) are kept: only the context ops are written.
        let from = shape.durations_from::<W>(pm.slot, high, set);
        let slot = pm.slot * 2 + high as usize;
        let ops = regime.ops.len();
        let (lane_us, kept) = durations_of::<W>(durations, slot, from, ops, draw.is_some());
        for (lane, &context) in contexts.iter().enumerate() {
            // The context read last first (a sweep plays each context's rows together); at
            // most CONTEXTS_PER_ENTRY kept per entry, the oldest replaced, so that a sweep over
            // thousands of contexts neither scans nor holds them all. A lane's prices are
            // copied out before the next lane may replace their slot.
            let context_index = context_slot(
                entry,
                twin,
                shape.key(),
                (regime, pm, &self.profile),
                (&mut *scenario, &mut *w_context, &mut *stored),
                (shape.local, shape.padded),
                context,
            );
            entry.last = context_index;
            let at_lane = (coll_index, context_index, lane);
            let busy = write_lane::<W>(entry, regime, at_lane, kept, lane_us);
            add_busy(&mut sts[lane].busy, entry, at_lane, &busy, at.repeat as f64);
        }
        if let Some(draw) = draw {
            let lat = self.latency_fractions_of(
                latency,
                (pm, regime),
                &shape,
                entry.touched,
                set,
                draw,
                scenario,
            );
            draw.apply_lanes::<W>(regime, lane_us, lat);
        }
        let straggler = self.straggler_of(pm, at.batch);
        then(regime, lane_us, &entry.excess, sts, straggler);
    }

    /// A new entry of the memo: the token-dependent ops of pass `pm` priced at `shape` (under
    /// expert parallelism, the expert GEMMs at each expert load the draws meet, weighed by its
    /// share, and the loaded ops scaled to the expected slowest rank), their busy time, and
    /// room for the context and collective prices.
    fn price_tokens(
        &self,
        pm: &PassModel,
        regime: &Regime,
        shape: &PassShape,
        scenario: &mut Scenario,
        scratch: &mut Scratch,
        stored: &mut usize,
    ) -> Entry {
        let profile = &self.profile;
        let tokens = shape.batch as u64 * shape.queries as u64;
        let touched = pm.touched(tokens, shape.rows);
        shape.put(scenario);
        let x = shape.basis(pm, touched);
        let layout = &regime.tokens_layout;
        let nkept = layout.iter().filter(|x| x.1).count();
        let draws = match (self.loads.as_ref(), &pm.ep) {
            (Some(l), Some(_)) => Some(l.draws(tokens, shape.rows - tokens, shape.batch)),
            _ => None,
        };
        let us = match &draws {
            // Expert parallelism: the expert GEMMs priced at each rounded mean of the experts
            // with tokens per rank the draws meet, weighed by its share.
            Some(d) => {
                let mut acc = vec![0.0; nkept];
                for (t, share) in d.experts_at() {
                    let priced =
                        price_layout_at(scratch, regime, layout, &x, scenario, profile, Some(t));
                    for (a, v) in acc.iter_mut().zip(keep_or_nan(priced, nkept)) {
                        *a += share * v;
                    }
                }
                acc
            }
            None => keep_or_nan(
                price_layout_in(scratch, regime, layout, &x, scenario, profile),
                nkept,
            ),
        };
        let mut tokens_us = vec![0.0; regime.ops.len()].into_boxed_slice();
        let kept = layout.iter().filter(|x| x.1).map(|x| x.0);
        for (i, v) in kept.clone().zip(&us) {
            tokens_us[i] = *v;
        }
        let (excess, coupled, tail) = match &draws {
            Some(d) => slowest_rank(regime, &mut tokens_us, &x, d),
            None => (Vec::new().into_boxed_slice(), Vec::new(), Tail::default()),
        };
        let us: Vec<f64> = kept.clone().map(|i| tokens_us[i]).collect();
        *stored += regime.ops.len();
        Entry {
            touched,
            excess,
            coupled,
            tail,
            tokens_busy: busy_of(regime, kept, &us),
            tokens_us,
            context: Vec::new(),
            evict: 0,
            last: 0,
            collectives: Vec::new(),
        }
    }

    /// The slot of `entry`'s collective prices under `set`, priced there first if not kept.
    #[allow(clippy::too_many_arguments)]
    fn price_collectives(
        &self,
        entry: &mut Entry,
        (pm, regime): (&PassModel, &Regime),
        shape: &PassShape,
        set: Setting<'_>,
        scenario: &mut Scenario,
        scratch: &mut Scratch,
        stored: &mut usize,
    ) -> usize {
        let (id, graphs) = (set.coll.id, set.launch.graphs);
        if let Some(i) = entry
            .collectives
            .iter()
            .position(|c| c.0 == id && c.1 == graphs)
        {
            return i;
        }
        shape.put(scenario);
        set.put(scenario);
        let x = shape.basis(pm, entry.touched);
        let layout: Vec<(usize, bool)> = regime.collective_ops.iter().map(|&i| (i, true)).collect();
        let us = keep_or_nan(
            price_layout_in(scratch, regime, &layout, &x, scenario, &self.profile),
            layout.len(),
        );
        let busy = busy_of(regime, regime.collective_ops.iter().copied(), &us);
        *stored += layout.len();
        entry
            .collectives
            .push((id, graphs, us.into_boxed_slice(), busy));
        entry.collectives.len() - 1
    }

    /// The latency part of each collective of the pass at `shape` under `set` (memoised), for
    /// a draw that scales latency and bandwidth apart; empty otherwise.
    #[allow(clippy::too_many_arguments)]
    fn latency_fractions_of<'m>(
        &self,
        latency: &'m mut HashMap<LatencyKey, Box<[f64]>>,
        (pm, regime): (&PassModel, &Regime),
        shape: &PassShape,
        touched: f64,
        set: Setting<'_>,
        draw: &Draw,
        scenario: &mut Scenario,
    ) -> &'m [f64] {
        if !draw.splits_collectives() || regime.collective_ops.is_empty() {
            return &[];
        }
        let (batch, queries, padded) = shape.key();
        let key = (
            pm.slot,
            batch,
            queries,
            padded,
            set.coll.id,
            set.launch.graphs,
        );
        latency.entry(key).or_insert_with(|| {
            shape.put(scenario);
            set.put(scenario);
            let x = shape.basis(pm, touched);
            latency_fractions(regime, &x, scenario, &self.profile).into_boxed_slice()
        })
    }

    /// The unique context-dependent prices of pass `pm` (one query per sequence) at `batch`
    /// and `context` (`Regime::context_layout`'s kept ops, `Regime::context_from` maps each
    /// context op to one), copied to `out`, through the memo; and the regime they belong to.
    /// None where the pass is not priced at that batch yet (its token-dependent entry, which
    /// the first play at the batch makes).
    pub(super) fn context_prices<'r>(
        &'r self,
        memo: &mut Memo,
        pm: &'r PassModel,
        (batch, context): (u32, u64),
        graphs: bool,
        out: &mut Vec<f64>,
    ) -> Option<&'r Regime> {
        let (_, local) = dp_share(pm, batch);
        let padded = pm.padded(local, 1, graphs);
        let regime = pm.regime(padded as f64);
        let high = !std::ptr::eq(regime, &pm.low);
        let Memo {
            scenario,
            passes,
            stored,
            scratch,
            ..
        } = memo;
        let w_context = &mut scratch[scratch_index(pm.slot, high, 1)];
        let (own, twin) = own_and_twin(passes, pm, high);
        let key = (batch, 1, padded as u32);
        let entry = own.get_mut(&key)?;
        let index = context_slot(
            entry,
            twin,
            key,
            (regime, pm, &self.profile),
            (scenario, w_context, stored),
            (local, padded),
            context,
        );
        out.clear();
        out.extend_from_slice(&entry.context[index].1);
        Some(regime)
    }
}

/// Writes lane `lane`'s durations into `lane_us` (op-major, `W` lanes) from `entry`: its token-
/// dependent and collective prices (slot `coll_index`) unless `kept` there from the last call,
/// its context ops' from context slot `context_index`, then the expert-parallel windows whose
/// part follows this lane's attention (`ep::Coupled`) and the step's tail (`ep::Tail`).
/// Returns the busy time per category those last two add.
#[inline]
fn write_lane<const W: usize>(
    entry: &Entry,
    regime: &Regime,
    (coll_index, context_index, lane): (usize, usize, usize),
    kept: bool,
    lane_us: &mut [f64],
) -> Busy {
    let (_, context_us, _) = &entry.context[context_index];
    let (_, _, coll_us, _) = &entry.collectives[coll_index];
    if !kept {
        for (i, &v) in entry.tokens_us.iter().enumerate() {
            lane_us[i * W + lane] = v;
        }
        for (&i, &v) in regime.collective_ops.iter().zip(coll_us.iter()) {
            lane_us[i * W + lane] = v;
        }
    }
    for (&i, &j) in regime.context_ops.iter().zip(&regime.context_from) {
        lane_us[i * W + lane] = context_us[j];
    }
    let mut busy = [0.0; NCAT];
    if !entry.coupled.is_empty() {
        // Written afresh on every lane: their part follows the lane's attention.
        for c in &entry.coupled {
            for &(i, ..) in c.ops() {
                lane_us[i * W + lane] = entry.tokens_us[i];
            }
        }
        Coupled::apply(&entry.coupled, regime, lane_us, W, lane, &mut busy);
    }
    if !entry.tail.is_empty() {
        entry
            .tail
            .apply(regime, &entry.tokens_us, lane_us, (W, lane), &mut busy);
    }
    busy
}

/// The memo's durations of (pass slot, regime) `slot`, `n` ops × `W` lanes, and whether they
/// still hold the token-dependent and collective prices of `from` (the last call's, at the
/// same batch and setting, undrawn: only the context ops need writing); cleared otherwise.
fn durations_of<const W: usize>(
    durations: &mut Vec<(Option<DurationsFrom>, Vec<f64>)>,
    slot: usize,
    from: DurationsFrom,
    n: usize,
    drawn: bool,
) -> (&mut Vec<f64>, bool) {
    if durations.len() <= slot {
        durations.resize_with(slot + 1, Default::default);
    }
    let (d_from, d) = &mut durations[slot];
    let kept = !drawn && *d_from == Some(from);
    if !kept {
        d.clear();
        d.resize(n * W, 0.0);
    }
    *d_from = (!drawn).then_some(from);
    (d, kept)
}

/// Adds a lane's busy time per category over `repeat` passes to `busy`: `entry`'s token-
/// dependent ops, its context ops and collectives at slots (`coll_index`, `context_index`),
/// and `extra` (the expert-parallel windows and tail of `write_lane`).
#[inline]
fn add_busy(
    busy: &mut Busy,
    entry: &Entry,
    (coll_index, context_index, _): (usize, usize, usize),
    extra: &Busy,
    repeat: f64,
) {
    let (_, _, context_busy) = &entry.context[context_index];
    let (_, _, _, coll_busy) = &entry.collectives[coll_index];
    for c in 0..NCAT {
        busy[c] += (entry.tokens_busy[c] + context_busy[c] + coll_busy[c] + extra[c]) * repeat;
    }
}

/// With data-parallel attention: the DP ranks, and the sequences of the largest one's share
/// of `batch` (each rank plays its DP rank's share, padded to the largest); else 1 and the
/// pass's own share.
fn dp_share(pm: &PassModel, batch: u32) -> (u32, u32) {
    match &pm.ep {
        Some(e) if e.dp > 1 => (e.dp, batch.div_ceil(e.dp)),
        _ => (1, batch.div_ceil(pm.dp_share)),
    }
}

/// The memo's entries of pass `pm`, and those of the earlier pipeline stage whose context ops
/// it prices alike (`PassModel::context_twin`), if any: a stage reads that stage's prices at
/// the same micro-batch and context (priced first: the stages play in order).
fn own_and_twin<'a>(
    passes: &'a mut [EntryMap],
    pm: &PassModel,
    high: bool,
) -> (&'a mut EntryMap, Option<&'a EntryMap>) {
    match pm.context_twin[high as usize] {
        Some(t) if t != pm.slot => {
            let [a, b] = passes
                .get_disjoint_mut([pm.slot, t])
                .expect("distinct pass slots");
            (a, Some(&*b))
        }
        _ => (&mut passes[pm.slot], None),
    }
}

/// The slot of `entry`'s context prices at `context`, priced there if not kept: the slot read
/// last first (a sweep plays each context's rows together), at most `CONTEXTS_PER_ENTRY` kept,
/// the oldest replaced, so that a sweep over thousands of contexts neither scans nor holds
/// them all. A pipeline stage whose context ops an earlier stage prices alike (`twin`) reads
/// that stage's prices at the same micro-batch and context.
fn context_slot(
    entry: &mut Entry,
    twin: Option<&EntryMap>,
    key: (u32, u32, u32),
    (regime, pm, profile): (&Regime, &PassModel, &CalibrationProfile),
    (scenario, w_context, stored): (&mut Scenario, &mut Scratch, &mut usize),
    (local, padded): (u32, u64),
    context: u64,
) -> usize {
    let hit = match entry.context.get(entry.last) {
        Some(c) if c.0 == context => Some(entry.last),
        _ => entry.context.iter().rposition(|c| c.0 == context),
    };
    if let Some(i) = hit {
        return i;
    }
    let (batch, queries, _) = key;
    scenario.batch = batch;
    scenario.context = context;
    let x = pm
        .vars(local, queries, context, entry.touched, padded)
        .basis();
    let unique = regime.context_layout.iter().filter(|x| x.1).count();
    // Once full, the oldest slot is priced over in place (no allocation per row).
    let index = if entry.context.len() >= CONTEXTS_PER_ENTRY {
        let i = entry.evict;
        entry.evict = (i + 1) % CONTEXTS_PER_ENTRY;
        i
    } else {
        *stored += unique;
        entry
            .context
            .push((0, vec![0.0; unique].into_boxed_slice(), [0.0; NCAT]));
        entry.context.len() - 1
    };
    let (at, us, busy) = &mut entry.context[index];
    *at = context;
    let layout = &regime.context_layout;
    let shared = twin
        .and_then(|passes| passes.get(&key))
        .and_then(|t| t.context.iter().rfind(|c| c.0 == context))
        .filter(|c| c.1.len() == us.len());
    if let Some(c) = shared {
        us.copy_from_slice(&c.1);
    } else if price_layout_into(w_context, regime, layout, &x, scenario, profile, None, us).is_err()
    {
        us.fill(f64::NAN);
    }
    *busy = [0.0; NCAT];
    for (&j, &(c, repeat)) in regime.context_from.iter().zip(&regime.context_busy) {
        busy[c] += us[j] * repeat;
    }
    index
}
