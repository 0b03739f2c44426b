//! Systems at the edge of what a file may state, and prices that are not times: a node of one
//! GPU (no peer on its node, so no P2P link to state) prices its collectives over the network
//! alone; a price that comes out infinite or NaN is an error naming the op, never a step.

use decodesim::cost::{price, CalibrationProfile};
use decodesim::sim::{simulate, ScenarioRequest};
use std::path::PathBuf;

fn system_file(name: &str, p2p: bool) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("decodesim-degenerate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.toml"));
    let p2p = if p2p {
        "p2p_gbps_same_socket = 54.5\n"
    } else {
        ""
    };
    std::fs::write(
        &path,
        format!(
            r#"name = "{name}"
description = "nodes of one RTX PRO 6000 over 200 GbE RoCE"
gpu = "rtx-pro-6000-server"
gpu_count = 1
nodes = 16
calibration = "rtx-pro-6000"

[interconnect]
kind = "pcie"
pcie_gen = 5
pcie_lanes = 16
sockets = 1
gpus_per_socket = 1
p2p_latency_us = 0.4
host_latency_us = 14.0
{p2p}
[network]
fabric = "RoCEv2 200GbE"
nics = 1
nics_per = "node"
nic_gbit = 200.0
latency_us = 2.0
transport = "rdma"
gpudirect = true
gpu_nic_path = "pcie"
"#
        ),
    )
    .unwrap();
    path
}

fn request(system: &std::path::Path, model: &str) -> ScenarioRequest {
    ScenarioRequest {
        model: model.into(),
        system: system.display().to_string(),
        batch: 16,
        context: 1024,
        layers: Some(4),
        ..Default::default()
    }
}

/// One GPU per node: tensor parallelism and expert parallelism across nodes go over the network
/// only, and whether the file states a P2P bandwidth (which no link of these nodes uses)
/// changes nothing.
#[test]
fn one_gpu_per_node_prices_collectives_over_the_network_alone() {
    let (bare, stated) = (system_file("bare", false), system_file("stated", true));
    let mut tp = [&bare, &stated].map(|s| {
        let mut r = request(s, "llama-3.1-70b");
        r.tp = Some(4);
        simulate(&r).unwrap()
    });
    let mut ep = [&bare, &stated].map(|s| {
        let mut r = request(s, "deepseek-v3");
        r.tp = Some(1);
        r.dp = Some(16);
        r.comm.ep_comm = decodesim::scenario::deployment::EpComm::AllToAll;
        simulate(&r).unwrap()
    });
    for [a, b] in [&mut tp, &mut ep] {
        let (ta, tb) = (a.step_time_us(), b.step_time_us());
        assert!(ta.is_finite() && ta > 0.0, "{ta}");
        assert_eq!(ta, tb);
        for c in &a.pricing.collectives {
            assert!(c.time_us.is_finite() && c.time_us > 0.0, "{c:?}");
            assert!(c.path.ends_with("net"), "{c:?}");
        }
    }
}

/// A law whose bandwidth is zero (a profile edited in memory, past the file checks) makes an
/// infinite price: `price` refuses it by op, never returning it.
#[test]
fn a_price_that_is_not_a_time_is_an_error_naming_the_op() {
    let req = ScenarioRequest {
        layers: Some(2),
        ..Default::default()
    };
    let (s, mut p): (_, CalibrationProfile) = req.load().unwrap();
    let w = decodesim::workload::build(&s);
    assert!(price(&w, &s, &p).is_ok());
    p.aiconfigurator = None;
    p.aic = None;
    for c in &mut p.collectives {
        c.bus_bw_gbps = 0.0;
    }
    let e = price(&w, &s, &p).unwrap_err().to_string();
    assert!(
        e.contains("op '") && e.contains("all_reduce") && e.contains("not a time"),
        "{e}"
    );
}
