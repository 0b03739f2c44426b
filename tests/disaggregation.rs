//! Disaggregated prefill and decode (`capacity --disaggregate`): the KV transfer law against
//! hand computations, the prefill:decode ratio where prefill binds and where decode binds, TTFT
//! against the input length, the decode pool's TPOT without prefill, and bad input.

mod common;

use common::decodesim_bin;
use decodesim::capacity::disagg::{self, DisaggOptions, Disaggregation, Winner};
use decodesim::capacity::memory::MemoryOptions;
use decodesim::capacity::{capacity, CapacityRequest, DemandSpec, Prices};
use decodesim::cost::kv_transfer::{
    kv_transfer, KvLink, NVLINK_EFFICIENCY, RDMA_EFFICIENCY, TCP_EFFICIENCY,
};
use decodesim::scenario::{ModelSpec, SystemSpec};
use decodesim::sim::ScenarioRequest;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn model(name: &str) -> ModelSpec {
    ModelSpec::from_file(&root().join(format!("models/{name}.json"))).unwrap()
}

fn system(name: &str) -> SystemSpec {
    SystemSpec::from_file(
        &root().join(format!("data/systems/{name}.toml")),
        &root().join("data/systems/gpus"),
    )
    .unwrap()
}

fn close(a: f64, b: f64) {
    assert!(((a - b) / b).abs() < 1e-9, "{a} against {b} by hand");
}

#[test]
fn kimi_kv_transfer_over_ndr_infiniband_by_hand() {
    let m = model("kimi-k2.5");
    let sys = system("h200-hgx-2node-ib");
    let link = KvLink::net(&sys, 8, &sys, 8).unwrap();
    let t = kv_transfer(&m, 8, 8, 2.0, 2000.0, &link);
    // MLA latent (kv_lora_rank 512 + qk_rope_head_dim 64) × 2 B (BF16) × 61 layers = 70,272 B
    // per token, on every TP rank; the decode rank needs the whole prompt's.
    let bytes = 2000.0 * (512.0 + 64.0) * 2.0 * 61.0;
    assert_eq!(t.bytes_per_rank, bytes);
    assert_eq!(t.total_bytes, 8.0 * bytes);
    // One ConnectX-7 of 400 Gb/s = 50 GB/s per GPU (8 per node, 8 ranks), below the PCIe Gen5
    // x16 path (32 GT/s × 16 / 8 = 64 GB/s), at the RDMA efficiency; one round trip of 1 µs
    // each way, GPUDirect (no staging).
    assert_eq!(link.class, "net");
    close(link.rank_gbps, 50.0);
    assert_eq!(link.efficiency, RDMA_EFFICIENCY);
    close(link.latency_us, 2.0);
    close(t.time_us, 2.0 + bytes / (50.0 * 0.87 * 1e3));
    close(t.busy_us, bytes / (50.0 * 0.87 * 1e3));
}

#[test]
fn kv_transfer_over_roce_without_gpudirect_and_over_tcp_by_hand() {
    let m = model("kimi-k2.5");
    let roce = system("rtx-pro-6000-2node-roce");
    let l = KvLink::net(&roce, 8, &roce, 8).unwrap();
    // 2 NICs of 200 Gb/s per node (25 GB/s each) shared by the 8 ranks of the node:
    // 6.25 GB/s per rank; no GPUDirect on either end: + 14 µs host staging at each end.
    close(l.rank_gbps, 2.0 * 25.0 / 8.0);
    close(l.latency_us, 2.0 * 2.0 + 14.0 + 14.0);
    let t = kv_transfer(&m, 8, 8, 1.0, 1000.0, &l);
    let bytes = 1000.0 * 576.0 * 1.0 * 61.0; // FP8 KV cache
    close(t.time_us, 32.0 + bytes / (6.25 * RDMA_EFFICIENCY * 1e3));

    let tcp = system("rtx-pro-6000-2node-tcp");
    let l = KvLink::net(&tcp, 8, &tcp, 8).unwrap();
    // 1 NIC of 100 Gb/s per node, 8 ranks; TCP efficiency; 15 µs each way + staging.
    close(l.rank_gbps, 12.5 / 8.0);
    assert_eq!(l.efficiency, TCP_EFFICIENCY);
    close(l.latency_us, 2.0 * 15.0 + 28.0);
    // A TCP end makes the path TCP even when the other end is RDMA; the slower end's rate.
    let mixed = KvLink::net(&roce, 8, &tcp, 8).unwrap();
    assert_eq!(mixed.efficiency, TCP_EFFICIENCY);
    close(mixed.rank_gbps, 12.5 / 8.0);
    // A single-node system has no network.
    assert!(KvLink::net(&system("h200-8x-nvlink"), 8, &roce, 8).is_none());
}

