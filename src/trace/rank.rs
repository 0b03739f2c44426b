//! Which rank a trace file belongs to: `distributedInfo.rank`, else the rank in vLLM's file name
//! (`..._rank{r}.{ns}.pt.trace.json.gz`, or a plainer `rank{r}` / `rank-{r}` / `rank_{r}`),
//! else the file's position among the inputs; and whether a set of files is the ranks of one
//! run, all of them ([`check_one_run`], [`check_complete`]).
//!
//! Signals that two files come from different runs, each cheap and robust (none relies on the
//! GPU timestamps, whose clock is per host, so ranks on two nodes are not refused):
//! - `distributedInfo.world_size`, `.backend` or `.nccl_version` differ;
//! - the `deviceProperties` GPU names differ;
//! - `baseTimeNanoseconds` (each process's profiler start, wall clock) are more than
//!   [`MAX_START_SPREAD_S`] apart: the ranks of one run start profiling at the same step;
//! - vLLM/harness file names `{stem}_rank{r}.{ns}.pt.trace.json[.gz]` whose stems differ (after
//!   `tp3`, `ep3`, ... group indices are set aside: they differ between ranks of one run), or
//!   whose `{ns}` save times are more than [`MAX_START_SPREAD_S`] apart.

use super::error::{Result, TraceError};
use super::model::TraceMeta;
use regex::Regex;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RankSource {
    DistributedInfo,
    FileName,
    FileOrder,
    /// A decodesim `--timeline` holding every simulated rank in one file: each rank is its own
    /// process (device) there.
    SimulatedTimeline,
}

impl RankSource {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            RankSource::DistributedInfo => "distributedInfo.rank",
            RankSource::FileName => "file name",
            RankSource::FileOrder => "file order",
            RankSource::SimulatedTimeline => "the simulated timeline's process id",
        }
    }
}

/// The longest plausible spread of one run's ranks' profiler start (and save) times, seconds.
/// Ranks start and stop profiling together (a collective call); a run profiled again later is
/// minutes away.
const MAX_START_SPREAD_S: f64 = 600.0;

/// What a caller allows of a set of rank files beyond one complete run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RankPolicy {
    /// Fewer files than `distributedInfo.world_size` (`--allow-partial-ranks`).
    pub allow_partial: bool,
    /// Files that look like different runs (`--allow-mixed-runs`).
    pub allow_mixed_runs: bool,
}

fn vllm_name(path: &Path) -> Option<(String, f64)> {
    static RE: OnceLock<Regex> = OnceLock::new();
    static GROUP: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r"^(.*)_rank\d+\.(\d+)\.pt\.trace\.json(\.gz)?$")
            .unwrap_or_else(|e| unreachable!("{e}"))
    });
    let group = GROUP.get_or_init(|| {
        Regex::new(r"(^|_)(dp|pp|tp|dcp|pcp|ep)\d+").unwrap_or_else(|e| unreachable!("{e}"))
    });
    let name = path.file_name()?.to_str()?;
    let c = re.captures(name)?;
    let stem = group.replace_all(&c[1], "${1}${2}#").into_owned();
    Some((stem, c[2].parse::<f64>().ok()?))
}

