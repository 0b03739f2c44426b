//! Physical ranges of the numbers a user states, on the command line or in a file, in one place.
//! "Above 0" is not enough: a link of 1e-300 GB/s is a positive number that prices a collective
//! at 1e305 µs, a count of 1e308 sums to infinity. Every range here has a floor and a ceiling
//! that no real hardware or workload comes near, each with its reason, so a value outside is a
//! unit mistake or a typo, and the error names the flag (or field), the value and the range.
//!
//! Ranges that belong to one file format stay beside it when they are that format's own
//! (`scenario::model::limits` for config.json dimensions); this module holds the physical ones
//! shared by flags, system files, profiles and logs.

use super::check::FloatRange;
use crate::error::{Error, Result};

/// Slowest link a collective may be priced on: 0.1 GB/s per direction, below 1 Gigabit Ethernet
/// (0.125 GB/s) and PCIe Gen1 x1 (2.5 GT/s x 1 lane / 8 = 0.31 GB/s signalling), the slowest
/// links any GPU server has. Fastest: 10,000 GB/s, 11x NVLink5's 900 GB/s per direction
/// (docs/sources.md §2) and above the HBM bandwidth of every GPU there (B200: 7,700 GB/s), which would
/// have to feed it.
pub const LINK_GBPS: FloatRange = FloatRange::between(0.1, 10_000.0, "GB/s per direction");

/// Per-hop link latency: 0 (an ideal link, for what-ifs) to 1 ms; docs/sources.md §2.1 gives ~14 µs for
/// the slowest GPU path (PCIe through host memory), so a millisecond is a unit mistake.
pub const LINK_LATENCY_US: FloatRange = FloatRange::non_negative(1_000.0, "µs per hop");

/// A nonzero P2P bandwidth in a system file: at least the link floor above.
pub const P2P_FLOOR_GBPS: f64 = 0.1;
/// A nonzero NVLink bandwidth: at least 10 GB/s per direction (NVLink 1.0 gives 20 GB/s per
/// direction per link; a GPU with NVLink has at least one).
pub const NVLINK_FLOOR_GBPS: f64 = 10.0;

/// `--nccl-max-nchannels`: 1 to 64, NCCL's MAXCHANNELS (docs/sources.md §4.3; the profile's
/// `[nccl] default_nchannels` is held to the same).
pub const NCCL_CHANNELS: std::ops::RangeInclusive<u64> = 1..=64;
/// `--nccl-buffsize`: 1 KiB to 16 GiB around NCCL's default 4 MiB (docs/sources.md §4.3), as the
/// flag's parser takes it (the library checks it again for `--vary` and sweep grids). NCCL
/// pipelines a buffer in steps (NCCL_STEPS = 8 in NCCL's device.h, not in docs/sources.md): below 1 KiB
/// a step is smaller than one 128-byte LL128 line. Above 16 GiB, one channel's buffers to its
/// two ring peers alone take 32 GiB, and 64 channels 2 TiB: more than any GPU has (docs/sources.md §2:
/// at most 180 GiB).
pub const NCCL_BUFFSIZE: std::ops::RangeInclusive<u64> = 1_024..=(1 << 34);

/// GPU memory: 1 GB to 4,096 GB. Every CUDA GPU one would serve an LLM on has more than 1 GB
/// (the smallest in docs/sources.md §2 has 48 GB); the ceiling is an order of magnitude above the
/// largest (B200: 180 GiB).
pub const GPU_MEMORY_GB: FloatRange = FloatRange::between(1.0, 4_096.0, "GB");
pub const GPU_MEMORY_MIB: FloatRange = FloatRange::between(1_024.0, 4_096.0 * 1_024.0, "MiB");
/// DRAM bandwidth: 10 GB/s (below a single DDR4 channel, 25.6 GB/s; the slowest data-centre GPU,
/// T4, has 320 GB/s) to 100,000 GB/s (13x B200's 7,700 GB/s, docs/sources.md §2).
pub const GPU_BANDWIDTH_GBPS: FloatRange = FloatRange::between(10.0, 100_000.0, "GB/s");
/// Dense tensor throughput: 1 TFLOP/s (a 2012 K20 did 3.5 FP32) to 100,000 TFLOP/s (22x B200's
/// 4,500 FP8, docs/sources.md §2). A value below is TFLOP/s given in PFLOP/s, above is FLOP/s.
pub const GPU_TFLOPS: FloatRange = FloatRange::between(1.0, 100_000.0, "TFLOP/s");
/// L2: zero (not modelled) to 4 GB.
pub const GPU_L2_MB: FloatRange = FloatRange::non_negative(4_096.0, "MB");

/// A collective's bus bandwidth in a profile: at least the link floor (0.1 GB/s); its ceiling is
/// the GPU's memory bandwidth (checked with the GPU).
pub const BUS_BW_FLOOR_GBPS: f64 = 0.1;
/// A kernel efficiency in a profile: at least 0.1% of the GPU's peak. The bundled fits are at
/// 2.7% and above; a decode kernel 1,000x slower than its roofline is a unit mistake, and an
/// efficiency of 1e-300 prices a kernel at 1e300 µs.
pub const EFFICIENCY: FloatRange = FloatRange::between(1e-3, 1.0, "(a fraction of the GPU's peak)");

