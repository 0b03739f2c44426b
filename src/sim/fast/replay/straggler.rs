//! The straggler wait: what the engine's seeded jitter adds to the mean step, as one stream's
//! spread across ranks since they last met (`Spread`) and the expected wait of a collective
//! for the slowest of them (`Straggler`, read off a table of E[max] per rank count).

use super::HashMap;

// ---------------------------------------------------------------------------------------------
// The straggler wait: what the engine's seeded jitter adds to the mean step.
//
// With jitter on (`cost::profile::Variability`, drawn in `sim::engine`), rank r's kernel of base
// time b lasts b × v_r × (1 + a·U), where v_r = 1 + s·U' is the rank's speed for the whole step
// (s = rank_skew_cv·√3), a = kernel_cv·√3 and U, U' are uniform on [-1, 1]; each rank also
// starts at its own launch offset, uniform on [0, launch_skew_us]. Collective transfer jitter is
// one draw for every rank, so it moves no mean. Every draw has mean zero, so each rank's mean
// timeline is the fast path's; but a collective ends at the LATEST arrival, and all ranks leave
// it together. Between two collectives each rank's arrival deviates from the mean by
//     D_r = (v_r − 1)·S + Σ b_i·a·U_i (+ its launch offset, from a launch clock),
// S = Σ b_i over the kernels on the critical path since the ranks last met (the stream each
// kernel, fork and join follows in the recursion). The mean collective therefore waits
// E[max over N ranks of D_r] beyond the fast path. D_r is a uniform of half-width s·S plus, by
// the central limit theorem, a normal of variance kernel_cv²·Σ b_i² (the launch offset's
// variance launch_skew_us²/12 joins it on a path from a launch clock: the step's start or an
// eager launch that bound the kernel). E[max] of N such sums is tabulated once per N by
// numerical integration (`expected_max_table`) and read at the path's mix of the two.
//
// The marginal is all that matters: ranks meet at every collective, so the waits add up even
// though each rank keeps its speed all step. Left out (measured by tests/fast_vs_seeds.rs):
// ties at a join or at the CPU's launch clock where ranks split between the two sides.
// ---------------------------------------------------------------------------------------------

/// One stream's spread across ranks since the ranks last met at a collective.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::sim::fast) struct Spread {
    /// Kernel time on the path (each rank's speed scales it).
    pub(in crate::sim::fast) sum: f64,
    /// Sum of squares of those kernels' times (each jitters independently).
    pub(in crate::sim::fast) sq: f64,
    /// The path starts at a launch clock (the step's start or a CPU-bound eager launch), whose
    /// ranks are apart by the launch skew.
    pub(in crate::sim::fast) launch: bool,
}

impl Spread {
    /// The spread of a path that follows `self` with `next`.
    #[inline]
    pub(in crate::sim::fast) fn then(&self, next: &Spread) -> Spread {
        Spread {
            sum: self.sum + next.sum,
            sq: self.sq + next.sq,
            launch: self.launch || next.launch,
        }
    }

    /// Just after a collective: every rank at the same time.
    pub(in crate::sim::fast) const MET: Spread = Spread {
        sum: 0.0,
        sq: 0.0,
        launch: false,
    };
    /// At a launch clock: apart by the launch skew only.
    pub(in crate::sim::fast) const LAUNCH: Spread = Spread {
        sum: 0.0,
        sq: 0.0,
        launch: true,
    };
}

/// Points of the E[max] table over the normal share of the variance, 0 to 1.
pub(in crate::sim::fast) const STRAGGLER_POINTS: usize = 65;

