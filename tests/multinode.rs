//! Systems of several nodes and collectives across them: the bundled multi-node system files,
//! refusals of bad `[network]` fields, the TP group across nodes priced by NCCL's hierarchical
//! law (cost::internode) in the timeline, and multi-node nccl-tests output as the multi-node
//! table. Fixture: tests/data/nccl-tests/all_reduce_perf_2node_16gpu.txt (synthetic times in
//! the output format of an MPI run over two hosts).

use decodesim::calibrate::nccl_tests::{self, Column, NcclTestsRequest};
use decodesim::cost::internode::{Bound, Hierarchy, MULTINODE_CSV};
use decodesim::scenario::network::{LinkClass, NicScope, Transport};
use decodesim::scenario::{CommPath, SystemSpec};
use decodesim::sim::ScenarioRequest;
use decodesim::workload::CostFamily;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("decodesim-mn-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn system(name: &str) -> SystemSpec {
    SystemSpec::from_file(
        &root().join(format!("data/systems/{name}.toml")),
        &root().join("data/systems/gpus"),
    )
    .unwrap()
}

#[test]
fn bundled_multinode_systems_load() {
    let h = system("h200-hgx-2node-ib");
    assert_eq!((h.nodes, h.gpus_per_node, h.gpu_count), (2, 8, 16));
    let n = h.network.as_ref().unwrap();
    assert_eq!((n.nics, n.nics_per, n.nic_gbit), (1, NicScope::Gpu, 400.0));
    assert_eq!(n.nics_per_node(8), 8);
    assert_eq!((n.transport, n.gpudirect), (Transport::Rdma, true));
    assert_eq!(system("h200-hgx-18node-ib").gpu_count, 144);
    assert_eq!(system("h100-hgx-2node-ib").gpu.name, "h100-sxm");
    // rank -> (node, local GPU), and the link between two ranks.
    assert_eq!(h.node_of(0), (0, 0));
    assert_eq!(h.node_of(13), (1, 5));
    assert_eq!(h.link_between(1, 7), LinkClass::Nvlink);
    assert_eq!(h.link_between(7, 8), LinkClass::Net);
    assert_eq!(h.link_between(3, 3), LinkClass::Local);
    assert!(!h.spans_nodes(8) && h.spans_nodes(16));
    // The law's view: 8 NICs x 50 GB/s per node, 1 us wire latency; NVLink 450 inside.
    let x = Hierarchy::of(&h, 16, CommPath::Nvlink).unwrap();
    assert_eq!((x.nodes, x.ranks_per_node, x.channels), (2, 8, 16));
    assert_eq!((x.net_node_gbps, x.net_extra_us), (400.0, 1.0));
    assert_eq!(x.raw_bus(), (400.0, LinkClass::Net));
    assert!(Hierarchy::of(&h, 8, CommPath::Nvlink).is_none());

    // 2x 200 GbE RoCE without GPUDirect (staged through host memory, +14 us per hop): 50 GB/s
    // of NICs per node, so the cross-socket PCIe P2P (45 GB/s) bounds the ring.
    let r = system("rtx-pro-6000-2node-roce");
    assert_eq!((r.nodes, r.gpus_per_node, r.gpu_count), (2, 8, 16));
    assert_eq!(r.link_between(0, 4), LinkClass::Pcie);
    let x = Hierarchy::of(&r, 16, CommPath::PcieP2p).unwrap();
    assert_eq!((x.net_node_gbps, x.net_extra_us), (50.0, 16.0));
    assert_eq!(x.raw_bus(), (45.0, LinkClass::Pcie));
    // 100 GbE TCP: 12.5 GB/s per node, the network bounds it.
    let t = system("rtx-pro-6000-2node-tcp");
    let x = Hierarchy::of(&t, 16, CommPath::PcieP2p).unwrap();
    assert_eq!(x.raw_bus(), (12.5, LinkClass::Net));
    assert!(!x.ll128);
    // Single-node files load unchanged: one node, no network.
    let one = system("rtx-pro-6000-8x-pcie");
    assert_eq!((one.nodes, one.gpus_per_node, one.gpu_count), (1, 8, 8));
    assert!(one.network.is_none() && !one.spans_nodes(8));
}

