//! `decodesim sweep`: a Cartesian grid of scenarios priced by the fast path on every core.
//!
//! The grid is bounded before it starts ([`SweepRequest::check_work`]: its size is the product
//! of the lists' lengths, computed without overflow) and streamed: scenarios are priced in
//! chunks of [`CHUNK`] in parallel, each chunk formatted in parallel and written in grid order,
//! so memory is bounded by one chunk whatever the grid's size. The best rows and the Pareto
//! front are tracked as the rows go by (the front as a small sorted set), among the scenarios
//! whose memory fits unless infeasible ones are asked for.

use super::acceptance::Acceptance;
use super::draft::Method;
use crate::category::Category;
use crate::cost::CalibrationProfile;
use crate::error::Result;
use crate::scenario::knobs::{Knob, Value};
use crate::scenario::{Algo, Proto, Scenario};
use crate::sim::fast::{Collectives, FastScenario, Launch};
use crate::sim::ScenarioRequest;
use rayon::prelude::*;

pub use front::{pareto_insert, Tracker};
pub use load::prepare;

mod front;
mod load;

/// Scenarios priced (and formatted) per chunk before the chunk is written: the memory a sweep
/// holds is about this many rows and their text (~30 MB for CSV), whatever the grid's size.
pub const CHUNK: usize = 1 << 16;
/// Scenarios per parallel task within a chunk (one memo warm-up per task stays negligible).
const TASK: usize = 1024;

/// The grid: the base scenario's model, system and profile with lists of knobs.
#[derive(Debug, Clone)]
pub struct SweepRequest {
    pub base: ScenarioRequest,
    /// Pipeline stages (`--pp`; the outermost list: each value is its own fitted scenario).
    /// Empty: the base request's own.
    pub pp: Vec<u32>,
    /// Data-parallel attention sizes (`--dp`; within each pipeline size, each its own fitted
    /// scenario, EP = DP × TP). Empty: the base request's own.
    pub dp: Vec<u32>,
    /// The lists of the layout settings given (`Sweep::Layout` knobs, as `--tbo` and
    /// `--nccl-min-nchannels`), in the knob table's order: within each data-parallel size, each
    /// value its own fitted scenario, the earlier knob's lists outside. A knob not listed keeps
    /// the base request's value and has no column.
    pub settings: Vec<(&'static Knob, Vec<Value>)>,
    pub batch: Vec<u32>,
    pub context: Vec<u64>,
    pub proto: Vec<Proto>,
    pub algo: Vec<Algo>,
    pub cuda_graphs: Vec<bool>,
    pub draft_tokens: Vec<u32>,
    pub method: Method,
    pub draft: Option<String>,
    /// Needed when any draft-token count is above 0.
    pub acceptance: Option<Acceptance>,
    /// Most work units the sweep may take (`--max-work`; one scenario is one unit).
    pub max_work: u64,
    /// Name scenarios whose memory does not fit as best or on the Pareto front too.
    pub include_infeasible: bool,
}

/// One scenario's inputs and outputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    /// Pipeline stages (1: none).
    pub pp: u32,
    /// Data-parallel attention ranks (1: none).
    pub dp: u32,
    /// The layout the row was priced under: an index into [`SweepRequest::layout_requests`]
    /// (its layout settings are [`Meta::layout_values`]).
    pub layout: u32,
    pub batch: u32,
    pub context: u64,
    pub proto: Proto,
    pub algo: Algo,
    pub cuda_graphs: bool,
    pub draft_tokens: u32,
    pub step_time_us: f64,
    pub tokens_per_s: f64,
    pub tokens_per_s_per_user: f64,
    pub mean_acceptance_length: f64,
    /// Busy time per category on one rank (every stream; categories in `Category::ALL` order).
    pub busy_us: [f64; Category::ALL.len()],
    /// Weights, buffers and the KV cache of `batch` sequences of `context + draft_tokens`
    /// tokens fit in the memory vLLM may use (`--gpu-memory-utilization`).
    pub fits: bool,
}

