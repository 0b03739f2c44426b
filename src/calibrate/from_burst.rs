//! `calibrate --from-burst COUNT,BYTES,TOTAL_US` (or a CSV `count,bytes,total_us`): allreduce
//! bursts timed end to end fit the collective latency and bandwidth scales of the scenario's
//! profile. Per collective, time = latency_scale × L + X / bw_scale, where L and X are the
//! latency and bytes terms of the price a step of the scenario uses for that message
//! ([`terms`]: the measured table, vLLM's custom all-reduce, the cross-node price or the law,
//! whichever prices it), so the written profile prices that allreduce inside a step as the burst
//! timed it (linear least squares in latency_scale and 1/bw_scale). One burst size identifies
//! one scale: the term that dominates at that size is fitted and the other is held at its
//! value, and the report says so.

use super::output::write_profile;
use super::regression::weighted_least_squares;
use crate::cost::profile::Factors;
use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::files::{field, HandCsv};
use crate::scenario::Scenario;
use crate::workload::CostFamily;
use std::path::{Path, PathBuf};

/// One measured burst: `count` allreduces of `bytes` each took `total_us` together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Burst {
    pub count: u32,
    pub bytes: u64,
    pub total_us: f64,
}

impl Burst {
    pub(crate) fn per_collective_us(&self) -> f64 {
        self.total_us / self.count as f64
    }
}

const EXPECTED: &str =
    "COUNT,BYTES,TOTAL_US (e.g. 122,14336,6810) or a CSV file with columns count,bytes,total_us";

fn parse_row(fields: &[&str], what: &dyn Fn(&str) -> String) -> Result<Burst> {
    let bad = |name: &str, v: &str, allowed: &str| Error::BadValue {
        place: what(name),
        field: name.to_string(),
        value: crate::units::echo(v),
        expected: allowed.to_string(),
    };
    if fields.len() != 3 {
        return Err(Error::BadRow {
            place: what("value"),
            expected: EXPECTED.into(),
        });
    }
    let count: u32 = fields[0]
        .trim()
        .parse()
        .ok()
        .filter(|&c| (1..=1_000_000).contains(&c))
        .ok_or_else(|| bad("count", fields[0], "a whole number 1..1000000"))?;
    let bytes: u64 = fields[1]
        .trim()
        .parse()
        .ok()
        .filter(|&b| (1..=1u64 << 36).contains(&b))
        .ok_or_else(|| bad("bytes", fields[1], "a message size in bytes, 1..2^36"))?;
    let total_us: f64 = fields[2]
        .trim()
        .parse()
        .ok()
        .filter(|t: &f64| t.is_finite() && *t > 0.0 && *t < 1e9)
        .ok_or_else(|| bad("total_us", fields[2], "a positive time in microseconds"))?;
    Ok(Burst {
        count,
        bytes,
        total_us,
    })
}

/// Parses `COUNT,BYTES,TOTAL_US` or reads a CSV of such rows (header `count,bytes,total_us`).
pub fn parse_bursts(arg: &str) -> Result<(Vec<Burst>, String)> {
    let (bursts, source, _) = parse_bursts_at(arg)?;
    Ok((bursts, source))
}

/// [`parse_bursts`] with where each burst came from ("FILE: line N", or the flag and its
/// value), for errors and warnings about one burst ([`fit_bursts_at`]).
pub(crate) fn parse_bursts_at(arg: &str) -> Result<(Vec<Burst>, String, Vec<String>)> {
    let path = Path::new(arg);
    if !path.exists() {
        let fields: Vec<&str> = arg.split(',').collect();
        let b = parse_row(&fields, &|_| {
            format!("--from-burst {}", crate::units::echo(arg))
        })?;
        let at = format!("--from-burst {}", crate::units::echo(arg));
        return Ok((vec![b], format!("--from-burst {arg}"), vec![at]));
    }
    let t = HandCsv::read(path, EXPECTED)?;
    let idx = t.require(
        &["count", "bytes", "total_us"],
        "the columns count,bytes,total_us",
    )?;
    let mut out = Vec::new();
    let mut at = Vec::new();
    for (line, f) in &t.rows {
        let row = [field(f, idx[0]), field(f, idx[1]), field(f, idx[2])];
        let what = |name: &str| format!("{}: line {line}, column {name}", path.display());
        out.push(parse_row(&row, &what)?);
        at.push(format!("{}: line {line}", path.display()));
    }
    if out.is_empty() {
        return Err(Error::field(path, "rows", "no data rows"));
    }
    Ok((out, crate::units::path(path), at))
}

