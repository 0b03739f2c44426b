//! Fits a calibration profile to measurements, with confidence intervals and fit quality, and
//! refuses a profile whose fit is poor, unidentified or unphysical (unless told to write it
//! anyway, which marks the profile).

pub mod aiconfigurator;
pub mod anchor;
pub mod bench_serve;
mod collectives;
pub mod deepep_ll;
pub mod from_burst;
pub mod from_throughput;
pub mod from_trace;
mod kernels;
mod launch;
pub mod nccl_tests;
pub mod output;
pub mod regression;
pub mod serving;
mod transfer;
pub mod transfer_profile;

pub use output::{calibrate_dir, DirRequest};
pub(crate) use transfer::transfer;

use crate::cost::profile::{CalibrationProfile, CollectiveParams, KernelParams, ProfileMeta};
use crate::error::{Error, Result};
use crate::measurements::{KernelPoint, Measurements};
use crate::scenario::GpuSpec;
use crate::workload::CostFamily;
use serde::Serialize;
use std::collections::BTreeMap;

/// Fit quality of one profile section.
#[derive(Debug, Clone, Serialize)]
pub struct FitQuality {
    pub section: String,
    pub(crate) points: usize,
    /// (name, estimate, 95% CI half-width; 0 for a value held fixed)
    pub(crate) params: Vec<(String, f64, f64)>,
    /// Parameters whose interval must be narrower than the value (the law's rates: an
    /// efficiency or bandwidth known to no digit prices nothing).
    checked: Vec<String>,
    pub r2: f64,
    pub median_abs_rel_err: f64,
    pub(crate) max_abs_rel_err: f64,
    /// Physical limits the fitted values break.
    unphysical: Vec<String>,
    pub(crate) notes: Vec<String>,
}

/// Why a section fails the rules, split by whether a measurement table can excuse it.
#[derive(Debug, Clone, Default)]
struct Problems {
    /// The law misses the points (median error, R²): the table still prices measured shapes.
    misfit: Vec<String>,
    /// The values are not known or not physical: nothing excuses that.
    unidentified: Vec<String>,
}

impl Problems {
    fn is_empty(&self) -> bool {
        self.misfit.is_empty() && self.unidentified.is_empty()
    }
    fn all(&self) -> Vec<String> {
        self.unidentified
            .iter()
            .chain(&self.misfit)
            .cloned()
            .collect()
    }
}

impl FitQuality {
    /// The rules: the typical point within the limit; R² at least the minimum unless every point
    /// is close (over a nearly constant set of times R² says nothing); each checked parameter
    /// finite with a 95% interval narrower than itself; nothing unphysical.
    fn problems(&self, o: &FitOptions) -> Problems {
        let mut p = Problems::default();
        if !(self.median_abs_rel_err <= o.max_median_err) {
            p.misfit.push(format!(
                "median |rel err| {:.1}% > {:.0}%",
                self.median_abs_rel_err * 100.0,
                o.max_median_err * 100.0
            ));
        }
        if !self.r2.is_finite()
            || (self.r2 < o.min_r2 && self.max_abs_rel_err > 2.0 * o.max_median_err)
        {
            p.misfit.push(format!(
                "R² {:.3} < {:.2} with a point off by {:.0}%",
                self.r2,
                o.min_r2,
                self.max_abs_rel_err * 100.0
            ));
        }
        for (name, v, ci) in &self.params {
            if !v.is_finite() {
                p.unidentified.push(format!("{name} is {v}"));
            } else if self.checked.contains(name) && !(*ci <= v.abs()) {
                p.unidentified.push(format!(
                    "{name} {v:.4} ± {ci:.4}: the 95% interval is wider than the value"
                ));
            }
        }
        p.unidentified.extend(self.unphysical.iter().cloned());
        p
    }

    fn describe(&self, o: &FitOptions) -> String {
        format!(
            "{}: median |rel err| {:.1}% (limit {:.0}%), R² {:.3} (limit {:.2}), max |rel err| {:.0}% over {} points",
            self.section,
            self.median_abs_rel_err * 100.0,
            o.max_median_err * 100.0,
            self.r2,
            o.min_r2,
            self.max_abs_rel_err * 100.0,
            self.points
        )
    }
}

