//! `decodesim whatif --vary KEY=V1,V2,...`: variants of a base scenario, each simulated on the
//! full timeline, ranked by tokens/s, with what moved: per-category time and the op families
//! whose time changed most.
//!
//! Several `--vary` keys combine as their Cartesian product (every combination is one variant);
//! `--one-at-a-time` varies each key alone with the others at the base instead. Every variant is
//! loaded and checked before any is simulated, so bad input costs no work.

use crate::category::Category;
use crate::error::{Error, Result};
use crate::scenario::knobs;
use crate::sim::{simulate, ScenarioRequest, Simulation};
use crate::workload::CostFamily;
use serde_json::json;
use std::collections::BTreeMap;

/// The keys `--vary` accepts: every knob of the scenario table, by its name.
pub(crate) fn keys() -> String {
    knobs::names()
}

#[derive(Debug, Clone)]
pub struct VaryRequest {
    pub base: ScenarioRequest,
    /// (key, values) in the order given.
    pub axes: Vec<(String, Vec<String>)>,
    pub one_at_a_time: bool,
}

/// Parses `KEY=V1,V2,...` arguments: an unknown key, a key given twice or an empty list is an
/// error naming it.
pub fn parse_axes(args: &[String]) -> Result<Vec<(String, Vec<String>)>> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for a in args {
        let Some((k, v)) = a.split_once('=') else {
            return Err(Error::FlagUse {
                flag: "--vary",
                problem: format!(
                    "'{}': expected KEY=V1,V2,... (keys: {})",
                    crate::units::echo(a),
                    keys()
                ),
            });
        };
        let key = knobs::lookup(k.trim(), "--vary")?.name().to_string();
        if out.iter().any(|(x, _)| *x == key) {
            return Err(Error::Usage {
                flag: "--vary".into(),
                problem: format!(
                    "key '{key}' is given twice; list all its values once ({key}=V1,V2,...)"
                ),
            });
        }
        let values: Vec<String> = v
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if values.is_empty() {
            return Err(Error::FlagUse {
                flag: "--vary",
                problem: format!("{key}=: no values"),
            });
        }
        out.push((key, values));
    }
    if out.is_empty() {
        return Err(Error::Usage {
            flag: "whatif".into(),
            problem: format!("give at least one --vary KEY=V1,V2,... (keys: {})", keys()),
        });
    }
    Ok(out)
}

/// Sets one key of a request; the scenario check (`ScenarioRequest::load`) then holds the whole.
pub fn set(req: &mut ScenarioRequest, key: &str, v: &str) -> Result<()> {
    let k = knobs::lookup(key, "--vary")?;
    let value = k.parse_value(v).map_err(|why| Error::FlagUse {
        flag: "--vary",
        problem: format!("{}={}: {why}", k.name(), crate::units::echo(v)),
    })?;
    k.apply(req, value);
    Ok(())
}

/// The variants' settings: each a list of (key, value).
fn combinations(axes: &[(String, Vec<String>)], one_at_a_time: bool) -> Vec<Vec<(String, String)>> {
    if one_at_a_time {
        return axes
            .iter()
            .flat_map(|(k, vs)| vs.iter().map(move |v| vec![(k.clone(), v.clone())]))
            .collect();
    }
    let mut out: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for (k, vs) in axes {
        out = out
            .iter()
            .flat_map(|prefix| {
                vs.iter().map(move |v| {
                    let mut p = prefix.clone();
                    p.push((k.clone(), v.clone()));
                    p
                })
            })
            .collect();
    }
    out
}

/// A variant's step against the base.
#[derive(Debug, Clone)]
pub struct VariantResult {
    pub settings: Vec<(String, String)>,
    pub step_time_us: f64,
    pub tokens_per_s: f64,
    /// Exclusive time per category (mean over ranks), variant − base, µs.
    category_delta_us: Vec<(Category, f64)>,
    /// Summed kernel time per op family (mean over ranks, waits included), variant − base, µs,
    /// largest change first; with the op counts (base, variant).
    family_delta_us: Vec<(CostFamily, f64, usize, usize)>,
    warnings: Vec<String>,
}

