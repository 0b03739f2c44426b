//! Flags that belong to one way of calibrating, refused under another, here rather than by clap:
//! its `requires` is silent whenever the mode the flag needs conflicts with the one given (a
//! `--from-burst` run with `--unprofiled-step-us` would otherwise drop the flag without a word).

use super::CalibrateArgs;
use crate::error::{Error, Result};

/// The calibration mode of `a`, by its flag.
fn mode(a: &CalibrateArgs) -> &'static str {
    if !a.from_throughput.is_empty() {
        "--from-throughput"
    } else if !a.from_nccl_tests.is_empty() {
        "--from-nccl-tests"
    } else if a.from_burst.is_some() {
        "--from-burst"
    } else if a.from_deepep_ll.is_some() {
        "--from-deepep-ll"
    } else if a.from_aiconfigurator.is_some() {
        "--from-aiconfigurator"
    } else if a.transfer_profile.is_some() {
        "--transfer-profile"
    } else if a.measurements.is_some() {
        "--measurements"
    } else {
        "--from-trace"
    }
}

/// Refuses each flag given that its mode does not read.
pub(super) fn check(a: &CalibrateArgs) -> Result<()> {
    let given: [(&'static str, bool, &[&str]); 9] = [
        (
            "--unprofiled-step-us",
            a.unprofiled_step_us.is_some(),
            &["--from-trace"],
        ),
        ("--allow-mismatch", a.allow_mismatch, &["--from-trace"]),
        ("--factors", !a.factors.is_empty(), &["--from-throughput"]),
        ("--step-error", a.step_error, &["--from-throughput"]),
        ("--serving", a.serving, &["--from-throughput"]),
        (
            "--nccl-channels",
            a.nccl_channels.is_some(),
            &["--from-nccl-tests"],
        ),
        (
            "--profile",
            a.profile.is_some(),
            &["--from-nccl-tests", "--from-deepep-ll"],
        ),
        ("--no-table", a.no_table, &["--measurements"]),
        (
            "--transfer-to",
            a.transfer_to.is_some(),
            &["--measurements", "--transfer-profile"],
        ),
    ];
    let m = mode(a);
    for (flag, set, modes) in given {
        if set && !modes.contains(&m) {
            return Err(Error::FlagUse {
                flag,
                problem: format!(
                    "applies to {} only; this run calibrates {m}, which does not read it",
                    modes.join(" and ")
                ),
            });
        }
    }
    Ok(())
}
