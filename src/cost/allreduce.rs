//! The all-reduce paths vLLM takes (docs/sources.md §3.3) and the NCCL knobs that change a
//! collective's cost (docs/sources.md §4.3).
//!
//! vLLM's dispatch, as `--allreduce auto` follows it: its custom all-reduce runs when the world
//! size is one it supports (2, 4, 6, 8, 16) and the GPUs are either two or fully NVLink-connected
//! (`custom_all_reduce.py`: "Custom allreduce is disabled because it's not supported on more
//! than two PCIe-only GPUs"), and per call when the message is a multiple of 16 bytes and below
//! `max_size` (8 MiB by default); every other all-reduce goes to NCCL (pynccl). On sm_120 the
//! FlashInfer and torch symmetric-memory paths are off (docs/sources.md §3.3), so on 8x RTX PRO 6000
//! over PCIe every all-reduce is NCCL's.

use super::profile::{CustomArLaw, NcclDefaults};
use crate::workload::CostFamily;

/// vLLM's `CustomAllreduce._SUPPORTED_WORLD_SIZES` (docs/sources.md §3.3).
pub const CUSTOM_AR_WORLD_SIZES: [u32; 5] = [2, 4, 6, 8, 16];
/// `should_custom_ar`: the byte size must be a multiple of this (docs/sources.md §3.3).
pub const CUSTOM_AR_ALIGN_BYTES: u64 = 16;

/// Why vLLM would not run its custom all-reduce: the rule, as vLLM states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The world size is not one of `CUSTOM_AR_WORLD_SIZES`.
    WorldSize(u32),
    /// More than two GPUs that are not all NVLink-connected.
    PcieOnly(u32),
    /// The message is not a multiple of 16 bytes.
    Unaligned(u64),
    /// The message is not below `max_size`.
    TooLarge { bytes: u64, max: u64 },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::WorldSize(n) => write!(
                f,
                "world size {n} is not one vLLM's custom all-reduce supports ({CUSTOM_AR_WORLD_SIZES:?}; custom_all_reduce.py _SUPPORTED_WORLD_SIZES)"
            ),
            Refusal::PcieOnly(n) => write!(
                f,
                "{n} GPUs without full NVLink: vLLM disables its custom all-reduce when world_size > 2 and the GPUs are not fully NVLink-connected (\"not supported on more than two PCIe-only GPUs\", custom_all_reduce.py)"
            ),
            Refusal::Unaligned(b) => write!(
                f,
                "{b} bytes is not a multiple of {CUSTOM_AR_ALIGN_BYTES} (should_custom_ar)"
            ),
            Refusal::TooLarge { bytes, max } => write!(
                f,
                "{} is not below max_size {} (should_custom_ar)",
                crate::units::bytes(*bytes as f64),
                crate::units::bytes(*max as f64)
            ),
        }
    }
}

/// Whether vLLM enables its custom all-reduce for this world size and topology.
pub fn custom_ar_enabled(world: u32, full_nvlink: bool) -> Result<(), Refusal> {
    if !CUSTOM_AR_WORLD_SIZES.contains(&world) {
        return Err(Refusal::WorldSize(world));
    }
    if world > 2 && !full_nvlink {
        return Err(Refusal::PcieOnly(world));
    }
    Ok(())
}

/// Whether one all-reduce of `bytes` goes to the custom kernel (else NCCL).
pub fn custom_ar_call(bytes: u64, max_size: u64) -> Result<(), Refusal> {
    if !bytes.is_multiple_of(CUSTOM_AR_ALIGN_BYTES) {
        return Err(Refusal::Unaligned(bytes));
    }
    if bytes >= max_size {
        return Err(Refusal::TooLarge {
            bytes,
            max: max_size,
        });
    }
    Ok(())
}

/// Where vLLM sends an all-reduce its custom kernel refused, in words for the report: above the
/// symmetric-memory cap (`cap`, docs/sources.md §3.3) torch symmetric memory is next in vLLM's
/// dispatch, which no table prices, so it is priced as NCCL; otherwise NCCL (pynccl).
pub fn next_path(
    why: &Refusal,
    cap: Option<&crate::scenario::allreduce_rules::SizeCap>,
    symm_mem: bool,
) -> String {
    match (why, cap) {
        (Refusal::TooLarge { .. }, Some(c)) if symm_mem => format!(
            "torch symmetric memory, next in vLLM's dispatch above the custom all-reduce's cap ({}); no table prices that path, so it is priced as NCCL",
            c.source
        ),
        _ => "NCCL".into(),
    }
}