#[test]
fn gqa_kv_transfer_within_an_nvlink_node_by_hand() {
    let m = model("llama-3.1-70b");
    let sys = system("h200-8x-nvlink");
    let l = KvLink::intra(&sys);
    assert_eq!(l.class, "nvlink");
    let t = kv_transfer(&m, 2, 2, 2.0, 4096.0, &l);
    // 8 KV heads over TP=2: 4 per rank; K and V of head_dim 128 in BF16, 80 layers.
    let bytes = 4096.0 * 2.0 * 4.0 * 128.0 * 2.0 * 80.0;
    assert_eq!(t.bytes_per_rank, bytes);
    close(t.time_us, 0.6 + bytes / (450.0 * NVLINK_EFFICIENCY * 1e3));
}

/// Prefill and decode instances of different TPs: every decode rank receives what it stores,
/// the prefill ranks share the sending, and the slower end sets the time.
#[test]
fn kv_transfer_between_different_tps_by_hand() {
    // Llama-3.1-70B (GQA, 8 KV heads) from a TP=2 prefill instance to a TP=8 decode instance
    // over the RoCE pair: a decode rank stores 1 KV head; 8 decode ranks need 8 heads' worth,
    // sent by 2 prefill ranks, 4 heads' worth each. 2 NICs of 200 Gb/s per node: shared by the
    // 2 prefill ranks of their node, 25 GB/s each; by the 8 decode ranks of theirs, 6.25.
    let m = model("llama-3.1-70b");
    let roce = system("rtx-pro-6000-2node-roce");
    let l = KvLink::net(&roce, 2, &roce, 8).unwrap();
    close(l.send_gbps, 2.0 * 25.0 / 2.0);
    close(l.recv_gbps, 2.0 * 25.0 / 8.0);
    let t = kv_transfer(&m, 2, 8, 2.0, 1000.0, &l);
    let head = 1000.0 * 2.0 * 128.0 * 2.0 * 80.0; // K and V of one head, BF16, 80 layers
    assert_eq!(t.bytes_per_rank, head);
    assert_eq!(t.ranks, 8);
    assert_eq!(t.total_bytes, 8.0 * head);
    // Sending 4 heads at 25 GB/s, receiving 1 at 6.25 GB/s: the same time at both ends.
    let send = 4.0 * head / (25.0 * RDMA_EFFICIENCY * 1e3);
    let recv = head / (6.25 * RDMA_EFFICIENCY * 1e3);
    close(send, recv);
    close(t.busy_us, send);
    close(t.time_us, l.latency_us + send);
    // TP=4 prefill to TP=8 decode: 2 heads sent at 12.5 GB/s, 1 received at 6.25 GB/s, again
    // even; TP=8 to TP=2: each decode rank receives 4 heads at 25 GB/s, the 8 prefill ranks
    // send 1 each at 6.25 GB/s; TP=2 to TP=4 on the H200 pair (one 50 GB/s NIC per GPU): 4
    // heads sent per prefill rank, 2 received per decode rank, the prefill end binds.
    let t = kv_transfer(
        &m,
        4,
        8,
        2.0,
        1000.0,
        &KvLink::net(&roce, 4, &roce, 8).unwrap(),
    );
    close(t.busy_us, 2.0 * head / (12.5 * RDMA_EFFICIENCY * 1e3));
    let back = kv_transfer(
        &m,
        8,
        2,
        2.0,
        1000.0,
        &KvLink::net(&roce, 8, &roce, 2).unwrap(),
    );
    assert_eq!(back.bytes_per_rank, 4.0 * head);
    close(back.busy_us, 4.0 * head / (25.0 * RDMA_EFFICIENCY * 1e3));
    let ib = system("h200-hgx-2node-ib");
    let t = kv_transfer(&m, 2, 4, 2.0, 1000.0, &KvLink::net(&ib, 2, &ib, 4).unwrap());
    assert_eq!(t.bytes_per_rank, 2.0 * head);
    close(t.busy_us, 4.0 * head / (50.0 * RDMA_EFFICIENCY * 1e3));
    // Equal TPs are the rank-to-rank transfer of before.
    let same = kv_transfer(
        &m,
        8,
        8,
        2.0,
        1000.0,
        &KvLink::net(&roce, 8, &roce, 8).unwrap(),
    );
    close(same.busy_us, head / (6.25 * RDMA_EFFICIENCY * 1e3));
}

