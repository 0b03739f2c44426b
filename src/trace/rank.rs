//! Which rank a trace file belongs to: `distributedInfo.rank`, else the rank in vLLM's file name
//! (`..._rank{r}.{ns}.pt.trace.json.gz`, or a plainer `rank{r}` / `rank-{r}` / `rank_{r}`),
//! else the file's position among the inputs.

use super::error::{Result, TraceError};
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
}

impl RankSource {
    pub fn describe(self) -> &'static str {
        match self {
            RankSource::DistributedInfo => "distributedInfo.rank",
            RankSource::FileName => "file name",
            RankSource::FileOrder => "file order",
        }
    }
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
pub fn assign_ranks(
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
