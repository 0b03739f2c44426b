//! The model's error across step sizes on one GPU, from benchmark points of that GPU: how far a
//! whole step's price is from the measured step, as a function of the step's tokens.
//!
//! The per-family error (`model_error`) comes from traces, category by category, on the GPU the
//! traces were captured on. Where a GPU has only throughput points (a development set of
//! tokens/s at several concurrencies), the residuals say two things: their size (σ of
//! ln(measured / predicted)) and how alike they are at neighbouring step sizes (ρ, the
//! correlation between steps a factor 2 apart in tokens). Both matter: a throughput answer's
//! interval needs σ, and a speedup that compares a step of B tokens with one of (k+1)·B tokens
//! (speculative decoding's verify pass) needs how much of the error the two share; paired draws
//! of one multiplier would cancel it entirely.
//!
//! A draw is a Gaussian random walk over log2(tokens): one deviate per power of two, joined as
//! an AR(1) chain with correlation ρ per step, so the error at any two sizes correlates as
//! ρ^|log2(t1/t2)| and each has variance σ². Sizes between two powers of two take the
//! variance-preserving blend of their neighbours.

use super::draws::normal;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Where the bundled step errors live, under the data root: one file per GPU.
pub const STEP_ERROR_DIR: &str = "data/calibration/step_error";

/// Knots of the walk: powers of two from 1 to 2^20 tokens (a step beyond is held at the last).
pub(super) const KNOTS: usize = 21;

/// The model's error across step sizes on one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct StepError {
    /// The GPU (a file stem of `data/systems/gpus`) whose points measured it.
    pub gpu: String,
    /// σ of ln(measured / predicted) over the points (rms: the bias counts as error).
    pub sigma: f64,
    /// Correlation of the error between two steps a factor 2 apart in tokens.
    pub rho: f64,
    /// Points it rests on, and the tokens per step they span.
    pub points: usize,
    pub tokens: [f64; 2],
    /// The file it came from, for reports.
    pub path: PathBuf,
}

impl StepError {
    /// σ and ρ from (tokens per step, ln(measured / predicted)) residuals. Needs 3 points at 2
    /// or more step sizes; ρ is the mean product of neighbouring residuals (sorted by tokens)
    /// over σ², per doubling of the tokens between them, in [0, 0.99].
    pub fn fit(gpu: &str, residuals: &[(f64, f64)], path: &Path) -> Result<Self> {
        let mut r: Vec<(f64, f64)> = residuals
            .iter()
            .copied()
            .filter(|(t, e)| *t >= 1.0 && e.is_finite())
            .collect();
        r.sort_by(|a, b| a.0.total_cmp(&b.0));
        let sizes = r.windows(2).filter(|w| w[1].0 > w[0].0).count() + 1;
        if r.len() < 3 || sizes < 2 {
            return Err(Error::field(
                path,
                "points",
                format!(
                    "found {} point(s) at {sizes} step size(s), expected at least 3 points at 2 or more concurrencies to measure the error across step sizes",
                    r.len()
                ),
            ));
        }
        let var = r.iter().map(|(_, e)| e * e).sum::<f64>() / r.len() as f64;
        let sigma = var.sqrt();
        let (mut prod, mut gap, mut pairs) = (0.0, 0.0, 0usize);
        for w in r.windows(2) {
            if w[1].0 > w[0].0 {
                prod += w[0].1 * w[1].1;
                gap += (w[1].0 / w[0].0).log2();
                pairs += 1;
            }
        }
        let rho = if var > 0.0 && pairs > 0 && prod > 0.0 {
            let c = (prod / pairs as f64 / var).min(1.0);
            c.powf(pairs as f64 / gap).clamp(0.0, 0.99)
        } else {
            0.0
        };
        Ok(StepError {
            gpu: gpu.to_string(),
            sigma,
            rho,
            points: r.len(),
            tokens: [r[0].0, r[r.len() - 1].0],
            path: path.to_path_buf(),
        })
    }