/// Refuses files that look like different runs (see the module doc for the signals).
pub(crate) fn check_one_run(paths: &[PathBuf], metas: &[&TraceMeta]) -> Result<()> {
    let mixed = |i: usize, why: String| TraceError::MixedRuns {
        first: paths[0].clone(),
        second: paths[i].clone(),
        why,
    };
    let names: Vec<Option<(String, f64)>> = paths.iter().map(|p| vllm_name(p)).collect();
    let (m0, n0) = (metas[0], &names[0]);
    for i in 1..metas.len() {
        let m = metas[i];
        let differ = |what: &str, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
            mixed(
                i,
                format!("{what} is {a:?} in the first and {b:?} in the second"),
            )
        };
        if let (Some(a), Some(b)) = (m0.world_size, m.world_size) {
            if a != b {
                return Err(differ("distributedInfo.world_size", &a, &b));
            }
        }
        if let (Some(a), Some(b)) = (&m0.backend, &m.backend) {
            if a != b {
                return Err(differ("distributedInfo.backend", a, b));
            }
        }
        if let (Some(a), Some(b)) = (&m0.nccl_version, &m.nccl_version) {
            if a != b {
                return Err(differ("distributedInfo.nccl_version", a, b));
            }
        }
        if !m0.device_names.is_empty()
            && !m.device_names.is_empty()
            && m0.device_names != m.device_names
        {
            return Err(differ(
                "the deviceProperties GPU list",
                &m0.device_names,
                &m.device_names,
            ));
        }
        if let (Some(a), Some(b)) = (m0.base_time_ns, m.base_time_ns) {
            let apart = (a - b).abs() / 1e9;
            if apart > MAX_START_SPREAD_S {
                return Err(mixed(
                    i,
                    format!(
                        "their profilers started {apart:.0} s apart (baseTimeNanoseconds; one run's ranks start within {MAX_START_SPREAD_S} s)"
                    ),
                ));
            }
        }
        if let (Some((s0, t0)), Some((s, t))) = (n0, &names[i]) {
            if s0 != s {
                return Err(mixed(
                    i,
                    format!("the file name stems differ ('{s0}' vs '{s}')"),
                ));
            }
            let apart = (t0 - t).abs() / 1e9;
            if apart > MAX_START_SPREAD_S {
                return Err(mixed(
                    i,
                    format!("the save times in their file names are {apart:.0} s apart (one run's ranks save together)"),
                ));
            }
        }
    }
    Ok(())
}

/// Refuses a set of files that is not every rank of `distributedInfo.world_size`.
pub(crate) fn check_complete(
    paths: &[PathBuf],
    metas: &[&TraceMeta],
    ranks: &[(u32, RankSource)],
) -> Result<()> {
    let Some((i, world)) = metas
        .iter()
        .enumerate()
        .find_map(|(i, m)| m.world_size.map(|w| (i, w)))
    else {
        return Ok(());
    };
    if let Some((j, &(r, _))) = ranks
        .iter()
        .enumerate()
        .find(|(_, (r, _))| i64::from(*r) >= world)
    {
        return Err(TraceError::PartialRanks {
            path: paths[j].clone(),
            problem: format!("rank {r} is outside distributedInfo.world_size {world}"),
        });
    }
    if (paths.len() as i64) < world {
        let have: std::collections::BTreeSet<u32> = ranks.iter().map(|r| r.0).collect();
        let missing: Vec<String> = (0..world.min(1 << 20) as u32)
            .filter(|r| !have.contains(r))
            .take(8)
            .map(|r| r.to_string())
            .collect();
        let more = (world as usize - have.len()).saturating_sub(missing.len());
        return Err(TraceError::PartialRanks {
            path: paths[i].clone(),
            problem: format!(
                "distributedInfo.world_size is {world} but {} rank file(s) were given; missing rank(s) {}{}",
                paths.len(),
                missing.join(", "),
                if more > 0 { format!(" and {more} more") } else { String::new() }
            ),
        });
    }
    Ok(())
}

fn file_name_rank(path: &Path) -> Option<u32> {
    static VLLM: OnceLock<Regex> = OnceLock::new();
    static PLAIN: OnceLock<Regex> = OnceLock::new();
    let name = path.file_name()?.to_str()?;
    // vLLM's suffix first: it is exact, and a prefix may contain other numbers.
    let vllm = VLLM.get_or_init(|| {
        Regex::new(r"_rank(\d+)\.\d+\.pt\.trace\.json(\.gz)?$")
            .unwrap_or_else(|e| unreachable!("{e}"))
    });
    let plain = PLAIN
        .get_or_init(|| Regex::new(r"(?i)rank[_-]?(\d+)").unwrap_or_else(|e| unreachable!("{e}")));
    let caps = vllm.captures(name).or_else(|| plain.captures(name))?;
    caps.get(1)?.as_str().parse().ok()
}

/// Assigns a rank to each file. `meta_ranks[i]` is file i's `distributedInfo.rank`.
/// The same source is used for every file when possible, so one file's metadata cannot clash
/// with another's file-name rank.
pub(crate) fn assign_ranks(
    paths: &[PathBuf],
    meta_ranks: &[Option<i64>],
) -> Result<Vec<(u32, RankSource)>> {
    let from_meta: Option<Vec<u32>> = meta_ranks
        .iter()
        .map(|r| r.and_then(|r| u32::try_from(r).ok()))
        .collect();
    let from_name: Option<Vec<u32>> = paths.iter().map(|p| file_name_rank(p)).collect();
    let distinct = |v: &Vec<u32>| {
        let mut s = v.clone();
        s.sort_unstable();
        s.windows(2).all(|w| w[0] != w[1])
    };
    let chosen = match (from_meta, from_name) {
        (Some(m), _) if distinct(&m) => m
            .into_iter()
            .map(|r| (r, RankSource::DistributedInfo))
            .collect(),
        (_, Some(n)) if distinct(&n) => n.into_iter().map(|r| (r, RankSource::FileName)).collect(),
        (Some(m), _) => return Err(duplicate(&m, paths)),
        _ => (0..paths.len() as u32)
            .map(|r| (r, RankSource::FileOrder))
            .collect(),
    };
    Ok(chosen)
}

