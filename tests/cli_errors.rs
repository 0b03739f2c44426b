//! Bad input gets a clear error naming what is wrong, and a non-zero exit; never a panic.

use std::process::Command;

fn decodesim(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .args(args)
        .output()
        .expect("binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn fails_with(args: &[&str], needles: &[&str]) {
    let (ok, _, err) = decodesim(args);
    assert!(!ok, "{args:?} should fail");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: error {err:?} lacks {n:?}");
    }
}

fn temp_file(name: &str, content: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("decodesim-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p
}

#[test]
fn unknown_names_list_the_choices() {
    fails_with(
        &["simulate", "--model", "gpt-5"],
        &["unknown model 'gpt-5'", "kimi-k2.5", "llama-3.1-70b"],
    );
    fails_with(
        &["simulate", "--system", "dgx"],
        &[
            "unknown system 'dgx'",
            "rtx-pro-6000-8x-pcie",
            "h200-8x-nvlink",
        ],
    );
    fails_with(
        &["simulate", "--calibration", "nope"],
        &["unknown calibration profile 'nope'", "rtx-pro-6000"],
    );
}

#[test]
fn config_missing_a_field_names_it() {
    let p = temp_file(
        "missing.json",
        r#"{"model_type":"llama","num_hidden_layers":2,"vocab_size":1000,"num_attention_heads":8,"intermediate_size":64}"#,
    );
    fails_with(
        &[
            "simulate",
            "--model",
            p.to_str().unwrap(),
            "--system",
            "h200-2x-nvlink",
        ],
        &["missing.json", "hidden_size", "missing"],
    );
    let p = temp_file("broken.json", "{\"hidden_size\": ");
    fails_with(
        &["simulate", "--model", p.to_str().unwrap()],
        &["broken.json", "not valid JSON"],
    );
    let p = temp_file(
        "badquant.json",
        r#"{"model_type":"llama","num_hidden_layers":2,"hidden_size":64,"vocab_size":1000,"num_attention_heads":8,"intermediate_size":64,
            "quantization_config":{"quant_method":"gptq"}}"#,
    );
    fails_with(
        &[
            "simulate",
            "--model",
            p.to_str().unwrap(),
            "--system",
            "h200-2x-nvlink",
        ],
        &["quantization_config.quant_method", "gptq"],
    );
}

#[test]
fn parallelism_must_divide_heads_and_experts() {
    fails_with(
        &[
            "simulate",
            "--tp",
            "3",
            "--system",
            "h200-8x-nvlink",
            "--nccl-proto",
            "auto",
        ],
        &["--tp 3", "64 attention heads"],
    );
    fails_with(&["simulate", "--tp", "16"], &["--tp 16", "has 8"]);
    fails_with(&["simulate", "--tp", "0"], &["at least 1"]);
    // 48 heads divide by 16 but MiniMax's 1536-wide experts do not divide by 32: test a config
    // whose experts do not split.
    let p = temp_file(
        "odd-experts.json",
        r#"{"model_type":"qwen3_moe","num_hidden_layers":2,"hidden_size":64,"vocab_size":1000,"num_attention_heads":8,
            "num_key_value_heads":2,"head_dim":8,"num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":30}"#,
    );
    fails_with(
        &["simulate", "--model", p.to_str().unwrap(), "--tp", "8"],
        &["expert intermediate size 30"],
    );
}

#[test]
fn zero_or_absurd_batch_and_context() {
    fails_with(
        &["simulate", "--batch", "0"],
        &["--batch 0", "expected 1 to"],
    );
    fails_with(&["simulate", "--batch", "100000"], &["--batch 100000"]);
    fails_with(&["simulate", "--context", "0"], &["--context 0"]);
    fails_with(
        &["simulate", "--context", "999999999"],
        &["--context 999999999", "262144"],
    );
    fails_with(&["simulate", "--batch", "-3"], &["-3"]);
}