/// The KV cache one rank holds, as vLLM sizes it (`capacity::memory::account`), for one
/// CUDA-graph setting (the graphs' pool is counted before the KV cache).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KvBudget {
    /// KV blocks left after weights, activations, graphs and buffers (0: nothing fits).
    pub num_blocks: u64,
    /// Tokens of one sequence a block holds (block size × DCP).
    pub tokens_per_block: u64,
    /// vLLM's `max_num_seqs`: more sequences than this never run at once.
    pub max_num_seqs: u32,
}

impl KvBudget {
    /// `batch` sequences of `tokens` KV tokens each fit, counting whole blocks per sequence as
    /// vLLM allocates them.
    pub fn fits(&self, batch: u32, tokens: u64) -> bool {
        let blocks = tokens.max(1).div_ceil(self.tokens_per_block.max(1)) as u128;
        batch <= self.max_num_seqs && batch as u128 * blocks <= self.num_blocks as u128
    }
}

/// What the output needs to know before the first row.
#[derive(Debug, Clone, PartialEq)]
pub struct Meta {
    pub model: String,
    pub system: String,
    pub calibration: String,
    pub scenarios: u64,
    pub include_infeasible: bool,
    /// The layout settings the grid lists ([`SweepRequest::settings`]): rows name them, a
    /// column each.
    pub settings: Vec<&'static Knob>,
    /// Per layout ([`Row::layout`]), the value of each of `settings` (None: unset).
    pub layout_values: Vec<Vec<Option<Value>>>,
    /// Where the grid reaches past what the fast path has been held to (the caller prints
    /// them before the rows).
    pub warnings: Vec<String>,
}

/// What is tracked as the rows go by.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub scenarios: u64,
    /// Scenarios whose memory fits.
    pub fitting: u64,
    /// Scenarios the fast path could not price (NaN step; never best nor on the front).
    pub unpriced: u64,
    /// Most tokens/s in total, and per user, among the candidates (fitting ones unless
    /// `include_infeasible`); the first in grid order on a tie.
    pub best_total: Option<Row>,
    pub best_per_user: Option<Row>,
    /// Candidates no other candidate beats on both total and per-user tokens/s, most per-user
    /// tokens/s first.
    pub front: Vec<Row>,
}

/// Formats consecutive rows into bytes (called from any thread).
pub type RowFormat<'a> = Box<dyn Fn(&[Row], &mut Vec<u8>) + Send + Sync + 'a>;

/// Where the rows go: the formatter runs on every core, `write` on the caller's thread with the
/// formatted chunks in grid order.
pub trait Output {
    fn begin(&mut self, meta: &Meta) -> Result<()>;
    fn formatter(&self) -> RowFormat<'static>;
    fn write(&mut self, bytes: &[u8]) -> Result<()>;
    fn finish(&mut self, meta: &Meta, summary: &Summary) -> Result<()>;
}

/// The default scenario alone: each list holds the base request's value, the layout lists are
/// empty (so that code building a request names only the lists it sets).
impl Default for SweepRequest {
    fn default() -> Self {
        let base = ScenarioRequest::default();
        SweepRequest {
            pp: Vec::new(),
            dp: Vec::new(),
            settings: Vec::new(),
            batch: vec![base.batch],
            context: vec![base.context],
            proto: vec![base.proto],
            algo: vec![base.algo],
            cuda_graphs: vec![base.cuda_graphs],
            draft_tokens: vec![0],
            method: Method::DEFAULT,
            draft: None,
            acceptance: None,
            max_work: crate::error::DEFAULT_MAX_WORK,
            include_infeasible: false,
            base,
        }
    }
}

impl SweepRequest {
    /// Scenarios in the grid, without overflow (a product of the lists' lengths).
    pub fn count(&self) -> u128 {
        let layout_lists = [self.pp.len(), self.dp.len()]
            .into_iter()
            .chain(self.settings.iter().map(|(_, v)| v.len()));
        let lists = [
            self.batch.len(),
            self.context.len(),
            self.proto.len(),
            self.algo.len(),
            self.cuda_graphs.len(),
            self.draft_tokens.len(),
        ];
        layout_lists
            .map(|l| l.max(1))
            .chain(lists)
            .fold(1u128, |n, l| n.saturating_mul(l as u128))
    }