/// Llama-3.1-70B at TP=2 on the 2-node H200 system (8 layers simulated, for speed): 1P:1D
/// fits on one node (NVLink), larger ratios cross the network.
fn study(
    input: u64,
    output: u64,
    tpot: Option<f64>,
    ttft: Option<f64>,
) -> (Disaggregation, decodesim::capacity::Capacity) {
    study_with(input, output, tpot, ttft, None)
}

/// [`study`] with the prefill instances at a TP of their own.
fn study_with(
    input: u64,
    output: u64,
    tpot: Option<f64>,
    ttft: Option<f64>,
    prefill_tp: Option<u32>,
) -> (Disaggregation, decodesim::capacity::Capacity) {
    study_on("h200-hgx-2node-ib", input, output, (tpot, ttft), prefill_tp)
}

/// [`study_with`] on `system` (a name or a file).
fn study_on(
    system: &str,
    input: u64,
    output: u64,
    (tpot, ttft): (Option<f64>, Option<f64>),
    prefill_tp: Option<u32>,
) -> (Disaggregation, decodesim::capacity::Capacity) {
    let req = CapacityRequest {
        scenario: ScenarioRequest {
            model: "llama-3.1-70b".into(),
            system: system.into(),
            tp: Some(2),
            layers: Some(8),
            ..ScenarioRequest::default()
        },
        memory: MemoryOptions::default(),
        demand: DemandSpec::Lengths {
            input_len: input,
            output_len: output,
        },
        points: 6,
        max_tpot_ms: tpot,
        target_tokens_per_s: None,
        users: None,
        systems: Vec::new(),
        layouts: Vec::new(),
        compare_layouts: false,
        max_systems: 1,
        prices: Prices::None,
        disaggregated: true,
    };
    let o = DisaggOptions {
        max_ttft_ms: ttft,
        prefill_system: None,
        prefill_tp,
        max_instances: 4,
    };
    disagg::precheck(&req, &o).unwrap();
    let cap = capacity(&req).unwrap();
    (disagg::disaggregate(&req, &o, &cap).unwrap(), cap)
}

fn row(d: &Disaggregation, x: u32, y: u32) -> &disagg::RatioRow {
    d.rows
        .iter()
        .find(|r| r.prefill_instances == x && r.decode_instances == y)
        .unwrap()
}

/// The disaggregated ratio with the most tokens/s per GPU (fewer GPUs on a tie).
fn best_ratio(d: &Disaggregation) -> (u32, u32) {
    let r = d
        .rows
        .iter()
        .filter(|r| r.meets)
        .max_by(|a, b| {
            a.tokens_per_s_per_gpu
                .total_cmp(&b.tokens_per_s_per_gpu)
                .then(b.gpus.cmp(&a.gpus))
        })
        .unwrap();
    (r.prefill_instances, r.decode_instances)
}