#[derive(Debug, Clone)]
pub struct CalibrationResult {
    pub profile: CalibrationProfile,
    pub quality: Vec<FitQuality>,
    pub(crate) warnings: Vec<String>,
    /// Sections whose fit broke the rules and which keep the fallback's values, with why.
    kept_fallback: Vec<String>,
}

/// How strict the fit is and what a poor section becomes.
#[derive(Debug, Clone)]
pub struct FitOptions {
    /// A section whose median |relative error| exceeds this (fraction) is poor.
    pub max_median_err: f64,
    /// A section below this R² with a point off by more than twice the limit is poor.
    pub min_r2: f64,
    /// The measurement table the profile will reference (path relative to the profile).
    pub table: Option<String>,
    /// The same table as the user named it (the measurements folder's `kernels.csv`), for
    /// messages: `table` is relative to the profile's folder, not to where the user stands.
    pub table_shown: Option<String>,
    /// Replace poor kernel sections by the fallback's instead of refusing (for transfers).
    pub keep_fallback_for_poor: bool,
    /// Write poor sections anyway, each marked in `[profile] poor_fit`.
    pub allow_poor_fit: bool,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions {
            max_median_err: 0.15,
            min_r2: 0.9,
            table: None,
            table_shown: None,
            keep_fallback_for_poor: false,
            allow_poor_fit: false,
        }
    }
}

impl FitOptions {
    /// Refuses limits that would switch the checks off (NaN compares false to everything).
    pub fn check(&self) -> Result<()> {
        let e = self.max_median_err;
        if !(e.is_finite() && e > 0.0 && e <= 10.0) {
            return Err(Error::Flag {
                flag: "--max-median-error",
                value: (e * 100.0).to_string(),
                expected: "expected a percentage above 0 and at most 1000".into(),
            });
        }
        if !(self.min_r2.is_finite() && (0.0..=1.0).contains(&self.min_r2)) {
            return Err(Error::Flag {
                flag: "--min-r2",
                value: self.min_r2.to_string(),
                expected: "expected a number from 0 to 1".into(),
            });
        }
        Ok(())
    }
}

/// What the verdicts leave: the sections to write, and what the report and profile must say.
struct Verdicts<'a> {
    o: &'a FitOptions,
    fallback: &'a CalibrationProfile,
    refused: Vec<String>,
    marks: Vec<String>,
    warnings: Vec<String>,
    kept_fallback: Vec<String>,
}

enum Verdict {
    Keep,
    Fallback,
    Drop,
}

impl Verdicts<'_> {
    /// Judges one fitted section; `has_fallback`: the fallback profile has this section.
    fn judge(&mut self, q: &mut FitQuality, has_fallback: bool, kernel: bool) -> Verdict {
        let p = q.problems(self.o);
        if p.is_empty() {
            return Verdict::Keep;
        }
        let why = p.all().join("; ");
        let desc = q.describe(self.o);
        if self.o.keep_fallback_for_poor && has_fallback {
            q.notes.push(format!(
                "poor fit ({why}): section kept from fallback '{}'",
                self.fallback.profile.name
            ));
            self.warnings
                .push(format!("{desc} ({why}; kept the fallback's section)"));
            self.kept_fallback.push(format!("{} ({why})", q.section));
            return Verdict::Fallback;
        }
        if let (true, Some(t), true) = (kernel, &self.o.table, p.unidentified.is_empty()) {
            q.notes
                .push("poor law fit: measured shapes priced from the table".into());
            self.warnings.push(format!(
                "{desc} (law fit poor; the measured shapes are priced from the table {}, other shapes extrapolate with this law)",
                self.o
                    .table_shown
                    .clone()
                    .unwrap_or_else(|| crate::units::path(std::path::Path::new(t)))
            ));
            return Verdict::Keep;
        }
        if self.o.allow_poor_fit {
            self.marks.push(format!("{}: {why}", q.section));
            self.warnings.push(format!(
                "{desc} (POOR: {why}; written because of --allow-poor-fit)"
            ));
            return Verdict::Keep;
        }
        self.refused.push(format!("{desc}: {why}"));
        Verdict::Drop
    }

    /// A section no law could be fitted to.
    fn unfittable(&mut self, section: &str, why: &str) {
        let msg = format!("{section}: {why}");
        if self.o.keep_fallback_for_poor || self.o.allow_poor_fit {
            self.warnings
                .push(format!("{msg} (kept the fallback's section)"));
            self.kept_fallback
                .push(format!("{section} (not fitted: {why})"));
            if self.o.allow_poor_fit {
                self.marks
                    .push(format!("{section}: not fitted ({why}); fallback kept"));
            }
        } else {
            self.refused.push(msg);
        }
    }
}

