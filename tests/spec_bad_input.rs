//! One test per class of bad model, system or GPU input: each is refused with an error naming
//! the file, the field (as a JSON/TOML path) and the value found.

use decodesim::scenario::{GpuSpec, ModelSpec, SystemSpec};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn root(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn temp_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("decodesim-spec-bad-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn kimi() -> Value {
    serde_json::from_str(&std::fs::read_to_string(root("models/kimi-k2.5.json")).unwrap()).unwrap()
}

/// Parses `v` as a config at a named path and returns the error text.
fn model_error(name: &str, v: &Value) -> String {
    let path = PathBuf::from(format!("/cfg/{name}.json"));
    let e = ModelSpec::from_json_str(&v.to_string(), &path, name)
        .expect_err("bad config must be refused");
    e.to_string()
}

fn has_all(text: &str, needles: &[&str]) {
    for n in needles {
        assert!(text.contains(n), "{text:?} lacks {n:?}");
    }
}

#[test]
fn hidden_size_1e18_is_refused_with_field_value_and_range() {
    let mut v = kimi();
    v["text_config"]["hidden_size"] = json!(1e18);
    has_all(
        &model_error("huge", &v),
        &[
            "/cfg/huge.json",
            "text_config.hidden_size",
            "1e+18",
            "1 to 65,536",
        ],
    );
    // The same as an integer, which fits a u64 and used to wrap the allreduce byte count.
    let mut v = kimi();
    v["text_config"]["hidden_size"] = json!(1_000_000_000_000_000_000u64);
    has_all(
        &model_error("huge-int", &v),
        &["text_config.hidden_size", "1000000000000000000", "65,536"],
    );
}

#[test]
fn kv_lora_rank_zero_is_refused() {
    let mut v = kimi();
    v["text_config"]["kv_lora_rank"] = json!(0);
    has_all(
        &model_error("lora0", &v),
        &["text_config.kv_lora_rank", "found 0", "from 1"],
    );
}

#[test]
fn quantization_config_of_the_wrong_type_is_an_error_not_bf16() {
    let mut v = kimi();
    v["text_config"]["quantization_config"] = json!("int4");
    has_all(
        &model_error("qstr", &v),
        &["text_config.quantization_config", "\"int4\"", "object"],
    );
    let mut v = kimi();
    v["text_config"]["quantization_config"]["ignore"] = json!("lm_head");
    has_all(
        &model_error("ignore", &v),
        &["text_config.quantization_config.ignore", "list of strings"],
    );
    let mut v = kimi();
    v["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] =
        json!(0);
    has_all(
        &model_error("g0", &v),
        &["config_groups.group_0.weights.group_size", "found 0"],
    );
    // A malformed outer quantization_config beside a valid nested one is not ignored.
    let mut v = kimi();
    v["quantization_config"] = json!("int4");
    has_all(
        &model_error("outer", &v),
        &["'quantization_config'", "\"int4\"", "object"],
    );
}

/// A change to a model's config.json.
type Edit = Box<dyn Fn(&mut Value)>;

#[test]
fn other_wrong_types_and_ranges_are_refused() {
    let cases: Vec<(&str, Edit, Vec<&str>)> = vec![
        (
            "topk",
            Box::new(|v| v["text_config"]["num_experts_per_tok"] = json!(500)),
            vec!["num_experts_per_tok", "500"],
        ),
        (
            "topk-above-experts",
            Box::new(|v| {
                v["text_config"]["n_routed_experts"] = json!(4);
                v["text_config"]["num_experts_per_tok"] = json!(8);
            }),
            vec!["num_experts_per_tok", "found 8", "number of experts (4)"],
        ),
        (
            "layers",
            Box::new(|v| v["text_config"]["num_hidden_layers"] = json!(100_000)),
            vec!["text_config.num_hidden_layers", "100000", "512"],
        ),
        (
            "neg-vocab",
            Box::new(|v| v["text_config"]["vocab_size"] = json!(-5)),
            vec!["text_config.vocab_size", "-5"],
        ),
        (
            "str-heads",
            Box::new(|v| v["text_config"]["num_attention_heads"] = json!("64")),
            vec!["text_config.num_attention_heads", "\"64\""],
        ),
        (
            "scoring",
            Box::new(|v| v["text_config"]["scoring_func"] = json!(1)),
            vec!["text_config.scoring_func", "a string"],
        ),
        (
            "text-config",
            Box::new(|v| v["text_config"] = json!([1, 2])),
            vec!["'text_config'", "an object"],
        ),
        (
            "n-group",
            Box::new(|v| v["text_config"]["n_group"] = json!(0)),
            vec!["text_config.n_group", "found 0"],
        ),
    ];
    for (name, edit, needles) in cases {
        let mut v = kimi();
        edit(&mut v);
        let e = model_error(name, &v);
        has_all(&e, &needles);
        assert!(e.contains(&format!("/cfg/{name}.json")), "{e}");
    }
}

#[test]
fn gqa_dense_ranges_are_checked_at_the_top_level() {
    let base = json!({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
        "vocab_size": 1000, "num_attention_heads": 8, "intermediate_size": 128});
    assert!(ModelSpec::from_json_str(&base.to_string(), Path::new("/cfg/ok.json"), "ok").is_ok());
    let mut v = base.clone();
    v["num_key_value_heads"] = json!(3);
    has_all(
        &model_error("kv3", &v),
        &["'num_key_value_heads'", "found 3", "divisor"],
    );
    let mut v = base.clone();
    v["hidden_size"] = json!(4);
    has_all(&model_error("hd0", &v), &["'head_dim'", "4 / 8 = 0"]);
    let mut v = base;
    v["quantization_config"] = json!(7);
    has_all(
        &model_error("q7", &v),
        &["'quantization_config'", "found 7"],
    );
}

#[test]
fn a_huge_array_value_is_not_echoed_in_full() {
    let mut v = kimi();
    v["text_config"]["hidden_size"] = json!(vec![1; 100_000]);
    let e = model_error("array", &v);
    assert!(e.len() < 400, "error is {} bytes", e.len());
    assert!(e.contains("text_config.hidden_size"));
}

#[test]
fn device_and_fifo_models_are_refused_before_reading() {
    let e = ModelSpec::from_file(Path::new("/dev/zero"))
        .unwrap_err()
        .to_string();
    has_all(&e, &["/dev/zero", "not a regular file"]);
    let fifo = temp_dir().join("model.fifo");
    let _ = std::fs::remove_file(&fifo);
    let ok = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs")
        .success();
    assert!(ok, "mkfifo failed");
    // Reading a FIFO with no writer would block forever; the check refuses it first.
    let e = ModelSpec::from_file(&fifo).unwrap_err().to_string();
    has_all(&e, &["model.fifo", "not a regular file"]);
    let e = SystemSpec::from_file(&fifo, &root("data/systems/gpus"))
        .unwrap_err()
        .to_string();
    has_all(&e, &["model.fifo", "not a regular file"]);
    std::fs::remove_file(&fifo).ok();
}

/// A copy of the default system with one line replaced, and the error it gives.
fn system_error(name: &str, from: &str, to: &str) -> String {
    let text = std::fs::read_to_string(root("data/systems/rtx-pro-6000-8x-pcie.toml")).unwrap();
    assert!(text.contains(from), "fixture lacks {from}");
    let p = temp_dir().join(format!("{name}.toml"));
    std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
    let e = SystemSpec::from_file(&p, &root("data/systems/gpus"))
        .expect_err("bad system must be refused")
        .to_string();
    assert!(e.contains(&format!("{name}.toml")), "{e}");
    e
}

#[test]
fn nan_infinite_and_negative_system_values_are_refused() {
    let e = system_error(
        "nan-bw",
        "p2p_gbps_same_socket = 54.5",
        "p2p_gbps_same_socket = nan",
    );
    has_all(&e, &["interconnect.p2p_gbps_same_socket", "NaN"]);
    let e = system_error(
        "inf-bw",
        "p2p_gbps_cross_socket = 45.0",
        "p2p_gbps_cross_socket = inf",
    );
    has_all(&e, &["interconnect.p2p_gbps_cross_socket", "inf"]);
    let e = system_error(
        "neg-lat",
        "host_latency_us = 14.0",
        "host_latency_us = -1.0",
    );
    has_all(
        &e,
        &["interconnect.host_latency_us", "found -1", "at least 0"],
    );
    let e = system_error(
        "fast-pcie",
        "p2p_gbps_same_socket = 54.5",
        "p2p_gbps_same_socket = 540.0",
    );
    has_all(&e, &["p2p_gbps_same_socket", "found 540", "64 GB/s"]);
}

#[test]
fn gpus_per_socket_zero_or_inconsistent_is_refused() {
    let e = system_error("gps0", "gpus_per_socket = 4", "gpus_per_socket = 0");
    has_all(&e, &["interconnect.gpus_per_socket", "found 0"]);
    let e = system_error("gps3", "gpus_per_socket = 4", "gpus_per_socket = 3");
    has_all(
        &e,
        &["interconnect.gpus_per_socket", "6 GPUs", "gpu_count is 8"],
    );
    let e = system_error("gpu0", "gpu_count = 8", "gpu_count = 0");
    has_all(&e, &["'gpu_count'", "found 0"]);
    let e = system_error("extra", "pcie_switches = 0", "pcie_switches = 0\nwarp = 9");
    has_all(&e, &["not valid TOML", "warp"]);
}

#[test]
fn bad_gpu_figures_are_refused() {
    let text = std::fs::read_to_string(root("data/systems/gpus/h200-sxm.toml")).unwrap();
    let dir = temp_dir();
    for (name, from, to, needles) in [
        (
            "bw-nan",
            "memory_bandwidth_gbps = 4800.0",
            "memory_bandwidth_gbps = nan",
            vec!["memory_bandwidth_gbps", "NaN"],
        ),
        (
            "flops-zero",
            "bf16_tflops = 989.0",
            "bf16_tflops = 0.0",
            vec![
                "bf16_tflops",
                "found 0",
                "at least 1 and at most 100,000 TFLOP/s",
            ],
        ),
        (
            "flops-unit",
            "fp8_tflops = 1978.0",
            "fp8_tflops = 1.978e15",
            vec!["fp8_tflops", "100,000"],
        ),
        ("sms0", "sms = 132", "sms = 0", vec!["'sms'", "found 0"]),
    ] {
        let p = dir.join(format!("{name}.toml"));
        std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
        let e = GpuSpec::from_file(&p).unwrap_err().to_string();
        assert!(e.contains(&format!("{name}.toml")), "{e}");
        has_all(&e, &needles);
    }
}