/// The fastest one allreduce of `bytes` can physically be on this scenario's link, µs: one hop
/// of the link's latency plus the bytes every rank must receive, (n − 1)/n × bytes (each rank
/// needs every other rank's contribution to each element; ring and tree move twice that, an
/// in-switch reduction about as much), at the link's full bandwidth. The link is the
/// scenario's `--link-gbps` / `--link-latency-us` when given, else the system's: NVLink's
/// `nvlink_gbps`, PCIe P2P's fastest of the P2P figures and the PCIe signalling rate (a floor
/// must not be above any real path), the host path's PCIe signalling rate.
fn latency_floor_us(s: &Scenario, bytes: u64) -> f64 {
    let ic = &s.system.interconnect;
    let pcie = pcie_signalling_gbps(ic.pcie_gen, ic.pcie_lanes);
    let (bw, lat) = match s.comm_path() {
        crate::scenario::CommPath::Nvlink => (ic.nvlink_gbps, ic.p2p_latency_us),
        crate::scenario::CommPath::PcieP2p => (
            ic.p2p_gbps_same_socket
                .max(ic.p2p_gbps_cross_socket)
                .max(pcie),
            ic.p2p_latency_us,
        ),
        crate::scenario::CommPath::Host => (pcie, ic.host_latency_us.min(ic.p2p_latency_us)),
    };
    let bw = s.comm.link_gbps.unwrap_or(bw);
    let lat = s.comm.link_latency_us.unwrap_or(lat);
    let n = s.layout.tp.max(1) as f64;
    lat + (n - 1.0) / n * bytes as f64 / (bw.max(f64::MIN_POSITIVE) * 1e3)
}

/// PCIe per-direction signalling rate in GB/s (GT/s per lane × lanes / 8), the most any PCIe
/// transfer can reach; 0 for an unknown generation (the system file refuses those).
fn pcie_signalling_gbps(gen: u32, lanes: u32) -> f64 {
    let gts = match gen {
        1 => 2.5,
        2 => 5.0,
        3 => 8.0,
        4 => 16.0,
        5 => 32.0,
        6 => 64.0,
        7 => 128.0,
        _ => 0.0,
    };
    gts * lanes as f64 / 8.0
}

/// Refuses a burst faster than the link allows ([`latency_floor_us`]) and warns of bursts of one
/// size whose times differ by more than 2x (contradictory: one of them measured something
/// else). `at[i]` says where burst i came from (may be empty).
fn check_bursts(
    s: &Scenario,
    bursts: &[Burst],
    at: &[String],
    source: &str,
) -> Result<Vec<String>> {
    let where_ = |i: usize| {
        at.get(i)
            .cloned()
            .unwrap_or_else(|| format!("{source}, burst {}", i + 1))
    };
    for (i, b) in bursts.iter().enumerate() {
        let floor = latency_floor_us(s, b.bytes);
        if b.per_collective_us() < floor {
            return Err(Error::FitData { source_name: where_(i).to_string(), problem: format!("{} allreduces of {} B in {} µs = {:.3} µs each is faster than the link allows: at least {:.3} µs each on the {} path at TP={} (one hop's latency + (n-1)/n of the bytes at the link's bandwidth, from {}{}); check the columns' units (total_us is microseconds for all {} together)", b.count, b.bytes, b.total_us, b.per_collective_us(), floor, s.comm_path(), s.layout.tp, crate::units::path(&s.system.source), if s.comm.link_gbps.is_some() || s.comm.link_latency_us.is_some() {
                    " with --link-gbps/--link-latency-us"
                } else {
                    ""
                }, b.count) });
        }
    }
    let mut warnings = Vec::new();
    let sizes: std::collections::BTreeSet<u64> = bursts.iter().map(|b| b.bytes).collect();
    for size in sizes {
        let same: Vec<usize> = (0..bursts.len())
            .filter(|&i| bursts[i].bytes == size)
            .collect();
        let t = |i: usize| bursts[i].per_collective_us();
        let (Some(&lo), Some(&hi)) = (
            same.iter().min_by(|&&a, &&b| t(a).total_cmp(&t(b))),
            same.iter().max_by(|&&a, &&b| t(a).total_cmp(&t(b))),
        ) else {
            continue;
        };
        if t(hi) > 2.0 * t(lo) {
            warnings.push(format!(
                "contradictory bursts of {size} B: {} gives {:.2} µs each and {} gives {:.2} µs each ({:.1}x apart, more than 2x): they cannot both time this allreduce; their mean is fitted",
                where_(lo),
                t(lo),
                where_(hi),
                t(hi),
                t(hi) / t(lo)
            ));
        }
    }
    Ok(warnings)
}

