//! A profile fitted on one GPU turned into one for another: efficiencies are fractions of each
//! GPU's own peak, so they transfer; the measured table and ranges do not.

use crate::cost::profile::{CalibrationProfile, CollectiveParams};
use crate::scenario::{CommPath, GpuSpec};

/// Turns a profile fitted on `measured` into one for `target`: fitted kernel sections become
/// "transferred" (efficiencies are fractions of each GPU's own peak), estimate sections and the
/// collectives of paths the measured machine does not share come from `fallback` (the target's
/// own profile), and the measured host path (P2P off) is kept as the closest stand-in for the
/// target's.
pub(crate) fn transfer(
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
        .filter(|c| c.path != CommPath::Host)
        .cloned()
        .collect();
    for c in &p.collectives {
        if c.path == CommPath::Host && c.source.starts_with("fitted") {
            let mut c = c.clone();
            c.source = format!(
                "transferred from {} with NCCL_P2P_DISABLE=1 (host-memory path), the closest measured stand-in ({})",
                measured.name, c.source
            );
            collectives.push(c);
        } else if c.path == CommPath::Nvlink
            && target_has_nvlink
            && !collectives.iter().any(|x| x.path == CommPath::Nvlink)
        {
            collectives.push(c.clone());
        }
    }
    if !collectives.iter().any(|c| c.path == CommPath::Host) {
        collectives.extend(
            fallback
                .collectives
                .iter()
                .filter(|c| c.path == CommPath::Host)
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
