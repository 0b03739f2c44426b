//! `calibrate --from-throughput`: factors fitted to measured throughput points, or with
//! `--step-error` the model's error across step sizes; each with its text.

use super::CalibrateArgs;
use crate::calibrate::from_throughput::{
    fit_throughput_with, read_inputs, Point, ThroughputFit, ThroughputLimits, ThroughputRequest,
};
use crate::cli::print;
use crate::error::Result;
use crate::whatif::uncertainty::StepError;
use std::path::PathBuf;

pub(super) fn from_throughput(a: &CalibrateArgs) -> Result<()> {
    let files = &a.from_throughput;
    let points = read_inputs(
        files,
        &crate::calibrate::bench_serve::BenchOptions {
            metric: a.bench_metric,
            serving: a.serving,
        },
    )?;
    if a.step_error {
        return step_error(a, &points);
    }
    let r = fit_throughput_with(
        &ThroughputRequest {
            base: a.scenario.request(),
            points,
            source: files[0].clone(),
            factors: a.factors.clone(),
            out: a.out.clone(),
            name: a.name.clone(),
        },
        &ThroughputLimits {
            max_median_error_pct: Some(a.max_median_error),
            allow_poor_fit: a.allow_poor_fit,
        },
    )?;
    let mut s = fit_header(&r, files);
    s.push_str(&factor_lines(&r));
    s.push_str(&point_lines(&r, files.len() > 1));
    s.push_str(&fit_notes(&r));
    print(&s)
}

/// What was written, from what.
fn fit_header(r: &ThroughputFit, files: &[PathBuf]) -> String {
    let names = files
        .iter()
        .map(|f| crate::units::path(f))
        .collect::<Vec<_>>()
        .join(" ");
    format!(
        "wrote {} (profile '{}' = '{}' + factors fitted to {} point(s) of {names}, {} iteration(s))\n\n",
        crate::units::path(&r.out),
        r.profile.profile.name,
        r.base,
        r.residuals.len(),
        r.iterations
    )
}

/// Each factor's sensitivity and choice, then the fitted values and the refusals.
fn factor_lines(r: &ThroughputFit) -> String {
    let mut s = format!("{:<26} {:>11}  {}\n", "factor", "sensitivity", "choice");
    for c in &r.choices {
        s.push_str(&format!(
            "{:<26} {:>10.2}%  {}\n",
            c.factor.name(),
            100.0 * c.sensitivity,
            c.why
        ));
    }
    s.push_str("(sensitivity: rms change of the predicted tokens/s for x1.65 of a scale, +0.5 of routing_alpha, +1 ms of step_overhead_us)\n\nfactor                     value   95% interval\n");
    for f in &r.fitted {
        s.push_str(&format!(
            "{:<24} {:>8.4}   [{:.4}, {:.4}]\n",
            f.factor.name(),
            f.value,
            f.ci95[0],
            f.ci95[1]
        ));
    }
    for (f, why) in &r.refused {
        if !r.choices.iter().any(|c| c.factor == *f) {
            s.push_str(&format!("{:<24} refused: {why}\n", f.name()));
        }
    }
    s
}

/// Each point before and after the fit (its file named when there are several).
fn point_lines(r: &ThroughputFit, several_files: bool) -> String {
    let mut s = String::from(
        "\npoint                                   measured   before    error   after    error  weight  left out\n",
    );
    for (b, x) in r.before.iter().zip(&r.residuals) {
        let file = if several_files {
            format!(
                "{} ",
                x.point
                    .file
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            )
        } else {
            String::new()
        };
        s.push_str(&format!(
            "{:<38} {:>9.1} {:>8.1} {:>+7.1}% {:>8.1} {:>+7.1}% {:>7.2} {:>9}\n",
            format!(
                "{file}line {}: c={} ctx={}{}",
                x.point.line,
                x.point.concurrency,
                x.point.context,
                if x.point.spec.is_some() { " spec" } else { "" }
            ),
            x.point.tokens_per_s,
            b.predicted,
            100.0 * b.rel_err,
            x.predicted,
            100.0 * x.rel_err,
            x.weight,
            match x.loo_rel_err {
                Some(e) => format!("{:+.1}%", 100.0 * e),
                None => "-".into(),
            }
        ));
    }
    s.push_str("(weight: the point's weight in the robust fit; left out: the error at the point when the fit is made without it)\n");
    s
}