#[test]
fn long_prompts_make_prefill_bind_and_long_outputs_make_decode_bind() {
    let (pre, _) = study(8000, 32, None, None);
    assert_eq!(row(&pre, 1, 1).binds, "prefill");
    // 1P:1D fits one node of 8 GPUs at TP=2; 3P:2D (10 GPUs) does not.
    assert_eq!(row(&pre, 1, 1).link, "nvlink");
    assert_eq!(row(&pre, 3, 2).link, "net");
    let (x, y) = best_ratio(&pre);
    assert!(x > y, "prefill-heavy: {x}P:{y}D");

    let (dec, _) = study(128, 2000, None, None);
    assert_eq!(row(&dec, 1, 1).binds, "decode");
    let (x, y) = best_ratio(&dec);
    assert!(y > x, "decode-heavy: {x}P:{y}D");
    // The ratio's requests/s is the smaller pool's: x × μ against y × decode rate / output.
    let r = row(&dec, 1, 1);
    let decode_rate = dec.decode_limit.unwrap().tokens_per_s / 2000.0;
    close(r.requests_per_s, decode_rate);
    close(r.tokens_per_s_per_gpu, decode_rate * 2000.0 / 4.0);
    let t = dec
        .transfers
        .iter()
        .find(|t| t.link.class == "nvlink")
        .unwrap();
    close(
        r.prefill_utilization,
        decode_rate / dec.prefill.compute_requests_per_s.min(1e6 / t.busy_us),
    );

    // Under a TPOT limit co-located chunked prefill carries 250 prompt tokens per output token
    // in its steps, so the long prompts make disaggregation win.
    let limit = 3.0 * pre.decode_curve.points[0].tpot_ms;
    let (tight, _) = study(8000, 32, Some(limit), None);
    assert!(
        matches!(tight.winner, Winner::Disaggregated { .. }),
        "{}",
        tight.verdict
    );
    assert!(
        tight.verdict.starts_with("disaggregate: "),
        "{}",
        tight.verdict
    );
    for r in tight.rows.iter().filter(|r| r.meets) {
        assert!(r.tpot_ms <= limit);
    }
}

#[test]
fn ttft_grows_with_the_input_length() {
    let (short, _) = study(1000, 256, None, None);
    let (long, _) = study(4000, 256, None, None);
    let (a, b) = (row(&short, 1, 1), row(&long, 1, 1));
    assert!(
        b.ttft_min_ms > a.ttft_min_ms,
        "{} !> {}",
        b.ttft_min_ms,
        a.ttft_min_ms
    );
    assert!(long.prefill.prefill_ms > short.prefill.prefill_ms);
    // The KV transfer's bytes grow with the prompt: four times the tokens, four times the bytes.
    close(
        long.transfers[0].bytes_per_rank,
        4.0 * short.transfers[0].bytes_per_rank,
    );
    // The lower bound is its three parts.
    let t = short
        .transfers
        .iter()
        .find(|t| t.link.class == a.link)
        .unwrap();
    let step = short
        .decode_curve
        .points
        .iter()
        .find(|p| p.concurrency == a.decode_concurrency)
        .unwrap()
        .step_time_us;
    close(
        a.ttft_min_ms,
        short.prefill.prefill_ms + (t.time_us + step) / 1e3,
    );
}

#[test]
fn decode_pool_tpot_is_below_the_colocated_tpot_at_the_same_concurrency() {
    let (d, cap) = study(2000, 200, None, None);
    let mut compared = 0;
    for p in &d.decode_curve.points {
        if let Some(c) = cap
            .curve
            .points
            .iter()
            .find(|c| c.concurrency == p.concurrency)
        {
            assert!(
                p.tpot_ms < c.tpot_ms,
                "at {}: {} !< {}",
                p.concurrency,
                p.tpot_ms,
                c.tpot_ms
            );
            // Same decode step; the co-located TPOT carries the chunked prefill share.
            close(p.step_time_us, c.step_time_us);
            assert_eq!(p.prefill_us, 0.0);
            compared += 1;
        }
    }
    assert!(compared >= 3);
}

#[test]
fn a_ttft_target_caps_the_prefill_load() {
    let (free, _) = study(4000, 64, None, None);
    let limit = row(&free, 1, 1).ttft_min_ms * 1.5;
    let (capped, _) = study(4000, 64, None, Some(limit));
    let r = row(&capped, 1, 1);
    assert!(r.meets);
    assert!(
        r.ttft_ms.unwrap() <= limit * (1.0 + 1e-9),
        "{:?} > {limit}",
        r.ttft_ms
    );
    assert!(r.prefill_utilization < row(&free, 1, 1).prefill_utilization);
    // Below the queueing-free bound nothing meets it.
    let (none, _) = study(4000, 64, None, Some(row(&free, 1, 1).ttft_min_ms * 0.5));
    assert!(none.rows.iter().all(|r| !r.meets && r.binds == "TTFT"));
}

