//! The fitted profile: its factors, provenance and fit table, written as a TOML file.

use super::factors::Factor;
use super::{FittedFactor, Residual, ThroughputFit, ThroughputRequest};
use crate::calibrate::output::{table_reference, write_profile};
use crate::cost::profile::Factors;
use crate::cost::CalibrationProfile;
use crate::error::Result;
use std::path::Path;

/// Points a copy of `base` written to `out` at the files `base` references relative to itself
/// (its measurement table, its AIConfigurator tables), so the copy loads from anywhere.
pub(crate) fn relocate(p: &mut CalibrationProfile, base: &CalibrationProfile, out: &Path) {
    if let Some(tab) = &base.table {
        p.measurements = Some(table_reference(&tab.path, out));
    }
    let dir = base.path.parent().unwrap_or(Path::new("."));
    if let (Some(a), Some(b)) = (p.aiconfigurator.as_mut(), base.aiconfigurator.as_ref()) {
        let abs = dir.join(&b.tables);
        a.tables = abs.canonicalize().unwrap_or(abs).display().to_string();
    }
}

/// The inputs named in messages and provenance: the points' files, else the request's source.
pub(super) fn sources_text(req: &ThroughputRequest) -> String {
    let mut files: Vec<&Path> = Vec::new();
    for p in &req.points {
        let f: &Path = if p.file.as_os_str().is_empty() {
            &req.source
        } else {
            &p.file
        };
        if !files.contains(&f) {
            files.push(f);
        }
    }
    if files.is_empty() {
        files.push(&req.source);
    }
    files
        .iter()
        .map(|f| crate::units::path(f))
        .collect::<Vec<_>>()
        .join(" ")
}

pub(super) fn write_fitted(
    req: &ThroughputRequest,
    base: &CalibrationProfile,
    mut factors: Factors,
    fitted: &[FittedFactor],
    refused: &[(Factor, String)],
    residuals: &[Residual],
    poor: Option<String>,
) -> Result<CalibrationProfile> {
    let src = sources_text(req);
    let points: Vec<String> = req
        .points
        .iter()
        .map(|p| format!("{} ({})", p.label(), p.origin(&req.source)))
        .collect();
    factors.source = factors_source(&src, base, fitted, &points);
    let mut p = base.clone();
    p.factors = factors;
    p.profile.poor_fit.extend(poor);
    describe(&mut p, req, base, fitted.len(), refused, &src, &points);
    p.fit.insert(
        "from_throughput".into(),
        toml::Value::Table(fit_table(fitted, residuals)),
    );
    relocate(&mut p, base, &req.out);
    let header = format!(
        "# Written by `decodesim calibrate --from-throughput {src}` from profile '{}'.\n# {}",
        base.profile.name, p.factors.source
    );
    write_profile(&req.out, &header, &p)?;
    Ok(p)
}

/// The factors' source line: the inputs, the base, the values fitted and the points.
fn factors_source(
    src: &str,
    base: &CalibrationProfile,
    fitted: &[FittedFactor],
    points: &[String],
) -> String {
    let fitted_text: Vec<String> = fitted
        .iter()
        .map(|f| {
            format!(
                "{} = {:.4} [95% {:.4}, {:.4}]",
                f.factor.name(),
                f.value,
                f.ci95[0],
                f.ci95[1]
            )
        })
        .collect();
    format!(
        "calibrate --from-throughput {src} on profile '{}': {}; fitted on {} point(s): {}",
        base.profile.name,
        fitted_text.join(", "),
        points.len(),
        points.join("; ")
    )
}

/// The written profile's name, description, method and provenance (`fitted` factors fitted,
/// `refused` not).
fn describe(
    p: &mut CalibrationProfile,
    req: &ThroughputRequest,
    base: &CalibrationProfile,
    fitted: usize,
    refused: &[(Factor, String)],
    src: &str,
    points: &[String],
) {
    p.profile.name = req.name.clone().unwrap_or_else(|| {
        req.out
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "from-throughput".into())
    });
    p.profile.description = format!(
        "profile '{}' with end-to-end factors fitted to {src}",
        base.profile.name
    );
    p.profile.method = format!(
        "Levenberg-Marquardt least squares on ln(predicted/measured tokens/s) over the simulator (forward-difference Jacobian), reweighted to Huber's loss (c = 1.345 robust standard deviations), 95% CIs from Student's t (statrs) with {} dof; {}",
        req.points.len() - fitted,
        base.profile.method
    );
    p.profile.provenance = format!(
        "{}; factors fitted by calibrate --from-throughput on {} point(s) of {src}: {}{}",
        base.profile.provenance,
        points.len(),
        points.join("; "),
        if refused.is_empty() {
            String::new()
        } else {
            format!(
                "; not fitted: {}",
                refused
                    .iter()
                    .map(|(f, why)| format!("{} ({why})", f.name()))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        }
    );
}

/// The profile's `[fit.from_throughput]`: the points, each factor with its interval, and the
/// residuals with their weights.
fn fit_table(
    fitted: &[FittedFactor],
    residuals: &[Residual],
) -> toml::map::Map<String, toml::Value> {
    let mut t = toml::map::Map::new();
    t.insert(
        "points".into(),
        toml::Value::Integer(residuals.len() as i64),
    );
    for f in fitted {
        t.insert(f.factor.name().into(), toml::Value::Float(f.value));
        t.insert(
            format!("{}_ci95", f.factor.name()),
            toml::Value::Array(vec![
                toml::Value::Float(f.ci95[0]),
                toml::Value::Float(f.ci95[1]),
            ]),
        );
    }
    t.insert(
        "rel_err".into(),
        toml::Value::Array(
            residuals
                .iter()
                .map(|r| toml::Value::Float(r.rel_err))
                .collect(),
        ),
    );
    t.insert(
        "weight".into(),
        toml::Value::Array(
            residuals
                .iter()
                .map(|r| toml::Value::Float(r.weight))
                .collect(),
        ),
    );
    t.insert(
        "rms_rel_err".into(),
        toml::Value::Float(ThroughputFit::rms_rel_err(residuals)),
    );
    t
}