/// Points far off, notes, broken rules and the rms error before and after.
fn fit_notes(r: &ThroughputFit) -> String {
    let mut s = String::new();
    for x in &r.residuals {
        if let Some(why) = &x.far_off {
            s.push_str(&format!(
                "far off: line {}: c={} ctx={}: {why}\n",
                x.point.line, x.point.concurrency, x.point.context
            ));
        }
    }
    for n in &r.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    for m in &r.profile.profile.poor_fit {
        s.push_str(&format!(
            "warning: written although the fit breaks the rules: {m}\n"
        ));
    }
    s.push_str(&format!(
        "rms error: before {:.1}%, after {:.1}%\n",
        100.0 * ThroughputFit::rms_rel_err(&r.before),
        100.0 * ThroughputFit::rms_rel_err(&r.residuals)
    ));
    s
}

/// `--step-error`: the model's error across step sizes on the scenario's GPU from the points,
/// each priced bottom-up; a table of the points (each against the band the others' fit gives:
/// leave-one-out), then the file.
fn step_error(a: &CalibrateArgs, points: &[Point]) -> Result<()> {
    let plain: Vec<_> = points
        .iter()
        .filter(|p| p.spec.is_none())
        .cloned()
        .collect();
    let left_out = points.len() - plain.len();
    let base = a.scenario.request();
    let (s, p) = base.load()?;
    let source = &a.from_throughput[0];
    let res = crate::calibrate::from_throughput::predict(&base, &plain, source)?;
    let r: Vec<(f64, f64)> = res
        .iter()
        .map(|x| {
            (
                x.point.concurrency as f64,
                (x.point.tokens_per_s / x.predicted).ln(),
            )
        })
        .collect();
    let gpu = &s.system.gpu.name;
    let e = StepError::fit(gpu, &r, source)?;
    let mut out = format!(
        "model error across step sizes on {gpu} from {} point(s) of {}{}\n\n",
        res.len(),
        crate::units::path(source),
        if left_out > 0 {
            format!(" ({left_out} speculative point(s) left out: their step mixes passes)")
        } else {
            String::new()
        }
    );
    let (table, inside) = left_out_bands(&res, &r, gpu, source);
    out.push_str(&table);
    out.push_str(&format!(
        "\nsigma {:.4} (rms of ln(measured / predicted)), rho {:.4} (between steps a factor 2 apart in tokens); {inside} of {} point(s) inside the band the others give\n",
        e.sigma,
        e.rho,
        res.len()
    ));
    let command = std::iter::once("decodesim".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let text = e.to_toml(
        &command,
        &crate::units::path(source),
        &crate::units::path(&p.path),
    );
    crate::files::write_atomic_bytes(&a.out, text.as_bytes())?;
    out.push_str(&format!("wrote {}\n", crate::units::path(&a.out)));
    print(&out)
}

/// The points' table, each against the p5..p95 band of the step error fitted to the others
/// (`logs`: each point's (concurrency, ln(measured / predicted))), and how many lie inside.
fn left_out_bands(
    res: &[crate::calibrate::from_throughput::Residual],
    logs: &[(f64, f64)],
    gpu: &str,
    source: &std::path::Path,
) -> (String, usize) {
    // A z of 1.645: the band a p5-p95 interval of the step error alone would draw.
    let z = 1.644_853_626_951_472_2;
    let mut out = String::from("point                     measured  predicted    error   band without it (p5..p95)  inside\n");
    let mut inside = 0;
    for (i, x) in res.iter().enumerate() {
        let others: Vec<(f64, f64)> = logs
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, v)| *v)
            .collect();
        let band = StepError::fit(gpu, &others, source).ok().map(|o| {
            (
                x.predicted * (-z * o.sigma).exp(),
                x.predicted * (z * o.sigma).exp(),
            )
        });
        let (text, ok) = match band {
            Some((lo, hi)) => (
                format!("{lo:>9.1} .. {hi:<9.1}"),
                (lo..=hi).contains(&x.point.tokens_per_s),
            ),
            None => ("(too few others)".to_string(), false),
        };
        inside += ok as usize;
        out.push_str(&format!(
            "{:<24} {:>9.1} {:>10.1} {:>+7.1}%   {:<24}  {}\n",
            format!(
                "line {}: c={} ctx={}",
                x.point.line, x.point.concurrency, x.point.context
            ),
            x.point.tokens_per_s,
            x.predicted,
            100.0 * x.rel_err,
            text,
            if ok { "yes" } else { "no" }
        ));
    }
    (out, inside)
}
