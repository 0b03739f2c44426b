//! Fits a calibration profile to measurements, with confidence intervals and fit quality, and
//! refuses a profile whose fit is poor.

pub mod anchor;

pub mod regression;

use crate::cost::profile::{
    CalibrationProfile, CollectiveParams, KernelParams, LaunchParams, ProfileMeta, Variability,
};
use crate::error::{Error, Result};
use crate::measurements::{KernelPoint, Measurements};
use crate::spec::GpuSpec;
use regression::{median, r_squared, weighted_least_squares};
use serde::Serialize;
use std::collections::BTreeMap;

/// Which profile section each harness kernel family calibrates.
pub fn profile_key(harness_family: &str) -> Option<&'static str> {
    Some(match harness_family {
        "gemm_bf16" => "gemm_bf16",
        "gemm_int4" => "gemm_int4",
        "gemm_fp8" => "gemm_fp8",
        "moe_grouped_bf16" => "moe_gemm_bf16",
        "moe_gemm_int4" => "moe_gemm_int4",
        "attention_mla_decode" => "attention_mla_decode",
        "attention_gqa_decode" => "attention_gqa_decode",
        "norm_rms" | "norm_fused_add_rms" => "norm",
        "act_silu_mul" | "rope" | "elementwise_add" => "elementwise",
        "kv_write" => "kv_write",
        "router_topk" => "router_topk",
        "moe_align" => "moe_align",
        "moe_sum" => "moe_sum",
        "sampling" => "sampling",
        "embedding" => "embedding",
        _ => return None,
    })
}

/// NCCL's base latency per protocol (facts.md §4.1, Ring), used when one rank count cannot
/// separate the base from the per-step latency.
fn nccl_base_us(proto: &str) -> f64 {
    match proto {
        "LL" => 6.6,
        "LL128" => 14.0,
        _ => 8.4,
    }
}

/// Fit quality of one profile section.
#[derive(Debug, Clone, Serialize)]
pub struct FitQuality {
    pub section: String,
    pub points: usize,
    /// (name, estimate, 95% CI half-width)
    pub params: Vec<(String, f64, f64)>,
    pub r2: f64,
    pub median_abs_rel_err: f64,
    pub max_abs_rel_err: f64,
    pub notes: Vec<String>,
}

impl FitQuality {
    /// Poor: the typical point misses by more than the limit, or the law explains little of
    /// the variation (low R²) while some point misses by more than twice the limit. (A low R²
    /// alone is no verdict: over a nearly constant set of times it says nothing.)
    pub fn is_poor(&self, max_median_err: f64, min_r2: f64) -> bool {
        self.median_abs_rel_err > max_median_err
            || (self.r2 < min_r2 && self.max_abs_rel_err > 2.0 * max_median_err)
    }
}

#[derive(Debug, Clone)]
pub struct CalibrationResult {
    pub profile: CalibrationProfile,
    pub quality: Vec<FitQuality>,
    pub warnings: Vec<String>,
}

