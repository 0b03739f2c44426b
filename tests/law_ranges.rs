//! The measured ranges behind a fitted law: a price outside them warns, in the units the
//! calibration measured. The kernels' CSV measures elementwise kernels by rows (tokens) and
//! width, while an elementwise op's M is its element count (`Builder::elementwise`), so an
//! elementwise op is held to its bytes, which is what the law prices.

use decodesim::cost;
use decodesim::scenario::deployment::EpComm;
use decodesim::sim::ScenarioRequest;
use decodesim::workload::{self, CostFamily};

#[test]
fn elementwise_ops_are_held_to_their_measured_bytes_not_to_rows() {
    // DeepSeek-V3 at DP16 with the experts over every GPU: expert parallelism gives the
    // experts' activation and the shared-plus-routed add per-rank shapes, priced by the law.
    let mut req = ScenarioRequest {
        model: "deepseek-v3".into(),
        system: "h200-hgx-2node-ib".into(),
        tp: Some(1),
        batch: 64,
        context: 4000,
        ..ScenarioRequest::default()
    };
    req.dp = Some(16);
    req.comm.ep_comm = EpComm::RdmaLl;
    let (s, mut p) = req.load().expect("loads");
    // The profile's laws, not its measured fused-MoE tables, price the routed experts here.
    p.aic = None;
    p.aiconfigurator = None;
    let w = workload::build(&s);
    // The h200 profile measured elementwise kernels at 1 to 4,096 rows; these ops hold more
    // elements than that.
    let act = w
        .ops
        .iter()
        .position(|o| o.name == "L3.experts_act_and_mul")
        .expect("the experts' activation");
    assert_eq!(w.ops[act].family, CostFamily::Elementwise);
    assert!(w.ops[act].shape.m > 4096, "{}", w.ops[act].shape.m);
    let priced = cost::price(&w, &s, &p).expect("priced");
    assert!(
        !priced.warnings.iter().any(|x| x.starts_with("elementwise")),
        "{:?}",
        priced.warnings
    );
    // Its bytes beyond twice the largest measured (452,984,832 B) do warn.
    let mut big = w.clone();
    big.ops[act].bytes = 1e10;
    let priced = cost::price(&big, &s, &p).expect("priced");
    assert!(
        priced
            .warnings
            .iter()
            .any(|x| x.starts_with("elementwise: ") && x.contains("outside the measured range")),
        "{:?}",
        priced.warnings
    );
}
