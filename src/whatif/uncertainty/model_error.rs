//! Where the spreads come from: the model-error file, the profile's fitted factor intervals and
//! table errors, the FP8 transfer's bounds.

use super::{Effect, Source, Target, FACTOR_EFFECTS, MLA, MODEL_FAMILIES, Z975};
use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::scenario::Scenario;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// An FP8 cache's MLA attention on a GPU whose own FP8 attention is unmeasured is priced at the
/// BF16 price (`cost::kv_dtype`); what it really costs lies between the byte-halved law (at
/// most half the BF16 time: only the cache's bytes halve) and the FP8/BF16 ratio measured on the
/// H200 at this shape. Those two bound the draw's 95% interval.
pub(super) fn fp8_transfer_source(s: &Scenario) -> Option<Source> {
    if s.kv_bytes != 1.0 || s.model.mla.is_none() {
        return None;
    }
    let t = crate::cost::kv_dtype::KvDtypeRatios::bundled().ok()?;
    if t.applies_to(&s.system.gpu.compute_capability) {
        return None;
    }
    let heads = (s.model.num_heads / s.layout.tp as usize).max(1) as u64;
    let hi = t
        .fp8_over_bf16(heads, s.rank_batch() as f64, s.context as f64)
        .value
        .max(1.0);
    let lo = 0.5_f64;
    Some(Source {
        name: "fp8_kv_transfer".into(),
        provenance: format!(
            "FP8 KV attention unmeasured on {}: between the byte-halved law (x{lo}) and the H200's FP8/BF16 ratio (x{hi:.2})",
            s.system.gpu.name
        ),
        target: Target::Families(MLA.to_vec()),
        mu: (lo.ln() + hi.ln()) / 2.0,
        sigma: (hi.ln() - lo.ln()) / (2.0 * Z975),
        log: true,
    })
}

/// Where the bundled model-form error lives, under the data root.
pub const MODEL_ERROR_FILE: &str = "data/calibration/model_error.toml";

/// Largest σ of ln(measured / predicted) a model-error file may state (a factor e^2 ≈ 7.4 at
/// one σ: beyond it the family is not modelled at all).
pub(super) const MAX_LOG_SIGMA: f64 = 2.0;
/// Largest idle σ a model-error file may state, µs per pass.
pub(super) const MAX_IDLE_SIGMA_US: f64 = 100_000.0;

/// The model's own error: how far its prices are from measured ones, per family, beyond what the
/// tables and fitted factors say. Read from `data/calibration/model_error.toml`, which
/// `decodesim validate --write-model-error` writes from the validation's residuals.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelError {
    /// σ of ln(measured / predicted) per family of [`MODEL_FAMILIES`] (absent: not drawn).
    pub sigma: BTreeMap<String, f64>,
    /// σ of the idle per pass the model lacks, µs.
    pub idle_sigma_us: f64,
    /// The file it came from, for reports.
    pub path: PathBuf,
    /// The GPU (a file stem of `data/systems/gpus`) the validation ran on: a scenario on it
    /// draws these families' errors, and no whole-step error unless it has its own.
    pub gpu: Option<String>,
    /// The whole-step errors measured from throughput points, one per GPU
    /// (`data/calibration/step_error/`).
    pub steps: Vec<super::StepError>,
}

