//! Prices ops from a measurement table (the harness's kernels.csv) by interpolation: exact
//! match on the shape columns, log-log interpolation along tokens (and context for attention).
//! Shapes the table does not hold fall back to the roofline law.

use crate::error::Result;
use crate::measurements::{read_kernels_csv, KernelFamily, KernelPoint};
use crate::workload::op::MeasureKey;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

type Key = (KernelFamily, u64, u64, u64);

#[derive(Debug, Clone)]
pub struct KernelTable {
    pub path: PathBuf,
    /// (family, n, k, batch) → its points (a sorted list is looked up by bisection: a table
    /// has a few hundred groups, and a sweep reads one per priced shape).
    groups: Vec<(Key, Group)>,
}

/// One shape's points, laid out for lookup without allocation.
#[derive(Debug, Clone)]
struct Group {
    /// (m, µs) of every point, sorted by (context, m).
    line: Vec<(f64, f64)>,
    /// The distinct contexts, ascending, and where each one's points start in `line` (one
    /// more: the end).
    ctxs: Vec<f64>,
    starts: Vec<usize>,
    /// (ln m, ln µs) of every point of `line`, and ln of every context: the interpolation's
    /// logarithms of the measured points, taken once (a sweep prices a new context per row).
    logs: Vec<(f64, f64)>,
    ctx_logs: Vec<f64>,
}

/// (m, µs), or their logarithms.
type Point = (f64, f64);

impl Group {
    /// The points at the `i`-th distinct context, as (m, µs), and their logarithms.
    fn at_context(&self, i: usize) -> (&[Point], &[Point]) {
        let r = self.starts[i]..self.starts[i + 1];
        (&self.line[r.clone()], &self.logs[r])
    }
}

impl PartialEq for KernelTable {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}

/// A table price and whether it lies outside the measured range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TablePrice {
    pub us: f64,
    pub extrapolated: bool,
}

/// The grouped GEMM's `batch` column repeats m; attention's repeats the batch axis.
fn batch_key(family: KernelFamily, batch: u64) -> u64 {
    match family {
        KernelFamily::MoeGroupedBf16 | KernelFamily::AttentionMlaDecode => 0,
        _ => batch.max(1),
    }
}

impl KernelTable {
    pub fn read(path: &Path) -> Result<Self> {
        Ok(Self::from_points(path, &read_kernels_csv(path)?))
    }