/// The HGX H200 2-node file with `from` replaced by `to`, written to a temporary file.
fn edited(dir: &Path, from: &str, to: &str) -> PathBuf {
    let text = std::fs::read_to_string(root().join("data/systems/h200-hgx-2node-ib.toml")).unwrap();
    assert!(text.contains(from), "{from}");
    let p = dir.join("sys.toml");
    std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
    p
}

fn refusal(dir: &Path, from: &str, to: &str) -> String {
    let p = edited(dir, from, to);
    SystemSpec::from_file(&p, &root().join("data/systems/gpus"))
        .unwrap_err()
        .to_string()
}

#[test]
fn bad_network_fields_are_refused_with_file_field_and_range() {
    let d = tmp("bad");
    let cases: [(&str, &str, &[&str]); 9] = [
        (
            "nic_gbit = 400.0",
            "nic_gbit = 400000.0",
            &["field 'network.nic_gbit'", "400000", "3,200", "Gb/s"],
        ),
        (
            "nic_gbit = 400.0",
            "nic_gbit = 0.0",
            &["field 'network.nic_gbit'", "at least 1"],
        ),
        (
            "latency_us = 1.0 ",
            "latency_us = 5000.0 ",
            &["field 'network.latency_us'", "5000"],
        ),
        (
            "gpudirect = true ",
            "gpudirect = true\ntransport_note = 1 ",
            &["transport_note"],
        ),
        (
            "transport = \"rdma\"",
            "transport = \"tcp\"",
            &[
                "field 'network.gpudirect'",
                "GPUDirect RDMA needs an RDMA transport",
            ],
        ),
        (
            "nics = 1 ",
            "nics = 9 ",
            &[
                "field 'network.nics'",
                "9 per GPU x 8 GPUs = 72",
                "from 1 to 64",
            ],
        ),
        (
            "nodes = 2",
            "nodes = 0",
            &["field 'nodes'", "from 1 to 16,384"],
        ),
        (
            "nodes = 2",
            "nodes = 20000",
            &["field 'nodes'", "20000", "16,384"],
        ),
        (
            "fabric = \"InfiniBand NDR, 8x ConnectX-7 400 Gb/s per node\"",
            "fabric = \" \"",
            &["field 'network.fabric'", "InfiniBand NDR"],
        ),
    ];
    for (from, to, want) in cases {
        let e = refusal(&d, from, to);
        assert!(e.contains("sys.toml"), "{e}");
        for w in want {
            assert!(e.contains(w), "{to}: {e}");
        }
    }
    // Several nodes need a network.
    let text = std::fs::read_to_string(root().join("data/systems/h200-hgx-2node-ib.toml")).unwrap();
    let cut = text.split("[network]").next().unwrap();
    let p = d.join("nonet.toml");
    std::fs::write(&p, cut).unwrap();
    let e = SystemSpec::from_file(&p, &root().join("data/systems/gpus"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("nonet.toml") && e.contains("field 'network'") && e.contains("2 nodes"),
        "{e}"
    );
    // An NVLink path to the NIC needs a GPU with NVLink.
    let rtx = std::fs::read_to_string(root().join("data/systems/rtx-pro-6000-2node-roce.toml"))
        .unwrap()
        .replace("gpu_nic_path = \"pcie\"", "gpu_nic_path = \"nvlink\"");
    let p = d.join("rtx.toml");
    std::fs::write(&p, rtx).unwrap();
    let e = SystemSpec::from_file(&p, &root().join("data/systems/gpus"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("field 'network.gpu_nic_path'") && e.contains("no NVLink"),
        "{e}"
    );
}

fn request(system: &str, tp: u32) -> ScenarioRequest {
    ScenarioRequest {
        model: "llama-3.1-70b".into(),
        system: system.into(),
        tp: Some(tp),
        batch: 16,
        context: 2048,
        ..Default::default()
    }
}

#[test]
fn tp_across_nodes_prices_the_allreduce_by_the_internode_law() {
    let sim = decodesim::sim::simulate(&request("h200-hgx-2node-ib", 16)).unwrap();
    // Llama 3.1 70B at batch 16: 16 x 8192 BF16 = 262,144 B per all-reduce. Default NCCL
    // settings are Ring / LL. Ring LL over 2 x 8 ranks: 6.6 + 26 x 0.6 + 4 x (2.7 + 1) = 37.0 us;
    // bus min(400 x 0.5, llMaxBw 141) = 141 GB/s, algbw 141 x 16 / 30 = 75.2 GB/s.
    let want = 37.0 + 262_144.0 / 75_200.0;
    let c = sim
        .pricing
        .collectives
        .iter()
        .find(|c| c.op == "all_reduce")
        .unwrap();
    assert_eq!(
        (c.path, c.algo.to_string().as_str(), c.proto.as_str()),
        ("nvlink+net", "ring", "LL")
    );
    assert_eq!(c.bytes, 262_144);
    assert!((c.time_us - want).abs() < 1e-9, "{c:?}");
    assert!(c.source.contains("cost::internode"), "{}", c.source);
    // The timeline carries it on every one of the 16 ranks.
    let ar: Vec<_> = sim
        .timeline
        .records
        .iter()
        .filter(|r| sim.workload.ops[r.op as usize].family == CostFamily::AllReduce)
        .collect();
    assert!(!ar.is_empty());
    assert_eq!(sim.timeline.ranks, 16);
    assert!((0..16u16).all(|k| ar.iter().any(|r| r.rank == k)));
    // The same model within one node is not priced by the network law.
    let one = decodesim::sim::simulate(&request("h200-hgx-2node-ib", 8)).unwrap();
    assert!(one
        .pricing
        .collectives
        .iter()
        .all(|c| !c.path.contains("net")));
    // The tuner, when allowed, takes the tree at this size (27.2 us + bytes over 48.4 GB/s).
    let mut r = request("h200-hgx-2node-ib", 16);
    r.algo = decodesim::scenario::Algo::Auto;
    r.proto = decodesim::scenario::Proto::Auto;
    let s = decodesim::sim::simulate(&r).unwrap();
    let c = s
        .pricing
        .collectives
        .iter()
        .find(|c| c.op == "all_reduce")
        .unwrap();
    assert_eq!(
        (c.algo.to_string().as_str(), c.proto.as_str()),
        ("tree", "LL")
    );
    // Over TCP the same all-reduce costs more than over InfiniBand.
    let tcp = decodesim::sim::simulate(&request("rtx-pro-6000-2node-tcp", 16)).unwrap();
    let t = tcp
        .pricing
        .collectives
        .iter()
        .find(|c| c.op == "all_reduce")
        .unwrap();
    assert_eq!(t.path, "pcie_p2p+net");
    assert!(t.time_us > c.time_us);
}

#[test]
fn tp_across_nodes_is_refused_where_it_cannot_run() {
    let e = request("h200-hgx-2node-ib", 12)
        .load()
        .unwrap_err()
        .to_string();
    assert!(e.contains("--tp 12") && e.contains("multiple of 8"), "{e}");
    let mut r = request("h200-hgx-2node-ib", 16);
    r.comm.allreduce = decodesim::scenario::deployment::AllreduceImpl::Custom;
    let e = decodesim::sim::simulate(&r).unwrap_err().to_string();
    assert!(e.contains("spans 2 nodes"), "{e}");
    // No custom all-reduce buffers are reserved for a group across nodes; within one NVLink
    // node they are.
    let (s16, _) = request("h200-hgx-2node-ib", 16).load().unwrap();
    assert_eq!(decodesim::capacity::memory::custom_ar_bytes(&s16), 0.0);
    let (s8, _) = request("h200-hgx-2node-ib", 8).load().unwrap();
    assert!(decodesim::capacity::memory::custom_ar_bytes(&s8) > 0.0);
    let mut r = request("h200-hgx-2node-ib", 16);
    r.comm.link_gbps = Some(100.0);
    let e = r.load().unwrap_err().to_string();
    assert!(e.contains("--link-gbps") && e.contains("[network]"), "{e}");
}

fn fixture() -> PathBuf {
    root().join("tests/data/nccl-tests/all_reduce_perf_2node_16gpu.txt")
}

#[test]
fn multinode_nccl_tests_output_is_read() {
    let f = nccl_tests::read(&fixture()).unwrap();
    assert_eq!((f.op.as_str(), f.nranks, f.nodes), ("all_reduce", 16, 2));
    assert_eq!(f.gpus, vec!["NVIDIA H200".to_string()]);
    assert!(f.threads_line.starts_with("nThread 1 nGpus 1"));
    assert_eq!(f.rows.len(), 9, "1 KiB to 64 MiB by factors of 4");
    assert_eq!((f.rows[0].bytes, f.rows[0].out_of_place_us), (1024, 32.01));
    // Ranks spread unevenly over the hosts are refused.
    let text = std::fs::read_to_string(fixture()).unwrap().replacen(
        "Rank  8 Group  0 Pid  52108 on  hgx-node-b",
        "Rank  8 Group  0 Pid  52108 on  hgx-node-a",
        1,
    );
    let e = nccl_tests::parse(&text, Path::new("uneven.txt"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("uneven.txt")
            && e.contains("16 ranks spread unevenly over 2 hosts")
            && e.contains("9 on hgx-node-a"),
        "{e}"
    );
}

#[test]
fn multinode_nccl_tests_become_the_multinode_table_and_price_tp16() {
    let d = tmp("cal");
    let out = d.join("mine/profile.toml");
    let (s, base) = request("h200-hgx-2node-ib", 16).load().unwrap();
    let r = nccl_tests::from_nccl_tests(&NcclTestsRequest {
        files: vec![fixture()],
        column: Column::OutOfPlace,
        base,
        system: s.system.clone(),
        out: out.clone(),
        name: None,
        channels: None,
    })
    .unwrap();
    assert_eq!(r.multinode_rows, 9);
    let csv = std::fs::read_to_string(d.join("mine/tables").join(MULTINODE_CSV)).unwrap();
    assert!(
        csv.starts_with("op,nodes,nranks,dtype,bytes,latency_us\n"),
        "{csv}"
    );
    assert!(
        csv.contains("all_reduce,2,16,bfloat16,1024,32.010\n"),
        "{csv}"
    );
    // No single-node file was given: no single-node rows were invented.
    assert!(!d.join("mine/tables/nccl_collectives.csv").exists());
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("16 ranks on 2 nodes"), "{text}");
    // The written profile prices the TP16 all-reduce from the measured curve: 262,144 B lies
    // between the 65,536 B (32.36 us) and 262,144 B rows; the latter is a row: 33.46 us.
    let mut req = request("h200-hgx-2node-ib", 16);
    req.calibration = Some(out.display().to_string());
    let sim = decodesim::sim::simulate(&req).unwrap();
    let c = sim
        .pricing
        .collectives
        .iter()
        .find(|c| c.op == "all_reduce")
        .unwrap();
    assert_eq!(c.proto, "measured");
    assert!((c.time_us - 33.46).abs() < 1e-9, "{c:?}");
    assert!(c.source.contains("nccl-tests over 2 nodes"), "{}", c.source);
    // A file without host names but with more ranks than one node holds: nodes from the system.
    let bare: String = std::fs::read_to_string(fixture())
        .unwrap()
        .lines()
        .filter(|l| !l.contains("Rank "))
        .map(|l| format!("{}\n", l.replace("nThread 1 nGpus 1", "nThread 1 nGpus 16")))
        .collect();
    let p = d.join("all_reduce_perf_bare.txt");
    std::fs::write(&p, bare).unwrap();
    assert_eq!(nccl_tests::read(&p).unwrap().nodes, 1);
    let (s, base) = request("h200-hgx-2node-ib", 16).load().unwrap();
    let r = nccl_tests::from_nccl_tests(&NcclTestsRequest {
        files: vec![p],
        column: Column::OutOfPlace,
        base,
        system: s.system.clone(),
        out: d.join("bare/profile.toml"),
        name: None,
        channels: None,
    })
    .unwrap();
    assert_eq!(r.files[0].nodes, 2);
    assert_eq!(r.multinode_rows, 9);
}

#[test]
fn rdma_all_to_all_on_the_bundled_fabric() {
    let h = system("h200-hgx-18node-ib");
    let x = Hierarchy::of(&h, 144, CommPath::Nvlink).unwrap();
    assert_eq!((x.nodes, x.ranks_per_node), (18, 8));
    let ll = x
        .alltoall(
            decodesim::cost::internode::AllToAllMode::RdmaLowLatency,
            1 << 20,
        )
        .unwrap();
    assert!(!ll.occupies_sms);
    assert_eq!(ll.bound, Bound::Link(LinkClass::Net));
    // Not on the TCP pair (no RDMA, no GPUDirect).
    let t = system("rtx-pro-6000-2node-tcp");
    let x = Hierarchy::of(&t, 16, CommPath::PcieP2p).unwrap();
    assert!(x
        .alltoall(
            decodesim::cost::internode::AllToAllMode::RdmaLowLatency,
            1 << 20
        )
        .is_none());
}