/// vLLM's kernel choice (csrc/custom_all_reduce.cuh, `CustomAllreduce::allreduce`): one stage at
/// 2 GPUs; with full NVLink, one stage below 512 KiB up to 4 GPUs and below 256 KiB up to 8,
/// else two stages.
pub fn one_stage(world: u32, bytes: u64) -> bool {
    world == 2 || (world <= 4 && bytes < 512 * 1024) || (world <= 8 && bytes < 256 * 1024)
}

/// Bytes each rank moves: one stage reads every peer's whole buffer; two stages
/// reduce-scatter then all-gather, 2(n−1)/n of it.
pub fn stage_bytes(world: u32, bytes: u64) -> f64 {
    let (n, b) = (world as f64, bytes as f64);
    if one_stage(world, bytes) {
        (n - 1.0) * b
    } else {
        2.0 * (n - 1.0) / n * b
    }
}

/// The custom all-reduce law (`CustomArLaw`): (total µs, latency part).
pub fn custom_law_us(l: &CustomArLaw, world: u32, bytes: u64) -> (f64, f64) {
    let lat = l.base_us + l.per_rank_us * (world.max(1) - 1) as f64;
    (lat + stage_bytes(world, bytes) / (l.bw_gbps * 1e3), lat)
}

/// The channels NCCL runs a collective on against those the profile was measured with
/// (`[nccl] default_nchannels`), under `NCCL_MIN_NCHANNELS` / `NCCL_MAX_NCHANNELS`, and the link
/// that bounds what more channels can give.
///
/// NCCL's tuner (docs/sources.md §4.2) sets a collective's bus bandwidth to `nChannels × bwIntra`
/// per protocol, so the bytes term of a price measured at `measured` channels scales by
/// `measured / run`; adding channels stops paying where the bus bandwidth reaches the link the
/// ring crosses (Simple carries its payload at the link's rate; LL's 8-byte lines carry 4 bytes
/// of data beside 4 of flags, half of it). The protocol does not move with them:
/// NCCL_MIN_NCHANNELS and NCCL_MAX_NCHANNELS copy or drop channels after the topology search
/// (`ncclTopoPostset`, connect.cc), and the tuner prices each protocol from the search's own
/// channels and bandwidth (`ncclTopoTuneModel`, tuning.cc), so NCCL picks at `run` channels what
/// it picked at `measured`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Channels {
    pub measured: u32,
    pub run: u32,
    /// The link's bandwidth per direction (GB/s) on the collective's path (`cost::link`).
    pub link_gbps: f64,
}

impl Channels {
    /// The channels a collective runs on: the measured count raised to `NCCL_MIN_NCHANNELS`,
    /// then capped at `NCCL_MAX_NCHANNELS` (NCCL applies the cap last); None when that is the
    /// measured count.
    pub fn of(
        d: &NcclDefaults,
        min: Option<u32>,
        max: Option<u32>,
        link_gbps: f64,
    ) -> Option<Channels> {
        let mut run = d.default_nchannels.max(min.unwrap_or(1));
        if let Some(m) = max {
            run = run.min(m.max(1));
        }
        (run != d.default_nchannels).then_some(Channels {
            measured: d.default_nchannels,
            run,
            link_gbps,
        })
    }

    /// The same setting seen by one message of `bytes`: NCCL spreads a collective over no more
    /// channels than it has `per_channel` bytes for (`bytes_per_channel`), so a small message
    /// runs on as few channels under either count and gains nothing from more.
    pub fn for_message(&self, bytes: f64, per_channel: f64) -> Channels {
        let used = |c: u32| ((bytes / per_channel).floor() as u32).clamp(1, c.max(1));
        Channels {
            measured: used(self.measured),
            run: used(self.run),
            link_gbps: self.link_gbps,
        }
    }

    /// The most bus bandwidth (GB/s) the link gives this protocol.
    fn cap_gbps(&self, ll: bool) -> f64 {
        if ll {
            0.5 * self.link_gbps
        } else {
            self.link_gbps
        }
    }

