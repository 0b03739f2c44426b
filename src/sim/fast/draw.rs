//! A Monte Carlo draw of what is uncertain in the prices (`whatif::uncertainty`), applied to
//! the memoised prices as multipliers per op family.

use super::basis::Regime;
use super::CostFamily;

/// One Monte Carlo draw of what is uncertain in the prices (`whatif::uncertainty`), applied
/// after the memoised prices, per op family: the memo key need not include it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Draw {
    /// Multiplier of each op's price by its cost family (`CostFamily as usize`); for a
    /// collective, of its bandwidth (bytes) term.
    pub family: [f64; CostFamily::ALL.len()],
    /// Multiplier of every collective's latency term (base + steps × hop).
    pub collective_latency: f64,
    /// µs added to the idle at the end of every pass window (may be negative down to the
    /// profile's own overhead: the draw of a fitted `step_overhead_us`).
    pub step_overhead_us: f64,
}

impl Default for Draw {
    fn default() -> Self {
        Draw {
            family: [1.0; CostFamily::ALL.len()],
            collective_latency: 1.0,
            step_overhead_us: 0.0,
        }
    }
}

impl Draw {
    /// Whether some collective's latency and bandwidth terms are scaled apart.
    pub(super) fn splits_collectives(&self) -> bool {
        CostFamily::ALL
            .iter()
            .filter(|f| f.is_collective())
            .any(|&f| self.family[f as usize] != self.collective_latency)
    }

    /// Scales one pass's durations `d` (`lat`: the latency fractions of the regime's
    /// collectives, in `collective_ops` order; empty when not split).
    pub(super) fn apply(&self, regime: &Regime, d: &mut [f64], lat: &[f64]) {
        for (op, v) in regime.ops.iter().zip(d.iter_mut()) {
            let f = op.template.family;
            if !f.is_collective() {
                *v *= self.family[f as usize];
            }
        }
        for (j, &i) in regime.collective_ops.iter().enumerate() {
            let f = regime.ops[i].template.family;
            let l = lat.get(j).copied().unwrap_or(1.0);
            d[i] *= l * self.collective_latency + (1.0 - l) * self.family[f as usize];
        }
    }

    /// [`Draw::apply`] to each of `W` lanes of `d` (op-major).
    pub(super) fn apply_lanes<const W: usize>(&self, regime: &Regime, d: &mut [f64], lat: &[f64]) {
        if W == 1 {
            self.apply(regime, d, lat);
            return;
        }
        let mut one = vec![0.0; regime.ops.len()];
        for lane in 0..W {
            for (i, v) in one.iter_mut().enumerate() {
                *v = d[i * W + lane];
            }
            self.apply(regime, &mut one, lat);
            for (i, v) in one.iter().enumerate() {
                d[i * W + lane] = *v;
            }
        }
    }
}
