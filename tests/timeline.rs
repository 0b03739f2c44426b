//! Invariants of the simulated timeline.

use decodesim::sim::{simulate, ScenarioRequest};
use decodesim::workload::Stream;

fn run(req: ScenarioRequest) -> decodesim::sim::Simulation {
    simulate(&req).expect("scenario simulates")
}

#[test]
fn no_two_kernels_overlap_on_one_stream() {
    for graphs in [true, false] {
        let sim = run(ScenarioRequest {
            cuda_graphs: graphs,
            ..Default::default()
        });
        for rank in 0..sim.timeline.ranks {
            for stream in Stream::ALL {
                let mut recs: Vec<_> = sim
                    .timeline
                    .rank_records(rank)
                    .filter(|r| r.stream == stream)
                    .collect();
                recs.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
                for pair in recs.windows(2) {
                    assert!(
                        pair[1].start_us >= pair[0].end_us - 1e-9,
                        "rank {rank} stream {stream:?}: {:?} overlaps {:?}",
                        pair[0],
                        pair[1]
                    );
                }
                for r in &recs {
                    assert!(r.end_us > r.start_us);
                }
            }
        }
    }
}

#[test]
fn a_collective_ends_at_the_same_time_on_every_rank() {
    let sim = run(ScenarioRequest::default());
    let ops = &sim.workload.ops;
    let mut checked = 0;
    for (i, op) in ops
        .iter()
        .enumerate()
        .filter(|(_, o)| o.family.is_collective())
    {
        let recs: Vec<_> = sim
            .timeline
            .records
            .iter()
            .filter(|r| r.op as usize == i)
            .collect();
        assert_eq!(recs.len(), 8, "{}", op.name);
        let end = recs[0].end_us;
        let last_arrival = recs.iter().map(|r| r.start_us).fold(f64::MIN, f64::max);
        for r in &recs {
            assert_eq!(r.end_us, end);
            // Wait is exactly the distance to the last arrival.
            assert!((r.start_us + r.wait_us - last_arrival).abs() < 1e-9);
        }
        // The last rank to arrive does not wait.
        assert!(recs.iter().any(|r| r.wait_us == 0.0));
        checked += 1;
    }
    assert_eq!(checked, 124);
}

#[test]
fn breakdown_sums_to_step_time_and_matches_the_timeline() {
    let (scenario, mut profile) = ScenarioRequest::default().load().unwrap();
    // With launch skew, each rank's window starts at its own first kernel.
    profile.variability.launch_skew_us = 200.0;
    let sim = decodesim::sim::simulate_loaded(scenario, profile).unwrap();
    let mut windows = 0.0;
    for (r, b) in sim.per_rank.iter().enumerate() {
        let window = sim.timeline.rank_window_us(r);
        let sum: f64 = b.exclusive_us.iter().sum();
        assert!((sum - window).abs() < 1e-6 * window);
        assert_eq!(b.step_time_us, window);
        let first = sim
            .timeline
            .rank_records(r)
            .map(|k| k.start_us)
            .fold(f64::MAX, f64::min);
        assert_eq!(first, sim.timeline.rank_start_us[r]);
        windows += window;
    }
    let step = sim.step_time_us();
    assert!((step - windows / 8.0).abs() < 1e-9);
    // Skewed starts: the first collective absorbs them as waiting.
    let starts = &sim.timeline.rank_start_us;
    let spread = starts.iter().copied().fold(f64::MIN, f64::max)
        - starts.iter().copied().fold(f64::MAX, f64::min);
    assert!(spread > 50.0 && spread <= 200.0, "{spread}");
    let first_ar = sim
        .workload
        .ops
        .iter()
        .position(|o| o.family.is_collective())
        .unwrap();
    let waits: f64 = sim
        .timeline
        .records
        .iter()
        .filter(|k| k.op as usize == first_ar)
        .map(|k| k.wait_us)
        .sum();
    assert!(waits > 100.0, "{waits}");
    let tps = sim.tokens_per_s();
    assert!((tps - 32.0 / step * 1e6).abs() < 1e-9);
}

#[test]
fn same_seed_same_result_other_seed_other_jitter() {
    let a = run(ScenarioRequest::default());
    let b = run(ScenarioRequest::default());
    assert_eq!(a.step_time_us(), b.step_time_us());
    assert_eq!(a.timeline.records, b.timeline.records);
    let c = run(ScenarioRequest {
        seed: 7,
        ..Default::default()
    });
    assert_ne!(a.step_time_us(), c.step_time_us());
    // Jitter moves the step by little: the cost model, not the noise, sets it.
    assert!((a.step_time_us() / c.step_time_us() - 1.0).abs() < 0.02);
}

#[test]
fn shared_expert_overlaps_on_the_aux_stream_only_up_to_256_tokens() {
    let small = run(ScenarioRequest::default());
    let aux = small
        .timeline
        .rank_records(0)
        .filter(|r| r.stream == Stream::Aux)
        .count();
    assert_eq!(aux, 60 * 3);
    let big = run(ScenarioRequest {
        batch: 512,
        context: 1024,
        ..Default::default()
    });
    assert_eq!(
        big.timeline
            .rank_records(0)
            .filter(|r| r.stream == Stream::Aux)
            .count(),
        0
    );
}

#[test]
fn eager_launches_cost_more_than_graph_replay() {
    let graph = run(ScenarioRequest {
        batch: 1,
        ..Default::default()
    });
    let eager = run(ScenarioRequest {
        batch: 1,
        cuda_graphs: false,
        ..Default::default()
    });
    assert!(eager.step_time_us() > graph.step_time_us());
    let idle = decodesim::category::Category::Idle;
    assert!(eager.mean.time(idle) > graph.mean.time(idle));
}

#[test]
fn other_families_simulate() {
    for (model, system, tp) in [
        ("llama-3.1-70b", "h200-8x-nvlink", 8),
        ("qwen3-235b-a22b", "h200-8x-nvlink", 8),
        ("minimax-m2.5", "h200-8x-nvlink", 4),
        ("deepseek-v3", "h200-8x-nvlink", 8),
    ] {
        let sim = run(ScenarioRequest {
            model: model.into(),
            system: system.into(),
            tp: Some(tp),
            proto: decodesim::scenario::Proto::Auto,
            ..Default::default()
        });
        assert!(sim.step_time_us() > 0.0, "{model}");
        let ars: u32 = sim
            .pricing
            .collectives
            .iter()
            .filter(|c| c.op == "all_reduce")
            .map(|c| c.count)
            .sum();
        assert_eq!(
            ars as usize,
            1 + 2 * sim.scenario.model.num_layers,
            "{model}"
        );
    }
}
