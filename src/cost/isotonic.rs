//! Isotonic fits of measured tables: a kernel's time never falls as its work grows (more tokens,
//! a longer KV, more bytes), so a table row below an earlier one is timing noise of the
//! collector, not the kernel. Pooling adjacent violators (the least-squares fit that is
//! non-decreasing) replaces each run of violating rows by its mean, which keeps what the rows
//! measured on average and lets interpolation between rows never reward more work.
//!
//! Collective tables are not fitted: NCCL's protocol switch is a real drop in latency with size
//! (a slower protocol chosen below the switch), which a monotone fit would erase.

/// Fits `ys` (in the order of their sizes) to the closest non-decreasing sequence in least
/// squares, in place. Returns how many values changed.
pub fn fit(ys: &mut [f64]) -> usize {
    // Blocks of pooled values: (sum, count), merged while a block's mean is below the one
    // before it.
    let mut blocks: Vec<(f64, usize)> = Vec::with_capacity(ys.len());
    for &y in ys.iter() {
        blocks.push((y, 1));
        while blocks.len() > 1 {
            let (s1, n1) = blocks[blocks.len() - 1];
            let (s0, n0) = blocks[blocks.len() - 2];
            if s1 / n1 as f64 >= s0 / n0 as f64 {
                break;
            }
            blocks.pop();
            let last = blocks.len() - 1;
            blocks[last] = (s0 + s1, n0 + n1);
        }
    }
    let mut changed = 0;
    let mut i = 0;
    for (s, n) in blocks {
        let mean = s / n as f64;
        for y in &mut ys[i..i + n] {
            if *y != mean {
                changed += 1;
                *y = mean;
            }
        }
        i += n;
    }
    changed
}

/// Fits the second member of `(size, time)` rows sorted by size. Returns how many changed.
pub fn fit_rows(rows: &mut [(f64, f64)]) -> usize {
    let mut ys: Vec<f64> = rows.iter().map(|r| r.1).collect();
    let changed = fit(&mut ys);
    for (r, y) in rows.iter_mut().zip(ys) {
        r.1 = y;
    }
    changed
}

/// Fits `(batch, step, time)` rows sorted by (step, batch) to be non-decreasing along both the
/// batch (within a step) and the step (within a batch), by alternating passes until neither
/// changes anything (at most a few). Returns how many rows differ from what was read.
pub fn fit_grid(rows: &mut [(f64, f64, f64)]) -> usize {
    let read: Vec<f64> = rows.iter().map(|r| r.2).collect();
    for _ in 0..8 {
        let mut changed = 0;
        // Along the batch: runs of one step are contiguous.
        let mut i = 0;
        while i < rows.len() {
            let step = rows[i].1;
            let end = i + rows[i..].partition_point(|r| r.1 <= step);
            let mut ys: Vec<f64> = rows[i..end].iter().map(|r| r.2).collect();
            changed += fit(&mut ys);
            for (r, y) in rows[i..end].iter_mut().zip(ys) {
                r.2 = y;
            }
            i = end;
        }
        // Along the step, at each batch (rows in step order already).
        let mut batches: Vec<f64> = rows.iter().map(|r| r.0).collect();
        batches.sort_by(f64::total_cmp);
        batches.dedup();
        for b in batches {
            let at: Vec<usize> = (0..rows.len()).filter(|&k| rows[k].0 == b).collect();
            let mut ys: Vec<f64> = at.iter().map(|&k| rows[k].2).collect();
            changed += fit(&mut ys);
            for (&k, y) in at.iter().zip(ys) {
                rows[k].2 = y;
            }
        }
        if changed == 0 {
            break;
        }
    }
    rows.iter().zip(read).filter(|(r, y)| r.2 != *y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotone_rows_are_kept() {
        let mut v = [1.0, 2.0, 2.0, 5.0];
        assert_eq!(fit(&mut v), 0);
        assert_eq!(v, [1.0, 2.0, 2.0, 5.0]);
    }

    #[test]
    fn a_dip_is_pooled_with_the_rows_it_undercuts() {
        // 10, 12, 9, 15: 12 and 9 pool to 10.5; 10 <= 10.5 <= 15.
        let mut v = [10.0, 12.0, 9.0, 15.0];
        assert_eq!(fit(&mut v), 2);
        assert_eq!(v, [10.0, 10.5, 10.5, 15.0]);
        // A low row late pools back across several: 5, 6, 7, 2 -> all 5 (the first was 5).
        let mut v = [5.0, 6.0, 7.0, 2.0];
        assert_eq!(fit(&mut v), 3);
        assert_eq!(v, [5.0; 4]);
        // The sum is kept (least squares under the order constraint).
        let before: f64 = [3.0, 1.0, 4.0, 1.0, 5.0].iter().sum();
        let mut v = [3.0, 1.0, 4.0, 1.0, 5.0];
        fit(&mut v);
        assert!((v.iter().sum::<f64>() - before).abs() < 1e-12);
        assert!(v.windows(2).all(|w| w[0] <= w[1]), "{v:?}");
        assert_eq!(v, [2.0, 2.0, 2.5, 2.5, 5.0]);
    }

    #[test]
    fn rows_keep_their_sizes() {
        let mut r = [(1.0, 4.0), (2.0, 3.0), (4.0, 8.0)];
        assert_eq!(fit_rows(&mut r), 2);
        assert_eq!(r, [(1.0, 3.5), (2.0, 3.5), (4.0, 8.0)]);
    }

    #[test]
    fn a_grid_is_monotone_in_both_axes() {
        // (batch, step, µs) sorted by step then batch; at step 2 the batch-2 row dips below
        // step 1's.
        let mut g = [
            (1.0, 1.0, 10.0),
            (2.0, 1.0, 12.0),
            (1.0, 2.0, 11.0),
            (2.0, 2.0, 11.5),
        ];
        let n = fit_grid(&mut g);
        for w in [(0, 1), (2, 3), (0, 2), (1, 3)] {
            assert!(g[w.0].2 <= g[w.1].2 + 1e-12, "{g:?}");
        }
        assert_eq!(n, 2, "{g:?}");
        // 12 and 11.5 pool along the step to 11.75; 11 <= 11.75 along the batch.
        assert_eq!(g[1].2, 11.75);
        assert_eq!(g[3].2, 11.75);
    }
}
