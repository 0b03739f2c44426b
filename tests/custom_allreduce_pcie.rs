//! The all-reduce the community runs on 8x RTX PRO 6000 over PCIe: a patched vLLM custom
//! all-reduce (`--allreduce custom`, a hypothetical mainline refuses) and NCCL's LL→Simple switch
//! size as a what-if (`--nccl-ll-threshold`).

use decodesim::cost::{CollectiveAlgo, CollectiveChoice};
use decodesim::scenario::deployment::{AllreduceImpl, CommKnobs};
use decodesim::scenario::Proto;
use decodesim::sim::{simulate, simulate_loaded, ScenarioRequest, Simulation};
use std::process::Command;

const NOTE: &str = "mainline vLLM disables its custom all-reduce on more than 2 PCIe GPUs; this prices a patched build";

fn req(batch: u32, allreduce: AllreduceImpl) -> ScenarioRequest {
    ScenarioRequest {
        batch,
        layers: Some(2),
        comm: CommKnobs {
            allreduce,
            ..Default::default()
        },
        ..ScenarioRequest::default()
    }
}

fn all_reduce(sim: &Simulation, bytes: u64) -> &CollectiveChoice {
    sim.pricing
        .collectives
        .iter()
        .find(|c| c.op == "all_reduce" && c.bytes == bytes)
        .unwrap_or_else(|| panic!("no all_reduce of {bytes} B: {:?}", sim.pricing.collectives))
}

#[test]
fn patched_custom_allreduce_is_priced_by_the_published_pcie_law() {
    // Kimi at batch 1: 7168 BF16 values, 14336 B per all-reduce.
    let sim = simulate(&req(1, AllreduceImpl::Custom)).unwrap();
    let c = all_reduce(&sim, 14_336);
    assert_eq!(c.algo.base, CollectiveAlgo::VllmCustom);
    assert_eq!(c.proto, "1stage");
    // [custom_allreduce_pcie.graph] of the shipped profile: 3.344 + 0.956 x 7 us of latency,
    // 7 peers' 14336 B read at 15.27 GB/s: 10.036 + 6.5719 = 16.6079 us.
    let want = 3.344 + 0.956 * 7.0 + 7.0 * 14_336.0 / 15_270.0;
    assert!((c.time_us - want).abs() < 1e-9, "{} vs {want}", c.time_us);
    assert!((want - 16.6079).abs() < 1e-3);
    assert!((c.latency_us - 10.036).abs() < 1e-9, "{}", c.latency_us);
    assert!(
        c.source.contains("hypothetical patched vLLM build"),
        "{}",
        c.source
    );
    assert!(
        sim.warnings
            .iter()
            .any(|w| w.contains(NOTE) && w.contains("--allreduce custom on")),
        "{:?}",
        sim.warnings
    );
    // Cheaper than NCCL's measured 27 us at this size (docs/sources.md §3.5).
    let nccl = simulate(&req(1, AllreduceImpl::Nccl)).unwrap();
    assert!(all_reduce(&nccl, 14_336).time_us > 25.0);
    assert!(sim.step_time_us() < nccl.step_time_us());
}

#[test]
fn messages_from_the_cutoff_go_to_nccl() {
    // Batch 4: 57344 B, not below the 56 KiB cutoff.
    let sim = simulate(&req(4, AllreduceImpl::Custom)).unwrap();
    let c = all_reduce(&sim, 57_344);
    assert_ne!(c.algo.base, CollectiveAlgo::VllmCustom);
    assert!(
        sim.warnings.iter().any(|w| w.contains(
            "vLLM hands all_reduce of 56.0 KiB to NCCL (56.0 KiB is not below max_size 56.0 KiB"
        )),
        "{:?}",
        sim.warnings
    );
}

#[test]
fn auto_keeps_mainline_vllm_and_says_nothing_of_a_patch() {
    let sim = simulate(&req(1, AllreduceImpl::Auto)).unwrap();
    assert_ne!(
        all_reduce(&sim, 14_336).algo.base,
        CollectiveAlgo::VllmCustom
    );
    assert!(!sim.warnings.iter().any(|w| w.contains(NOTE)));
}