/// The expected straggler wait of one profile's jitter over one scenario's ranks.
#[derive(Debug, Clone)]
pub(in crate::sim::fast) struct Straggler {
    /// Half-width of the rank speed's uniform draw (rank_skew_cv × √3).
    pub(in crate::sim::fast) skew: f64,
    /// kernel_cv²: variance of one kernel's relative jitter.
    pub(in crate::sim::fast) kernel_var: f64,
    /// launch_skew_us² / 12: variance of the ranks' uniform launch offsets.
    pub(in crate::sim::fast) launch_var: f64,
    /// E[max of N] of a unit-variance uniform-plus-normal sum, at normal shares of the
    /// variance 0, 1/64, ..., 1 (`expected_max_table`); empty: no wait (one rank, no jitter).
    pub(in crate::sim::fast) table: std::sync::Arc<[f64]>,
    /// Any wait at all (else the spreads are not tracked: a step with no collective, TP=1,
    /// still reaches its steady state).
    pub(in crate::sim::fast) on: bool,
    /// The wait of a collective the CPU's launch bound (the launch skew alone), precomputed:
    /// eager steps meet it at most collectives.
    pub(in crate::sim::fast) launch_wait: f64,
    /// A wait within one tensor-parallel group at all (`on` also covers the wide group's).
    pub(in crate::sim::fast) own: bool,
    /// The wide group is larger than a TP group (data-parallel attention): the spread is
    /// carried across TP collectives to the next wide one (`State::carry`).
    pub(in crate::sim::fast) layered: bool,
    /// The same over the whole expert-parallel group (`Kind::Collective { wide }`: data-parallel
    /// attention's dispatch and combine meet DP × TP ranks); a copy of this one otherwise.
    pub(in crate::sim::fast) wide: Box<WideStraggler>,
}

/// The straggler wait of collectives that sync the whole expert-parallel group.
#[derive(Debug, Clone)]
pub(in crate::sim::fast) struct WideStraggler {
    pub(in crate::sim::fast) table: std::sync::Arc<[f64]>,
    pub(in crate::sim::fast) on: bool,
    pub(in crate::sim::fast) skew: f64,
    pub(in crate::sim::fast) kernel_var: f64,
    pub(in crate::sim::fast) launch_var: f64,
    pub(in crate::sim::fast) launch_wait: f64,
}

impl WideStraggler {
    #[inline]
    pub(in crate::sim::fast) fn wait(&self, sp: &Spread) -> f64 {
        straggler_wait(
            self.on,
            self.skew,
            self.kernel_var,
            self.launch_var,
            &self.table,
            sp,
        )
    }
}

/// Expected wait of a collective whose arriving path has spread `sp` (see `Straggler`), µs.
#[inline]
fn straggler_wait(
    on: bool,
    skew: f64,
    kernel_var: f64,
    launch_var: f64,
    table: &[f64],
    sp: &Spread,
) -> f64 {
    if !on {
        return 0.0;
    }
    let w = skew * sp.sum;
    let uniform = w * w / 3.0;
    let normal = kernel_var * sp.sq + if sp.launch { launch_var } else { 0.0 };
    let var = uniform + normal;
    if var <= 0.0 {
        return 0.0;
    }
    let x = normal / var * (STRAGGLER_POINTS - 1) as f64;
    // x ≥ 0 (a share of the variance): through i64, one instruction where usize takes a dozen.
    let i = (x as i64 as usize).min(STRAGGLER_POINTS - 2);
    let t = x - i as f64;
    var.sqrt() * (table[i] + t * (table[i + 1] - table[i]))
}

impl Straggler {
    /// `ranks`: a tensor-parallel group's; `wide`: the expert-parallel group's (data-parallel
    /// attention: DP × TP; `ranks` otherwise).
    pub(in crate::sim::fast) fn new(
        v: &crate::cost::profile::Variability,
        ranks: u32,
        wide: u32,
    ) -> Self {
        let mut sg = Self::one(v, ranks);
        let w = if wide == ranks {
            sg.clone()
        } else {
            Self::one(v, wide)
        };
        sg.own = sg.on;
        sg.on |= w.on;
        sg.layered = wide > ranks && w.on;
        sg.wide = Box::new(WideStraggler {
            table: w.table,
            on: w.on,
            skew: w.skew,
            kernel_var: w.kernel_var,
            launch_var: w.launch_var,
            launch_wait: w.launch_wait,
        });
        sg
    }