fn refused(args: &[&str], needles: &[&str]) {
    let (ok, _, err) = decodesim_bin(args);
    assert!(!ok, "{args:?} was accepted");
    for n in needles {
        assert!(err.contains(n), "{args:?}: '{n}' not in: {err}");
    }
}

/// `--prefill-tp`: TP=4 prefill instances beside TP=2 decode instances. Every ratio counts
/// 4 GPUs per prefill and 2 per decode instance, fits one node of 8 while it can, and moves
/// the KV cache from 4 ranks to 2; the prefill pool is priced at TP=4 (a prompt token costs
/// less time on twice the GPUs).
#[test]
fn prefill_instances_at_a_tp_of_their_own() {
    let (same, _) = study_with(2000, 200, None, None, None);
    let (wide, _) = study_with(2000, 200, None, None, Some(4));
    assert_eq!((same.prefill.tp, wide.prefill.tp), (2, 4));
    assert_eq!(wide.tp, 2);
    assert!(
        wide.prefill.us_per_token < same.prefill.us_per_token,
        "TP=4 prefill {} µs per token against TP=2 {}",
        wide.prefill.us_per_token,
        same.prefill.us_per_token
    );
    for r in &wide.rows {
        let (x, y) = (r.prefill_instances, r.decode_instances);
        assert_eq!(r.gpus, 4 * x + 2 * y, "{x}P:{y}D");
        let one_node = 4 * x + 2 * y <= 8;
        assert_eq!(r.link, if one_node { "nvlink" } else { "net" }, "{x}P:{y}D");
    }
    // The transfer each row uses, by hand: 8 layers simulated; a TP=2 decode rank stores 4 of
    // the 8 KV heads, 2,000 tokens × K and V × 128 × 2 B each; the 4 prefill ranks send 2
    // heads' worth each. The decode end binds on either link (both ends at the same rate).
    let head = 2000.0 * 2.0 * 128.0 * 2.0 * 8.0;
    let sys = system("h200-hgx-2node-ib");
    for (class, l) in [
        ("nvlink", KvLink::intra(&sys)),
        ("net", KvLink::net(&sys, 4, &sys, 2).unwrap()),
    ] {
        let by_hand = l.latency_us
            + (2.0 * head / (l.send_gbps * l.efficiency * 1e3))
                .max(4.0 * head / (l.recv_gbps * l.efficiency * 1e3));
        let row = wide.rows.iter().find(|r| r.link == class).expect(class);
        close(row.kv_transfer_ms, by_hand / 1e3);
    }
}