fn duplicate(ranks: &[u32], paths: &[PathBuf]) -> TraceError {
    for i in 0..ranks.len() {
        for j in i + 1..ranks.len() {
            if ranks[i] == ranks[j] {
                return TraceError::DuplicateRank {
                    rank: ranks[i],
                    first: paths[i].clone(),
                    second: paths[j].clone(),
                };
            }
        }
    }
    unreachable!("called only when a duplicate exists")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_name_patterns() {
        let r = |s: &str| file_name_rank(Path::new(s));
        assert_eq!(
            r("dp0_pp0_tp0_dcp0_ep0_rank3.1764523456789012345.pt.trace.json.gz"),
            Some(3)
        );
        assert_eq!(
            r("refstep_b8_c1024_nccl_rank1.123.pt.trace.json.gz"),
            Some(1)
        );
        assert_eq!(r("sampled_rank-1.json.gz"), Some(1));
        assert_eq!(r("trace.json.gz"), None);
    }

    #[test]
    fn vllm_stems_set_group_indices_aside() {
        let a = vllm_name(Path::new(
            "dp0_pp0_tp0_dcp0_ep0_rank0.1764523456789012345.pt.trace.json.gz",
        ));
        let b = vllm_name(Path::new(
            "dp0_pp0_tp1_dcp0_ep1_rank1.1764523456789999999.pt.trace.json.gz",
        ));
        assert_eq!(a.as_ref().unwrap().0, b.as_ref().unwrap().0);
        let c = vllm_name(Path::new(
            "refstep_b16_c8192_default_rank1.1.pt.trace.json.gz",
        ));
        let d = vllm_name(Path::new(
            "refstep_b128_c1024_default_rank0.1.pt.trace.json.gz",
        ));
        assert_ne!(c.unwrap().0, d.unwrap().0);
    }

    #[test]
    fn one_run_and_complete() {
        let p = |s: &str| PathBuf::from(s);
        let paths = [p("a.json"), p("b.json")];
        let m = |w: i64, base: f64| TraceMeta {
            world_size: Some(w),
            base_time_ns: Some(base),
            ..TraceMeta::default()
        };
        let (a, b) = (m(2, 0.0), m(2, 5e9));
        assert!(check_one_run(&paths, &[&a, &b]).is_ok());
        let e = check_one_run(&paths, &[&a, &m(4, 0.0)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("world_size") && e.contains("b.json"), "{e}");
        let e = check_one_run(&paths, &[&a, &m(2, 4000e9)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("4000 s apart"), "{e}");
        let ranks = [(0, RankSource::DistributedInfo)];
        let e = check_complete(&paths[..1], &[&a], &ranks)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("world_size is 2") && e.contains("missing rank(s) 1"),
            "{e}"
        );
    }

    #[test]
    fn sources_in_order() {
        let p = |s: &str| PathBuf::from(s);
        let paths = [p("a_rank1.5.pt.trace.json"), p("b_rank0.5.pt.trace.json")];
        let r = assign_ranks(&paths, &[Some(7), Some(6)]).unwrap();
        assert_eq!(
            r,
            [
                (7, RankSource::DistributedInfo),
                (6, RankSource::DistributedInfo)
            ]
        );
        let r = assign_ranks(&paths, &[Some(0), None]).unwrap();
        assert_eq!(r, [(1, RankSource::FileName), (0, RankSource::FileName)]);
        let r = assign_ranks(&[p("x.json"), p("y.json")], &[None, None]).unwrap();
        assert_eq!(r, [(0, RankSource::FileOrder), (1, RankSource::FileOrder)]);
        assert!(assign_ranks(&[p("x.json"), p("y.json")], &[Some(0), Some(0)]).is_err());
    }
}