/// The roofline law fitted as it is used: `t = a + max(b·tm, c·tc)` with `tm`, `tc` the
/// memory and compute times at 100% efficiency, so `b = 1/mem_eff`, `c = 1/compute_eff`.
/// Fitted by alternating between assigning each point to its bound and a weighted least
/// squares on relative error.
fn fit_kernel_family(
    key: &str,
    pts: &[&KernelPoint],
    gpu: &GpuSpec,
) -> Option<(KernelParams, FitQuality)> {
    let peak = if key.contains("fp8") {
        gpu.fp8_tflops
    } else {
        gpu.bf16_tflops
    } * 1e6;
    let bw = gpu.memory_bandwidth_gbps * 1e3;
    let tm: Vec<f64> = pts.iter().map(|p| p.bytes / bw).collect();
    let tc: Vec<f64> = pts.iter().map(|p| p.flops / peak).collect();
    let y: Vec<f64> = pts.iter().map(|p| p.median_us).collect();
    let w: Vec<f64> = y.iter().map(|t| 1.0 / (t * t)).collect();
    let mut mem_bound: Vec<bool> = tm.iter().zip(&tc).map(|(m, c)| m >= c).collect();
    let mut notes = Vec::new();
    let mut best = None;
    for _ in 0..20 {
        let any_mem = mem_bound.iter().any(|&b| b);
        let any_cmp = mem_bound.iter().any(|&b| !b);
        let x: Vec<Vec<f64>> = (0..pts.len())
            .map(|i| {
                let mut r = vec![1.0];
                if any_mem {
                    r.push(if mem_bound[i] { tm[i] } else { 0.0 });
                }
                if any_cmp {
                    r.push(if mem_bound[i] { 0.0 } else { tc[i] });
                }
                r
            })
            .collect();
        let fit = weighted_least_squares(&x, &y, &w)?;
        let a = fit.coef[0].max(0.0);
        let b = if any_mem { fit.coef[1] } else { f64::NAN };
        let c = if any_cmp {
            fit.coef[if any_mem { 2 } else { 1 }]
        } else {
            f64::NAN
        };
        let next: Vec<bool> = (0..pts.len())
            .map(|i| {
                let bm = if b.is_finite() && b > 0.0 {
                    b * tm[i]
                } else {
                    0.0
                };
                let bc = if c.is_finite() && c > 0.0 {
                    c * tc[i]
                } else {
                    0.0
                };
                bm >= bc
            })
            .collect();
        let stable = next == mem_bound;
        best = Some((a, b, c, fit));
        if stable {
            break;
        }
        mem_bound = next;
    }
    let (a, b, c, fit) = best?;
    let mem_eff = if b.is_finite() && b > 0.0 {
        1.0 / b
    } else {
        return None;
    };
    let compute_eff = if c.is_finite() && c > 0.0 {
        (1.0 / c).min(1.0)
    } else {
        notes.push("no compute-bound point: compute efficiency not identified, set to 1.0".into());
        1.0
    };
    let pred: Vec<f64> = (0..pts.len())
        .map(|i| a + (tm[i] / mem_eff).max(tc[i] / compute_eff))
        .collect();
    let mut rel: Vec<f64> = y
        .iter()
        .zip(&pred)
        .map(|(o, p)| ((p - o) / o).abs())
        .collect();
    let max_rel = rel.iter().copied().fold(0.0, f64::max);
    let med = median(&mut rel);
    let ci = |j: usize| fit.ci95.get(j).copied().unwrap_or(f64::NAN);
    // CI of an efficiency from the CI of its reciprocal (delta method).
    let mut params = vec![("fixed_us".to_string(), a, ci(0))];
    params.push(("mem_efficiency".into(), mem_eff, ci(1) * mem_eff * mem_eff));
    if c.is_finite() && c > 0.0 {
        params.push((
            "compute_efficiency".into(),
            compute_eff,
            ci(2) * compute_eff * compute_eff,
        ));
    }
    let ms: Vec<f64> = pts.iter().map(|p| p.m).collect();
    let bs: Vec<f64> = pts.iter().map(|p| p.bytes).collect();
    let range = |v: &[f64]| {
        [
            v.iter().copied().fold(f64::MAX, f64::min),
            v.iter().copied().fold(f64::MIN, f64::max),
        ]
    };
    let families: std::collections::BTreeSet<&str> =
        pts.iter().map(|p| p.family.as_str()).collect();
    let k = KernelParams {
        fixed_us: a,
        mem_efficiency: mem_eff,
        compute_efficiency: compute_eff,
        m_half: 0.0,
        source: format!(
            "fitted: {} points of {} (median |rel err| {:.1}%)",
            pts.len(),
            families.into_iter().collect::<Vec<_>>().join("+"),
            med * 100.0
        ),
        measured_m: if ms.iter().any(|&m| m > 0.0) {
            Some(range(&ms))
        } else {
            None
        },
        measured_bytes: Some(range(&bs)),
    };
    let q = FitQuality {
        section: format!("kernels.{key}"),
        points: pts.len(),
        params,
        r2: r_squared(&y, &pred),
        median_abs_rel_err: med,
        max_abs_rel_err: max_rel,
        notes,
    };
    Some((k, q))
}