#[test]
fn bad_disaggregation_flags_are_refused_by_name() {
    let base = [
        "capacity",
        "--system",
        "h200-hgx-2node-ib",
        "--tp",
        "8",
        "--input-len",
        "1000",
        "--output-len",
        "100",
        "--disaggregate",
    ];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        base.iter().copied().chain(extra.iter().copied()).collect()
    };
    refused(
        &with(&["--max-ttft-ms", "0"]),
        &["--max-ttft-ms 0", "out of range"],
    );
    refused(&with(&["--max-ttft-ms=-5"]), &["--max-ttft-ms -5"]);
    refused(
        &with(&["--max-pool-instances", "0"]),
        &["--max-pool-instances 0", "1 to 16"],
    );
    refused(
        &with(&["--max-pool-instances", "17"]),
        &["--max-pool-instances 17"],
    );
    // A single-node system whose two TP=8 instances cannot share its 8 GPUs.
    refused(
        &[
            "capacity",
            "--input-len",
            "1000",
            "--output-len",
            "100",
            "--disaggregate",
        ],
        &["--system", "rtx-pro-6000-8x-pcie", "[network]"],
    );
    refused(
        &with(&["--prefill-system", "h200-8x-nvlink"]),
        &["--prefill-system", "h200-8x-nvlink", "[network]"],
    );
    refused(
        &with(&["--prefill-system", "nosuch"]),
        &["--prefill-system nosuch", "unknown system"],
    );
    // A prefill system that cannot run the decode instance's TP.
    refused(
        &with(&["--prefill-system", "h200-2x-nvlink"]),
        &["--prefill-system h200-2x-nvlink", "TP=8", "--prefill-tp"],
    );
    // A prefill TP of its own that the system or the model cannot run.
    refused(&with(&["--prefill-tp", "0"]), &["--prefill-tp 0"]);
    refused(
        &with(&["--prefill-system", "h200-2x-nvlink", "--prefill-tp", "4"]),
        &["--prefill-tp 4", "h200-2x-nvlink"],
    );
    refused(&with(&["--prefill-tp", "3"]), &["--prefill-tp 3"]);
    // Kimi-K2.5's weights do not fit 4 H200s: the prefill TP's problem, by name.
    refused(
        &with(&["--prefill-tp", "4"]),
        &["--prefill-tp 4", "does not fit"],
    );
    // Only with --disaggregate.
    refused(
        &[
            "capacity",
            "--system",
            "h200-hgx-2node-ib",
            "--input-len",
            "1000",
            "--output-len",
            "100",
            "--prefill-tp",
            "4",
        ],
        &["--prefill-tp", "--disaggregate"],
    );
    // No prompts to separate.
    refused(
        &[
            "capacity",
            "--system",
            "h200-hgx-2node-ib",
            "--tp",
            "8",
            "--disaggregate",
        ],
        &["--disaggregate", "--input-len"],
    );
    // The TTFT limit and the prefill system mean nothing without --disaggregate.
    refused(&["capacity", "--max-ttft-ms", "100"], &["--disaggregate"]);
    refused(
        &["capacity", "--prefill-system", "h200-8x-nvlink"],
        &["--disaggregate"],
    );
}

#[test]
fn the_binary_writes_the_ratios_as_json_and_csv() {
    let args = [
        "capacity",
        "--model",
        "llama-3.1-70b",
        "--system",
        "h200-hgx-2node-ib",
        "--tp",
        "2",
        "--layers",
        "8",
        "--input-len",
        "2000",
        "--output-len",
        "200",
        "--points",
        "4",
        "--draws",
        "0",
        "--disaggregate",
        "--max-pool-instances",
        "2",
        "--gpu-hour-usd",
        "3.5",
    ];
    let (ok, out, err) = decodesim_bin(&[&args[..], &["--format", "json"]].concat());
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let d = &v["disaggregation"];
    let rows = d["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4); // 1P:1D, 1P:2D, 2P:1D, 2P:2D
    for r in rows {
        let gpus = r["gpus"].as_f64().unwrap();
        let tps = r["tokens_per_s"].as_f64().unwrap();
        close(r["tokens_per_s_per_gpu"].as_f64().unwrap(), tps / gpus);
        // USD per million output tokens = GPUs × 3.5 USD/h / (tokens/s × 3600) × 1e6.
        close(
            r["usd_per_million_tokens"].as_f64().unwrap(),
            gpus * 3.5 / (tps * 3600.0) * 1e6,
        );
        assert_eq!(r["link"], "nvlink"); // at most 4 instances of TP=2: one node of 8 GPUs
    }
    assert!(d["colocated"]["tokens_per_s"].as_f64().unwrap() > 0.0);
    assert!(d["verdict"]
        .as_str()
        .unwrap()
        .contains("USD per million output tokens"));
    assert!(d["transfers"][0]["bytes_per_rank"].as_f64().unwrap() > 0.0);

    let (ok, out, err) = decodesim_bin(&[&args[..], &["--format", "csv"]].concat());
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("layout,prefill_instances,decode_instances,gpus,link,meets,binds,")
    );
    assert_eq!(lines.len(), 1 + 4 + 1);
    assert!(lines[1].starts_with("disaggregated,1,1,4,nvlink,true,"));
    assert!(lines[5].starts_with("colocated,,,2,"));

    let (ok, out, err) = decodesim_bin(&args);
    assert!(ok, "{err}");
    assert!(out.contains("disaggregated prefill and decode"), "{out}");
    assert!(out.contains("KV transfer over nvlink"), "{out}");
    assert!(out.contains("co-located"), "{out}");
}

