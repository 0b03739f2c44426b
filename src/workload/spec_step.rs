//! One speculative-decoding step as a workload: which passes it runs, in which order, with how
//! many query tokens each, and which kernels surround them (the rejection sampler after the
//! verify pass, the proposer's bookkeeping before the first draft pass).
//!
//! Both engines iterate the same [`SpecStep`]: `whatif::spec_decode` plays each window's
//! workload on the timeline engine, `sim::fast` plays each pass's fitted model. Neither
//! composes a step of its own. A method is a row of the one table of methods
//! (`workload::spec_method`): its [`Schedule`] picks the passes in [`SpecStep::new`], its
//! [`DraftInput`] the kernels [`Drafter::draft_pass`] adds around the drafter's layers.
//!
//! What stays outside: loading a drafter (config files, pairing checks, the methods' limits) is
//! `whatif::draft`; how many draft tokens are accepted is statistics (`whatif::acceptance`);
//! host time and the gap between passes are the profile's `[spec_decode]` prices.

use super::builder::Builder;
use super::{CostFamily, Op, OpRole, Shape, Workload};
use crate::category::Category;
use crate::error::{Error, Result};
use crate::scenario::cudagraph::PadRule;
use crate::scenario::{ModelSpec, Scenario, WeightFormat};

pub use super::spec_method::{DraftInput, Schedule, SpecMethod};

/// What a method drafts with: the model one draft pass runs (the EAGLE-3 layer, the MTP layer
/// or the whole draft model) and how many of the target's hidden states it reads.
#[derive(Debug, Clone)]
pub struct Drafter {
    pub(crate) method: SpecMethod,
    pub model: ModelSpec,
    /// Target hidden states fused into the first draft pass (`aux_hidden_states` of
    /// `data/spec_decode/methods.toml`; read by [`DraftInput::AuxHidden`] methods only).
    pub(crate) aux_hidden_states: u32,
    /// The deepest k the method allows (`max_draft_tokens` of `data/spec_decode/methods.toml`).
    pub(crate) max_draft_tokens: u32,
}

/// The distinct pass shapes of a speculative step: each is one workload builder, and one fitted
/// model (one memo slot) of the fast path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassKind {
    /// The target over k+1 query tokens per sequence, then the rejection sampler.
    Verify,
    /// The proposer's bookkeeping, then the first draft pass over the positions the verify kept.
    DraftFirst,
    /// A later draft pass: one token per sequence.
    DraftNext,
}

impl PassKind {
    /// Every kind, in the order of the fast path's pass models.
    pub const ALL: [PassKind; 3] = [PassKind::Verify, PassKind::DraftFirst, PassKind::DraftNext];

    /// Built on the drafter's scenario (the draft model at the target's TP), else the target's.
    pub(crate) fn on_draft(self) -> bool {
        !matches!(self, PassKind::Verify)
    }

    /// How CUDA graphs pad the pass's tokens: the verify pass is a uniform batch of q tokens per
    /// sequence; draft passes pad like a decode step of their token count.
    pub(crate) fn pad_rule(self, queries: u32) -> PadRule {
        match self {
            PassKind::Verify => PadRule::Uniform { q: queries.max(1) },
            _ => PadRule::Decode,
        }
    }

    /// The index (in `draft<index>.` op names) of the first pass of this kind in a step.
    pub(crate) fn first_index(self) -> u32 {
        match self {
            PassKind::DraftNext => 1,
            _ => 0,
        }
    }

    /// The pass's workload on `s` at `queries` tokens per sequence; draft ops are named
    /// `draft<index>.` so a timeline shows which pass ran them.
    pub(crate) fn build(
        self,
        drafter: &Drafter,
        s: &Scenario,
        queries: u32,
        index: u32,
    ) -> Workload {
        match self {
            PassKind::Verify => verify_pass(s, queries),
            PassKind::DraftFirst => {
                let pass = drafter.draft_pass(s, queries, true, index);
                let mut ops = proposer_bookkeeping(
                    // Each DP rank speculates for its own sequences.
                    s.rank_batch() as u64,
                    queries.max(1) as u64 - 1,
                    s.model.hidden as u64,
                    drafter.bookkeeping_aux(),
                );
                ops.extend(pass.ops);
                Workload {
                    ops,
                    experts_touched: pass.experts_touched,
                    routing: pass.routing,
                }
            }
            PassKind::DraftNext => drafter.draft_pass(s, queries, false, index),
        }
    }
}