    /// Reads and checks a step-error file; an error names the file and field.
    pub fn from_file(path: &Path) -> Result<Self> {
        let v: toml::Value = crate::files::read_toml(path, crate::files::InputKind::Profile)?;
        let step = v.get("step").and_then(|t| t.as_table()).ok_or_else(|| {
            Error::field(
                path,
                "step",
                "a table [step] with gpu, sigma, rho, points and tokens",
            )
        })?;
        let num = |k: &str| {
            step.get(k)
                .and_then(|x| x.as_float().or_else(|| x.as_integer().map(|i| i as f64)))
        };
        let gpu = step
            .get("gpu")
            .and_then(|x| x.as_str())
            .filter(|g| !g.trim().is_empty())
            .ok_or_else(|| {
                Error::field(
                    path,
                    "step.gpu",
                    "a GPU name (a file stem of data/systems/gpus)",
                )
            })?;
        let sigma = num("sigma")
            .filter(|x| x.is_finite() && (0.0..=super::model_error::MAX_LOG_SIGMA).contains(x))
            .ok_or_else(|| {
                Error::field(
                    path,
                    "step.sigma",
                    format!(
                        "a σ of ln(measured / predicted) in [0, {}]",
                        super::model_error::MAX_LOG_SIGMA
                    ),
                )
            })?;
        let rho = num("rho")
            .filter(|x| x.is_finite() && (0.0..1.0).contains(x))
            .ok_or_else(|| Error::field(path, "step.rho", "a correlation in [0, 1)"))?;
        let points = num("points")
            .filter(|x| *x >= 3.0 && x.fract() == 0.0)
            .ok_or_else(|| {
                Error::field(path, "step.points", "a whole number of points, at least 3")
            })?;
        let tokens = step
            .get("tokens")
            .and_then(|x| x.as_array())
            .and_then(|a| {
                let n: Vec<f64> = a
                    .iter()
                    .filter_map(|x| x.as_float().or_else(|| x.as_integer().map(|i| i as f64)))
                    .collect();
                (n.len() == 2 && n[0] >= 1.0 && n[0] <= n[1]).then(|| [n[0], n[1]])
            })
            .ok_or_else(|| {
                Error::field(
                    path,
                    "step.tokens",
                    "[low, high]: tokens per step, 1 <= low <= high",
                )
            })?;
        Ok(StepError {
            gpu: gpu.to_string(),
            sigma,
            rho,
            points: points as usize,
            tokens,
            path: path.to_path_buf(),
        })
    }

