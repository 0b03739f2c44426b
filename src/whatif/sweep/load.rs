//! [`prepare`]: a sweep's grid loaded and checked, each layout fitted, before any row is priced.

use super::{KvBudget, Layout, Meta, Prepared, SweepRequest};
use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::scenario::Scenario;
use crate::sim::fast::{Collectives, FastScenario, Launch};
use crate::whatif::draft::Draft;
use crate::workload::spec_step::Drafter;

/// The memory of a scenario under a CUDA-graph setting (`capacity::memory` in the CLI).
type Budget<'b> = dyn Fn(&Scenario, &CalibrationProfile, bool) -> Result<KvBudget> + 'b;

/// Loads and checks everything a sweep needs, before any row is priced or written: the work
/// bound, every grid value, the drafter, the NCCL settings and the memory of each graph
/// setting (`budget(scenario, profile, cuda_graphs)`, from `capacity::memory` in the CLI).
pub fn prepare<'a>(req: &'a SweepRequest, budget: &Budget<'_>) -> Result<Prepared<'a>> {
    if req.is_empty() {
        return Err(Error::EmptyGrid);
    }
    req.check_work()?;
    let requests = req.layout_requests();
    let loaded = requests
        .iter()
        .map(|r| r.load())
        .collect::<Result<Vec<_>>>()?;
    let (scenario, profile) = loaded[0].clone();
    let draft = load_draft(req, &scenario)?;
    check_grid_values(req, &loaded, &scenario)?;
    let mut layouts = Vec::new();
    for (scenario, profile) in &loaded {
        layouts.push(fit_layout(
            req,
            scenario,
            profile,
            draft.as_deref(),
            budget,
        )?);
    }
    let meta = Meta {
        model: scenario.model.name.clone(),
        system: scenario.system.name.clone(),
        calibration: profile.profile.name.clone(),
        scenarios: req.count() as u64,
        include_infeasible: req.include_infeasible,
        settings: req.settings.iter().map(|(k, _)| *k).collect(),
        layout_values: requests
            .iter()
            .map(|r| req.settings.iter().map(|(k, _)| k.get(r)).collect())
            .collect(),
        warnings: accuracy_warnings(&loaded),
    };
    Ok(Prepared {
        req,
        layouts,
        mean_len: mean_lengths(req),
        meta,
    })
}

/// The drafter when any draft-token count is above 0, checked at every such count together
/// with the acceptance it needs.
fn load_draft(req: &SweepRequest, scenario: &Scenario) -> Result<Option<Draft>> {
    if !req.draft_tokens.iter().any(|&k| k > 0) {
        return Ok(None);
    }
    let d = Draft::load(req.method, req.draft.as_deref(), &scenario.model)?;
    let acc = req.acceptance.as_ref().ok_or_else(|| Error::FlagUse {
        flag: "--draft-tokens",
        problem: "above 0 needs the acceptance: --acceptance-rate R (or --acceptance-per-position)"
            .into(),
    })?;
    for &k in req.draft_tokens.iter().filter(|&&k| k > 0) {
        d.check_k(k)?;
        acc.check_k(k)?;
    }
    Ok(Some(d))
}

/// Every grid value is checked before any work starts (the checks of batch and of context
/// are independent, so the lists are checked each against the base, not as a product).
/// Batches against every layout's scenario: two-batch overlap takes at least 2 sequences.
fn check_grid_values(
    req: &SweepRequest,
    loaded: &[(Scenario, CalibrationProfile)],
    base: &Scenario,
) -> Result<()> {
    for (scenario, _) in loaded {
        for &b in &req.batch {
            let mut s = scenario.clone();
            s.batch = b;
            s.validate()?;
        }
    }
    for &c in &req.context {
        let mut s = base.clone();
        s.context = c;
        s.validate()?;
    }
    Ok(())
}

/// One layout fitted by the fast path, with its NCCL settings and, per CUDA-graph setting, its
/// launch parameters and memory; a batch the fast path cannot price there is refused.
fn fit_layout(
    req: &SweepRequest,
    scenario: &Scenario,
    profile: &CalibrationProfile,
    draft: Option<&Drafter>,
    budget: &Budget<'_>,
) -> Result<Layout> {
    let fast = FastScenario::new(scenario, profile, draft)?;
    let mut colls = Vec::new();
    for &proto in &req.proto {
        for &algo in &req.algo {
            let mut s = scenario.clone();
            s.nccl.proto = proto;
            s.nccl.algo = algo;
            colls.push((proto, algo, Collectives::new(&s, profile)?));
        }
    }
    let mut launches = Vec::new();
    for &g in &req.cuda_graphs {
        launches.push((g, Launch::new(profile, g), budget(scenario, profile, g)?));
        for &b in &req.batch {
            if let Some(rows) = fast.thin_batch(b, g) {
                return Err(thin_batch_error(scenario, &fast, b, g, rows));
            }
        }
    }
    Ok(Layout {
        pp: scenario.layout.pp_size(),
        dp: scenario.layout.dp_size(),
        fast,
        colls,
        launches,
    })
}

/// The refusal of batch `b`, whose mean expert-parallel rank holds `rows` (< 1) routed rows
/// under CUDA-graph setting `graphs`.
fn thin_batch_error(
    scenario: &Scenario,
    fast: &FastScenario,
    b: u32,
    graphs: bool,
    rows: f64,
) -> Error {
    Error::ScenarioSetting {
        flag: "--batch",
        value: b.to_string(),
        problem: format!(
            ": {rows:.2} routed rows per expert-parallel rank on average{} (EP {}, CUDA graphs {}), fewer than one; the sweep's fast path prices expert loads from the mean rank, which holds no whole row here: sweep batches from {} up, or price this one with `decodesim simulate`",
            if scenario.layout.tbo {
                " in the smaller micro-batch"
            } else {
                ""
            },
            scenario.layout.ep_size(),
            if graphs { "on" } else { "off" },
            first_whole_batch(fast, b, graphs)
        ),
    }
}

/// The mean tokens a step emits at each draft-token count (1 without drafting).
fn mean_lengths(req: &SweepRequest) -> Vec<f64> {
    req.draft_tokens
        .iter()
        .map(|&k| match (&req.acceptance, k) {
            (Some(a), k) if k > 0 => crate::workload::spec_step::SpecStep::new(req.method, k)
                .expected_tokens(&a.survival(k)),
            _ => 1.0,
        })
        .collect()
}

/// The grid's scenarios where the fast path is known to read off the timeline's mean over
/// seeds by more than its 0.5% (measured in docs/internals/fast-path.md, "Where the fast path is
/// known to read off").
fn accuracy_warnings(loaded: &[(Scenario, CalibrationProfile)]) -> Vec<String> {
    let mut out = Vec::new();
    if loaded.iter().any(|(s, _)| s.layout.tbo) {
        out.push("--tbo on: the fast path's two-batch overlap agrees with `decodesim simulate` to about 1% (measured: mean 0.2% on short models, 0.6% at full depth, worst 1.2%), not the 0.5% of the other layouts; check a decision that hinges on overlap with `simulate --tbo on`".to_string());
    }
    out
}

/// The least batch from `b` up that the fast path prices under `graphs` (`thin_batch`).
fn first_whole_batch(fast: &FastScenario, b: u32, graphs: bool) -> u32 {
    (b..)
        .find(|&x| fast.thin_batch(x, graphs).is_none())
        .unwrap_or(b)
}