    /// [`SweepRequest::count`] as a usize (saturating).
    pub fn len(&self) -> usize {
        self.count().min(usize::MAX as u128) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }

    /// The scenario of each layout the grid loads, in grid order ([`Row::layout`]): per
    /// pipeline size, per data-parallel size, per value of each layout setting (the earlier
    /// setting outside), the base request at those values.
    pub fn layout_requests(&self) -> Vec<ScenarioRequest> {
        let pps: Vec<Option<u32>> = if self.pp.is_empty() {
            vec![self.base.pp]
        } else {
            self.pp.iter().map(|&n| Some(n)).collect()
        };
        let dps: Vec<Option<u32>> = if self.dp.is_empty() {
            vec![self.base.dp]
        } else {
            self.dp.iter().map(|&n| Some(n)).collect()
        };
        let mut out = Vec::new();
        for &pp in &pps {
            for &dp in &dps {
                let mut r = self.base.clone();
                r.pp = pp;
                r.dp = dp;
                out.push(r);
            }
        }
        for (k, values) in &self.settings {
            out = out
                .iter()
                .flat_map(|r| {
                    values.iter().map(move |v| {
                        let mut r = r.clone();
                        k.apply(&mut r, v.clone());
                        r
                    })
                })
                .collect();
        }
        out
    }

    /// The work of the grid in units (about 1 µs of CPU each), from the cost of the path
    /// each layout takes (measured with the release build; `tests/sweep_work.rs` holds the
    /// estimate against the measured time of every layout kind):
    ///
    /// - every layout is loaded and its fast path fitted once ([`crate::error::WORK_SWEEP_LAYOUT`];
    ///   with expert parallelism the expected slowest rank is fitted from seeded routing draws
    ///   over every rank: [`crate::error::WORK_EP_LAYOUT_PER_RANK`] more per EP rank);
    /// - every row replays the step's recursion ([`crate::error::WORK_FAST_SCENARIO`]), once per
    ///   pipeline stage, twice under two-batch overlap (two micro-batches interleaved), a
    ///   speculative row ([`crate::error::WORK_FAST_SPEC_ROW`]) its draft and verify passes;
    /// - with expert parallelism every distinct batch (per draft-token count and graph
    ///   setting) draws the expert loads of every rank again: [`crate::error::WORK_EP_BATCH_PER_RANK`]
    ///   per EP rank and [`crate::error::WORK_EP_BATCH_PER_SEQ`] per sequence of the batch.
    ///
    /// The EP group is `--ep`, else `--dp` × `--tp` (`--tp` 1 when not given: the grid is
    /// counted before the system is read). Returns the units and a line that says what was
    /// counted.
    pub fn work(&self) -> (f64, String) {
        use crate::error::{
            WORK_EP_LAYOUT_PER_RANK, WORK_FAST_SCENARIO, WORK_FAST_SPEC_ROW, WORK_SWEEP_LAYOUT,
        };
        use crate::sim::work::{ep_ranks, routing_units};
        // A speculative row (k > 0) plays a draft and a verify pass and the acceptance.
        let draft_weight: f64 = self
            .draft_tokens
            .iter()
            .map(|&k| if k > 0 { WORK_FAST_SPEC_ROW } else { 1.0 })
            .sum();
        let per_layout_rows = [
            self.batch.len(),
            self.context.len(),
            self.proto.len(),
            self.algo.len(),
            self.cuda_graphs.len(),
        ]
        .iter()
        .fold(draft_weight, |n, &l| n * l as f64);
        let mut batches: Vec<u32> = self.batch.clone();
        batches.sort_unstable();
        batches.dedup();
        let batch_settings = (self.draft_tokens.len() * self.cuda_graphs.len()) as f64;
        let layouts = self.layout_requests();
        let (mut total, mut ep_layouts, mut max_ep) = (0.0f64, 0usize, 0u32);
        for r in &layouts {
            let overlap = if r.tbo { 2.0 } else { 1.0 };
            let row = WORK_FAST_SCENARIO * r.pp_size() as f64 * overlap;
            let ep = ep_ranks(r.ep, r.dp_size(), r.tp);
            let mut units = WORK_SWEEP_LAYOUT + per_layout_rows * row;
            if ep > 1 {
                ep_layouts += 1;
                max_ep = max_ep.max(ep);
                let ep = ep as f64;
                units += WORK_EP_LAYOUT_PER_RANK * ep
                    + batch_settings
                        * batches
                            .iter()
                            .map(|&b| routing_units(ep, b as f64))
                            .sum::<f64>();
            }
            total += units;
        }
        let how = if ep_layouts > 0 {
            format!(
                "; {} layout(s) with expert parallelism (up to {max_ep} ranks) draw every rank's expert loads again at each of {} distinct batches",
                ep_layouts,
                crate::units::grouped(batches.len() as f64, 0)
            )
        } else {
            String::new()
        };
        (
            total,
            format!(
                "{} layout(s) loaded and fitted, rows replayed once per pipeline stage (twice under two-batch overlap){how}",
                layouts.len()
            ),
        )
    }