/// A pool's instances packed on a node share its NICs: per node, divided by every rank of the
/// pool there; per GPU, each rank keeps its own.
#[test]
fn a_pools_instances_share_their_nodes_nics() {
    let roce = system("rtx-pro-6000-2node-roce");
    // One TP=2 instance alone on its node: 2 NICs of 25 GB/s over its 2 ranks; four packed on
    // the node: over 8.
    let alone = KvLink::net(&roce, 2, &roce, 2).unwrap();
    close(alone.send_gbps, 2.0 * 25.0 / 2.0);
    let packed = KvLink::net_shared(&roce, (2, 8), &roce, (2, 2)).unwrap();
    close(packed.send_gbps, 2.0 * 25.0 / 8.0);
    close(packed.recv_gbps, 2.0 * 25.0 / 2.0);
    // A pool never has more ranks on a node than the node's GPUs.
    let over = KvLink::net_shared(&roce, (2, 64), &roce, (2, 2)).unwrap();
    close(over.send_gbps, packed.send_gbps);
    // One 400 Gb/s NIC per H200: packing shares nothing.
    let ib = system("h200-hgx-2node-ib");
    let (a, b) = (
        KvLink::net(&ib, 2, &ib, 2).unwrap(),
        KvLink::net_shared(&ib, (2, 8), &ib, (2, 8)).unwrap(),
    );
    close(a.send_gbps, 50.0);
    close(b.send_gbps, 50.0);
    close(b.recv_gbps, 50.0);
}

/// More prefill nodes than decode ones: every prompt's KV arrives through the decode node's
/// NICs, which bind the ratio; and each pool's rate is taken on its shared links.
#[test]
fn the_decode_sides_links_bind_when_more_prefill_nodes_feed_it() {
    // A slow network (10 GbE, TCP) so that the links, not prefill compute, set the rates.
    let dir = std::env::temp_dir().join(format!("decodesim-disagg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(root().join("data/systems/rtx-pro-6000-2node-tcp.toml"))
        .unwrap()
        .replace("name = \"rtx-pro-6000-2node-tcp\"", "name = \"slow-tcp\"")
        .replace("nic_gbit = 100.0", "nic_gbit = 10.0");
    assert!(text.contains("nic_gbit = 10.0"));
    let file = dir.join("slow-tcp.toml");
    std::fs::write(&file, text).unwrap();
    let sys = SystemSpec::from_file(&file, &root().join("data/systems/gpus")).unwrap();
    let m = model("llama-3.1-70b");
    let (d, _) = study_on(file.to_str().unwrap(), 4000, 32, (None, None), Some(4));
    // Llama at 8 layers here: scale the model's KV to the study's.
    let mut m8 = m.clone();
    m8.num_layers = 8;
    let net = d.transfers.iter().find(|t| t.link.class == "net").unwrap();
    close(
        kv_transfer(&m8, 4, 2, 2.0, 4000.0, &net.link).bytes_per_rank,
        net.bytes_per_rank,
    );
    let mut checked = 0;
    for r in d.rows.iter().filter(|r| r.meets && r.link == "net") {
        let (x, y) = (r.prefill_instances, r.decode_instances);
        let l = KvLink::net_shared(&sys, (4, (4 * x).min(8)), &sys, (2, (2 * y).min(8))).unwrap();
        let t = kv_transfer(&m8, 4, 2, 2.0, 4000.0, &l);
        let send = x as f64 * (1e6 / t.send_us).min(d.prefill.compute_requests_per_s);
        let recv = y as f64 * 1e6 / t.recv_us;
        let decode = y as f64 * d.decode_limit.unwrap().tokens_per_s / 32.0;
        close(r.requests_per_s, send.min(recv).min(decode));
        if recv < send.min(decode) {
            assert_eq!(r.binds, "KV transfer", "{x}P:{y}D");
            checked += 1;
        }
    }
    // 2 prefill nodes (TP=4 × 4) into one decode node (TP=2): its one NIC carries every prompt.
    let r = row(&d, 4, 1);
    assert_eq!(r.binds, "KV transfer");
    assert!(checked >= 1);
    // Its TTFT waits in both queues: finite below saturation and above the lower bound.
    assert!(r.ttft_ms.is_none_or(|t| t > r.ttft_min_ms));
    std::fs::remove_dir_all(&dir).ok();
}
