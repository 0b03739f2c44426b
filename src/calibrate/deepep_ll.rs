//! `calibrate --from-deepep-ll`: a profile's DeepEP low-latency laws (`[deepep_ll]`, priced by
//! `cost::deepep`) fitted to measured dispatch and combine kernel times of this machine, on top
//! of a base profile.

use super::output::write_profile;
use crate::cost::deepep::{DeepEpLl, Phase};
use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// What `--from-deepep-ll` wrote.
#[derive(Debug, Clone)]
pub struct DeepEpFit {
    pub profile: CalibrationProfile,
    pub base: String,
    pub out: PathBuf,
    pub section: DeepEpLl,
}

/// Fits both phases' laws to `table` (a `deepep_ll.csv`), checks each against the quality rule
/// (median |relative error| at most `max_median_error`, unless `allow_poor_fit` marks it), and
/// writes `base` with them to `out`.
pub fn from_deepep_ll(
    table: &Path,
    base: &CalibrationProfile,
    out: &Path,
    name: Option<&str>,
    max_median_error: f64,
    allow_poor_fit: bool,
) -> Result<DeepEpFit> {
    let rows = crate::measurements::read_deepep_ll_csv(table)?;
    let mut shapes: Vec<String> = rows
        .iter()
        .map(|r| format!("{}/{}/{}", r.hidden, r.topk, r.experts))
        .collect();
    shapes.sort();
    shapes.dedup();
    let source = format!(
        "measured: {} ({} rows; hidden/top-k/experts {})",
        crate::units::path(table),
        rows.len(),
        shapes.join(", ")
    );
    let section = DeepEpLl::fit(&rows, table, source)?;
    let mut p = base.clone();
    p.profile.poor_fit.retain(|m| !m.starts_with("deepep_ll"));
    for phase in [Phase::Dispatch, Phase::Combine] {
        let law = section.law(phase);
        if law.median_rel_err * 100.0 > max_median_error {
            let why = format!(
                "deepep_ll.{}: median |rel err| {:.1}% above {max_median_error}% (the law latency + bytes / bandwidth does not hold these rows)",
                phase.name(),
                law.median_rel_err * 100.0
            );
            if !allow_poor_fit {
                return Err(Error::field(
                    table,
                    phase.name(),
                    format!("{why}; pass --allow-poor-fit to write it anyway, marked"),
                ));
            }
            p.profile.poor_fit.push(why);
        }
    }
    p.deepep_ll = Some(section.clone());
    p.profile.name = name.map(str::to_string).unwrap_or_else(|| {
        out.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "from-deepep-ll".into())
    });
    p.profile.description = format!(
        "profile '{}' with DeepEP low-latency laws fitted to {}",
        base.profile.name,
        crate::units::path(table)
    );
    p.profile.provenance = format!(
        "{}; DeepEP low-latency dispatch and combine fitted to {}",
        base.profile.provenance,
        crate::units::path(table)
    );
    super::from_throughput::relocate(&mut p, base, out);
    let header = format!(
        "# Written by `decodesim calibrate --from-deepep-ll {}` from profile '{}'.",
        crate::units::path(table),
        base.profile.name
    );
    write_profile(out, &header, &p)?;
    Ok(DeepEpFit {
        profile: p,
        base: base.profile.name.clone(),
        out: out.to_path_buf(),
        section,
    })
}