fn fit_collectives(m: &Measurements) -> (Vec<CollectiveParams>, Vec<FitQuality>) {
    let mut groups: BTreeMap<
        (String, String, String, String),
        Vec<&crate::measurements::CollectivePoint>,
    > = BTreeMap::new();
    for p in &m.collectives {
        // Explicit protocols inside CUDA graphs are what the engine prices; NCCL's own choice
        // ("default") is kept for validation, and eager timings measure the host.
        if p.mode != "graph" || p.proto == "default" || p.nranks < 2 {
            continue;
        }
        let algo = if p.algo == "default" {
            "ring".to_string()
        } else {
            p.algo.to_ascii_lowercase()
        };
        let path = if p.p2p { "nvlink" } else { "host" };
        groups
            .entry((p.op.clone(), path.to_string(), algo, p.proto.clone()))
            .or_default()
            .push(p);
    }
    let mut out = Vec::new();
    let mut quality = Vec::new();
    for ((op, path, algo, proto), pts) in groups {
        let family = if op == "all_gather" {
            crate::workload::CostFamily::AllGather
        } else {
            crate::workload::CostFamily::AllReduce
        };
        let ranks: std::collections::BTreeSet<u32> = pts.iter().map(|p| p.nranks).collect();
        let several = ranks.len() > 1;
        let base = nccl_base_us(&proto);
        let steps = |n: u32| crate::cost::collective::steps(family, n);
        // t = base + hop·steps + (1/busbw)·bytes·steps/n  (tree all-reduce: bytes·2/busbw)
        let load = |p: &crate::measurements::CollectivePoint| {
            if algo == "tree" && family == crate::workload::CostFamily::AllReduce {
                2.0 * p.bytes / 1e3
            } else {
                p.bytes * steps(p.nranks) / p.nranks as f64 / 1e3
            }
        };
        let x: Vec<Vec<f64>> = pts
            .iter()
            .map(|p| {
                if several {
                    vec![1.0, steps(p.nranks), load(p)]
                } else {
                    vec![steps(p.nranks), load(p)]
                }
            })
            .collect();
        let y: Vec<f64> = pts
            .iter()
            .map(|p| {
                if several {
                    p.median_us
                } else {
                    p.median_us - base
                }
            })
            .collect();
        let w: Vec<f64> = pts
            .iter()
            .map(|p| 1.0 / (p.median_us * p.median_us))
            .collect();
        let Some(fit) = weighted_least_squares(&x, &y, &w) else {
            continue;
        };
        let (b, hop, inv_bw, ci_hop, ci_bw) = if several {
            (
                fit.coef[0],
                fit.coef[1],
                fit.coef[2],
                fit.ci95[1],
                fit.ci95[2],
            )
        } else {
            (base, fit.coef[0], fit.coef[1], fit.ci95[0], fit.ci95[1])
        };
        if inv_bw <= 0.0 {
            continue;
        }
        let (b, hop) = if hop < 0.0 {
            (b + hop * steps(*ranks.iter().next().unwrap()), 0.0)
        } else {
            (b, hop)
        };
        let params = CollectiveParams {
            op: op.clone(),
            path: path.clone(),
            algo: algo.clone(),
            proto: proto.clone(),
            base_us: b.max(0.0),
            hop_us: hop,
            bus_bw_gbps: 1.0 / inv_bw,
            source: format!(
                "fitted: {} in-graph points, {} ranks{}",
                pts.len(),
                ranks
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join("/"),
                if several {
                    ""
                } else {
                    "; base fixed to NCCL's baseLat (one rank count cannot separate it)"
                }
            ),
            measured_nranks: ranks.iter().copied().collect(),
            measured_bytes: Some([
                pts.iter().map(|p| p.bytes).fold(f64::MAX, f64::min),
                pts.iter().map(|p| p.bytes).fold(f64::MIN, f64::max),
            ]),
        };
        let obs: Vec<f64> = pts.iter().map(|p| p.median_us).collect();
        let pred: Vec<f64> = pts
            .iter()
            .map(|p| crate::cost::collective::time_us(&params, family, p.nranks, p.bytes as u64))
            .collect();
        let mut rel: Vec<f64> = obs
            .iter()
            .zip(&pred)
            .map(|(o, p)| ((p - o) / o).abs())
            .collect();
        let max_rel = rel.iter().copied().fold(0.0, f64::max);
        let bw = params.bus_bw_gbps;
        quality.push(FitQuality {
            section: format!("collectives {op}/{path}/{algo}/{proto}"),
            points: pts.len(),
            params: vec![
                (
                    "base_us".into(),
                    params.base_us,
                    if several { fit.ci95[0] } else { 0.0 },
                ),
                ("hop_us".into(), hop, ci_hop),
                ("bus_bw_gbps".into(), bw, ci_bw * bw * bw),
            ],
            r2: r_squared(&obs, &pred),
            median_abs_rel_err: median(&mut rel),
            max_abs_rel_err: max_rel,
            notes: vec![],
        });
        out.push(params);
    }
    (out, quality)
}