    fn one(v: &crate::cost::profile::Variability, ranks: u32) -> Self {
        let skew = v.rank_skew_cv * 3f64.sqrt();
        let kernel_var = v.kernel_cv * v.kernel_cv;
        let launch_var = v.launch_skew_us * v.launch_skew_us / 12.0;
        let on = ranks > 1 && (skew > 0.0 || kernel_var > 0.0 || launch_var > 0.0);
        let mut sg = Straggler {
            on,
            skew,
            kernel_var,
            launch_var,
            table: if on {
                expected_max_table(ranks)
            } else {
                std::sync::Arc::from(Vec::new())
            },
            launch_wait: 0.0,
            own: on,
            layered: false,
            wide: Box::new(WideStraggler {
                table: std::sync::Arc::from(Vec::new()),
                on: false,
                skew: 0.0,
                kernel_var: 0.0,
                launch_var: 0.0,
                launch_wait: 0.0,
            }),
        };
        sg.launch_wait = sg.wait(&Spread::LAUNCH);
        sg
    }

    /// Expected wait of a collective whose arriving path has spread `sp`, µs.
    #[inline]
    pub(in crate::sim::fast) fn wait(&self, sp: &Spread) -> f64 {
        straggler_wait(
            self.own,
            self.skew,
            self.kernel_var,
            self.launch_var,
            &self.table,
            sp,
        )
    }
}

/// E[max of `n` iid Y], Y = √(1−q)·√3·U + √q·Z (U uniform on [-1, 1], Z standard normal: unit
/// variance, a share q of it normal), at q = j/64. Computed once per `n` and kept. By symmetry of
/// Y, E[max] = ∫₀^∞ 1 − F(x)ⁿ − (1 − F(x))ⁿ dx (Simpson's rule), where the CDF of the sum is
/// F(x) = σ/(2h)·[G((x+h)/σ) − G((x−h)/σ)], G(t) = tΦ(t) + φ(t) (the uniform of half-width h
/// convolved with the normal of deviation σ). Checked against the exact ends: √3·(n−1)/(n+1) for
/// the uniform (the mean of the top order statistic) and E[max of n standard normals]
/// (n = 2: 1/√π; tabulated by Harter, 1961).
pub(in crate::sim::fast) fn expected_max_table(n: u32) -> std::sync::Arc<[f64]> {
    use std::sync::{Arc, Mutex, OnceLock};
    static TABLES: OnceLock<Mutex<HashMap<u32, Arc<[f64]>>>> = OnceLock::new();
    let tables = TABLES.get_or_init(Default::default);
    if let Some(t) = tables.lock().map(|m| m.get(&n).cloned()).ok().flatten() {
        return t;
    }
    let table: Arc<[f64]> = (0..STRAGGLER_POINTS)
        .map(|j| expected_max(n, j as f64 / (STRAGGLER_POINTS - 1) as f64))
        .collect();
    if let Ok(mut m) = tables.lock() {
        m.insert(n, table.clone());
    }
    table
}