/// The two parts a step's time is reported in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Verify,
    Draft,
}

/// `repeat` passes of one kind back to back, the first named `draft<first_index>.`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassRun {
    pub kind: PassKind,
    /// Query tokens per sequence.
    pub queries: u32,
    pub repeat: u32,
    pub first_index: u32,
}

/// Passes played as one window on the engine (one launch sequence, one end-of-step idle),
/// followed by `pass_gaps` of the profile's `pass_gap_us` (each draft pass is one more graph
/// replay or eager forward after the previous one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub side: Side,
    pub passes: Vec<PassRun>,
    pub pass_gaps: u32,
}

/// One speculative step of `method` with `k` draft tokens, in the order vLLM runs it: the
/// verify pass (the target scores the k drafted tokens, the rejection sampler keeps a prefix),
/// then the drafter proposes the next step's k tokens. The profile's exposed host time is added
/// once per step by whoever prices it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecStep {
    method: SpecMethod,
    pub k: u32,
    pub windows: Vec<Window>,
}

impl SpecStep {
    /// The step at `k` draft tokens (callers check k against the method's limits first).
    pub fn new(method: SpecMethod, k: u32) -> SpecStep {
        match method.spec().schedule {
            // Chain drafters: k autoregressive draft passes, the first over the k+1 positions
            // the verify pass kept (as vLLM's proposer runs it), the rest over one token.
            Schedule::Chain => {
                let mut draft = vec![PassRun {
                    kind: PassKind::DraftFirst,
                    queries: k + 1,
                    repeat: 1,
                    first_index: PassKind::DraftFirst.first_index(),
                }];
                if k > 1 {
                    draft.push(PassRun {
                        kind: PassKind::DraftNext,
                        queries: 1,
                        repeat: k - 1,
                        first_index: PassKind::DraftNext.first_index(),
                    });
                }
                SpecStep {
                    method,
                    k,
                    windows: vec![
                        Window {
                            side: Side::Verify,
                            passes: vec![PassRun {
                                kind: PassKind::Verify,
                                queries: k + 1,
                                repeat: 1,
                                first_index: PassKind::Verify.first_index(),
                            }],
                            pass_gaps: 0,
                        },
                        Window {
                            side: Side::Draft,
                            passes: draft,
                            pass_gaps: k,
                        },
                    ],
                }
            }
        }
    }

    /// Forward passes of each kind in the step.
    pub fn count(&self, kind: PassKind) -> u32 {
        self.windows
            .iter()
            .flat_map(|w| &w.passes)
            .filter(|r| r.kind == kind)
            .map(|r| r.repeat)
            .sum()
    }

    /// Expected tokens per sequence per step from `survival[i]` = P(at least i+1 of the draft
    /// tokens accepted): a chain keeps the accepted prefix and the target's bonus token,
    /// 1 + Σ survival (vLLM's mean acceptance length).
    pub fn expected_tokens(&self, survival: &[f64]) -> f64 {
        1.0 + survival.iter().take(self.k as usize).sum::<f64>()
    }