impl VariantResult {
    pub fn label(&self) -> String {
        self.settings
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[derive(Debug, Clone)]
pub struct VaryStudy {
    pub base: Simulation,
    /// Ranked by tokens/s, best first.
    pub variants: Vec<VariantResult>,
}

/// Kernel time per op family summed over the step, averaged over ranks, and op counts.
fn family_time(sim: &Simulation) -> BTreeMap<CostFamily, (f64, usize)> {
    let mut out: BTreeMap<CostFamily, (f64, usize)> = BTreeMap::new();
    let ranks = sim.timeline.ranks.max(1) as f64;
    for r in &sim.timeline.records {
        let op = &sim.workload.ops[r.op as usize];
        out.entry(op.family).or_default().0 += (r.end_us - r.start_us) / ranks;
    }
    for op in sim.workload.ops.iter().filter(|o| o.is_kernel()) {
        out.entry(op.family).or_default().1 += 1;
    }
    out
}

fn compare(base: &Simulation, v: &Simulation, settings: Vec<(String, String)>) -> VariantResult {
    let category_delta_us = Category::ALL
        .iter()
        .map(|&c| (c, v.mean.time(c) - base.mean.time(c)))
        .collect();
    let (fb, fv) = (family_time(base), family_time(v));
    let mut fams: Vec<(CostFamily, f64, usize, usize)> = fb
        .keys()
        .chain(fv.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|f| {
            let (b, nb) = fb.get(f).copied().unwrap_or_default();
            let (x, nx) = fv.get(f).copied().unwrap_or_default();
            (*f, x - b, nb, nx)
        })
        .filter(|(_, d, nb, nx)| d.abs() > 1e-9 || nb != nx)
        .collect();
    fams.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()));
    VariantResult {
        settings,
        step_time_us: v.step_time_us(),
        tokens_per_s: v.tokens_per_s(),
        category_delta_us,
        family_delta_us: fams,
        warnings: v.warnings.clone(),
    }
}

/// Variants the lists make (their product, or their sum one at a time), counted in f64 without
/// building them, so that a product of long lists cannot wrap or fill memory.
fn variant_count(axes: &[(String, Vec<String>)], one_at_a_time: bool) -> f64 {
    let lens = axes.iter().map(|(_, v)| v.len() as f64);
    if one_at_a_time {
        lens.sum()
    } else {
        lens.product()
    }
}

/// [`run_bounded`] at the default `--max-work`, without intervals.
pub fn run(req: &VaryRequest) -> Result<VaryStudy> {
    run_bounded(req, crate::error::DEFAULT_MAX_WORK, 0)
}

/// Checks the work against `max_work` and every variant, then simulates the base and each
/// variant. Each variant and the base is loaded (model, system, profile and its tables:
/// [`crate::error::WORK_VARIANT_LOAD`]), played as a full timeline and, with `draws` interval
/// draws to come, replayed per draw on every expert-parallel rank
/// ([`crate::error::WORK_VARIANT_DRAW`] + [`crate::error::WORK_VARIANT_DRAW_PER_RANK`] per rank).
pub(crate) fn run_bounded(req: &VaryRequest, max_work: u64, draws: usize) -> Result<VaryStudy> {
    run_bounded_with(req, max_work, draws, &mut |_, _| {})
}