/// E[max of `n` iid unit-variance uniform-plus-normal sums with normal share `q` of the variance.
pub(in crate::sim::fast) fn expected_max(n: u32, q: f64) -> f64 {
    let phi = |t: f64| (-0.5 * t * t).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let cdf = |t: f64| 0.5 * statrs::function::erf::erfc(-t / std::f64::consts::SQRT_2);
    let h = 3f64.sqrt() * (1.0 - q).max(0.0).sqrt();
    let sigma = q.sqrt();
    if q <= 0.0 {
        // The top of n uniforms on [-h, h] lies at h·(n−1)/(n+1) on average.
        return h * (n as f64 - 1.0) / (n as f64 + 1.0);
    }
    let f = |x: f64| -> f64 {
        if sigma < 1e-9 {
            ((x + h) / (2.0 * h)).clamp(0.0, 1.0)
        } else if h < 1e-6 * sigma {
            cdf(x / sigma)
        } else {
            let g = |t: f64| t * cdf(t) + phi(t);
            (sigma / (2.0 * h) * (g((x + h) / sigma) - g((x - h) / sigma))).clamp(0.0, 1.0)
        }
    };
    let nf = n as f64;
    let integrand = |x: f64| {
        let p = f(x);
        1.0 - p.powf(nf) - (1.0 - p).powf(nf)
    };
    // Y is within h + 9σ of 0 but for ~1e-19; 2400 Simpson intervals.
    let top = h + 9.0 * sigma;
    let m = 2400;
    let dx = top / m as f64;
    let mut sum = integrand(0.0) + integrand(top);
    for k in 1..m {
        sum += integrand(k as f64 * dx) * if k % 2 == 1 { 4.0 } else { 2.0 };
    }
    sum * dx / 3.0
}

#[cfg(test)]
mod straggler_tests {
    use super::*;

    /// The table's ends against the exact values: the mean top order statistic of n uniforms,
    /// and E[max of n standard normals] (n = 2: 1/√π; n = 4, 8: Harter 1961, "Expected values
    /// of normal order statistics", Biometrika 48, table 1: 1.02938, 1.42360).
    #[test]
    pub(super) fn expected_max_matches_known_values() {
        for n in [2u32, 4, 8] {
            let u = 3f64.sqrt() * (n as f64 - 1.0) / (n as f64 + 1.0);
            assert!((expected_max(n, 0.0) - u).abs() < 1e-12);
            // Just off the pure uniform the integral (kink smoothed) agrees with the end.
            assert!((expected_max(n, 1e-10) - u).abs() < 1e-4, "n {n}");
        }
        let pi = std::f64::consts::PI;
        for (n, e) in [(2u32, 1.0 / pi.sqrt()), (4, 1.029_375), (8, 1.423_600)] {
            let got = expected_max(n, 1.0);
            assert!((got - e).abs() < 2e-6, "n {n}: {got} vs {e}");
        }
        // A mix lies between the two ends (the normal's tail lifts the max above the uniform's).
        let mid = expected_max(8, 0.5);
        assert!(
            mid > expected_max(8, 0.0) && mid < expected_max(8, 1.0),
            "{mid}"
        );
    }

    /// The wait read off the table: a pure skew path waits its uniform's top order statistic,
    /// one rank or no jitter waits nothing.
    #[test]
    pub(super) fn wait_of_a_path() {
        let v = crate::cost::profile::Variability {
            kernel_cv: 0.0,
            rank_skew_cv: 0.01,
            collective_cv: 0.03,
            launch_skew_us: 0.0,
            source: String::new(),
        };
        let sp = Spread {
            sum: 100.0,
            sq: 2000.0,
            launch: false,
        };
        let w = Straggler::new(&v, 8, 8).wait(&sp);
        let expect = 100.0 * 0.01 * 3f64.sqrt() * 7.0 / 9.0;
        assert!((w - expect).abs() < 1e-9, "{w} vs {expect}");
        assert_eq!(Straggler::new(&v, 1, 1).wait(&sp), 0.0);
        let off = crate::cost::profile::Variability {
            rank_skew_cv: 0.0,
            collective_cv: 0.0,
            ..v
        };
        assert_eq!(Straggler::new(&off, 8, 8).wait(&sp), 0.0);
        // Kernel jitter alone: σ·E[max of 2 normals] = σ/√π.
        let k = crate::cost::profile::Variability {
            kernel_cv: 0.02,
            rank_skew_cv: 0.0,
            ..off
        };
        let w = Straggler::new(&k, 2, 2).wait(&sp);
        let expect = 0.02 * 2000f64.sqrt() / std::f64::consts::PI.sqrt();
        assert!((w - expect).abs() < 1e-5 * expect, "{w} vs {expect}");
    }
}