#[test]
fn a_profile_without_the_pcie_law_refuses_by_name() {
    let (s, mut p) = req(1, AllreduceImpl::Custom).load().unwrap();
    p.custom_allreduce_pcie = None;
    let e = simulate_loaded(s, p).unwrap_err().to_string();
    assert!(
        e.contains("profile.toml")
            && e.contains("custom_allreduce_pcie")
            && e.contains("patched vLLM build")
            && e.contains("not supported on more than two PCIe-only GPUs"),
        "{e}"
    );
}

#[test]
fn the_cli_prices_it_and_names_the_rule() {
    let out = Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .args([
            "simulate",
            "--batch",
            "1",
            "--layers",
            "2",
            "--allreduce",
            "custom",
        ])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains(NOTE), "{text}");
}

fn threshold(proto: Proto, t: Option<u64>, tables: bool) -> Simulation {
    let r = ScenarioRequest {
        proto,
        comm: CommKnobs {
            nccl_ll_threshold: t,
            ..Default::default()
        },
        ..req(32, AllreduceImpl::Nccl)
    };
    let (s, mut p) = r.load().unwrap();
    if !tables {
        p.aic = None;
        p.aiconfigurator = None;
    }
    simulate_loaded(s, p).unwrap()
}

#[test]
fn ll_threshold_reads_the_regime_rows_of_the_table() {
    // Batch 32: 458752 B per all-reduce.
    let b = 458_752;
    let ll = all_reduce(&threshold(Proto::Ll, None, true), b).time_us;
    let simple = all_reduce(&threshold(Proto::Simple, None, true), b).time_us;
    let auto = all_reduce(&threshold(Proto::Auto, None, true), b).time_us;
    let below = threshold(Proto::Auto, Some(1 << 20), true);
    let c = all_reduce(&below, b);
    assert_eq!(c.proto, "threshold: LL");
    assert!((c.time_us - ll).abs() < 1e-9, "{} vs LL {ll}", c.time_us);
    assert!(
        c.source.contains("--nccl-ll-threshold 1048576"),
        "{}",
        c.source
    );
    let above = threshold(Proto::Auto, Some(65_536), true);
    let c = all_reduce(&above, b);
    assert_eq!(c.proto, "threshold: Simple");
    assert!(
        (c.time_us - simple).abs() < 1e-9,
        "{} vs Simple {simple}",
        c.time_us
    );
    // NCCL's own measured choice at this size is LL (the switch is at 1 MiB on this machine).
    assert!(
        (auto - ll).abs() < 1e-9 && (simple - ll).abs() > 1.0,
        "{auto} {ll} {simple}"
    );
}

#[test]
fn ll_threshold_picks_the_law_by_size() {
    let b = 458_752u64;
    let sim = threshold(Proto::Auto, Some(1 << 20), false);
    let c = all_reduce(&sim, b);
    assert_eq!(c.proto, "threshold: LL");
    // By hand from the profile's ring LL entry on pcie_p2p: base + 14 hops + bytes / algbw,
    // algbw = busbw x 8 / 14.
    let e = sim
        .profile
        .collectives
        .iter()
        .find(|e| {
            // The shipped profile's PCIe entries price any collective.
            e.op == decodesim::cost::profile::CollectiveOp::Any
                && e.algo == decodesim::scenario::Algo::Ring
                && e.path == decodesim::scenario::CommPath::PcieP2p
                && e.proto == Proto::Ll
        })
        .unwrap();
    let want = e.base_us + 14.0 * e.hop_us + b as f64 / (e.bus_bw_gbps * 8.0 / 14.0 * 1e3);
    assert!((c.time_us - want).abs() < 1e-9, "{} vs {want}", c.time_us);
    let above = threshold(Proto::Auto, Some(4096), false);
    assert_eq!(all_reduce(&above, b).proto, "threshold: Simple");
}

#[test]
fn ll_threshold_under_a_forced_protocol_is_named_as_doing_nothing() {
    let sim = threshold(Proto::Ll, Some(4096), true);
    assert!(
        sim.warnings
            .iter()
            .any(|w| w.contains("--nccl-ll-threshold 4096 changes nothing")),
        "{:?}",
        sim.warnings
    );
    let e = ScenarioRequest {
        comm: CommKnobs {
            nccl_ll_threshold: Some(0),
            ..Default::default()
        },
        ..ScenarioRequest::default()
    }
    .load()
    .unwrap_err()
    .to_string();
    assert!(e.contains("--nccl-ll-threshold 0 is out of range"), "{e}");
}