#[test]
fn unreadable_or_invalid_calibration() {
    fails_with(
        &["simulate", "--calibration", "/nonexistent/profile.toml"],
        &["/nonexistent/profile.toml"],
    );
    let p = temp_file("bad.toml", "[profile\nname=");
    fails_with(
        &["simulate", "--calibration", p.to_str().unwrap()],
        &["bad.toml", "not valid TOML"],
    );
    let good = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/calibration/rtx-pro-6000-estimate/profile.toml"
    ))
    .unwrap();
    let p = temp_file(
        "neg.toml",
        &good.replacen("mem_efficiency = 0.80", "mem_efficiency = -1.0", 1),
    );
    fails_with(
        &["simulate", "--calibration", p.to_str().unwrap()],
        &["neg.toml", "kernels.gemm_bf16.mem_efficiency", "found -1"],
    );
    let p = temp_file(
        "nokernel.toml",
        &good.replacen("[kernels.norm]", "[kernels.normal]", 1),
    );
    fails_with(
        &["simulate", "--calibration", p.to_str().unwrap()],
        &["kernels.normal", "unknown kernel family"],
    );
    // A profile lacking the host path cannot price --p2p off: say so, listing what it has.
    let p = temp_file(
        "nohost.toml",
        &good.replace("path = \"host\"", "path = \"nvlink\""),
    );
    fails_with(
        &[
            "simulate",
            "--calibration",
            p.to_str().unwrap(),
            "--p2p",
            "off",
        ],
        &["no entry for all_reduce on path 'host'"],
    );
}