    /// A bus bandwidth measured at `measured` channels, run at `run`: in proportion, and when
    /// raised no higher than the link allows (a measured figure above it is kept).
    pub fn bus_gbps(&self, measured_gbps: f64, ll: bool) -> f64 {
        let scaled = measured_gbps * self.run as f64 / self.measured as f64;
        if self.run > self.measured {
            measured_gbps.max(scaled.min(self.cap_gbps(ll)))
        } else {
            scaled
        }
    }

    /// The bytes term of a price (µs) measured at `measured` channels, run at `run`;
    /// `wire_bytes` is what each rank sends (steps / ranks × the message for a ring).
    pub fn bytes_us(&self, measured_us: f64, wire_bytes: f64, ll: bool) -> f64 {
        let scaled = measured_us * self.measured as f64 / self.run as f64;
        if self.run > self.measured {
            let floor = wire_bytes / (self.cap_gbps(ll) * 1e3);
            measured_us.min(scaled.max(floor))
        } else {
            scaled
        }
    }
}

/// Bytes of a collective each channel takes before NCCL spreads it over one more: threads per
/// block × the per-thread threshold (`while (nBytes < nc × nThreads × threadThreshold) nc--`,
/// enqueue.cc; thresholds LL 8 B and Simple 64 B, Ring LL's times the ranks, tuning.cc; 512
/// threads, NCCL_LL_MAX_NTHREADS and NCCL_SIMPLE_MAX_NTHREADS; docs/sources.md §4.3).
pub fn bytes_per_channel(ll: bool, ring: bool, nranks: u32) -> f64 {
    const THREADS: f64 = 512.0;
    match (ll, ring) {
        (true, true) => THREADS * 8.0 * nranks.max(1) as f64,
        (true, false) => THREADS * 8.0,
        (false, _) => THREADS * 64.0,
    }
}

/// Ring loops a Simple-protocol collective needs: each loop moves nranks × channels × one
/// buffer slot (NCCL_BUFFSIZE / NCCL_STEPS) per rank.
fn loops(bytes: u64, nranks: u32, channels: u32, buffsize: u64, steps: u32) -> u64 {
    let slot = (buffsize / steps.max(1) as u64).max(1);
    let per_loop = slot * nranks.max(1) as u64 * channels.max(1) as u64;
    bytes.div_ceil(per_loop).max(1)
}