#[derive(Debug, Clone)]
pub struct BurstFit {
    pub profile: CalibrationProfile,
    pub(crate) base: String,
    pub(crate) bursts: Vec<Burst>,
    /// (per-collective µs before, after) for each burst.
    pub predicted: Vec<(f64, f64)>,
    pub latency_scale: f64,
    pub latency_ci95: Option<f64>,
    pub bw_scale: f64,
    pub(crate) bw_ci95: Option<[f64; 2]>,
    pub notes: Vec<String>,
    /// Contradictory bursts ([`check_bursts`]).
    pub(crate) warnings: Vec<String>,
    /// Which entry priced the allreduce.
    pub(crate) entry: String,
    pub(crate) out: PathBuf,
}

/// The latency and bytes terms of one allreduce of `bytes` as a step of this scenario prices
/// it, and what priced it: the price source steps really use (a measured table where the
/// profile has one, vLLM's custom all-reduce where `--allreduce` dispatches to it, NCCL's
/// hierarchical price where the group spans nodes, else the law), split into the latency
/// term and the bytes term that `collective_latency_scale` and `collective_bw_scale` act on
/// (`cost::profile::apply_factors`). The terms are read with the profile's collective scales at
/// 1 and without a hypothetical link (`--link-gbps`, which replaces the link after the factors
/// correct the machine), so `latency_scale × L + X / bw_scale` is the step's price under any
/// scales.
pub fn terms(s: &Scenario, p: &CalibrationProfile, bytes: u64) -> Result<(f64, f64, String)> {
    let mut s = s.clone();
    s.comm.link_gbps = None;
    s.comm.link_latency_us = None;
    let mut p = p.clone();
    p.factors.collective_latency_scale = 1.0;
    p.factors.collective_bw_scale = 1.0;
    let mut b = crate::workload::builder::Builder::new();
    let role = crate::workload::OpRole::Collective;
    b.collective(role, "all_reduce", "nccl", CostFamily::AllReduce, bytes);
    let w = crate::workload::Workload {
        ops: b.ops,
        experts_touched: Vec::new(),
        routing: Default::default(),
    };
    let priced = crate::cost::price_quiet(&w, &s, &p)?;
    let (Some(&t), Some(&l), Some(c)) = (
        priced.base_us.first(),
        priced.split_us.first(),
        priced.collectives.first(),
    ) else {
        return Err(Error::field(
            &p.path,
            "collectives",
            format!(
                "no price for an all_reduce of {bytes} B on path '{}'",
                s.comm_path()
            ),
        ));
    };
    let l = l.clamp(0.0, t);
    // "measured: AIConfigurator nccl_collectives.csv (DIR), ..." -> its first clause.
    let from = c.source.split(" (").next().unwrap_or(&c.source).trim();
    Ok((
        l,
        t - l,
        format!(
            "{}/{}/{} [{}]",
            c.path,
            c.algo,
            c.proto,
            crate::units::clip(from, 90)
        ),
    ))
}

/// Fits the collective scales to the bursts and writes the profile.
pub fn fit_bursts(
    s: &Scenario,
    base: &CalibrationProfile,
    bursts: &[Burst],
    source: &str,
    out: &Path,
    name: Option<&str>,
) -> Result<BurstFit> {
    fit_bursts_at(s, base, bursts, &[], source, out, name)
}

