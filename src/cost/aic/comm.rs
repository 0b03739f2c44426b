//! AIConfigurator's collective rows as prices: a curve of latency against bytes with NCCL's
//! LL-to-Simple switch found in it, read log-log inside the rows and linearly outside them.

use crate::cost::table::{interp, TablePrice};
use crate::scenario::Proto;

/// One collective's latency against message bytes, and where NCCL's tuner switched from LL to
/// Simple in it: the row at 64 KiB or more where the incremental cost per byte falls most, and
/// by more than 1/0.6 (LL moves half its bytes as flags, docs/sources.md §4.2, so the switch shows as a
/// drop in latency or a sharp kink).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommCurve {
    pub pts: Vec<(f64, f64)>,
    /// Index of the first Simple row; None when no switch shows.
    pub switch: Option<usize>,
}

/// Below this size a slope change is noise (the latency floor dominates).
const SWITCH_MIN_BYTES: f64 = 65_536.0;

impl CommCurve {
    pub(super) fn new(mut pts: Vec<(f64, f64)>) -> Self {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts.dedup_by(|a, b| a.0 == b.0);
        let slope = |i: usize| (pts[i].1 - pts[i - 1].1) / (pts[i].0 - pts[i - 1].0);
        // The sharpest fall of the cost per byte (a drop in latency counts as infinite): a
        // protocol change, where a wiggle at small sizes is a smaller one.
        let fall = |i: usize| {
            let (a, b) = (slope(i - 1), slope(i));
            if b <= 0.0 {
                f64::INFINITY
            } else {
                a / b
            }
        };
        let switch = (2..pts.len())
            .filter(|&i| pts[i].0 >= SWITCH_MIN_BYTES && fall(i) > 1.0 / 0.6)
            .max_by(|&i, &j| fall(i).total_cmp(&fall(j)).then(j.cmp(&i)));
        CommCurve { pts, switch }
    }

    /// The rows of one protocol regime (`Auto`: all of them, NCCL's own choice per size).
    pub fn regime(&self, proto: Proto) -> Option<&[(f64, f64)]> {
        match (proto, self.switch) {
            (Proto::Auto, _) => Some(&self.pts),
            (Proto::Ll, Some(s)) => Some(&self.pts[..s]),
            (Proto::Simple, Some(s)) => Some(&self.pts[s..]),
            (Proto::Ll, None) => Some(&self.pts),
            _ => None,
        }
    }

    /// The switch as a size bracket (last LL row, first Simple row), bytes.
    pub fn switch_bytes(&self) -> Option<(f64, f64)> {
        self.switch.map(|s| (self.pts[s - 1].0, self.pts[s].0))
    }
}

/// Latency against bytes: log-log inside the rows, linear (latency + bytes / bandwidth of the
/// end segment) outside them, which is how a collective grows.
pub fn comm_price(pts: &[(f64, f64)], bytes: f64) -> Option<TablePrice> {
    let (first, last) = (pts.first()?, pts.last()?);
    if pts.len() == 1 {
        return Some(TablePrice {
            us: first.1,
            extrapolated: bytes != first.0,
        });
    }
    let lin = |a: (f64, f64), b: (f64, f64)| {
        let slope = ((b.1 - a.1) / (b.0 - a.0)).max(0.0);
        (a.1 + slope * (bytes - a.0)).max(a.1.min(b.1) * 0.5)
    };
    if bytes > last.0 {
        let n = pts.len();
        return Some(TablePrice {
            us: lin(pts[n - 2], pts[n - 1]),
            extrapolated: true,
        });
    }
    if bytes < first.0 {
        return Some(TablePrice {
            us: lin(pts[0], pts[1]).min(first.1),
            extrapolated: true,
        });
    }
    interp(pts, bytes)
}

/// The latency part of a collective's price read from `pts`: the rows' first segment
/// extrapolated to zero bytes (within [0, the first row]). The bytes term is the rest, so a
/// regime whose rows start at a large size (Simple from 1 MiB) still has one.
pub fn comm_latency(pts: &[(f64, f64)]) -> f64 {
    match pts {
        [] => 0.0,
        [a] => a.1,
        [a, b, ..] => {
            let slope = ((b.1 - a.1) / (b.0 - a.0)).max(0.0);
            (a.1 - slope * a.0).clamp(0.0, a.1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_found_at_the_drop_and_at_the_kink() {
        // 8 ranks: the 1 MiB row is cheaper than the 512 KiB row (NCCL moved to Simple).
        let c = CommCurve::new(vec![
            (65_536.0, 34.2),
            (131_072.0, 47.8),
            (262_144.0, 84.8),
            (524_288.0, 156.1),
            (1_048_576.0, 131.5),
            (2_097_152.0, 221.2),
        ]);
        assert_eq!(c.switch, Some(4));
        assert_eq!(c.regime(Proto::Ll).unwrap().len(), 4);
        assert_eq!(c.regime(Proto::Simple).unwrap()[0].0, 1_048_576.0);
        // 4 ranks: no drop, but the cost per byte falls to a tenth.
        let c = CommCurve::new(vec![
            (131_072.0, 24.9),
            (262_144.0, 41.0),
            (524_288.0, 78.1),
            (1_048_576.0, 86.1),
            (2_097_152.0, 141.7),
        ]);
        assert_eq!(c.switch_bytes(), Some((524_288.0, 1_048_576.0)));
    }

    #[test]
    fn comm_price_extrapolates_linearly() {
        let pts = [(100.0, 10.0), (200.0, 20.0), (400.0, 30.0)];
        let p = comm_price(&pts, 800.0).unwrap();
        assert!(p.extrapolated && (p.us - 50.0).abs() < 1e-9, "{p:?}");
        let p = comm_price(&pts, 200.0).unwrap();
        assert!(!p.extrapolated && (p.us - 20.0).abs() < 1e-9);
    }
}
