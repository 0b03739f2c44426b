//! Table rows that ran from cache, and the line that prices their shapes from DRAM.
//!
//! A collector that repeats one call on the same weights (AIConfigurator's) keeps a small call's
//! working set in L2: its row is faster than the call can be in a decode step, where every
//! layer's weights were evicted by the other layers' since the step before. Interpolating
//! between such a row and the DRAM-bound rows above it misprices every shape in between (the
//! RTX PRO 6000's Kimi INT4 routed experts: 45.7 µs at 4 tokens, 32 experts' 99 MB read at
//! 2.2 TB/s on a 1.6 TB/s GPU; 160 µs at 8 tokens). A row is cache-resident when its working set
//! fits in L2 or its implied bandwidth beats DRAM; the shapes such rows would price are priced
//! instead by fixed cost + bytes / effective bandwidth, fitted by least squares to the
//! DRAM-bound rows of the same line in the regime where the time follows the bytes.

/// The DRAM-bound rows' line of one table line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DramLine {
    pub fixed_us: f64,
    /// µs per byte (1 / the effective bandwidth).
    pub us_per_byte: f64,
    /// The table's first row above its last cache-resident one: lookups below it use the line.
    pub first_dram_x: f64,
    /// DRAM-bound rows the line was fitted to.
    pub rows: usize,
}

impl DramLine {
    pub fn us(&self, bytes: f64) -> f64 {
        self.fixed_us + bytes * self.us_per_byte
    }

    /// The effective bandwidth in GB/s (bytes per µs / 1e3).
    pub fn gbps(&self) -> f64 {
        1e-3 / self.us_per_byte.max(1e-30)
    }
}

/// Whether a row moving `bytes` in `us` ran from cache: its working set fits in L2 (`l2_bytes`)
/// or it beats DRAM (`bw`: bytes per µs).
pub fn is_resident(bytes: f64, us: f64, l2_bytes: f64, bw: f64) -> bool {
    bytes <= l2_bytes || bytes > us * bw
}

/// The line of `rows` ((x, µs), ascending x) where some row is cache-resident: `bytes_at(x)` is
/// a row's working set; rows above `bytes_regime_x` are outside the regime where the time follows
/// the bytes (every expert already touched) and are not fitted. None where no row is resident
/// (the table stands) or fewer than two DRAM-bound rows are in the regime.
pub fn dram_line(
    rows: &[(f64, f64)],
    bytes_at: impl Fn(f64) -> f64,
    bytes_regime_x: f64,
    l2_bytes: f64,
    bw: f64,
) -> Option<DramLine> {
    let last_resident = rows
        .iter()
        .rposition(|&(x, us)| is_resident(bytes_at(x), us, l2_bytes, bw))?;
    let first_dram_x = rows.get(last_resident + 1)?.0;
    let pts: Vec<(f64, f64)> = rows[last_resident + 1..]
        .iter()
        .filter(|&&(x, _)| x <= bytes_regime_x)
        .map(|&(x, us)| (bytes_at(x), us))
        .collect();
    if pts.len() < 2 {
        return None;
    }
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    // No line may beat DRAM nor have a negative fixed cost: the slope at least 1/bw, the
    // intercept at least 0 (then the slope through the origin, still at least 1/bw).
    let mut slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    slope = slope.max(1.0 / bw);
    let mut fixed = my - slope * mx;
    if fixed < 0.0 {
        let sxx0: f64 = pts.iter().map(|p| p.0 * p.0).sum();
        let sxy0: f64 = pts.iter().map(|p| p.0 * p.1).sum();
        slope = (sxy0 / sxx0).max(1.0 / bw);
        fixed = 0.0;
    }
    Some(DramLine {
        fixed_us: fixed,
        us_per_byte: slope,
        first_dram_x,
        rows: pts.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The RTX PRO 6000's Kimi INT4 TP8 balanced rows (AIConfigurator moe.csv): tokens, µs.
    const KIMI_TP8: [(f64, f64); 7] = [
        (1.0, 32.069),
        (2.0, 37.573),
        (4.0, 45.733),
        (8.0, 160.288),
        (16.0, 295.909),
        (32.0, 517.221),
        (48.0, 824.176),
    ];
    /// One expert's TP8 slice of INT4 group-32 weights: 3 x 7168 x 256 x (0.5 + 2/32) bytes.
    const EXPERT: f64 = 3.0 * 7168.0 * 256.0 * 0.5625;

    fn kimi_bytes(x: f64) -> f64 {
        (x * 8.0).min(384.0) * EXPERT
    }

    #[test]
    fn rows_in_l2_or_faster_than_dram_are_resident() {
        let (l2, bw) = (128e6, 1597e3);
        assert!(is_resident(kimi_bytes(4.0), 45.733, l2, bw));
        assert!(!is_resident(kimi_bytes(8.0), 160.288, l2, bw));
        // Faster than DRAM though bigger than L2.
        assert!(is_resident(400e6, 200.0, l2, bw));
    }

    #[test]
    fn the_line_is_fitted_to_the_dram_bound_rows_and_never_beats_dram() {
        let (l2, bw) = (128e6, 1597e3);
        let line = dram_line(&KIMI_TP8, kimi_bytes, 48.0, l2, bw).unwrap();
        assert_eq!(line.first_dram_x, 8.0);
        assert_eq!(line.rows, 4);
        assert!(line.us_per_byte >= 1.0 / bw);
        // The fitted rows are met within 10%.
        for &(x, us) in &KIMI_TP8[3..] {
            let p = line.us(kimi_bytes(x));
            assert!((p / us - 1.0).abs() < 0.10, "x {x}: {p} vs {us}");
        }
        // Four tokens' 32 experts from DRAM cost more than the cached row's 45.7 µs and at
        // least their bytes at the DRAM bandwidth.
        let at4 = line.us(kimi_bytes(4.0));
        assert!(at4 > 45.733 && at4 >= kimi_bytes(4.0) / bw, "{at4}");
        assert!(
            (0.5..1.6).contains(&(line.gbps() / 1e3)),
            "{} GB/s",
            line.gbps()
        );
    }

    #[test]
    fn a_table_without_resident_rows_stands() {
        let rows = [(8.0, 160.0), (16.0, 300.0), (32.0, 560.0)];
        assert!(dram_line(&rows, kimi_bytes, 48.0, 128e6, 1597e3).is_none());
    }
}