impl ModelError {
    /// Reads and checks a model-error file; an error names the file and field.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let v: toml::Value = crate::files::read_toml(path, crate::files::InputKind::Profile)?;
        let mut out = ModelError {
            path: path.to_path_buf(),
            ..Default::default()
        };
        let num = |x: &toml::Value| x.as_float().or_else(|| x.as_integer().map(|i| i as f64));
        let sigma = v.get("sigma").and_then(|t| t.as_table()).ok_or_else(|| {
            Error::field(
                path,
                "sigma",
                "a table [sigma] of family = σ of ln(measured / predicted)",
            )
        })?;
        for (name, x) in sigma {
            if !MODEL_FAMILIES.iter().any(|f| f.0 == name) {
                return Err(Error::field(
                    path,
                    format!("sigma.{name}"),
                    format!(
                        "a family of the model-form error: {}",
                        MODEL_FAMILIES
                            .iter()
                            .map(|f| f.0)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
            match num(x) {
                Some(sd) if sd.is_finite() && (0.0..=MAX_LOG_SIGMA).contains(&sd) => {
                    out.sigma.insert(name.clone(), sd);
                }
                _ => {
                    return Err(Error::field(
                        path,
                        format!("sigma.{name}"),
                        format!("found {x}, expected a σ of ln(measured / predicted) in [0, {MAX_LOG_SIGMA}]"),
                    ))
                }
            }
        }
        if let Some(g) = v.get("provenance").and_then(|t| t.get("gpu")) {
            match g.as_str().filter(|g| !g.trim().is_empty()) {
                Some(g) => out.gpu = Some(g.to_string()),
                None => {
                    return Err(Error::field(
                        path,
                        "provenance.gpu",
                        format!("found {g}, expected the GPU the validation ran on (a file stem of data/systems/gpus)"),
                    ))
                }
            }
        }
        if let Some(x) = v.get("idle").and_then(|t| t.get("sigma_us")) {
            match num(x) {
                Some(sd) if sd.is_finite() && (0.0..=MAX_IDLE_SIGMA_US).contains(&sd) => {
                    out.idle_sigma_us = sd;
                }
                _ => {
                    return Err(Error::field(
                        path,
                        "idle.sigma_us",
                        format!("found {x}, expected µs in [0, {MAX_IDLE_SIGMA_US}]"),
                    ))
                }
            }
        }
        Ok(out)
    }

    /// The bundled file (`data/calibration/model_error.toml` under the data root), read once
    /// per process.
    pub fn bundled() -> Result<Self> {
        static CACHE: OnceLock<Mutex<BTreeMap<PathBuf, ModelError>>> = OnceLock::new();
        let path = crate::bundle::data_root().join(MODEL_ERROR_FILE);
        let cache = CACHE.get_or_init(Default::default);
        if let Some(v) = cache.lock().ok().and_then(|c| c.get(&path).cloned()) {
            return Ok(v);
        }
        if !path.is_file() {
            return Err(Error::field(
                &path,
                "model_error",
                "missing: every interval draws the model's own error from this file (`decodesim validate --write-model-error FILE` writes it; the bundled data holds one); pass --draws 0 for points",
            ));
        }
        let mut v = Self::from_file(&path)?;
        v.steps = super::StepError::bundled()?;
        if let Ok(mut c) = cache.lock() {
            c.insert(path, v.clone());
        }
        Ok(v)
    }

    /// The whole-step error a scenario on `gpu` draws, and whether it stands in for a GPU with
    /// no validation of its own (`step_error::choose`).
    pub(super) fn step_for(&self, gpu: &str) -> Option<(&super::StepError, bool)> {
        super::step_error::choose(&self.steps, gpu, self.gpu.as_deref())
    }

    /// Its sources: one lognormal multiplier per family with a σ, and the idle per pass.
    pub(super) fn sources(&self) -> Vec<Source> {
        let file = crate::units::path(&self.path);
        let mut out = Vec::new();
        for (name, fams) in MODEL_FAMILIES {
            let Some(&sigma) = self.sigma.get(*name) else {
                continue;
            };
            if sigma > 0.0 {
                out.push(Source {
                    name: format!("model_{name}"),
                    provenance: format!(
                        "{file}: the model's own error on {name} prices, rms of ln(measured/predicted) over the validation {sigma:.4}"
                    ),
                    target: Target::Families(fams.to_vec()),
                    mu: 0.0,
                    sigma,
                    log: true,
                });
            }
        }
        if self.idle_sigma_us > 0.0 {
            out.push(Source {
                name: "model_idle".into(),
                provenance: format!(
                    "{file}: the idle per step no op prices (launch stalls, host gaps), rms of measured minus predicted {:.1} µs",
                    self.idle_sigma_us
                ),
                target: Target::Idle,
                mu: 0.0,
                sigma: self.idle_sigma_us,
                log: false,
            });
        }
        out
    }
}

/// Interpolation errors per AIConfigurator table folder, computed once per process.
pub(super) fn table_errors(p: &CalibrationProfile) -> BTreeMap<&'static str, f64> {
    static CACHE: OnceLock<Mutex<BTreeMap<PathBuf, BTreeMap<&'static str, f64>>>> = OnceLock::new();
    let Some(t) = &p.aic else {
        return BTreeMap::new();
    };
    let cache = CACHE.get_or_init(Default::default);
    if let Some(v) = cache.lock().ok().and_then(|c| c.get(&t.dir).cloned()) {
        return v;
    }
    let v = t.interpolation_rms_log_error();
    if let Ok(mut c) = cache.lock() {
        c.insert(t.dir.clone(), v.clone());
    }
    v
}

/// The factor intervals a profile states: `<factor>_ci95 = [lo, hi]` in any `[fit.*]` table.
pub(super) fn factor_intervals(p: &CalibrationProfile) -> Result<BTreeMap<String, [f64; 2]>> {
    let mut out = BTreeMap::new();
    for (section, t) in &p.fit {
        let Some(t) = t.as_table() else { continue };
        for (name, _) in FACTOR_EFFECTS {
            let key = format!("{name}_ci95");
            let Some(v) = t.get(&key) else { continue };
            let field = format!("fit.{section}.{key}");
            let bad = |found: String| {
                Error::field(
                    &p.path,
                    &field,
                    format!("found {found}, expected [low, high]: two finite numbers, low <= high"),
                )
            };
            let arr = v.as_array().ok_or_else(|| bad(v.to_string()))?;
            let num = |x: &toml::Value| x.as_float().or_else(|| x.as_integer().map(|i| i as f64));
            let (lo, hi) = match arr.as_slice() {
                [a, b] => match (num(a), num(b)) {
                    (Some(lo), Some(hi)) => (lo, hi),
                    _ => return Err(bad(v.to_string())),
                },
                _ => return Err(bad(v.to_string())),
            };
            if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
                return Err(bad(format!("[{lo}, {hi}]")));
            }
            let scale = !matches!(
                FACTOR_EFFECTS.iter().find(|f| f.0 == *name).map(|f| f.1),
                Some(Effect::StepOverhead | Effect::Routing)
            );
            if scale && lo <= 0.0 {
                return Err(Error::field(
                    &p.path,
                    &field,
                    format!("found [{lo}, {hi}], expected a scale's interval: 0 < low <= high"),
                ));
            }
            out.insert(name.to_string(), [lo, hi]);
        }
    }
    Ok(out)
}

/// A factor's value in the profile, by name (0 or 1 for an absent one: no change).
pub(super) fn factor_value(p: &CalibrationProfile, name: &str) -> Option<f64> {
    let v = toml::Value::try_from(&p.factors).ok()?;
    let x = v.get(name)?;
    x.as_float().or_else(|| x.as_integer().map(|i| i as f64))
}
