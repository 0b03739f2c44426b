//! The channels the measured collectives ran on, for the written profile's `[nccl]` section:
//! `--nccl-channels N` (what the user's NCCL log said), or NCCL's own INFO lines inside the
//! nccl-tests logs. `--nccl-min-nchannels` and `--nccl-max-nchannels` scale the bytes term of a
//! measured price from this count, so a count carried over from another machine's profile would
//! scale the user's own measurement from the wrong base; where nothing states it, the report says
//! so and the profile's `[nccl]` source says whose count it is.

use super::NcclTestsFile;
use crate::cost::profile::NcclDefaults;
use crate::error::{Error, Result};
use crate::scenario::system::LinkKind;

/// What the written profile takes for the measured channel count.
#[derive(Debug, Clone, PartialEq)]
pub enum MeasuredChannels {
    /// Stated by the flag or the logs: the count and where it was read.
    Stated { count: u32, from: String },
    /// Nothing states it: the base profile's count is kept (None: the base has no `[nccl]`).
    Unstated { kept: Option<u32> },
}

/// The channel count the logs and the flag state, checked against each other.
pub fn measured_channels(
    flag: Option<u32>,
    files: &[NcclTestsFile],
) -> Result<Option<(u32, String)>> {
    let mut logs = files.iter().filter_map(|f| f.channels.map(|c| (c, f)));
    let first = logs.next();
    if let Some(((n, at), f)) = first {
        if let Some(((m, at2), g)) = logs.find(|((m, _), _)| *m != n) {
            return Err(Error::field(
                &g.path,
                format!("line {at2}"),
                format!(
                    "NCCL ran on {m} channels here but on {n} in {} (line {at}): one profile states one channel count; calibrate logs of different NCCL settings separately",
                    crate::units::path(&f.path)
                ),
            ));
        }
        if let Some(k) = flag.filter(|k| *k != n) {
            return Err(Error::field(
                &f.path,
                format!("line {at}"),
                format!("NCCL's log says {n} channels, but --nccl-channels {k} was given: drop the flag or rerun with the NCCL settings it names"),
            ));
        }
        return Ok(Some((
            n,
            format!("NCCL's log in {} (line {at})", crate::units::path(&f.path)),
        )));
    }
    Ok(flag.map(|k| (k, format!("--nccl-channels {k}"))))
}

/// Sets the profile's `[nccl]` defaults to the measured channel count, or marks the kept count
/// as the base profile's.
pub fn apply(
    nccl: &mut Option<NcclDefaults>,
    stated: Option<(u32, String)>,
    link: LinkKind,
    base_name: &str,
) -> MeasuredChannels {
    match stated {
        Some((count, from)) => {
            let mut d = nccl.take().unwrap_or_else(|| nccl_defaults(link));
            d.default_nchannels = count;
            d.source = with_channels(&d.source, &format!("{count} channels: {from}"));
            *nccl = Some(d);
            MeasuredChannels::Stated { count, from }
        }
        None => {
            let kept = nccl.as_ref().map(|d| d.default_nchannels);
            if let Some(d) = nccl.as_mut() {
                d.source = format!(
                    "the nccl-tests logs do not state their channels (NCCL_DEBUG=INFO prints them; or give --nccl-channels N): the count is profile '{base_name}''s; {}",
                    d.source
                );
            }
            MeasuredChannels::Unstated { kept }
        }
    }
}

/// NCCL's defaults on a path, at one channel until a count is stated (docs/sources.md §4.1,
/// §4.3).
pub(crate) fn nccl_defaults(link: LinkKind) -> NcclDefaults {
    let (hop, on) = match link {
        LinkKind::Nvlink => (3.4, "NVLink"),
        LinkKind::Pcie => (5.7, "PCI"),
    };
    NcclDefaults {
        default_nchannels: 1,
        buffsize_bytes: 4 << 20,
        steps_per_buffer: 8,
        simple_hop_us: hop,
        source: format!("buffsize: NCCL DEFAULT_BUFFSIZE 4 MiB (docs/sources.md §4.3); 8 slots: NCCL_STEPS (NCCL src/include/device.h); Simple hop: Ring Simple hwLat {on} {hop} µs (docs/sources.md §4.1)"),
    }
}

/// `source` with its channel clause (`N channels: ...` and the parts after it, which explain
/// it) replaced by `clause`.
fn with_channels(source: &str, clause: &str) -> String {
    let mut parts: Vec<&str> = source
        .split("; ")
        .take_while(|p| {
            let mut w = p.split_whitespace();
            !(w.next().is_some_and(|n| n.parse::<u32>().is_ok())
                && w.next().is_some_and(|c| c.starts_with("channels")))
        })
        .collect();
    parts.push(clause);
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_channel_clause_is_replaced_and_the_rest_kept() {
        let s = "buffsize: 4 MiB; 8 slots: NCCL_STEPS; 2 channels: ASSUMPTION, not in the tables; set it from your NCCL log";
        assert_eq!(
            with_channels(s, "8 channels: --nccl-channels 8"),
            "buffsize: 4 MiB; 8 slots: NCCL_STEPS; 8 channels: --nccl-channels 8"
        );
    }

    #[test]
    fn a_base_without_nccl_defaults_gets_nccls_own() {
        let mut n = None;
        let m = apply(
            &mut n,
            Some((4, "--nccl-channels 4".into())),
            LinkKind::Nvlink,
            "h200",
        );
        assert_eq!(
            m,
            MeasuredChannels::Stated {
                count: 4,
                from: "--nccl-channels 4".into()
            }
        );
        let d = n.unwrap();
        assert_eq!((d.default_nchannels, d.simple_hop_us), (4, 3.4));
        let mut none = None;
        assert_eq!(
            apply(&mut none, None, LinkKind::Pcie, "h200"),
            MeasuredChannels::Unstated { kept: None }
        );
        assert!(none.is_none());
    }
}
