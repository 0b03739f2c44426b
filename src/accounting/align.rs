//! Communication wait vs transfer. A collective cannot finish on any rank before the last rank
//! arrives, so on every rank its kernel lasts (time waiting for the last rank) + (the transfer).
//! The last rank to arrive waits for nobody: its kernel duration *is* the transfer. So for each
//! collective instance, aligned across ranks as the n-th collective of the same step on each
//! rank, transfer = the shortest duration over ranks and each rank's wait = its duration minus
//! that. This uses durations only, so it needs no clock synchronisation between hosts.

use serde::Serialize;

/// How the collectives were matched across ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AlignMethod {
    /// One rank only: nothing to align, all communication time is reported as transfer.
    SingleRank,
    /// The n-th collective of step k on every rank (ranks have the same number of steps).
    PerStep,
    /// The n-th collective of the whole trace on every rank (step counts differ).
    WholeTrace,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alignment {
    pub method: AlignMethod,
    /// Collective instances matched on every rank.
    pub aligned: usize,
    /// Collectives present on some ranks only (counted as transfer on theirs).
    pub unmatched: usize,
    /// `[rank][step] = (wait_us, transfer_us)`.
    #[serde(skip)]
    pub(crate) per_rank: Vec<Vec<(f64, f64)>>,
}

/// `ranks[r][k]` lists the (start, end) of rank r's collectives in its k-th step, in start order.
pub(crate) fn split_wait_transfer(ranks: &[Vec<Vec<(f64, f64)>>]) -> Alignment {
    let mut per_rank: Vec<Vec<(f64, f64)>> = ranks
        .iter()
        .map(|steps| {
            steps
                .iter()
                .map(|ops| (0.0, ops.iter().map(|(s, e)| e - s).sum()))
                .collect()
        })
        .collect();
    if ranks.len() < 2 {
        return Alignment {
            method: AlignMethod::SingleRank,
            aligned: 0,
            unmatched: 0,
            per_rank,
        };
    }
    // Groups of instances to align: each is a list of (rank, step, duration).
    let same_steps = ranks.windows(2).all(|w| w[0].len() == w[1].len());
    let mut groups: Vec<Vec<(usize, usize, f64)>> = Vec::new();
    let mut unmatched = 0;
    let mut align = |lists: Vec<Vec<(usize, f64)>>| {
        let n = lists.iter().map(Vec::len).min().unwrap_or(0);
        unmatched += lists.iter().map(|l| l.len() - n).sum::<usize>();
        for i in 0..n {
            groups.push(
                lists
                    .iter()
                    .enumerate()
                    .map(|(r, l)| (r, l[i].0, l[i].1))
                    .collect(),
            );
        }
    };
    if same_steps {
        for k in 0..ranks[0].len() {
            align(
                ranks
                    .iter()
                    .map(|steps| steps[k].iter().map(|(s, e)| (k, e - s)).collect())
                    .collect(),
            );
        }
    } else {
        align(
            ranks
                .iter()
                .map(|steps| {
                    steps
                        .iter()
                        .enumerate()
                        .flat_map(|(k, ops)| ops.iter().map(move |(s, e)| (k, e - s)))
                        .collect()
                })
                .collect(),
        );
    }
    let aligned = groups.len();
    for g in &groups {
        let transfer = g.iter().map(|x| x.2).fold(f64::INFINITY, f64::min);
        for &(r, k, d) in g {
            per_rank[r][k].0 += d - transfer;
            per_rank[r][k].1 -= d - transfer;
        }
    }
    Alignment {
        method: if same_steps {
            AlignMethod::PerStep
        } else {
            AlignMethod::WholeTrace
        },
        aligned,
        unmatched,
        per_rank,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_arriver_shows_the_transfer() {
        // Rank 0 arrives at 0 and waits for rank 1 (arrives at 30); both end at 40.
        let r0 = vec![vec![(0.0, 40.0), (100.0, 110.0)]];
        let r1 = vec![vec![(30.0, 40.0), (95.0, 110.0)]];
        let a = split_wait_transfer(&[r0, r1]);
        assert_eq!(a.method, AlignMethod::PerStep);
        assert_eq!(a.aligned, 2);
        assert_eq!(a.per_rank[0][0], (30.0, 20.0));
        assert_eq!(a.per_rank[1][0], (5.0, 20.0));
        // Wait + transfer is each rank's collective time.
        assert_eq!(a.per_rank[0][0].0 + a.per_rank[0][0].1, 50.0);
    }

    #[test]
    fn single_rank_and_mismatch() {
        let a = split_wait_transfer(&[vec![vec![(0.0, 5.0)]]]);
        assert_eq!(a.method, AlignMethod::SingleRank);
        assert_eq!(a.per_rank[0][0], (0.0, 5.0));
        let a = split_wait_transfer(&[vec![vec![(0.0, 5.0), (6.0, 8.0)]], vec![vec![(0.0, 3.0)]]]);
        assert_eq!((a.aligned, a.unmatched), (1, 1));
        assert_eq!(a.per_rank[0][0], (2.0, 5.0));
    }
}