    /// Refuses a grid above `--max-work` before anything is loaded or priced ([`Self::work`]).
    pub fn check_work(&self) -> Result<()> {
        let n = self.count();
        let axis = |n: usize, noun: &str| match n {
            0 | 1 => String::new(),
            n => format!("{n} {noun} × "),
        };
        let mut layout_lists = axis(self.pp.len(), "pipeline sizes");
        layout_lists.push_str(&axis(self.dp.len(), "data-parallel sizes"));
        for (k, values) in &self.settings {
            if let crate::scenario::knobs::Sweep::Layout { noun, .. } = k.sweep {
                layout_lists.push_str(&axis(values.len(), noun));
            }
        }
        let lists = format!(
            "{layout_lists}{} batches × {} contexts × {} protocols × {} algorithms × {} graph settings × {} draft-token counts",
            self.batch.len(),
            self.context.len(),
            self.proto.len(),
            self.algo.len(),
            self.cuda_graphs.len(),
            self.draft_tokens.len()
        );
        let (units, how) = self.work();
        crate::error::check_work(
            "sweep",
            format!(
                "the grid of {} scenarios ({lists}; {how})",
                scenarios_text(n)
            ),
            units,
            self.max_work,
            "shorten the lists",
        )
    }
}

fn scenarios_text(n: u128) -> String {
    if n < 1_000_000_000_000_000 {
        crate::units::grouped(n as f64, 0)
    } else {
        format!("{:.2e}", n as f64)
    }
}

/// One task's buffers, kept from chunk to chunk: its first row, the rows, their text and the
/// rows' done flags.
type TaskBuffer = (usize, Vec<Row>, Vec<u8>, Vec<bool>);

/// A sweep loaded and checked, ready to stream.
pub struct Prepared<'a> {
    req: &'a SweepRequest,
    /// Per layout, in [`SweepRequest::layout_requests`]' order.
    layouts: Vec<Layout>,
    mean_len: Vec<f64>,
    pub meta: Meta,
}

/// One layout of the grid: its fitted scenario and the settings priced under it.
struct Layout {
    pp: u32,
    dp: u32,
    fast: FastScenario,
    colls: Vec<(Proto, Algo, Collectives)>,
    /// Per CUDA-graph setting: the setting, its launch parameters and its KV budget.
    launches: Vec<(bool, Launch, KvBudget)>,
}

/// Where row `i` lies in the grid: its layout and its index in each list.
#[derive(Clone, Copy)]
struct Cell {
    lay: usize,
    bi: usize,
    xi: usize,
    ki: usize,
    li: usize,
    di: usize,
}

/// A row before it is priced (`Prepared::rows_into` fills every slot; tests build rows from it).
pub(crate) const BLANK: Row = Row {
    pp: 0,
    dp: 0,
    layout: 0,
    batch: 0,
    context: 0,
    proto: Proto::Ll,
    algo: Algo::Ring,
    cuda_graphs: false,
    draft_tokens: 0,
    step_time_us: f64::NAN,
    tokens_per_s: f64::NAN,
    tokens_per_s_per_user: f64::NAN,
    mean_acceptance_length: f64::NAN,
    busy_us: [f64::NAN; Category::ALL.len()],
    fits: false,
};