/// [`run_bounded`], calling `progress(done, total)` after each timeline (the base first).
pub(crate) fn run_bounded_with(
    req: &VaryRequest,
    max_work: u64,
    draws: usize,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<VaryStudy> {
    use crate::error::{
        WORK_TIMELINE_STEP, WORK_VARIANT_DRAW, WORK_VARIANT_DRAW_PER_RANK, WORK_VARIANT_LOAD,
    };
    let n = variant_count(&req.axes, req.one_at_a_time);
    let ep = crate::sim::work::ep_ranks(req.base.ep, req.base.dp_size(), req.base.tp) as f64;
    let per_variant = WORK_VARIANT_LOAD
        + WORK_TIMELINE_STEP
        + draws as f64 * (WORK_VARIANT_DRAW + WORK_VARIANT_DRAW_PER_RANK * ep);
    check_listed_work(req, n, draws, per_variant, max_work)?;
    let combos = combinations(&req.axes, req.one_at_a_time);
    // Once loaded, each timeline is counted at its own ranks and batch (a variant at DP128 or
    // at 16,384 sequences costs more than the 2,500 counted above) and the bound checked again,
    // still before anything is simulated.
    let timeline = |s: &crate::scenario::Scenario| {
        crate::sim::work::timeline_units(crate::sim::work::TimelineLayout::of(s), s.batch as u64)
            - WORK_TIMELINE_STEP
    };
    let mut played = timeline(&req.base.load()?.0);
    let mut reqs = Vec::with_capacity(combos.len());
    for settings in combos {
        let mut r = req.base.clone();
        for (k, v) in &settings {
            set(&mut r, k, v)?;
        }
        let (s, _) = r.load().map_err(|e| {
            let label: Vec<String> = settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let why = e.scenario_problem().unwrap_or_else(|| e.to_string());
            Error::FlagUse {
                flag: "--vary",
                problem: format!("variant [{}]: {why}", label.join(" ")),
            }
        })?;
        played += timeline(&s);
        reqs.push((settings, r));
    }
    crate::error::check_work(
        "whatif --vary",
        format!(
            "{} variants and the base, loaded, each timeline at its own ranks and batch{}",
            crate::units::grouped(n, 0),
            if draws > 0 {
                format!(" with {draws} interval draws")
            } else {
                String::new()
            },
        ),
        (n + 1.0) * per_variant + played,
        max_work,
        "shorten the lists or use --one-at-a-time",
    )?;
    let total = reqs.len() as u64 + 1;
    let base = simulate(&req.base)?;
    progress(1, total);
    let mut variants = Vec::with_capacity(reqs.len());
    for (i, (settings, r)) in reqs.into_iter().enumerate() {
        let v = simulate(&r)?;
        variants.push(compare(&base, &v, settings));
        progress(i as u64 + 2, total);
    }
    variants.sort_by(|a, b| b.tokens_per_s.total_cmp(&a.tokens_per_s));
    Ok(VaryStudy { base, variants })
}

/// The work of `n` variants and the base, `per_variant` each with `draws` interval draws,
/// bounded by `max_work` before anything is loaded.
fn check_listed_work(
    req: &VaryRequest,
    n: f64,
    draws: usize,
    per_variant: f64,
    max_work: u64,
) -> Result<()> {
    crate::error::check_work(
        "whatif --vary",
        format!(
            "{} variants and the base, each loaded and played as a full timeline{} ({})",
            if n < 1e15 {
                crate::units::grouped(n, 0)
            } else {
                format!("{n:.2e}")
            },
            if draws > 0 {
                format!(" with {draws} interval draws")
            } else {
                String::new()
            },
            if req.one_at_a_time {
                "the sum of the lists, --one-at-a-time"
            } else {
                "the product of the lists"
            }
        ),
        (n + 1.0) * per_variant,
        max_work,
        "shorten the lists or use --one-at-a-time",
    )
}

fn signed_us(v: f64) -> String {
    if v >= 0.0 {
        format!("+{}", crate::units::us(v))
    } else {
        format!("-{}", crate::units::us(-v))
    }
}

fn family_text(f: &(CostFamily, f64, usize, usize)) -> String {
    let counts = if f.2 != f.3 {
        format!(" ({} → {} ops)", f.2, f.3)
    } else {
        String::new()
    };
    format!("{} {}{}", f.0, signed_us(f.1), counts)
}

/// The text table: one line per variant, then its category shifts and top families.
pub fn table(s: &VaryStudy, top: usize) -> String {
    use std::fmt::Write;
    let b = &s.base;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "base: {} on {}, TP={}, batch {}, context {}: step {} µs, {:.1} tokens/s",
        b.scenario.model.name,
        b.scenario.system.name,
        b.scenario.layout.tp,
        b.scenario.batch,
        b.scenario.context,
        crate::units::us(b.step_time_us()),
        b.tokens_per_s()
    );
    let _ = writeln!(o, "variants, ranked by tokens/s (full timeline each):\n");
    let w = s
        .variants
        .iter()
        .map(|v| v.label().len())
        .max()
        .unwrap_or(7)
        .max(7);
    let _ = writeln!(
        o,
        "{:>4}  {:<w$}  {:>12}  {:>10}  {:>8}",
        "rank", "variant", "step µs", "tokens/s", "vs base"
    );
    for (i, v) in s.variants.iter().enumerate() {
        let _ = writeln!(
            o,
            "{:>4}  {:<w$}  {:>12}  {:>10.1}  {:>7.3}x",
            i + 1,
            v.label(),
            crate::units::us(v.step_time_us),
            v.tokens_per_s,
            v.tokens_per_s / b.tokens_per_s()
        );
    }
    let _ = writeln!(o, "\nwhat moved (variant − base, mean over ranks):");
    for v in &s.variants {
        let cats: Vec<String> = v
            .category_delta_us
            .iter()
            .filter(|(_, d)| d.abs() >= 0.05)
            .map(|(c, d)| format!("{} {}", c.name(), signed_us(*d)))
            .collect();
        let _ = writeln!(o, "  {}:", v.label());
        let _ = writeln!(
            o,
            "    categories: {}",
            if cats.is_empty() {
                "no change".into()
            } else {
                cats.join(", ")
            }
        );
        let fams: Vec<String> = v
            .family_delta_us
            .iter()
            .take(top)
            .map(family_text)
            .collect();
        if !fams.is_empty() {
            let _ = writeln!(o, "    top op families: {}", fams.join(", "));
        }
    }
    let mut warns: Vec<&String> = s.variants.iter().flat_map(|v| &v.warnings).collect();
    warns.sort();
    warns.dedup();
    let base_w: Vec<&String> = b.warnings.iter().collect();
    let new: Vec<&&String> = warns.iter().filter(|w| !base_w.contains(w)).collect();
    if !new.is_empty() {
        let _ = writeln!(o, "\nwarnings of the variants (beyond the base's):");
        for w in new {
            let _ = writeln!(o, "  - {w}");
        }
    }
    o
}

