//! Intervals of a serving run (`decodesim serve`): the run's own steps replayed under each
//! draw's prices.
//!
//! The scheduler's choices depend on tokens, never on time (each client sends its next request
//! when its last one finishes), so a draw changes only how long each step takes: every step's
//! price is multiplied by the draw's ratio for its shape, and the requests' times are read off
//! the redrawn clock. A decode step takes the draw's ratio of the same decode step
//! ([`Drawn::step_ratios`]); a step with prefill chunks takes the ratio of a decode step of as
//! many tokens at the chunks' mean KV length (the GEMMs and collectives that dominate a chunk
//! see the same draws; its attention over the prefix is priced differently, which the ratio
//! does not follow).

use super::{timeline_step_ratios, Drawn, Interval, Uncertainty};
use crate::cost::CalibrationProfile;
use crate::error::Result;
use crate::scenario::Scenario;
use crate::sim::serving::Schedule;
use crate::workload::mixed::MixedStep;
use serde::Serialize;

/// p5 / p50 / p95 of a run's headline metrics over the draws.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ServeIntervals {
    pub draws: usize,
    /// Output tokens/s over the run.
    pub output_throughput: Interval,
    pub ttft_mean_ms: Interval,
    pub tpot_mean_ms: Interval,
    pub tpot_median_ms: Interval,
    pub e2el_mean_ms: Interval,
    /// Every shape took the ratios of the run's mean decode step on the timeline (the fast
    /// path does not price this deployment's decode step).
    pub from_mean_step: bool,
}

/// The decode step whose draws stand for `shape`: (tokens, KV length).
fn stand_in(shape: &MixedStep) -> (u32, u64) {
    let tokens = shape.tokens().clamp(1, u32::MAX as u64) as u32;
    if shape.chunks.is_empty() {
        return (tokens, shape.context.max(1));
    }
    // Decode sequences at their context, chunk tokens at the middle of their span.
    let mut kv = shape.decode as f64 * shape.context as f64;
    for c in &shape.chunks {
        kv += c.tokens as f64 * (c.prefix as f64 + c.tokens as f64 / 2.0);
    }
    (tokens, (kv / tokens as f64).round().max(1.0) as u64)
}

/// Per shape of `sched`, per draw, the step's drawn time over its undrawn time.
fn shape_ratios(
    s: &Scenario,
    p: &CalibrationProfile,
    sched: &Schedule,
    draws: usize,
    seed: u64,
) -> Result<(Vec<Vec<f64>>, bool)> {
    match Drawn::new(s, p, None, draws, seed) {
        Ok(d) => Ok((
            sched
                .shapes
                .iter()
                .map(|(shape, _)| {
                    let (tokens, kv) = stand_in(shape);
                    d.step_ratios(tokens, kv)
                })
                .collect(),
            false,
        )),
        Err(_) => {
            // The run's mean decode step, played on the timeline under each draw.
            let (mut n, mut tokens, mut kv) = (0.0f64, 0.0f64, 0.0f64);
            for &i in &sched.steps {
                let (t, c) = stand_in(&sched.shapes[i as usize].0);
                n += 1.0;
                tokens += t as f64;
                kv += c as f64;
            }
            let mut mean = s.clone();
            mean.batch = (tokens / n.max(1.0)).round().max(1.0) as u32;
            mean.context = (kv / n.max(1.0)).round().max(1.0) as u64;
            let u = Uncertainty::from_profile(p, &mean)?;
            let r = timeline_step_ratios(&mean, p, &u, draws, seed)?;
            Ok((vec![r; sched.shapes.len()], true))
        }
    }
}

/// The serving run's metrics under each of `draws` draws of its prices (module doc); None for
/// no draws.
pub fn serve_intervals(
    s: &Scenario,
    p: &CalibrationProfile,
    sched: &Schedule,
    draws: usize,
    seed: u64,
) -> Result<Option<ServeIntervals>> {
    if draws == 0 {
        return Ok(None);
    }
    let (ratios, from_mean_step) = shape_ratios(s, p, sched, draws, seed)?;
    let mut clock = Vec::with_capacity(sched.steps.len() + 1);
    let mut per_request = Vec::with_capacity(sched.requests.len());
    let mut by_metric: [Vec<f64>; 5] = Default::default();
    for d in 0..ratios.first().map_or(0, Vec::len) {
        let price: Vec<f64> = sched
            .shapes
            .iter()
            .zip(&ratios)
            .map(|((_, us), r)| us * r[d])
            .collect();
        let m = replay(sched, &price, &mut clock, &mut per_request);
        for (v, x) in by_metric.iter_mut().zip(m) {
            v.push(x);
        }
    }
    let [out, ttft, tpot, tpot_median, e2el] = by_metric;
    Ok(Some(ServeIntervals {
        draws: out.len(),
        output_throughput: Interval::of(&out),
        ttft_mean_ms: Interval::of(&ttft),
        tpot_mean_ms: Interval::of(&tpot),
        tpot_median_ms: Interval::of(&tpot_median),
        e2el_mean_ms: Interval::of(&e2el),
        from_mean_step,
    }))
}