/// [`fit_bursts`] with where each burst came from (`parse_bursts_at`), for its messages.
pub(crate) fn fit_bursts_at(
    s: &Scenario,
    base: &CalibrationProfile,
    bursts: &[Burst],
    at: &[String],
    source: &str,
    out: &Path,
    name: Option<&str>,
) -> Result<BurstFit> {
    if s.layout.tp < 2 {
        return Err(Error::FitData {
            source_name: "--from-burst".into(),
            problem: "the scenario has one rank (--tp 1): no allreduce to fit".into(),
        });
    }
    let warnings = check_bursts(s, bursts, at, source)?;
    let f0 = &base.factors;
    let mut rows = Vec::new();
    let mut entry = String::new();
    for b in bursts {
        let (l, x, e) = terms(s, base, b.bytes)?;
        entry = e;
        rows.push((l, x, b.per_collective_us()));
    }
    let sizes: std::collections::BTreeSet<u64> = bursts.iter().map(|b| b.bytes).collect();
    let fit = if sizes.len() >= 2 {
        fit_sizes(&rows, f0, source)?
    } else {
        fit_one_size(&rows, f0, source)?
    };
    let (lat, bw) = (fit.lat, fit.bw);
    for (v, name) in [
        (lat, "collective_latency_scale"),
        (bw, "collective_bw_scale"),
    ] {
        if !(0.01..=100.0).contains(&v) {
            return Err(Error::FitData { source_name: source.to_string(), problem: format!("fitted {name} = {v:.3} is outside [0.01, 100]: the burst does not look like this scenario's allreduce (check --tp, --p2p, --nccl-proto and the byte count)") });
        }
    }
    let predicted: Vec<(f64, f64)> = rows
        .iter()
        .map(|(l, x, _)| {
            (
                l * f0.collective_latency_scale + x / f0.collective_bw_scale,
                l * lat + x / bw,
            )
        })
        .collect();
    let priced = format!("{entry} at {} ranks", s.layout.tp);
    let p = scaled_profile(base, bursts, &fit, &priced, source, out, name);
    let header = format!(
        "# Written by `decodesim calibrate {source}` from profile '{}'.\n# {}",
        base.profile.name, p.factors.source
    );
    write_profile(out, &header, &p)?;
    Ok(BurstFit {
        profile: p,
        base: base.profile.name.clone(),
        bursts: bursts.to_vec(),
        predicted,
        latency_scale: lat,
        latency_ci95: fit.lat_ci,
        bw_scale: bw,
        bw_ci95: fit.bw_ci,
        notes: fit.notes,
        warnings,
        entry,
        out: out.to_path_buf(),
    })
}

/// The fitted collective scales, their intervals where the data give them, and what the
/// report says about the fit.
struct Scales {
    lat: f64,
    bw: f64,
    lat_ci: Option<f64>,
    bw_ci: Option<[f64; 2]>,
    notes: Vec<String>,
}

/// Two sizes or more: latency and 1/bandwidth scales by weighted least squares over the
/// (latency term, bytes term, measured µs) rows.
fn fit_sizes(rows: &[(f64, f64, f64)], f0: &Factors, source: &str) -> Result<Scales> {
    let mut scales = Scales {
        lat: f0.collective_latency_scale,
        bw: f0.collective_bw_scale,
        lat_ci: None,
        bw_ci: None,
        notes: Vec::new(),
    };
    let x: Vec<Vec<f64>> = rows.iter().map(|(l, x, _)| vec![*l, *x]).collect();
    let y: Vec<f64> = rows.iter().map(|r| r.2).collect();
    // Relative errors: weight 1/t² so a 10 ms burst does not drown a 50 µs one.
    let w: Vec<f64> = y.iter().map(|t| 1.0 / (t * t)).collect();
    let fit = weighted_least_squares(&x, &y, &w).ok_or_else(|| Error::FitData {
        source_name: source.to_string(),
        problem: "the burst sizes cannot separate latency from bandwidth (the design is singular)"
            .into(),
    })?;
    let (a, inv_bw) = (fit.coef[0], fit.coef[1]);
    if !(a > 0.0 && inv_bw > 0.0) {
        return Err(Error::FitData { source_name: source.to_string(), problem: format!("the bursts imply a {} (latency scale {a:.3}, 1/bandwidth scale {inv_bw:.3}): per-collective time should grow with message size; check the columns", if a <= 0.0 { "negative latency" } else { "negative bandwidth" }) });
    }
    scales.lat = a;
    scales.bw = 1.0 / inv_bw;
    if fit.dof > 0 {
        scales.lat_ci = Some(fit.ci95[0]);
        let (lo, hi) = (inv_bw + fit.ci95[1], inv_bw - fit.ci95[1]);
        scales.bw_ci = Some([1.0 / lo, if hi > 0.0 { 1.0 / hi } else { f64::INFINITY }]);
    } else {
        scales.notes.push("two burst sizes and two scales: an exact solution, no confidence interval (add a third size)".into());
    }
    Ok(scales)
}