    /// One window as one workload for the timeline engine: its passes' ops back to back, each
    /// pass built on its scenario (`target`, or the drafter's `draft`). Repeated passes are
    /// built once and replayed under their own names.
    pub fn window_workload(
        &self,
        window: &Window,
        drafter: &Drafter,
        target: &Scenario,
        draft: &Scenario,
    ) -> Workload {
        let mut out: Option<Workload> = None;
        for run in &window.passes {
            let s = if run.kind.on_draft() { draft } else { target };
            let w = run.kind.build(drafter, s, run.queries, run.first_index);
            // Later copies of a repeated pass carry their own index (and name).
            let from = format!("draft{}.", run.first_index);
            let mut copies: Vec<Op> = Vec::new();
            for r in 1..run.repeat {
                let index = run.first_index + r;
                let to = format!("draft{index}.");
                copies.extend(w.ops.iter().cloned().map(|mut o| {
                    o.name = o.name.replacen(&from, &to, 1);
                    o.draft_pass = o.draft_pass.map(|_| index);
                    o
                }));
            }
            match &mut out {
                None => out = Some(w),
                Some(o) => o.ops.extend(w.ops),
            }
            if let Some(o) = &mut out {
                o.ops.extend(copies);
            }
        }
        out.unwrap_or_else(|| Workload {
            ops: Vec::new(),
            experts_touched: Vec::new(),
            routing: Default::default(),
        })
    }

    /// The whole step as one workload (every window in order), for `--timeline`.
    pub(crate) fn workload(
        &self,
        drafter: &Drafter,
        target: &Scenario,
        draft: &Scenario,
    ) -> Workload {
        let mut windows = self.windows.iter();
        let Some(first) = windows.next() else {
            return Workload {
                ops: Vec::new(),
                experts_touched: Vec::new(),
                routing: Default::default(),
            };
        };
        let mut w = self.window_workload(first, drafter, target, draft);
        for win in windows {
            w.ops
                .extend(self.window_workload(win, drafter, target, draft).ops);
        }
        w
    }
}

impl Drafter {
    /// The draft's scenario: the target's system, TP, batch, context and settings. Expert
    /// parallelism (`--ep`) spreads the target's routed experts; a drafter without routed
    /// experts (an EAGLE-3 head, a dense draft model) has none to spread, so its passes run
    /// without it (vLLM builds the dense drafter with plain TP linears). The MTP layer is a MoE
    /// layer of the target's own shape and keeps it.
    pub fn scenario(&self, target: &Scenario) -> Result<Scenario> {
        let mut s = target.clone();
        s.model = self.model.clone();
        if s.model.moe.is_none() {
            s.layout.ep = None;
            s.comm.ep_comm = Default::default();
            // Under data-parallel attention a dense drafter runs on each DP rank alone (its
            // own sequences, the target's TP, nothing across DP ranks): played as the largest
            // DP rank's share, which the next verify pass's all-to-all waits for.
            s.batch = target.rank_batch();
            s.layout.dp = None;
            s.layout.redundant_experts = None;
            s.layout.tbo = false;
        }
        s.validate().map_err(|e| match e.scenario_problem() {
            Some(problem) => Error::ScenarioPart {
                part: format!("draft {}", self.model.name),
                problem,
            },
            None => e,
        })?;
        Ok(s)
    }

    /// Target hidden states the proposer gathers before the first draft pass.
    fn bookkeeping_aux(&self) -> u64 {
        match self.method.spec().input {
            DraftInput::AuxHidden => self.aux_hidden_states as u64,
            DraftInput::EmbedHidden | DraftInput::Tokens => 0,
        }
    }