/// A capacity plan's throughput target: 1e-3 to 1e9 tokens/s. The ceiling is a thousand times
/// the world's largest serving fleets (a 100k-GPU fleet at 10k tokens/s per GPU is 1e9): beyond
/// it replica and GPU counts no longer fit in 32 bits and the plan means nothing.
pub const TARGET_TOKENS_PER_S: FloatRange = FloatRange::between(1e-3, 1e9, "tokens/s");
/// Concurrent users a plan is asked for: 1 to 1e8 (a hundred million at once; every user needs
/// its own KV cache, so such a plan already needs millions of GPUs).
pub const USERS: std::ops::RangeInclusive<u64> = 1..=100_000_000;
/// A TPOT limit: 0.01 ms (no GPU decodes a token in 10 µs: one kernel launch takes ~5 µs) to one
/// hour per token.
pub const MAX_TPOT_MS: FloatRange = FloatRange::between(0.01, 3_600_000.0, "ms");
/// A per-user speed target (`--min-tokens-per-s-per-user`): the TPOT limit's range turned
/// over (1,000 / ms): 0.001 tokens/s (one token every 17 minutes) to 100,000 (a 0.01 ms TPOT).
pub const TOKENS_PER_S_PER_USER: FloatRange =
    FloatRange::between(1e-3, 100_000.0, "tokens/s per user");
/// A GPU-hour price: 0 (owned hardware) to 1,000 USD, a hundred times the dearest on-demand
/// cloud price of one GPU (about 10 USD per H100/H200-hour); beyond it the cost per hour of a
/// plan overflows into nonsense.
pub const GPU_HOUR_USD: FloatRange = FloatRange::non_negative(1_000.0, "USD per GPU-hour");

/// A count in a hand-written log (routing counts, histogram steps, mix weights): at most 1e15.
/// A server at 1e6 tokens/s for 30 years routes 1e15 tokens; a million such rows sum to 1e21,
/// far from overflow (1e308 twice is infinite).
pub const LOG_COUNT: FloatRange = FloatRange::non_negative(1e15, "");
/// Tokens in one logged step: at most 10,000,000, the longest context decodesim accepts
/// (`scenario::MAX_CONTEXT`); a step prefilling more than a whole context does not happen.
pub const STEP_TOKENS: FloatRange = FloatRange::between(1.0, 1e7, "tokens");

/// A NIC's line rate in a system file's `[network]`, in Gb/s per direction as vendors quote it:
/// 1 (1 GbE, the slowest NIC a server has) to 3,200 (4x the 800 Gb/s of ConnectX-8, the fastest
/// NIC NVIDIA lists; a value above is Mb/s given for Gb/s).
pub const NIC_GBIT: FloatRange = FloatRange::between(1.0, 3_200.0, "Gb/s per direction");
/// NICs per node: 1 to 64 (an HGX node has 8 compute NICs plus 1-2 for storage; 64 is a NIC
/// per PCIe x4 slot of a large host, far above any GPU server).
pub const NICS_PER_NODE: std::ops::RangeInclusive<u64> = 1..=64;
/// Nodes in one system file: 1 to 16,384, and at most 131,072 GPUs in all: the largest
/// training clusters built are about 100,000 GPUs; more is a typo.
pub const NODES: std::ops::RangeInclusive<u64> = 1..=16_384;
pub const TOTAL_GPUS: std::ops::RangeInclusive<u64> = 1..=131_072;

/// Checks a flag's float against `range`: the error names the flag, the value and the range.
pub fn flag_in(flag: &'static str, v: f64, range: &FloatRange) -> Result<f64> {
    if range.contains(v) {
        Ok(v)
    } else {
        Err(Error::Flag {
            flag,
            value: super::check::show(v),
            expected: format!("out of range: expected {}", range.describe()),
        })
    }
}

/// Checks a flag's integer against `range`.
pub fn flag_int_in(
    flag: &'static str,
    v: u64,
    range: &std::ops::RangeInclusive<u64>,
) -> Result<u64> {
    if range.contains(&v) {
        Ok(v)
    } else {
        Err(Error::Flag {
            flag,
            value: v.to_string(),
            expected: format!(
                "out of range: expected an integer {}",
                super::check::int_range_text(range)
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_floor_refuses_subnormal_bandwidths() {
        for bad in [1e-300, 5e-324, 0.0, -1.0, f64::NAN, f64::INFINITY, 2e4] {
            let e = flag_in("--link-gbps", bad, &LINK_GBPS)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("--link-gbps") && e.contains("at least 0.1") && e.contains("10,000"),
                "{e}"
            );
        }
        assert_eq!(flag_in("--link-gbps", 450.0, &LINK_GBPS).unwrap(), 450.0);
        assert!(LINK_GBPS.contains(0.1) && LINK_GBPS.contains(1e4));
    }
}