    /// Every step-error file under the data root, read once per process, in file-name order.
    pub fn bundled() -> Result<Vec<StepError>> {
        use std::collections::BTreeMap;
        use std::sync::{Mutex, OnceLock};
        static CACHE: OnceLock<Mutex<BTreeMap<PathBuf, Vec<StepError>>>> = OnceLock::new();
        let dir = crate::bundle::data_root().join(STEP_ERROR_DIR);
        let cache = CACHE.get_or_init(Default::default);
        if let Some(v) = cache.lock().ok().and_then(|c| c.get(&dir).cloned()) {
            return Ok(v);
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        let v = files
            .iter()
            .map(|f| Self::from_file(f))
            .collect::<Result<Vec<_>>>()?;
        if let Ok(mut c) = cache.lock() {
            c.insert(dir, v.clone());
        }
        Ok(v)
    }

    /// The text of a step-error file, provenance first.
    pub fn to_toml(&self, command: &str, how_points: &str, profile: &str) -> String {
        let q = |s: &str| toml::Value::String(s.to_string()).to_string();
        let mut out = String::new();
        out.push_str("# The model's error across step sizes on one GPU: ln(measured / predicted) of whole steps,\n");
        out.push_str("# its size (sigma) and its correlation between steps a factor 2 apart in tokens (rho).\n");
        out.push_str("# Intervals on this GPU draw it as a random walk over log2(tokens); a GPU with neither\n");
        out.push_str(
            "# its own file nor the per-family validation draws the widest file's, and says so.\n",
        );
        out.push_str("# Written by `decodesim calibrate --from-throughput ... --step-error`: do not edit by hand.\n\n");
        out.push_str("[provenance]\n");
        out.push_str(&format!("command = {}\n", q(command)));
        out.push_str(&format!("points = {}\n", q(how_points)));
        out.push_str(&format!("profile = {}\n", q(profile)));
        out.push_str(&format!(
            "how = {}\n\n",
            q("each point priced bottom-up (no factor fitted); sigma = rms of ln(measured / predicted); rho = mean product of neighbouring residuals (sorted by tokens per step) over sigma^2, per doubling of the tokens between them")
        ));
        out.push_str("[step]\n");
        out.push_str(&format!("gpu = {}\n", q(&self.gpu)));
        out.push_str(&format!("sigma = {:.4}\n", self.sigma));
        out.push_str(&format!("rho = {:.4}\n", self.rho));
        out.push_str(&format!("points = {}\n", self.points));
        out.push_str(&format!(
            "tokens = [{}, {}]\n",
            self.tokens[0], self.tokens[1]
        ));
        out
    }

    /// The walk's knots in draw `draw` under `seed`: ln multipliers at 1, 2, 4, ... tokens.
    pub(super) fn knots(&self, seed: u64, draw: u64) -> [f64; KNOTS] {
        let mut k = [0.0; KNOTS];
        let step = self.sigma * (1.0 - self.rho * self.rho).sqrt();
        for j in 0..KNOTS {
            let z = normal(seed, draw, &format!("model_step_{j}"));
            k[j] = if j == 0 {
                self.sigma * z
            } else {
                self.rho * k[j - 1] + step * z
            };
        }
        k
    }

    /// The step-time multiplier at `tokens` per step from a draw's knots.
    pub(super) fn multiplier(&self, knots: &[f64; KNOTS], tokens: f64) -> f64 {
        let x = tokens.max(1.0).log2().min((KNOTS - 1) as f64);
        let j = (x.floor() as usize).min(KNOTS - 2);
        let f = x - j as f64;
        let (a, b) = (1.0 - f, f);
        // a·X + b·Y with corr(X, Y) = ρ has variance σ²(a² + b² + 2abρ): rescaled to σ².
        let norm = (a * a + b * b + 2.0 * a * b * self.rho).sqrt().max(1e-12);
        ((a * knots[j] + b * knots[j + 1]) / norm).exp()
    }
}

/// The step error a scenario on `gpu` draws, and whose it is: the GPU's own; none on the GPU the
/// per-family error was validated on (`validated`); else, for a GPU with no validation of its
/// own, the widest file's, standing in.
pub(super) fn choose<'a>(
    steps: &'a [StepError],
    gpu: &str,
    validated: Option<&str>,
) -> Option<(&'a StepError, bool)> {
    if let Some(own) = steps.iter().find(|e| e.gpu == gpu) {
        return Some((own, false));
    }
    if validated == Some(gpu) {
        return None;
    }
    steps
        .iter()
        .max_by(|a, b| a.sigma.total_cmp(&b.sigma))
        .map(|e| (e, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(sigma: f64, rho: f64) -> StepError {
        StepError {
            gpu: "g".into(),
            sigma,
            rho,
            points: 8,
            tokens: [1.0, 128.0],
            path: PathBuf::from("t"),
        }
    }

    #[test]
    fn fit_recovers_size_and_correlation() {
        // Alike at neighbours: the same sign and size everywhere gives rho near 1.
        let r: Vec<(f64, f64)> = (0..8).map(|i| (2f64.powi(i), 0.1)).collect();
        let e = StepError::fit("g", &r, Path::new("p")).unwrap();
        assert!((e.sigma - 0.1).abs() < 1e-12 && e.rho > 0.98, "{e:?}");
        // Alternating signs: no shared error between neighbours.
        let r: Vec<(f64, f64)> = (0..8)
            .map(|i| (2f64.powi(i), if i % 2 == 0 { 0.2 } else { -0.2 }))
            .collect();
        let e = StepError::fit("g", &r, Path::new("p")).unwrap();
        assert!((e.sigma - 0.2).abs() < 1e-12 && e.rho == 0.0, "{e:?}");
        // Too few points, or one step size only, is refused by name.
        let one = [(4.0, 0.1), (4.0, 0.2), (4.0, 0.0)];
        let msg = StepError::fit("g", &one, Path::new("p"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("2 or more concurrencies"), "{msg}");
    }

    #[test]
    fn draws_have_the_stated_variance_and_correlation() {
        let e = err(0.2, 0.6);
        let n = 4000;
        let (mut s1, mut s4, mut s14, mut s3) = (0.0, 0.0, 0.0, 0.0);
        for i in 0..n {
            let k = e.knots(3, i);
            let (a, b) = (e.multiplier(&k, 1.0).ln(), e.multiplier(&k, 4.0).ln());
            let c = e.multiplier(&k, 3.0).ln();
            s1 += a * a;
            s4 += b * b;
            s14 += a * b;
            s3 += c * c;
        }
        let n = n as f64;
        let (v1, v4, v3) = (s1 / n, s4 / n, s3 / n);
        assert!((v1.sqrt() - 0.2).abs() < 0.01, "{v1}");
        assert!((v4.sqrt() - 0.2).abs() < 0.01, "{v4}");
        // Between knots too (3 tokens: between 2 and 4).
        assert!((v3.sqrt() - 0.2).abs() < 0.01, "{v3}");
        // Two doublings apart: rho^2.
        let corr = s14 / n / (v1 * v4).sqrt();
        assert!((corr - 0.36).abs() < 0.05, "{corr}");
        // Same seed and draw, same multiplier.
        assert_eq!(e.knots(3, 7), e.knots(3, 7));
    }

    #[test]
    fn a_gpu_takes_its_own_else_none_where_validated_else_the_widest() {
        let mut a = err(0.1, 0.5);
        a.gpu = "a".into();
        let mut b = err(0.3, 0.5);
        b.gpu = "b".into();
        let v = [a, b];
        assert_eq!(
            choose(&v, "a", Some("h")).map(|x| (x.0.gpu.as_str(), x.1)),
            Some(("a", false))
        );
        assert!(choose(&v, "h", Some("h")).is_none());
        assert_eq!(
            choose(&v, "z", Some("h")).map(|x| (x.0.gpu.as_str(), x.1)),
            Some(("b", true))
        );
        assert!(choose(&[], "z", None).is_none());
    }
}