/// Fits every profile section the measurements cover. `fallback` supplies the sections they
/// do not (say which in the result's notes); a poor fit is an error naming the section.
/// How strict the fit is and what a poor section becomes.
#[derive(Debug, Clone)]
pub struct FitOptions {
    /// A section whose median |relative error| exceeds this (fraction) is poor.
    pub max_median_err: f64,
    /// A section below this R² with a point off by more than twice the limit is poor.
    pub min_r2: f64,
    /// The measurement table the profile will reference (path relative to the profile).
    pub table: Option<String>,
    /// Replace poor kernel sections by the fallback's instead of refusing (for transfers).
    pub keep_fallback_for_poor: bool,
}

pub fn calibrate(
    m: &Measurements,
    gpu: &GpuSpec,
    name: &str,
    fallback: &CalibrationProfile,
    opts: &FitOptions,
) -> Result<CalibrationResult> {
    let FitOptions {
        max_median_err,
        min_r2,
        ref table,
        keep_fallback_for_poor,
    } = *opts;
    let table = table.clone();
    let mut by_key: BTreeMap<&'static str, Vec<&KernelPoint>> = BTreeMap::new();
    let mut unknown = std::collections::BTreeSet::new();
    for p in &m.kernels {
        match profile_key(&p.family) {
            Some(k) => by_key.entry(k).or_default().push(p),
            None => {
                unknown.insert(p.family.clone());
            }
        }
    }
    let mut quality = Vec::new();
    let mut kernels = fallback.kernels.clone();
    let mut fitted_keys = Vec::new();
    for (key, pts) in &by_key {
        if pts.len() < 3 {
            continue;
        }
        let (k, q) = fit_kernel_family(key, pts, gpu).ok_or_else(|| {
            Error::Other(format!("calibration refused: kernels.{key}: the fit is singular or has no memory-bound term"))
        })?;
        kernels.insert(key.to_string(), k);
        fitted_keys.push(key.to_string());
        quality.push(q);
    }
    let (mut collectives, cq) = fit_collectives(m);
    quality.extend(cq);
    let describe = |q: &FitQuality| {
        format!(
                "{}: median |rel err| {:.1}% (limit {:.0}%), R² {:.3} (limit {:.2}), max |rel err| {:.0}% over {} points",
                q.section,
                q.median_abs_rel_err * 100.0,
                max_median_err * 100.0,
                q.r2,
                min_r2,
                q.max_abs_rel_err * 100.0,
                q.points
        )
    };
    // With a measurement table, the measured shapes are priced from the table itself, so a
    // kernel law that fits poorly only prices shapes nobody measured: it is kept, marked and
    // reported. Without a table, or for collectives, a poor fit is refused.
    let mut warnings = Vec::new();
    let mut poor = Vec::new();
    for q in quality
        .iter_mut()
        .filter(|q| q.is_poor(max_median_err, min_r2))
    {
        let key = q.section.strip_prefix("kernels.");
        match (key, &table) {
            (Some(key), _) if keep_fallback_for_poor && fallback.kernels.contains_key(key) => {
                kernels.insert(key.to_string(), fallback.kernels[key].clone());
                fitted_keys.retain(|k| k != key);
                q.notes.push(format!(
                    "poor law fit: section kept from fallback '{}'",
                    fallback.profile.name
                ));
                warnings.push(format!(
                    "{} (law fit poor; kept the fallback's section)",
                    describe(q)
                ));
            }
            (Some(key), Some(t)) => {
                let msg = format!(
                    "{} (law fit poor; the measured shapes are priced from the table {t}, other shapes extrapolate with this law)",
                    describe(q)
                );
                if let Some(k) = kernels.get_mut(key) {
                    k.source = format!(
                        "{}; POOR law fit: measured shapes priced from the table",
                        k.source
                    );
                }
                q.notes
                    .push("poor law fit: measured shapes priced from the table".into());
                warnings.push(msg);
            }
            _ => poor.push(describe(q)),
        }
    }
    if !poor.is_empty() {
        return Err(Error::Other(format!(
            "calibration refused: poor fit in {} section(s):\n  {}",
            poor.len(),
            poor.join("\n  ")
        )));
    }
    // Paths and protocols the measurements do not cover keep the fallback's entries.
    for f in &fallback.collectives {
        if !collectives
            .iter()
            .any(|c| c.path == f.path && c.algo == f.algo && c.proto == f.proto)
        {
            collectives.push(f.clone());
        }
    }
    // total = launch + kernels × per-kernel cost, per mode (chains of tiny kernels).
    let launch_fit = |mode: &str| {
        let pts: Vec<_> = m.launch.iter().filter(|l| l.mode == mode).collect();
        let x: Vec<Vec<f64>> = pts.iter().map(|l| vec![1.0, l.kernels]).collect();
        let y: Vec<f64> = pts.iter().map(|l| l.total_us).collect();
        let w: Vec<f64> = y.iter().map(|t| 1.0 / (t * t)).collect();
        weighted_least_squares(&x, &y, &w).map(|f| (f.coef[0].max(0.0), f.coef[1]))
    };
    let graph = launch_fit("graph");
    let eager = launch_fit("eager");
    // Kernel medians are per-call times of back-to-back in-graph replays, so they already hold
    // the kernel-to-kernel gap; only the part of the per-kernel chain cost beyond the smallest
    // measured kernel's fixed cost is left to the engine's gap.
    let elementwise_fixed = kernels
        .get("elementwise")
        .map(|k| k.fixed_us)
        .unwrap_or(0.0);
    let launch = LaunchParams {
        graph_launch_us: graph.map(|g| g.0).unwrap_or(fallback.launch.graph_launch_us),
        graph_kernel_gap_us: graph
            .map(|g| (g.1 - elementwise_fixed).max(0.0))
            .unwrap_or(fallback.launch.graph_kernel_gap_us),
        eager_launch_us: eager.map(|e| e.1).unwrap_or(fallback.launch.eager_launch_us),
        eager_kernel_gap_us: fallback.launch.eager_kernel_gap_us,
        graph_first_collective_us: first_collective_stall(m).unwrap_or(fallback.launch.graph_first_collective_us),
        source: match (graph, eager) {
            (Some(g), Some(e)) => format!(
                "{}; ",
                first_collective_stall(m)
                    .map(|s| format!("graph_first_collective_us measured: graph_overheads.csv, median over message sizes of the intercept of T(L) - T(0) = stall + L x t ({s:.2} us)"))
                    .unwrap_or_else(|| "graph_first_collective_us from the fallback".into())
            ) + &format!(
                "measured: launch.csv chains of tiny kernels, fitted total = launch + n x per-kernel: graph {:.2} us + {:.3} us/kernel (gap = per-kernel minus the elementwise fixed cost, {:.2} us), eager {:.2} us/kernel; eager gap from the fallback profile",
                g.0, g.1, elementwise_fixed, e.1
            ),
            _ => format!("from fallback profile '{}'", fallback.profile.name),
        },
    };
    let cvs: Vec<f64> = m
        .kernels
        .iter()
        .filter(|p| p.p90_us > p.p10_us)
        .map(|p| (p.p90_us - p.p10_us) / (2.0 * 1.2816 * p.median_us))
        .collect();
    let variability = if cvs.is_empty() {
        fallback.variability.clone()
    } else {
        let mut c = cvs.clone();
        Variability {
            kernel_cv: median(&mut c).min(0.3),
            rank_skew_cv: fallback.variability.rank_skew_cv,
            collective_cv: fallback.variability.collective_cv,
            launch_skew_us: launch_skew(m).unwrap_or(fallback.variability.launch_skew_us),
            source: format!(
                "kernel_cv measured: median over {} kernels of (p90 - p10) / (2 x 1.2816 x median); {}; rank skew and collective cv from the fallback",
                cvs.len(),
                launch_skew(m)
                    .map(|s| format!("launch_skew_us measured: launch_skew.csv median first-collective wait / (n/(n+1) - 1/2) = {s:.2} us"))
                    .unwrap_or_else(|| "launch_skew_us from the fallback".into())
            ),
        }
    };
    let manifest_first = m
        .manifest
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty()
                && l.chars().any(|c| c.is_alphanumeric())
                && !l.starts_with(['=', '#', '-'])
        })
        .take(3)
        .collect::<Vec<_>>()
        .join("; ");
    let mut fit = BTreeMap::new();
    for q in &quality {
        let mut t = toml::map::Map::new();
        t.insert("points".into(), toml::Value::Integer(q.points as i64));
        t.insert("r2".into(), toml::Value::Float(q.r2));
        t.insert(
            "median_abs_rel_err".into(),
            toml::Value::Float(q.median_abs_rel_err),
        );
        t.insert(
            "max_abs_rel_err".into(),
            toml::Value::Float(q.max_abs_rel_err),
        );
        for (n, v, ci) in &q.params {
            t.insert(n.clone(), toml::Value::Float(*v));
            t.insert(
                format!("{n}_ci95"),
                toml::Value::Float(if ci.is_finite() { *ci } else { -1.0 }),
            );
        }
        fit.insert(
            q.section.replace([' ', '/', '.'], "_"),
            toml::Value::Table(t),
        );
    }
    let not_fitted: Vec<String> = kernels
        .keys()
        .filter(|k| !fitted_keys.contains(k))
        .cloned()
        .collect();
    let profile = CalibrationProfile {
        profile: ProfileMeta {
            name: name.to_string(),
            gpu: gpu.name.clone(),
            description: format!("fitted by `decodesim calibrate` from {}", m.dir.display()),
            created: manifest_date(&m.manifest).unwrap_or_else(|| "unknown".into()),
            method: format!(
                "least squares (nalgebra) on {} kernel and {} collective measurements from {}; 95% CIs from Student's t (statrs). Data: {}",
                m.kernels.len(),
                m.collectives.len(),
                m.dir.display(),
                if manifest_first.is_empty() { "no MANIFEST.txt".into() } else { format!("{manifest_first} (see MANIFEST.txt)") }
            ),
            provenance: format!(
                "fitted: kernels {}; collectives fitted where measured; from fallback '{}': kernels {}{}",
                fitted_keys.join(", "),
                fallback.profile.name,
                if not_fitted.is_empty() { "none".into() } else { not_fitted.join(", ") },
                if unknown.is_empty() { String::new() } else { format!("; harness families not used: {}", unknown.into_iter().collect::<Vec<_>>().join(", ")) }
            ),
        },
        kernels,
        collectives,
        launch,
        variability,
        spec_decode: fallback.spec_decode.clone(),
        measurements: table,
        fit,
        path: Default::default(),
        table: None,
    };
    Ok(CalibrationResult {
        profile,
        quality,
        warnings,
    })
}

