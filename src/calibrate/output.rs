//! `calibrate --measurements`: read a folder, fit, optionally transfer to another GPU, and write
//! the profile atomically (temp file + rename, folders created), checked as any profile is read.

use super::{calibrate, transfer, CalibrationResult, FitOptions};
use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::measurements::Measurements;
use crate::scenario::{catalog, GpuSpec};
use std::path::{Path, PathBuf};

/// Everything `calibrate --measurements` is asked.
#[derive(Debug, Clone)]
pub struct DirRequest {
    pub measurements: PathBuf,
    /// GPU the measurements were taken on (a file stem in data/systems/gpus).
    pub gpu: String,
    /// Profile supplying the sections the measurements do not cover.
    pub fallback: String,
    pub out: PathBuf,
    /// Name recorded in the profile [default: the output folder's name].
    pub name: Option<String>,
    /// Do not reference kernels.csv as a measurement table.
    pub no_table: bool,
    /// Write a profile for this other GPU (efficiencies transfer, the table does not).
    pub transfer_to: Option<String>,
    /// Median |relative error| limit, percent.
    pub max_median_error_pct: f64,
    pub min_r2: f64,
    pub allow_poor_fit: bool,
}

fn gpu(stem: &str) -> Result<GpuSpec> {
    let path = catalog::gpus_dir().join(format!("{stem}.toml"));
    if !path.is_file() {
        return Err(Error::Unknown {
            kind: "GPU",
            name: crate::units::echo(stem),
            choices: catalog::stems(&catalog::gpus_dir(), "toml"),
        });
    }
    GpuSpec::from_file(&path)
}

/// Fits the folder's measurements and writes the profile to `req.out`.
pub fn calibrate_dir(req: &DirRequest) -> Result<CalibrationResult> {
    let opts = FitOptions {
        max_median_err: req.max_median_error_pct / 100.0,
        min_r2: req.min_r2,
        table: None,
        table_shown: None,
        keep_fallback_for_poor: req.transfer_to.is_some(),
        allow_poor_fit: req.allow_poor_fit,
    };
    opts.check()?;
    let m = Measurements::read_dir(&req.measurements)?;
    let measured_gpu = gpu(&req.gpu)?;
    let target = req.transfer_to.as_deref().map(gpu).transpose()?;
    let fallback = CalibrationProfile::from_file(&catalog::resolve_profile(&req.fallback)?)?;
    let name = profile_name(req.name.as_deref(), &req.out, "fitted");
    let table = if req.no_table || target.is_some() || m.kernels.is_empty() {
        None
    } else {
        Some(table_reference(
            &req.measurements.join("kernels.csv"),
            &req.out,
        ))
    };
    let mut result = calibrate(
        &m,
        &measured_gpu,
        &name,
        &fallback,
        &FitOptions {
            table_shown: table
                .as_ref()
                .map(|_| crate::units::path(&req.measurements.join("kernels.csv"))),
            table,
            ..opts
        },
    )?;
    if let Some(target) = &target {
        transfer(&mut result.profile, &fallback, &measured_gpu, target);
    }
    if !result.kept_fallback.is_empty() {
        // Said in the profile itself: these sections are the fallback's, not the measurements'.
        result.profile.profile.provenance = format!(
            "{}; kept from '{}' because the fit broke the rules (poor, unidentified or unphysical): {}",
            result.profile.profile.provenance,
            fallback.profile.name,
            result.kept_fallback.join(", ")
        );
    }
    let header = format!(
        "# Written by `decodesim calibrate --measurements {} --gpu {} --fallback {}{}{}`.\n# {}\n# {}\n",
        req.measurements.display(),
        req.gpu,
        req.fallback,
        req.transfer_to
            .as_ref()
            .map(|t| format!(" --transfer-to {t}"))
            .unwrap_or_default(),
        if req.allow_poor_fit { " --allow-poor-fit" } else { "" },
        result.profile.profile.method,
        result.profile.profile.provenance
    );
    write_profile(&req.out, &header, &result.profile)?;
    Ok(result)
}

/// A written profile's name: `--name` when given, else the name of the folder it is written
/// in (`data/calibration/<name>/profile.toml`), else `fallback`.
pub(crate) fn profile_name(name: Option<&str>, out: &Path, fallback: &str) -> String {
    name.map(str::to_string).unwrap_or_else(|| {
        out.parent()
            .and_then(|d| d.file_name())
            .and_then(|n| n.to_str())
            .unwrap_or(fallback)
            .to_string()
    })
}

/// How a profile written to `out` refers to a measurement table: a path relative to the
/// profile's folder (the file name when both sit in one folder), so profile and data move
/// together and no profile carries an absolute path.
pub(crate) fn table_reference(table: &Path, out: &Path) -> String {
    let out_dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // Relative to the profile's folder, never absolute (`aiconfigurator::relative_to`).
    super::aiconfigurator::relative_to(table, out_dir)
}

/// Checks the profile as a reader would, then writes it atomically under a comment header.
pub fn write_profile(path: &Path, header: &str, p: &CalibrationProfile) -> Result<()> {
    let text = render_profile(path, header, p)?;
    crate::files::write_atomic_bytes(path, &text)
}

/// The text of the profile to be written at `path` (paths relative to its folder), checked as
/// a reader would check it: a caller writing more than the profile (its tables) renders first,
/// so a profile that would be refused is refused before anything is replaced.
pub fn render_profile(path: &Path, header: &str, p: &CalibrationProfile) -> Result<Vec<u8>> {
    p.validate(path)?;
    let mut p = super::aiconfigurator::rebase_tables(p, path);
    // A measurement table named by an absolute path is written relative to the profile.
    if let Some(m) = p
        .measurements
        .as_mut()
        .filter(|m| Path::new(m.as_str()).is_absolute())
    {
        *m = table_reference(Path::new(m.as_str()), path);
    }
    // `created` is when this profile was written; the dates of the data it was made from stay
    // in its method and provenance.
    p.profile.created = today();
    let p = &p;
    let body = toml::to_string_pretty(p).map_err(|e| Error::Serialize {
        what: "profile",
        message: e.to_string(),
    })?;
    Ok(format!("{header}\n{body}").into_bytes())
}

/// Today's date (UTC): a written profile's `created`.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}