/// The run of `sched` with each shape priced at `price` (µs): output tokens/s and the mean
/// TTFT, mean and median TPOT and mean end-to-end latency (ms), as `sim::serving` computes
/// them from its own clock. `clock` and `per_request` are scratch.
fn replay(
    sched: &Schedule,
    price: &[f64],
    clock: &mut Vec<f64>,
    per_request: &mut Vec<f64>,
) -> [f64; 5] {
    clock.clear();
    clock.push(0.0);
    let mut t = 0.0;
    for &i in &sched.steps {
        t += price[i as usize];
        clock.push(t);
    }
    let at = |step: u64| clock[step as usize] / 1e3;
    let n = sched.requests.len().max(1) as f64;
    let total_out: u64 = sched.requests.iter().map(|r| r.output).sum();
    let mean = |f: &dyn Fn(&crate::sim::serving::RequestSteps) -> f64| {
        sched.requests.iter().map(f).sum::<f64>() / n
    };
    let ttft = mean(&|r| at(r.first_token) - at(r.sent));
    let e2el = mean(&|r| at(r.done) - at(r.sent));
    per_request.clear();
    per_request.extend(
        sched
            .requests
            .iter()
            .filter(|r| r.output > 1)
            .map(|r| (at(r.done) - at(r.first_token)) / (r.output - 1) as f64),
    );
    let tpot = per_request.iter().sum::<f64>() / per_request.len().max(1) as f64;
    per_request.sort_by(f64::total_cmp);
    let tpot_median = crate::sim::serving::stats::percentile(per_request, 50.0);
    [
        total_out as f64 / (t / 1e6).max(f64::MIN_POSITIVE),
        ttft,
        tpot,
        tpot_median,
        e2el,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::mixed::PrefillChunk;

    #[test]
    fn the_undrawn_prices_replay_the_run_exactly() {
        let (s, p) = crate::sim::ScenarioRequest::default().load().unwrap();
        let o = crate::sim::serving::ServeOptions {
            input_len: 300,
            output_len: 40,
            concurrency: 4,
            num_prompts: 12,
            range_ratio: 0.5,
            ..Default::default()
        };
        let r = crate::sim::serving::serve(&s, &p, &o).unwrap();
        let price: Vec<f64> = r.schedule.shapes.iter().map(|(_, us)| *us).collect();
        let m = replay(&r.schedule, &price, &mut Vec::new(), &mut Vec::new());
        let want = [
            r.output_throughput,
            r.ttft.mean_ms,
            r.tpot.mean_ms,
            r.tpot.median_ms,
            r.e2el.mean_ms,
        ];
        for (got, want) in m.iter().zip(want) {
            assert!((got / want - 1.0).abs() < 1e-9, "{m:?} vs {want}");
        }
        // Every step twice as long: throughput halves, the latencies double.
        let twice: Vec<f64> = price.iter().map(|x| 2.0 * x).collect();
        let m2 = replay(&r.schedule, &twice, &mut Vec::new(), &mut Vec::new());
        assert!((m2[0] / m[0] - 0.5).abs() < 1e-9);
        for k in 1..5 {
            assert!((m2[k] / m[k] - 2.0).abs() < 1e-9);
        }
    }

    #[test]
    fn a_chunk_stands_in_as_a_decode_step_of_its_tokens() {
        let decode = MixedStep {
            decode: 32,
            context: 2048,
            chunks: Vec::new(),
        };
        assert_eq!(stand_in(&decode), (32, 2048));
        // 1,000 prompt tokens after a prefix of 3,000: KV 3,500 at the chunk's middle; with 24
        // decode sequences at 1,024 the mean over the 1,024 tokens is (24·1,024 + 1,000·3,500)
        // / 1,024.
        let mixed = MixedStep {
            decode: 24,
            context: 1024,
            chunks: vec![PrefillChunk {
                tokens: 1000,
                prefix: 3000,
            }],
        };
        let want = ((24.0 * 1024.0 + 1000.0 * 3500.0) / 1024.0f64).round() as u64;
        assert_eq!(stand_in(&mixed), (1024, want));
    }
}