    pub fn from_points(path: &Path, pts: &[KernelPoint]) -> Self {
        let mut points: HashMap<Key, Vec<(f64, f64, f64)>> = HashMap::new();
        for p in pts {
            // The INT4 rows differ by group size, which the key does not carry.
            if p.family == KernelFamily::GemmInt4 {
                continue;
            }
            let key = (p.family, p.n, p.k, batch_key(p.family, p.batch));
            points
                .entry(key)
                .or_default()
                .push((p.m, p.context as f64, p.median_us));
        }
        let mut groups: Vec<(Key, Group)> = points
            .into_iter()
            .map(|(key, mut v)| {
                v.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.total_cmp(&b.0)));
                let (mut ctxs, mut starts) = (Vec::new(), Vec::new());
                for (i, p) in v.iter().enumerate() {
                    if ctxs.last() != Some(&p.1) {
                        ctxs.push(p.1);
                        starts.push(i);
                    }
                }
                starts.push(v.len());
                let line: Vec<(f64, f64)> = v.iter().map(|p| (p.0, p.2)).collect();
                let logs = line.iter().map(|p| (p.0.ln(), p.1.ln())).collect();
                let ctx_logs = ctxs.iter().map(|c| c.ln()).collect();
                (
                    key,
                    Group {
                        line,
                        ctxs,
                        starts,
                        logs,
                        ctx_logs,
                    },
                )
            })
            .collect();
        groups.sort_by_key(|g| g.0);
        KernelTable {
            path: path.to_path_buf(),
            groups,
        }
    }

    fn group(&self, key: &MeasureKey) -> Option<&Group> {
        // A family the harness does not measure has no table entry: the law prices it.
        let family = KernelFamily::from_name(key.family)?;
        let k = (family, key.n, key.k, batch_key(family, key.batch));
        let i = self.groups.binary_search_by_key(&k, |g| g.0).ok()?;
        Some(&self.groups[i].1)
    }

    pub fn len(&self) -> usize {
        self.groups.iter().map(|g| g.1.line.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    pub fn price(&self, key: &MeasureKey) -> Option<TablePrice> {
        let g = self.group(key)?;
        if key.context == 0 {
            return interp_ln(&g.line, &g.logs, key.m as f64);
        }
        // Two axes: interpolate along m at the two bracketing contexts, then along context.
        let ctxs = &g.ctxs;
        let c = key.context as f64;
        let (lo, hi) = bracket(ctxs, c)?;
        let at = |i: usize| {
            let (line, logs) = g.at_context(i);
            interp_ln(line, logs, key.m as f64)
        };
        let (a, b) = (at(lo)?, at(hi)?);
        let us = log_lerp_ln(
            (ctxs[lo], g.ctx_logs[lo]),
            (a.us, a.us.ln()),
            (ctxs[hi], g.ctx_logs[hi]),
            (b.us, b.us.ln()),
            c,
        );
        Some(TablePrice {
            us,
            extrapolated: a.extrapolated
                || b.extrapolated
                || c < ctxs[0]
                || c > ctxs[ctxs.len() - 1],
        })
    }
}

impl KernelTable {
    /// The smallest context the table measured this key's shape at (None: no such group, or a
    /// shape without a context axis).
    pub fn min_context(&self, key: &MeasureKey) -> Option<u64> {
        if key.context == 0 {
            return None;
        }
        let g = self.group(key)?;
        g.ctxs.first().map(|&c| c as u64)
    }
}

/// Indices of the two points bracketing x in a sorted, deduplicated axis (the end pair when
/// x lies outside).
pub(crate) fn bracket(axis: &[f64], x: f64) -> Option<(usize, usize)> {
    match axis.len() {
        0 => None,
        1 => Some((0, 0)),
        n => {
            let i = axis.partition_point(|&v| v <= x);
            let hi = i.clamp(1, n - 1);
            Some((hi - 1, hi))
        }
    }
}

pub(crate) fn log_lerp(x0: f64, y0: f64, x1: f64, y1: f64, x: f64) -> f64 {
    if x0 == x1 || x0 <= 0.0 || x1 <= 0.0 || y0 <= 0.0 || y1 <= 0.0 || x <= 0.0 {
        return if x1 == x0 {
            y0
        } else {
            y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        };
    }
    log_lerp_ln(
        (x0, x0.ln()),
        (y0, y0.ln()),
        (x1, x1.ln()),
        (y1, y1.ln()),
        x,
    )
}

/// [`log_lerp`] with the ends' logarithms given as (value, ln value), for callers that keep
/// them (a table's axis, a line read at one batch): the same operations, the same bits.
pub(crate) fn log_lerp_ln(
    (x0, lx0): (f64, f64),
    (y0, ly0): (f64, f64),
    (x1, lx1): (f64, f64),
    (y1, ly1): (f64, f64),
    x: f64,
) -> f64 {
    if x0 == x1 || x0 <= 0.0 || x1 <= 0.0 || y0 <= 0.0 || y1 <= 0.0 || x <= 0.0 {
        return if x1 == x0 {
            y0
        } else {
            y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        };
    }
    let t = (x.ln() - lx0) / (lx1 - lx0);
    (ly0 + t * (ly1 - ly0)).exp()
}

/// [`interp`] over a line whose points' logarithms are kept (`logs[i]` is (ln x, ln y) of
/// `line[i]`): the same operations, the same bits.
fn interp_ln(line: &[(f64, f64)], logs: &[(f64, f64)], x: f64) -> Option<TablePrice> {
    let (lo, hi) = line_bracket(line, x)?;
    let (a, b, la, lb) = (line[lo], line[hi], logs[lo], logs[hi]);
    let us = log_lerp_ln((a.0, la.0), (a.1, la.1), (b.0, lb.0), (b.1, lb.1), x);
    Some(line_price(line, us, x))
}

pub(crate) fn interp(line: &[(f64, f64)], x: f64) -> Option<TablePrice> {
    let (lo, hi) = line_bracket(line, x)?;
    let us = log_lerp(line[lo].0, line[lo].1, line[hi].0, line[hi].1, x);
    Some(line_price(line, us, x))
}

/// [`bracket`] over a line's points' x, read in place: no axis is collected (this runs per
/// priced shape, a sweep's hot path).
fn line_bracket(line: &[(f64, f64)], x: f64) -> Option<(usize, usize)> {
    let n = line.len();
    match n {
        0 => None,
        1 => Some((0, 0)),
        _ => {
            let hi = line.partition_point(|p| p.0 <= x).clamp(1, n - 1);
            Some((hi - 1, hi))
        }
    }
}

/// `us` read off `line` at `x`, flagged when x lies outside the measured points.
fn line_price(line: &[(f64, f64)], us: f64, x: f64) -> TablePrice {
    TablePrice {
        us,
        extrapolated: x < line[0].0 || x > line[line.len() - 1].0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(family: &str, m: f64, n: u64, ctx: u64, us: f64) -> KernelPoint {
        KernelPoint {
            family: family.parse().unwrap(),
            m,
            n,
            k: 7,
            batch: 1,
            context: ctx,
            flops: 0.0,
            bytes: 0.0,
            median_us: us,
            p10_us: us,
            p90_us: us,
        }
    }

    #[test]
    fn interpolates_log_log_and_flags_extrapolation() {
        let t = KernelTable::from_points(
            Path::new("t.csv"),
            &[
                pt("gemm_bf16", 1.0, 8, 0, 10.0),
                pt("gemm_bf16", 4.0, 8, 0, 40.0),
                pt("gemm_bf16", 16.0, 8, 0, 40.0),
            ],
        );
        let key = |m| MeasureKey::new("gemm_bf16", m, 8, 7);
        assert!((t.price(&key(2)).unwrap().us - 20.0).abs() < 1e-9);
        assert_eq!(
            t.price(&key(4)).unwrap(),
            TablePrice {
                us: 40.0,
                extrapolated: false
            }
        );
        assert!((t.price(&key(8)).unwrap().us - 40.0).abs() < 1e-9);
        assert!(t.price(&key(32)).unwrap().extrapolated);
        assert!(t.price(&MeasureKey::new("gemm_bf16", 2, 9, 7)).is_none());
    }

    #[test]
    fn two_axis_attention() {
        let pts: Vec<KernelPoint> = [
            (1.0, 1024, 10.0),
            (4.0, 1024, 20.0),
            (1.0, 4096, 40.0),
            (4.0, 4096, 80.0),
        ]
        .iter()
        .map(|&(m, c, us)| KernelPoint {
            batch: m as u64,
            k: 576,
            ..pt("attention_mla_decode", m, 32, c, us)
        })
        .collect();
        let t = KernelTable::from_points(Path::new("a.csv"), &pts);
        let key = MeasureKey {
            context: 2048,
            batch: 2,
            ..MeasureKey::new("attention_mla_decode", 2, 32, 576)
        };
        // Geometric midpoints: m=2 gives sqrt(10·20) and sqrt(40·80); ctx 2048 gives their geometric mean.
        let want = ((10.0f64 * 20.0).sqrt() * (40.0f64 * 80.0).sqrt()).sqrt();
        let got = t.price(&key).unwrap();
        assert!((got.us - want).abs() < 1e-9 && !got.extrapolated);
    }
}
