//! Reports of `decodesim sweep`, streamed: one CSV row per scenario, a JSON object whose rows
//! are written element by element (the best rows and the Pareto front after them), or a short
//! summary. Rows are formatted into byte buffers with integer and fixed-point writers (no
//! `format!` per field): at a million scenarios, formatting is a large share of the work.

mod digits;
mod rows;
mod summary;
mod writer;

use crate::category::Category;
use crate::error::Result;
use crate::whatif::sweep::Row;
use crate::whatif::uncertainty::Interval;
pub use rows::{csv_row, csv_rows, json_row};
pub use summary::{csv_header_with_intervals, summary};
pub use writer::Writer;

/// Prices the p5/p50/p95 of tokens/s of the rows a sweep decides on (`sweep --intervals`).
pub type DecisionIntervals = Box<dyn Fn(&[Row]) -> Result<Vec<Interval>>>;

/// What the output holds besides its format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Csv,
    Json,
    /// A short summary at the end (no rows).
    Summary,
}

pub fn csv_header() -> String {
    let mut h = String::from("model,system,calibration,batch,context,nccl_proto,nccl_algo,cuda_graphs,draft_tokens,mean_acceptance_length,step_time_us,tokens_per_s,tokens_per_s_per_user,fits");
    for c in Category::ALL {
        h.push(',');
        h.push_str(c.name());
        h.push_str("_busy_us");
    }
    // Appended last, so that the columns before it keep their places.
    h.push_str(",pp,dp");
    h.push('\n');
    h
}

#[cfg(test)]
mod tests {
    use super::digits::push_fixed;
    use super::*;
    use crate::scenario::{Algo, Proto};

    /// Rows written together (number columns keeping their last text) are the bytes of each
    /// row written alone: over repeated and changing values, both zeros, NaN, a value on a
    /// rounding half and one past the fast writer's range.
    #[test]
    fn rows_written_together_are_each_row_alone() {
        let values = [
            12579.251,
            12579.251,
            0.0,
            -0.0,
            f64::NAN,
            0.0005,
            1e300,
            2627.5735,
            2627.5735,
            7.0,
        ];
        let mut rows = Vec::new();
        for (i, &v) in values.iter().enumerate() {
            for j in 0..3 {
                let mut busy = [1841.38; Category::ALL.len()];
                busy[2] = v + j as f64;
                busy[5] = if j == 1 { v } else { 3.5 };
                rows.push(Row {
                    pp: 1 + j as u32,
                    dp: 1,
                    batch: 1 + i as u32,
                    context: 1000 + j,
                    proto: Proto::Ll,
                    algo: Algo::Ring,
                    cuda_graphs: j != 2,
                    draft_tokens: 0,
                    step_time_us: v,
                    tokens_per_s: if j == 0 { v } else { 79.496 },
                    tokens_per_s_per_user: 79.4960,
                    mean_acceptance_length: 1.0,
                    busy_us: busy,
                    fits: true,
                    // The layout settings rows name only where a grid lists them.
                    ..crate::whatif::sweep::BLANK
                });
            }
        }
        let prefix = b"kimi-k2.5,sys,cal,";
        let mut together = Vec::new();
        csv_rows(&mut together, prefix, &rows);
        let mut alone = Vec::new();
        for r in &rows {
            csv_row(&mut alone, prefix, r);
        }
        assert_eq!(
            String::from_utf8(together).unwrap(),
            String::from_utf8(alone).unwrap()
        );
    }

    #[test]
    fn fixed_point_matches_format() {
        for v in [
            0.0,
            1.0,
            0.5,
            1234.5678,
            0.0004,
            0.0005,
            0.00051,
            99.9996,
            1e9 + 0.123,
            -3.25,
            -0.0001,
            7.0e-7,
            123456789.987654,
            99_999_999.999_999_9,
            100_000_000.0,
            12_345_678.0,
            0.999_999_6,
            -99_999_999.5,
        ] {
            for d in [0u32, 1, 3, 4, 5, 6, 7] {
                let mut out = Vec::new();
                push_fixed(&mut out, v, d);
                let got = String::from_utf8(out).unwrap();
                let want = format!("{v:.*}", d as usize);
                // 0.0005 and 0.5 are (near) ties: decided as format! does.
                assert_eq!(got, want, "{v} at {d} decimals");
            }
        }
        // Random values, and values on or next to a half at 3 and 4 decimals (busy times built
        // from 4-decimal table values), against `format!`.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            let v = match i % 4 {
                0 => u * 10f64.powi((i % 12) as i32),
                1 => ((x % 10_000_000) as f64 + 0.5) / 1000.0,
                2 => ((x % 100_000_000) as f64 * 0.0001) * (1 + i % 61) as f64,
                _ => -u * 1e4,
            };
            for d in [0u32, 2, 3, 4, 6] {
                let mut out = Vec::new();
                push_fixed(&mut out, v, d);
                let want = format!("{v:.*}", d as usize);
                assert_eq!(
                    String::from_utf8(out).unwrap(),
                    want,
                    "{v:e} at {d} decimals"
                );
            }
        }
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e300] {
            let mut out = Vec::new();
            push_fixed(&mut out, v, 3);
            assert_eq!(String::from_utf8(out).unwrap(), format!("{v:.3}"));
        }
    }
}