pub fn json(s: &VaryStudy) -> serde_json::Value {
    let b = &s.base;
    json!({
        "base": {
            "step_time_us": b.step_time_us(),
            "tokens_per_s": b.tokens_per_s(),
            "categories_us": Category::ALL.iter().map(|c| (c.name().to_string(), json!(b.mean.time(*c)))).collect::<serde_json::Map<_, _>>(),
        },
        "variants": s.variants.iter().map(|v| json!({
            "settings": v.settings.iter().map(|(k, x)| (k.clone(), json!(x))).collect::<serde_json::Map<_, _>>(),
            "step_time_us": v.step_time_us,
            "tokens_per_s": v.tokens_per_s,
            "speedup": v.tokens_per_s / b.tokens_per_s(),
            "category_delta_us": v.category_delta_us.iter().map(|(c, d)| (c.name().to_string(), json!(d))).collect::<serde_json::Map<_, _>>(),
            "family_delta_us": v.family_delta_us.iter().map(|f| json!({
                "family": f.0.key(), "delta_us": f.1, "ops_base": f.2, "ops_variant": f.3,
            })).collect::<Vec<_>>(),
            "warnings": v.warnings,
        })).collect::<Vec<_>>(),
    })
}

pub fn csv(s: &VaryStudy, top: usize) -> String {
    let b = &s.base;
    let keys: Vec<String> = s
        .variants
        .first()
        .map(|v| v.settings.iter().map(|(k, _)| k.clone()).collect())
        .unwrap_or_default();
    // Cartesian variants share their keys: one column each; one-at-a-time ones do not.
    let same_keys = s
        .variants
        .iter()
        .all(|v| v.settings.iter().map(|(k, _)| k).eq(keys.iter()));
    let mut o = String::new();
    let mut head: Vec<String> = if same_keys {
        keys.clone()
    } else {
        vec!["variant".into()]
    };
    head.extend(["step_time_us", "tokens_per_s", "speedup"].map(String::from));
    head.extend(
        Category::ALL
            .iter()
            .map(|c| format!("delta_{}_us", c.name())),
    );
    head.push("top_families".into());
    o.push_str(&head.join(","));
    o.push('\n');
    for v in &s.variants {
        let mut row: Vec<String> = if !same_keys {
            vec![v.label()]
        } else {
            v.settings.iter().map(|(_, x)| x.clone()).collect()
        };
        row.push(format!("{:.3}", v.step_time_us));
        row.push(format!("{:.3}", v.tokens_per_s));
        row.push(format!("{:.5}", v.tokens_per_s / b.tokens_per_s()));
        row.extend(v.category_delta_us.iter().map(|(_, d)| format!("{d:.3}")));
        let fams: Vec<String> = v
            .family_delta_us
            .iter()
            .take(top)
            .map(|f| format!("{}:{:.3}", f.0.key(), f.1))
            .collect();
        row.push(format!("\"{}\"", fams.join(" ")));
        o.push_str(&row.join(","));
        o.push('\n');
    }
    o
}