/// The first ISO date (YYYY-MM-DD) in the manifest.
fn manifest_date(manifest: &str) -> Option<String> {
    let re = regex::Regex::new(r"\b(20\d\d-[01]\d-[0-3]\d)\b").expect("valid regex");
    re.captures(manifest).map(|c| c[1].to_string())
}

/// Turns a profile fitted on `measured` into one for `target`: fitted kernel sections become
/// "transferred" (efficiencies are fractions of each GPU's own peak), estimate sections and the
/// collectives of paths the measured machine does not share come from `fallback` (the target's
/// own profile), and the measured host path (P2P off) is kept as the closest stand-in for the
/// target's.
pub fn transfer(
    p: &mut CalibrationProfile,
    fallback: &CalibrationProfile,
    measured: &GpuSpec,
    target: &GpuSpec,
) {
    for (key, k) in p.kernels.iter_mut() {
        if k.source.starts_with("fitted") {
            k.source = format!("transferred from the {} fit ({})", measured.name, k.source);
            // The measured M and byte ranges describe another GPU's runs.
            k.measured_m = None;
            k.measured_bytes = None;
        } else if let Some(f) = fallback.kernels.get(key) {
            *k = f.clone();
        }
    }
    let target_has_nvlink = target.nvlink;
    let mut collectives: Vec<CollectiveParams> = fallback
        .collectives
        .iter()
        .filter(|c| c.path != "host")
        .cloned()
        .collect();
    for c in &p.collectives {
        if c.path == "host" && c.source.starts_with("fitted") {
            let mut c = c.clone();
            c.source = format!(
                "transferred from {} with NCCL_P2P_DISABLE=1 (host-memory path), the closest measured stand-in ({})",
                measured.name, c.source
            );
            collectives.push(c);
        } else if c.path == "nvlink"
            && target_has_nvlink
            && !collectives.iter().any(|x| x.path == "nvlink")
        {
            collectives.push(c.clone());
        }
    }
    if !collectives.iter().any(|c| c.path == "host") {
        collectives.extend(
            fallback
                .collectives
                .iter()
                .filter(|c| c.path == "host")
                .cloned(),
        );
    }
    p.collectives = collectives;
    // Speculative-decoding host costs are estimates of the target's own software stack.
    if fallback.spec_decode.is_some() {
        p.spec_decode = fallback.spec_decode.clone();
    }
    p.launch.source = format!("transferred from {}: {}", measured.name, p.launch.source);
    p.variability.source = format!(
        "transferred from {}: {}",
        measured.name, p.variability.source
    );
    p.profile.gpu = target.name.clone();
    p.profile.description = format!(
        "{}: kernel efficiencies transferred from the {} fit; collectives from '{}' where the target has its own",
        target.display_name, measured.name, fallback.profile.name
    );
    p.profile.provenance = format!(
        "transferred from {} measurements: kernel efficiencies and fixed costs, launch costs, kernel jitter, host-path collectives; from '{}' ({}): the rest",
        measured.name, fallback.profile.name, fallback.profile.provenance
    );
    p.fit.clear();
}