/// Fits every profile section the measurements cover; `fallback` supplies the sections they do
/// not (the provenance says which). A poor section is refused with every reason, unless the
/// options keep the fallback's or allow it (then marked in `[profile] poor_fit`).
pub fn calibrate(
    m: &Measurements,
    gpu: &GpuSpec,
    name: &str,
    fallback: &CalibrationProfile,
    o: &FitOptions,
) -> Result<CalibrationResult> {
    o.check()?;
    let mut v = Verdicts {
        o,
        fallback,
        refused: Vec::new(),
        marks: Vec::new(),
        warnings: Vec::new(),
        kept_fallback: Vec::new(),
    };
    let mut quality = Vec::new();
    let (kernels, fitted) = fit_kernels(m, gpu, fallback, &mut v, &mut quality);
    let collectives = fit_collectives(m, gpu, fallback, &mut v, &mut quality);
    if !v.refused.is_empty() {
        return Err(Error::CalibrationRefused {
            reason: format!(
                "poor fit in {} section(s) (write it anyway, marked, with --allow-poor-fit):\n  {}",
                v.refused.len(),
                v.refused.join("\n  ")
            ),
        });
    }
    let launch = launch::launch_params(m, fallback, kernels.get(&CostFamily::Elementwise));
    let variability = launch::variability(m, fallback);
    let not_fitted: Vec<String> = kernels
        .keys()
        .filter(|k| !fitted.contains(k))
        .map(|k| k.to_string())
        .collect();
    let profile = CalibrationProfile {
        profile: meta(m, gpu, name, fallback, &fitted, &not_fitted, v.marks),
        kernels,
        collectives,
        launch,
        variability,
        spec_decode: fallback.spec_decode.clone(),
        measurements: o.table.clone(),
        table_scales: Default::default(),
        fit: fit_records(&quality),
        factors: fallback.factors.clone(),
        aiconfigurator: None,
        custom_allreduce: fallback.custom_allreduce.clone(),
        custom_allreduce_pcie: fallback.custom_allreduce_pcie.clone(),
        fused_allreduce_rms: fallback.fused_allreduce_rms.clone(),
        transfer: None,
        measured_rules: None,
        deepep_ll: fallback.deepep_ll.clone(),
        nccl: fallback.nccl.clone(),
        path: Default::default(),
        table: None,
        aic: None,
    };
    Ok(CalibrationResult {
        profile,
        quality,
        warnings: v.warnings,
        kept_fallback: v.kept_fallback,
    })
}

/// The kernel sections: fitted where at least 3 points measure a family, judged, else the
/// fallback's. Returns the sections and which were fitted.
fn fit_kernels(
    m: &Measurements,
    gpu: &GpuSpec,
    fallback: &CalibrationProfile,
    v: &mut Verdicts,
    quality: &mut Vec<FitQuality>,
) -> (BTreeMap<CostFamily, KernelParams>, Vec<CostFamily>) {
    let mut by_family: BTreeMap<CostFamily, Vec<&KernelPoint>> = BTreeMap::new();
    for p in &m.kernels {
        by_family.entry(p.family.cost_family()).or_default().push(p);
    }
    let mut kernels = fallback.kernels.clone();
    let mut fitted = Vec::new();
    for (family, pts) in &by_family {
        if pts.len() < 3 {
            v.warnings.push(format!(
                "kernels.{family}: {} point(s), too few to fit; the fallback's section is kept",
                pts.len()
            ));
            continue;
        }
        let has_fallback = fallback.kernels.contains_key(family);
        match kernels::fit_family(*family, pts, gpu) {
            Ok((k, mut q)) => {
                if let Verdict::Keep = v.judge(&mut q, has_fallback, true) {
                    kernels.insert(*family, k);
                    fitted.push(*family);
                }
                quality.push(q);
            }
            Err(why) => v.unfittable(&format!("kernels.{family}"), &why),
        }
    }
    (kernels, fitted)
}