    /// One draft pass on the draft's scenario `ds` with `queries` tokens per sequence: the
    /// drafter's forward pass and the method's own input kernels (`first`: the step's first
    /// draft pass, which reads the target's hidden states).
    fn draft_pass(&self, ds: &Scenario, queries: u32, first: bool, index: u32) -> Workload {
        let mut w = super::build_pass(ds, queries);
        // The pass's rows, padded like a decode step of its own token count under graphs (one
        // DP rank's, the largest, under data-parallel attention, as the pass itself).
        let local = super::parallel::dp_rank_scenario(ds);
        let tokens = local
            .as_ref()
            .unwrap_or(ds)
            .padding(queries, PadRule::Decode)
            .padded;
        let hidden = ds.model.hidden as u64;
        let mut extra = Builder::new();
        match self.method.spec().input {
            // EAGLE-3's first pass fuses the target's aux hidden states into one hidden row
            // (fc: aux × hidden → hidden); later passes feed the draft's own hidden state.
            DraftInput::AuxHidden if first => {
                let aux = self.aux_hidden_states.max(1) as u64;
                extra.gemm(
                    OpRole::DraftInput,
                    "eagle3_fc",
                    "gemm (cuBLAS) eagle fc",
                    Category::Gemm,
                    tokens,
                    hidden,
                    aux * hidden,
                    WeightFormat::Bf16,
                );
            }
            // DeepSeek's MTP module normalises the embedding and the previous hidden state and
            // projects their concatenation (eh_proj: 2 × hidden → hidden) before its layer.
            DraftInput::EmbedHidden => {
                extra.norm("mtp_enorm", "vllm::rms_norm_kernel", tokens, hidden, false);
                extra.norm("mtp_hnorm", "vllm::rms_norm_kernel", tokens, hidden, false);
                extra.gemm(
                    OpRole::DraftInput,
                    "mtp_eh_proj",
                    "gemm (cuBLAS) eh_proj",
                    Category::Gemm,
                    tokens,
                    hidden,
                    2 * hidden,
                    ds.model.weight_format("model.layers.0.eh_proj"),
                );
            }
            DraftInput::AuxHidden | DraftInput::Tokens => {}
        }
        // After the embedding and its allreduce, before the first layer.
        let at = w
            .ops
            .iter()
            .position(|o| o.layer >= 0)
            .unwrap_or(w.ops.len());
        w.ops.splice(at..at, extra.ops);
        for op in &mut w.ops {
            op.name = format!("draft{index}.{}", op.name);
            op.draft_pass = Some(index);
        }
        w
    }
}

/// The verify pass: the target at `queries` (= k+1) tokens per sequence (with CUDA graphs,
/// padded to the capture sizes adjusted to multiples of k+1: `scenario::cudagraph`), then the
/// rejection sampler over the real rows (it runs outside the graph).
pub(crate) fn verify_pass(s: &Scenario, queries: u32) -> Workload {
    let q = queries.max(1);
    let mut w = super::build_verify(s, q);
    // Each DP rank samples its own sequences.
    w.ops
        .extend(rejection_sampler(s.rank_batch() as u64, q as u64 - 1));
    w
}

/// The greedy rejection sampler vLLM runs after the verify pass, priced by its family.
fn rejection_sampler(batch: u64, k: u64) -> Vec<Op> {
    let mut b = Builder::new();
    let rows = batch * (k + 1);
    // Compares each draft token id with the target's argmax and writes the accepted ids and
    // counts: int64 ids in and out.
    b.push(
        OpRole::Sampling,
        "rejection_greedy_sample",
        "rejection_greedy_sample_kernel",
        CostFamily::Elementwise,
        Category::Sampling,
        Shape {
            m: rows,
            n: 1,
            k: 0,
            batch: 1,
        },
        "-",
        rows as f64,
        rows as f64 * 8.0 * 3.0,
    );
    b.ops
}

/// The proposer's input preparation before the first draft pass (plus EAGLE-3's gather of the
/// target's `aux` hidden states).
fn proposer_bookkeeping(batch: u64, k: u64, hidden: u64, aux: u64) -> Vec<Op> {
    let mut b = Builder::new();
    let rows = batch * (k + 1);
    // Next-token ids, positions and slot mappings for the first draft pass (int64 each).
    b.push(
        OpRole::DraftInput,
        "prepare_next_token_inputs",
        "eagle_prepare_next_token_padded_kernel",
        CostFamily::Elementwise,
        Category::Elementwise,
        Shape {
            m: rows,
            n: 3,
            k: 0,
            batch: 1,
        },
        "-",
        rows as f64,
        rows as f64 * 8.0 * 6.0,
    );
    if aux > 0 {
        b.elementwise(
            OpRole::DraftInput,
            "gather_aux_hidden_states",
            "at::native::CatArrayBatchedCopy (aux hidden states)",
            Category::Elementwise,
            rows * aux * hidden,
            rows * aux * hidden,
        );
    }
    b.ops
}