/// Contexts of one batch and setting priced together (`FastScenario::step_us_busy_lanes`).
const LANES: usize = 8;

impl Prepared<'_> {
    /// Where row `i` lies, in the grid's nested order: pp × dp × the layout settings, batch, context, proto × algo,
    /// graphs, draft tokens.
    fn cell(&self, i: usize) -> Cell {
        let req = self.req;
        let (nb, nc, nk, nl, nd) = (
            req.batch.len(),
            req.context.len(),
            req.proto.len() * req.algo.len(),
            req.cuda_graphs.len(),
            req.draft_tokens.len(),
        );
        Cell {
            di: i % nd,
            li: (i / nd) % nl,
            ki: (i / (nd * nl)) % nk,
            xi: (i / (nd * nl * nk)) % nc,
            bi: (i / (nd * nl * nk * nc)) % nb,
            lay: i / (nd * nl * nk * nc * nb),
        }
    }

    /// Rows between one context and the next of the same batch and setting.
    fn context_stride(&self) -> usize {
        let req = self.req;
        req.proto.len() * req.algo.len() * req.cuda_graphs.len() * req.draft_tokens.len()
    }

    /// Row `i` in the grid's nested order.
    fn row(&self, i: usize) -> Row {
        let c = self.cell(i);
        let req = self.req;
        let lay = &self.layouts[c.lay];
        let (batch, context) = (req.batch[c.bi], req.context[c.xi]);
        let (_, _, coll) = &lay.colls[c.ki];
        let (_, launch, _) = &lay.launches[c.li];
        let k = req.draft_tokens[c.di];
        let fast = &lay.fast;
        let priced = if k == 0 {
            fast.step_us_busy(batch, context, launch, coll)
        } else {
            match fast.spec_step_us_busy(batch, context, k, launch, coll) {
                Some((s, b)) => (s.2, b),
                // Not reached: the drafter is fitted whenever a k above 0 is in the grid.
                None => (f64::NAN, [f64::NAN; Category::ALL.len()]),
            }
        };
        self.row_of(c, priced)
    }

    /// The row of cell `c` priced at (step µs, busy per category).
    fn row_of(&self, c: Cell, (step, busy): (f64, [f64; Category::ALL.len()])) -> Row {
        let req = self.req;
        let lay = &self.layouts[c.lay];
        let (batch, context) = (req.batch[c.bi], req.context[c.xi]);
        let (proto, algo, _) = &lay.colls[c.ki];
        let (graphs, _, kv) = &lay.launches[c.li];
        let k = req.draft_tokens[c.di];
        let per_user = self.mean_len[c.di] / step * 1e6;
        Row {
            pp: lay.pp,
            dp: lay.dp,
            layout: c.lay as u32,
            batch,
            context,
            proto: *proto,
            algo: *algo,
            cuda_graphs: *graphs,
            draft_tokens: k,
            step_time_us: step,
            tokens_per_s: per_user * batch as f64,
            tokens_per_s_per_user: per_user,
            mean_acceptance_length: self.mean_len[c.di],
            busy_us: busy,
            // vLLM reserves k lookahead slots per sequence for the draft tokens. With data
            // parallel attention each DP rank is its own engine (its own KV cache and
            // max_num_seqs, the budget's): the largest DP rank's sequences must fit.
            fits: kv.fits(batch.div_ceil(lay.dp.max(1)), context + k as u64),
        }
    }

    /// Rows `a..b` into `rows`, in grid order. A step's row (plain or speculative) and the
    /// rows of the next contexts at the same batch and setting are priced together ([`LANES`]
    /// at a time): the same figures as `row` gives each.
    fn rows_into(&self, a: usize, b: usize, rows: &mut Vec<Row>, done: &mut Vec<bool>) {
        let stride = self.context_stride();
        let nc = self.req.context.len();
        // Every slot is written below, in grid order or ahead of it.
        rows.clear();
        rows.resize(b - a, BLANK);
        done.clear();
        done.resize(b - a, false);
        for i in a..b {
            if done[i - a] {
                continue;
            }
            let c = self.cell(i);
            let last = i + (LANES - 1) * stride;
            if c.xi + LANES <= nc && last < b {
                let lay = &self.layouts[c.lay];
                let (_, _, coll) = &lay.colls[c.ki];
                let (_, launch, _) = &lay.launches[c.li];
                let contexts: [u64; LANES] = std::array::from_fn(|l| self.req.context[c.xi + l]);
                let (batch, k) = (self.req.batch[c.bi], self.req.draft_tokens[c.di]);
                let priced = if k == 0 {
                    lay.fast.step_us_busy_lanes(batch, contexts, launch, coll)
                } else {
                    match lay
                        .fast
                        .spec_step_us_busy_lanes(batch, contexts, k, launch, coll)
                    {
                        Some(p) => p.map(|(s, b)| (s.2, b)),
                        // Not reached: the drafter is fitted whenever a k above 0 is in the
                        // grid.
                        None => [(f64::NAN, [f64::NAN; Category::ALL.len()]); LANES],
                    }
                };
                for (l, p) in priced.into_iter().enumerate() {
                    let j = i + l * stride - a;
                    rows[j] = self.row_of(Cell { xi: c.xi + l, ..c }, p);
                    done[j] = true;
                }
            } else {
                rows[i - a] = self.row(i);
            }
        }
    }

    /// Prices every scenario, streaming the rows to `out` chunk by chunk; `progress(n)` after
    /// each chunk.
    pub fn stream(&self, out: &mut dyn Output, progress: &dyn Fn(u64)) -> Result<Summary> {
        let n = self.req.count() as usize;
        let mut track = Tracker::new(self.req.include_infeasible);
        out.begin(&self.meta)?;
        let fmt = out.formatter();
        // One (rows, text) buffer per task of a chunk, kept from chunk to chunk: a fresh
        // 1024-row text buffer per task is a large allocation, handed back to the system and
        // faulted in again every time (a third of a sweep's CPU time was page faults).
        let mut parts: Vec<TaskBuffer> = Vec::new();
        let mut lo = 0usize;
        while lo < n {
            let hi = (lo + CHUNK).min(n);
            let tasks = (hi - lo).div_ceil(TASK);
            if parts.len() < tasks {
                parts.resize_with(tasks, || (0, Vec::new(), Vec::new(), Vec::new()));
            }
            for (t, p) in parts.iter_mut().enumerate() {
                p.0 = lo + t * TASK;
            }
            parts[..tasks]
                .par_iter_mut()
                .for_each(|(a, rows, text, done)| {
                    let b = (*a + TASK).min(hi);
                    self.rows_into(*a, b, rows, done);
                    text.clear();
                    fmt(rows, text);
                });
            for (_, rows, text, _) in &parts[..tasks] {
                for r in rows {
                    track.add(r);
                }
                out.write(text)?;
            }
            progress((hi - lo) as u64);
            lo = hi;
        }
        let summary = track.finish(n as u64);
        out.finish(&self.meta, &summary)?;
        Ok(summary)
    }
}

/// Loads, checks and streams a sweep (see [`prepare`] and [`Prepared::stream`]).
pub fn run(
    req: &SweepRequest,
    budget: &dyn Fn(&Scenario, &CalibrationProfile, bool) -> Result<KvBudget>,
    out: &mut dyn Output,
    progress: &dyn Fn(u64),
) -> Result<Summary> {
    prepare(req, budget)?.stream(out, progress)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_budget_counts_whole_blocks() {
        let kv = KvBudget {
            num_blocks: 10,
            tokens_per_block: 16,
            max_num_seqs: 4,
        };
        assert!(kv.fits(2, 80)); // 2 × 5 blocks
        assert!(!kv.fits(2, 81)); // 2 × 6 blocks
        assert!(!kv.fits(5, 1)); // above max_num_seqs
    }
}