/// The collective entries: fitted where measured and judged; paths and protocols the
/// measurements do not cover keep the fallback's entries.
fn fit_collectives(
    m: &Measurements,
    gpu: &GpuSpec,
    fallback: &CalibrationProfile,
    v: &mut Verdicts,
    quality: &mut Vec<FitQuality>,
) -> Vec<CollectiveParams> {
    let (fits, cq, failed) = collectives::fit_all(&m.collectives, gpu.memory_bandwidth_gbps);
    let mut out = Vec::new();
    for (c, mut q) in fits.into_iter().zip(cq) {
        let has_fallback = fallback
            .collectives
            .iter()
            .any(|f| f.path == c.path && f.algo == c.algo && f.proto == c.proto);
        if let Verdict::Keep = v.judge(&mut q, has_fallback, false) {
            out.push(c);
        }
        quality.push(q);
    }
    for f in failed {
        v.unfittable(&f.section, &f.why);
    }
    for f in &fallback.collectives {
        if !out
            .iter()
            .any(|c| c.path == f.path && c.algo == f.algo && c.proto == f.proto)
        {
            out.push(f.clone());
        }
    }
    out
}

fn meta(
    m: &Measurements,
    gpu: &GpuSpec,
    name: &str,
    fallback: &CalibrationProfile,
    fitted: &[CostFamily],
    not_fitted: &[String],
    poor_fit: Vec<String>,
) -> ProfileMeta {
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
    ProfileMeta {
        name: name.to_string(),
        gpu: gpu.name.clone(),
        description: format!("fitted by `decodesim calibrate` from {}", m.dir.display()),
        created: output::today(),
        method: format!(
            "least squares (nalgebra) on {} kernel and {} collective measurements from {}; 95% CIs from Student's t (statrs); efficiencies held to at most 1. Data: {}",
            m.kernels.len(),
            m.collectives.len(),
            m.dir.display(),
            if manifest_first.is_empty() {
                "no MANIFEST.txt".into()
            } else {
                format!("{manifest_first} (see MANIFEST.txt)")
            }
        ),
        provenance: format!(
            "fitted: kernels {}; collectives fitted where measured; from fallback '{}': kernels {}{}",
            fitted.iter().map(|f| f.name()).collect::<Vec<_>>().join(", "),
            fallback.profile.name,
            if not_fitted.is_empty() {
                "none".into()
            } else {
                not_fitted.join(", ")
            },
            // When the measurements were taken (MANIFEST.txt); `created` is when the profile was.
            manifest_date(&m.manifest)
                .map(|d| format!("; measurements dated {d}"))
                .unwrap_or_default(),
        ),
        poor_fit,
    }
}

/// The `[fit.*]` tables: each section's quality and estimates with their intervals.
fn fit_records(quality: &[FitQuality]) -> BTreeMap<String, toml::Value> {
    let mut fit = BTreeMap::new();
    for q in quality {
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
        if !q.notes.is_empty() {
            t.insert(
                "notes".into(),
                toml::Value::Array(q.notes.iter().cloned().map(toml::Value::String).collect()),
            );
        }
        fit.insert(
            q.section.replace([' ', '/', '.'], "_"),
            toml::Value::Table(t),
        );
    }
    fit
}

/// The first ISO date (YYYY-MM-DD) in the manifest.
fn manifest_date(manifest: &str) -> Option<String> {
    let re = regex::Regex::new(r"\b(20\d\d-[01]\d-[0-3]\d)\b").expect("valid regex");
    re.captures(manifest).map(|c| c[1].to_string())
}