/// The stall before a graph replay's first collective: per message size, the intercept of
/// T(L) − T(0) = stall + L·t over the graphs with L ≥ 1 collectives; the median over sizes.
fn first_collective_stall(m: &Measurements) -> Option<f64> {
    let mut sizes: Vec<f64> = m.graph_overheads.iter().map(|p| p.bytes).collect();
    sizes.sort_by(|a, b| a.total_cmp(b));
    sizes.dedup();
    let mut stalls = Vec::new();
    for b in sizes {
        let pts: Vec<_> = m.graph_overheads.iter().filter(|p| p.bytes == b).collect();
        let base = pts.iter().find(|p| p.collectives == 0.0)?.median_us;
        let with: Vec<_> = pts.iter().filter(|p| p.collectives > 0.0).collect();
        let x: Vec<Vec<f64>> = with.iter().map(|p| vec![1.0, p.collectives]).collect();
        let y: Vec<f64> = with.iter().map(|p| p.median_us - base).collect();
        if let Some(f) = weighted_least_squares(&x, &y, &vec![1.0; y.len()]) {
            stalls.push(f.coef[0].max(0.0));
        }
    }
    (!stalls.is_empty()).then(|| median(&mut stalls))
}

/// Launch skew from the median first-collective wait: with starts uniform in [0, S], a rank
/// waits S·(n/(n+1) − 1/2) on average.
fn launch_skew(m: &Measurements) -> Option<f64> {
    let p = m.launch_skew.first()?;
    let n = p.nranks as f64;
    (n > 1.0).then(|| p.median_first_wait_us / (n / (n + 1.0) - 0.5))
}