#[test]
fn default_scenario_json_has_the_documented_keys() {
    let (ok, out, err) = decodesim(&["simulate", "--format", "json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for k in [
        "step_time_us",
        "tokens_per_s",
        "breakdown",
        "collectives",
        "scenario",
        "calibration",
    ] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    let ar = &v["collectives"][0];
    assert_eq!(ar["op"], "all_reduce");
    assert_eq!(ar["count"], 123);
    assert_eq!(ar["bytes"], 32 * 14_336);
    assert_eq!(v["collectives"][1]["op"], "all_gather");
    let shares: f64 = v["breakdown"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["share"].as_f64().unwrap())
        .sum();
    assert!((shares - 1.0).abs() < 1e-9);
    assert_eq!(v["scenario"]["tp"], 8);
    assert_eq!(v["calibration"]["name"], "rtx-pro-6000");
    let step = v["step_time_us"].as_f64().unwrap();
    assert!((v["tokens_per_s"].as_f64().unwrap() - 32.0e6 / step).abs() < 1e-6);
}

#[test]
fn csv_and_table_carry_the_same_step_time() {
    let (_, json, _) = decodesim(&["simulate", "--format", "json", "--batch", "8"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let step = v["step_time_us"].as_f64().unwrap();
    let (ok, csv, _) = decodesim(&["simulate", "--format", "csv", "--batch", "8"]);
    assert!(ok);
    let line = csv
        .lines()
        .find(|l| l.starts_with("summary,,step_time_us,"))
        .unwrap();
    let csv_step: f64 = line.rsplit(',').next().unwrap().parse().unwrap();
    assert!(
        (csv_step - step).abs() <= 1e-9 * step,
        "{csv_step} vs {step}"
    );
    assert!(csv.contains("breakdown,communication,share,"));
    let (ok, table, _) = decodesim(&["simulate", "--batch", "8"]);
    assert!(ok);
    assert!(table.contains("step time") && table.contains("calibration: rtx-pro-6000"));
}

#[test]
fn timeline_is_a_chrome_trace_with_one_process_per_rank() {
    let p = std::env::temp_dir().join(format!("decodesim-tl-{}.json", std::process::id()));
    let (ok, _, err) = decodesim(&[
        "simulate",
        "--batch",
        "2",
        "--timeline",
        p.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let kernels: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(kernels.len(), 8 * 1524);
    let pids: std::collections::BTreeSet<i64> =
        kernels.iter().map(|e| e["pid"].as_i64().unwrap()).collect();
    assert_eq!(pids.len(), 8);
    assert!(kernels.iter().all(|e| e["args"]["category"].is_string()));
    let names: Vec<_> = events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .collect();
    assert_eq!(names.len(), 8 * 3);
    std::fs::remove_file(p).ok();
}

#[test]
fn list_shows_models_systems_and_profiles() {
    let (ok, out, _) = decodesim(&["list"]);
    assert!(ok);
    for n in [
        "kimi-k2.5",
        "deepseek-v3",
        "minimax-m2.5",
        "qwen3-235b-a22b",
        "llama-3.1-70b",
        "rtx-pro-6000-8x-pcie",
        "rtx-pro-6000-8x-pcie-switch",
        "h200-8x-nvlink",
        "h200-2x-nvlink",
        "rtx-pro-6000",
    ] {
        assert!(out.contains(n), "list lacks {n}");
    }
    assert!(!out.contains("error:"), "{out}");
}

/// Runs the binary, killing it if it has not finished in `secs` (a hang is a failure, not a
/// stuck test run).
fn decodesim_within(args: &[&str], secs: u64) -> (bool, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("binary runs");
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            return (status.success(), err);
        }
        if start.elapsed().as_secs() >= secs {
            child.kill().ok();
            child.wait().ok();
            panic!("{args:?} did not finish within {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn kimi_with(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> std::path::PathBuf {
    let mut v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/models/kimi-k2.5.json"
        ))
        .unwrap(),
    )
    .unwrap();
    edit(&mut v);
    temp_file(name, &v.to_string())
}

#[test]
fn absurd_model_dimensions_are_refused_naming_file_field_and_value() {
    let p = kimi_with("hidden-1e18.json", |v| {
        v["text_config"]["hidden_size"] = serde_json::json!(1e18)
    });
    fails_with(
        &["simulate", "--model", p.to_str().unwrap()],
        &[
            "hidden-1e18.json",
            "text_config.hidden_size",
            "1e+18",
            "65,536",
        ],
    );
    let p = kimi_with("lora0.json", |v| {
        v["text_config"]["kv_lora_rank"] = serde_json::json!(0)
    });
    fails_with(
        &["simulate", "--model", p.to_str().unwrap()],
        &["lora0.json", "text_config.kv_lora_rank", "found 0"],
    );
    let p = kimi_with("qstring.json", |v| {
        v["text_config"]["quantization_config"] = serde_json::json!("w4a16")
    });
    fails_with(
        &["simulate", "--model", p.to_str().unwrap()],
        &["qstring.json", "text_config.quantization_config", "w4a16"],
    );
}

#[test]
fn an_expert_width_missing_beside_dense_layers_is_refused_not_guessed() {
    // Kimi's intermediate_size (18,432) is its dense layer's width: without
    // moe_intermediate_size, reading it as the experts' would price each expert 9x too big.
    let p = kimi_with("no-moe-width.json", |v| {
        v["text_config"]["moe_intermediate_size"] = serde_json::Value::Null
    });
    fails_with(
        &["simulate", "--model", p.to_str().unwrap()],
        &[
            "no-moe-width.json",
            "text_config.moe_intermediate_size",
            "required field is missing",
            "first_k_dense_replace = 1",
        ],
    );
    // With the dense layer gone the shared expert still needs the width.
    let p = kimi_with("no-moe-width-shared.json", |v| {
        let t = &mut v["text_config"];
        t.as_object_mut().unwrap().remove("moe_intermediate_size");
        t["first_k_dense_replace"] = serde_json::json!(0);
    });
    fails_with(
        &["simulate", "--model", p.to_str().unwrap()],
        &["text_config.moe_intermediate_size", "n_shared_experts = 1"],
    );
    // No dense layer and no shared expert: intermediate_size is the experts' width (MiniMax-M2).
    let p = kimi_with("experts-only.json", |v| {
        let t = &mut v["text_config"];
        t.as_object_mut().unwrap().remove("moe_intermediate_size");
        t["first_k_dense_replace"] = serde_json::json!(0);
        t["n_shared_experts"] = serde_json::json!(0);
        t["intermediate_size"] = serde_json::json!(2048);
    });
    let (ok, _, err) = decodesim(&["simulate", "--model", p.to_str().unwrap(), "--draws", "0"]);
    assert!(ok, "{err}");
}

#[test]
fn devices_and_fifos_are_refused_without_hanging() {
    fails_with(
        &["simulate", "--model", "/dev/zero"],
        &["/dev/zero", "not a regular file"],
    );
    fails_with(
        &["simulate", "--system", "/dev/zero"],
        &["/dev/zero", "not a regular file"],
    );
    let fifo = std::env::temp_dir().join(format!("decodesim-fifo-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let (ok, err) = decodesim_within(&["simulate", "--model", fifo.to_str().unwrap()], 30);
    assert!(!ok);
    assert!(err.contains("not a regular file"), "{err}");
    std::fs::remove_file(&fifo).ok();
}

#[test]
fn bad_system_values_are_refused() {
    let good = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/systems/rtx-pro-6000-8x-pcie.toml"
    ))
    .unwrap();
    let p = temp_file(
        "gps0.toml",
        &good.replacen("gpus_per_socket = 4", "gpus_per_socket = 0", 1),
    );
    fails_with(
        &["simulate", "--system", p.to_str().unwrap()],
        &["gps0.toml", "interconnect.gpus_per_socket", "found 0"],
    );
    let p = temp_file(
        "nanlat.toml",
        &good.replacen("p2p_latency_us = 0.4", "p2p_latency_us = nan", 1),
    );
    fails_with(
        &["simulate", "--system", p.to_str().unwrap()],
        &["nanlat.toml", "interconnect.p2p_latency_us", "NaN"],
    );
}

#[test]
fn float_flags_and_context_are_range_checked() {
    for bad in ["NaN", "inf", "0", "1.5", "-0.2"] {
        fails_with(
            &["simulate", &format!("--gpu-memory-utilization={bad}")],
            &["--gpu-memory-utilization", "at most 1"],
        );
    }
    fails_with(
        &["simulate", "--context", "300000"],
        &[
            "--context 300000",
            "max_position_embeddings = 262144",
            "kimi-k2.5",
        ],
    );
    fails_with(&["simulate", "--layers", "0"], &["--layers 0", "512"]);
}

#[test]
fn a_memory_overflow_is_stated_at_the_top() {
    let (ok, out, err) = decodesim(&["simulate", "--gpu-memory-utilization", "0.5"]);
    assert!(ok, "{err}");
    let top = out.find("DOES NOT FIT").expect("overflow stated");
    assert!(top < out.find("step time").unwrap(), "{out}");
    assert!(out.contains("GiB per GPU"), "{out}");
    let (ok, out, _) = decodesim(&["simulate"]);
    assert!(ok);
    assert!(
        !out.contains("DOES NOT FIT"),
        "the default scenario fits at 0.9"
    );
    let (_, json, _) = decodesim(&[
        "simulate",
        "--format",
        "json",
        "--gpu-memory-utilization",
        "0.5",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["memory_per_gpu"]["fits"], false);
    assert_eq!(v["memory_per_gpu"]["gpu_memory_utilization"], 0.5);
    assert!(v["warnings"][0]
        .as_str()
        .unwrap()
        .starts_with("does not fit"));
}

#[test]
fn list_lines_are_readable() {
    let (ok, out, _) = decodesim(&["list"]);
    assert!(ok);
    for line in out.lines() {
        assert!(
            line.chars().count() <= 100,
            "{} characters: {line}",
            line.chars().count()
        );
    }
}

#[test]
fn concurrent_timeline_writers_leave_one_whole_file() {
    let dir = std::env::temp_dir().join(format!("decodesim-tl8-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The folder does not exist yet: the writer creates it.
    let p = dir.join("nested/same.json");
    let children: Vec<_> = (0..8)
        .map(|i| {
            Command::new(env!("CARGO_BIN_EXE_decodesim"))
                .args([
                    "simulate",
                    "--batch",
                    "2",
                    "--seed",
                    &i.to_string(),
                    "--format",
                    "json",
                    "--timeline",
                    p.to_str().unwrap(),
                ])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap())
        .expect("the timeline is one whole JSON document");
    let kernels = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .count();
    assert_eq!(kernels, 8 * 1524);
    let left: Vec<_> = std::fs::read_dir(p.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "temporary files left: {left:?}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn poor_fit_marks_are_warned_at_the_top() {
    let good = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/calibration/rtx-pro-6000-estimate/profile.toml"
    ))
    .unwrap();
    let at = good.find("[profile]\n").expect("a [profile] table") + "[profile]\n".len();
    let marked = format!(
        "{}poor_fit = [\"kernels.norm: R² 0.58 < 0.90\"]\n{}",
        &good[..at],
        &good[at..]
    );
    let p = temp_file("poor.toml", &marked);
    let (ok, out, err) = decodesim(&["simulate", "--calibration", p.to_str().unwrap()]);
    assert!(ok, "{err}");
    let top = out.find("POOR FIT").expect("poor fit stated");
    assert!(top < out.find("step time").unwrap(), "{out}");
    assert!(out.contains("kernels.norm: R² 0.58 < 0.90"), "{out}");
}

#[test]
fn calibrate_flags_of_another_mode_are_refused() {
    let out = std::env::temp_dir().join(format!("decodesim-mode-{}.toml", std::process::id()));
    let o = out.to_str().unwrap();
    for (extra, flag, mode) in [
        (
            &["--unprofiled-step-us", "5000"][..],
            "--unprofiled-step-us",
            "--from-trace",
        ),
        (&["--serving"][..], "--serving", "--from-throughput"),
        (
            &["--nccl-channels", "4"][..],
            "--nccl-channels",
            "--from-nccl-tests",
        ),
        (&["--no-table"][..], "--no-table", "--measurements"),
    ] {
        let mut args = vec!["calibrate", "--from-burst", "122,14336,6810", "--out", o];
        args.extend(extra);
        fails_with(
            &args,
            &[flag, &format!("applies to {mode}"), "--from-burst"],
        );
        assert!(!out.exists(), "{args:?} wrote a profile");
    }
}