/// One size: the term that dominates the profile's price is fitted, the other kept.
fn fit_one_size(rows: &[(f64, f64, f64)], f0: &Factors, source: &str) -> Result<Scales> {
    let (mut lat, mut bw) = (f0.collective_latency_scale, f0.collective_bw_scale);
    let mut notes = Vec::new();
    let (l, x) = rows.iter().fold((0.0, 0.0), |(a, b), r| (a + r.0, b + r.1));
    let t: f64 = rows.iter().map(|r| r.2).sum();
    if l * f0.collective_latency_scale >= x / f0.collective_bw_scale {
        lat = ((t - x / bw) / l).max(0.01);
        notes.push(format!(
            "one message size: it is latency-bound ({:.0}% of the profile's time is latency), so the latency scale is fitted and collective_bw_scale is not identifiable (kept at {bw})",
            100.0 * l / (l + x)
        ));
    } else {
        bw = (x / (t - l * lat)).max(0.01);
        if !(t > l * lat) {
            return Err(Error::FitData { source_name: source.to_string(), problem: format!("{:.2} µs per collective is below the profile's latency alone ({:.2} µs): the bandwidth scale cannot explain it", t / rows.len() as f64, l * lat / rows.len() as f64) });
        }
        notes.push(format!(
            "one message size: it is bandwidth-bound, so the bandwidth scale is fitted and collective_latency_scale is not identifiable (kept at {lat})"
        ));
    }
    if rows.len() >= 2 {
        notes.push(
            "several bursts of one size: their mean is fitted (no interval: one size cannot separate the terms)".into(),
        );
    }
    Ok(Scales {
        lat,
        bw,
        lat_ci: None,
        bw_ci: None,
        notes,
    })
}

/// The base profile with the fitted scales, named and described by the bursts they came from
/// and what priced them (`priced`: the entry and the ranks).
fn scaled_profile(
    base: &CalibrationProfile,
    bursts: &[Burst],
    fit: &Scales,
    priced: &str,
    source: &str,
    out: &Path,
    name: Option<&str>,
) -> CalibrationProfile {
    let (lat, bw) = (fit.lat, fit.bw);
    let mut p = base.clone();
    p.factors.collective_latency_scale = lat;
    p.factors.collective_bw_scale = bw;
    let list: Vec<String> = bursts
        .iter()
        .map(|b| format!("{} x {} B in {} µs", b.count, b.bytes, b.total_us))
        .collect();
    p.factors.source = format!(
        "calibrate {source} on profile '{}' ({priced}): collective_latency_scale = {lat:.4}, collective_bw_scale = {bw:.4}; bursts: {}",
        base.profile.name,
        list.join("; ")
    );
    p.profile.name = name.map(str::to_string).unwrap_or_else(|| {
        out.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "from-burst".into())
    });
    p.profile.description = format!(
        "profile '{}' with collective scales fitted to allreduce bursts",
        base.profile.name
    );
    p.profile.provenance = format!(
        "{}; collective scales fitted by {source} ({})",
        base.profile.provenance,
        list.join("; ")
    );
    super::from_throughput::relocate(&mut p, base, out);
    p
}