/// Extra latency of a Simple-protocol collective under `NCCL_BUFFSIZE`: each ring loop beyond
/// those the measured default needed adds one pass of ring steps. LL and LL128 use their own
/// buffers (NCCL_LL_BUFFSIZE, NCCL_LL128_BUFFSIZE), so `NCCL_BUFFSIZE` never changes them.
pub fn buffsize_extra_us(
    d: &NcclDefaults,
    buffsize: Option<u64>,
    channels: Option<Channels>,
    family: CostFamily,
    nranks: u32,
    bytes: u64,
) -> f64 {
    let Some(b) = buffsize else { return 0.0 };
    let ch = channels.map_or(d.default_nchannels, |c| c.run);
    let now = loops(bytes, nranks, ch, b, d.steps_per_buffer);
    let then = loops(bytes, nranks, ch, d.buffsize_bytes, d.steps_per_buffer);
    now.saturating_sub(then) as f64 * super::collective::steps(family, nranks) * d.simple_hop_us
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> NcclDefaults {
        NcclDefaults {
            default_nchannels: 2,
            buffsize_bytes: 4 << 20,
            steps_per_buffer: 8,
            simple_hop_us: 5.7,
            source: "test".into(),
        }
    }

    #[test]
    fn vllm_dispatch_rules() {
        assert_eq!(custom_ar_enabled(8, false), Err(Refusal::PcieOnly(8)));
        assert_eq!(custom_ar_enabled(2, false), Ok(()));
        assert_eq!(custom_ar_enabled(8, true), Ok(()));
        assert_eq!(custom_ar_enabled(3, true), Err(Refusal::WorldSize(3)));
        assert_eq!(custom_ar_enabled(1, true), Err(Refusal::WorldSize(1)));
        assert_eq!(custom_ar_call(14_336, 8 << 20), Ok(()));
        assert_eq!(
            custom_ar_call(14_338, 8 << 20),
            Err(Refusal::Unaligned(14_338))
        );
        assert!(custom_ar_call(8 << 20, 8 << 20).is_err());
        assert!(one_stage(2, 100 << 20));
        assert!(one_stage(8, 200 << 10) && !one_stage(8, 256 << 10));
        assert!(one_stage(4, 500 << 10) && !one_stage(4, 512 << 10));
    }

    #[test]
    fn knobs_matter_only_where_they_bind() {
        let d = defaults();
        assert_eq!(Channels::of(&d, None, None, 45.0), None);
        assert_eq!(Channels::of(&d, None, Some(64), 45.0), None);
        assert_eq!(Channels::of(&d, Some(1), None, 45.0), None);
        let one = Channels::of(&d, None, Some(1), 45.0).unwrap();
        assert_eq!(one.run, 1);
        // Half the channels: the bytes term doubles, whatever the link.
        assert_eq!(one.bytes_us(100.0, 1e6, false), 200.0);
        assert_eq!(one.bus_gbps(20.0, false), 10.0);
        // The cap wins over the minimum, as in NCCL.
        assert_eq!(Channels::of(&d, Some(8), Some(4), 45.0).unwrap().run, 4);
        // 1.8 MB over 8 ranks x 2 channels x 512 KiB slots: one loop either way.
        let b = 1_835_008;
        assert_eq!(
            buffsize_extra_us(&d, Some(1 << 20), None, CostFamily::AllReduce, 8, b),
            0.0
        );
        // 128 KiB buffers: 16 KiB slots, 256 KiB per loop: 7 loops, 6 extra passes of 14 steps.
        let x = buffsize_extra_us(&d, Some(128 << 10), None, CostFamily::AllReduce, 8, b);
        assert!((x - 6.0 * 14.0 * 5.7).abs() < 1e-9, "{x}");
    }

    #[test]
    fn a_message_runs_on_the_channels_it_fills() {
        let d = defaults();
        let eight = Channels::of(&d, Some(8), None, 45.0).unwrap();
        // Ring LL at 8 ranks: 512 threads x 8 B x 8 = 32 KiB a channel.
        let per = bytes_per_channel(true, true, 8);
        assert_eq!(per, 32_768.0);
        let used = |b: f64| {
            let c = eight.for_message(b, per);
            (c.measured, c.run)
        };
        assert_eq!(used(14_336.0), (1, 1));
        assert_eq!(used(57_344.0), (1, 1));
        assert_eq!(used(114_688.0), (2, 3));
        assert_eq!(used(1_835_008.0), (2, 8));
        // Tree LL does not multiply by the ranks; Simple gives 32 KiB a channel.
        assert_eq!(bytes_per_channel(true, false, 8), 4_096.0);
        assert_eq!(bytes_per_channel(false, true, 8), 32_768.0);
    }

    #[test]
    fn more_channels_pay_up_to_the_link() {
        let d = defaults();
        let eight = Channels::of(&d, Some(8), None, 45.0).unwrap();
        assert_eq!((eight.measured, eight.run), (2, 8));
        // 24 GB/s measured at 2 channels: x4 would be 96, the link gives 45; LL 8 GB/s x4
        // would be 32, LL's half of the link gives 22.5.
        assert_eq!(eight.bus_gbps(24.0, false), 45.0);
        assert_eq!(eight.bus_gbps(8.0, true), 22.5);
        // 4 GB/s x 4 = 16 fits under the link.
        assert_eq!(eight.bus_gbps(4.0, false), 16.0);
        // A measured figure above the link stays (the channels never make it slower).
        assert_eq!(eight.bus_gbps(60.0, false), 60.0);
        // A 1.8 MB all-reduce's bytes term of 170 us at 2 channels: /4 = 42.5 us, but 8 ranks
        // send 14/8 x 1.8 MB = 3.21 MB, 71.4 us at 45 GB/s.
        let wire = 14.0 / 8.0 * 1_835_008.0;
        let t = eight.bytes_us(170.0, wire, false);
        assert!((t - wire / 45e3).abs() < 1e-9, "{t}");
        assert!((t - 71.36).abs() < 0.01, "{t}");
    }
}
