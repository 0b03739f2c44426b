//! The best rows and the Pareto front, kept as a sweep's rows go by.

use super::{Row, Summary};

/// Best rows and the Pareto front, updated row by row in grid order.
#[derive(Debug, Clone)]
pub struct Tracker {
    include_infeasible: bool,
    s: Summary,
}

impl Tracker {
    pub fn new(include_infeasible: bool) -> Self {
        Tracker {
            include_infeasible,
            s: Summary::default(),
        }
    }

    pub fn add(&mut self, r: &Row) {
        self.s.scenarios += 1;
        self.s.fitting += r.fits as u64;
        if !(r.tokens_per_s.is_finite() && r.tokens_per_s_per_user.is_finite()) {
            self.s.unpriced += 1;
            return;
        }
        if !(r.fits || self.include_infeasible) {
            return;
        }
        if self
            .s
            .best_total
            .is_none_or(|b| r.tokens_per_s > b.tokens_per_s)
        {
            self.s.best_total = Some(*r);
        }
        if self
            .s
            .best_per_user
            .is_none_or(|b| r.tokens_per_s_per_user > b.tokens_per_s_per_user)
        {
            self.s.best_per_user = Some(*r);
        }
        pareto_insert(&mut self.s.front, r);
    }

    pub fn finish(mut self, scenarios: u64) -> Summary {
        self.s.scenarios = scenarios;
        self.s
    }
}

/// Adds `r` to a front kept sorted by per-user tokens/s, most first (so total tokens/s rises
/// along it): `r` joins unless a member has at least its per-user and its total tokens/s (an
/// earlier row wins a tie), and then drops the members it has at least as much as on both.
pub fn pareto_insert(front: &mut Vec<Row>, r: &Row) {
    let (u, t) = (r.tokens_per_s_per_user, r.tokens_per_s);
    // Members with at least r's per-user rate form a prefix; the last has the most total.
    let p = front.partition_point(|m| m.tokens_per_s_per_user >= u);
    if p > 0 && front[p - 1].tokens_per_s >= t {
        return;
    }
    // r joins after the members with more per-user rate and replaces those it dominates: a
    // member with the same per-user rate (less total, else r was refused), then the following
    // members with no more total than r.
    let q = front.partition_point(|m| m.tokens_per_s_per_user > u);
    let mut end = p;
    while end < front.len() && front[end].tokens_per_s <= t {
        end += 1;
    }
    front.splice(q..end, std::iter::once(*r));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::category::Category;
    use crate::scenario::{Algo, Proto};

    fn row(per_user: f64, total: f64, fits: bool) -> Row {
        Row {
            pp: 1,
            dp: 1,
            batch: 1,
            context: 1,
            proto: Proto::Ll,
            algo: Algo::Ring,
            cuda_graphs: true,
            draft_tokens: 0,
            step_time_us: 1.0,
            tokens_per_s: total,
            tokens_per_s_per_user: per_user,
            mean_acceptance_length: 1.0,
            busy_us: [0.0; Category::ALL.len()],
            fits,
            ..crate::whatif::sweep::BLANK
        }
    }

    /// The front by brute force: rows no earlier-or-better row dominates.
    fn brute(rows: &[Row]) -> Vec<(f64, f64)> {
        let mut out: Vec<(f64, f64)> = rows
            .iter()
            .enumerate()
            .filter(|(i, r)| {
                !rows.iter().enumerate().any(|(j, o)| {
                    let ge = o.tokens_per_s_per_user >= r.tokens_per_s_per_user
                        && o.tokens_per_s >= r.tokens_per_s;
                    let same = o.tokens_per_s_per_user == r.tokens_per_s_per_user
                        && o.tokens_per_s == r.tokens_per_s;
                    ge && (!same || j < *i)
                })
            })
            .map(|(_, r)| (r.tokens_per_s_per_user, r.tokens_per_s))
            .collect();
        out.sort_by(|a, b| b.0.total_cmp(&a.0));
        out
    }

    #[test]
    fn incremental_front_matches_brute_force() {
        // A deterministic spread with ties on either axis.
        let mut x = 12345u64;
        let mut rows = Vec::new();
        for _ in 0..400 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = ((x >> 33) % 50) as f64;
            let t = ((x >> 13) % 50) as f64;
            rows.push(row(u, t, true));
        }
        let mut front = Vec::new();
        for r in &rows {
            pareto_insert(&mut front, r);
        }
        let got: Vec<(f64, f64)> = front
            .iter()
            .map(|r| (r.tokens_per_s_per_user, r.tokens_per_s))
            .collect();
        assert_eq!(got, brute(&rows));
    }

    #[test]
    fn infeasible_rows_are_never_best_unless_asked() {
        let rows = [row(10.0, 100.0, true), row(50.0, 500.0, false)];
        let mut t = Tracker::new(false);
        rows.iter().for_each(|r| t.add(r));
        let s = t.finish(2);
        assert_eq!(s.best_total.unwrap().tokens_per_s, 100.0);
        assert_eq!(s.front.len(), 1);
        assert_eq!(s.fitting, 1);
        let mut t = Tracker::new(true);
        rows.iter().for_each(|r| t.add(r));
        let s = t.finish(2);
        assert_eq!(s.best_total.unwrap().tokens_per_s, 500.0);
        assert_eq!(s.best_per_user.unwrap().tokens_per_s_per_user, 50.0);
    }
}
