//! Profiles and model configs read as vLLM (and the tables' own provenance) would: tables
//! measured on another GPU refused at load, conflicting duplicate table rows refused by file and
//! lines, a relative `tables` path resolved against the profile's folder, no profile written
//! with an absolute path; which layers are MoE by vLLM's rules; KV heads against TP by vLLM's
//! rule; `whatif spec-decode --ep` on the target only.

mod common;

use common::{decodesim_bin, scratch};
use decodesim::cost::aic::AicTables;
use decodesim::cost::CalibrationProfile;
use decodesim::scenario::ModelSpec;
use decodesim::sim::ScenarioRequest;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// The bundled RTX PRO 6000 profile with its `tables` line replaced.
fn rtx_profile_with_tables(tables: &str) -> String {
    let src =
        std::fs::read_to_string(root().join("data/calibration/rtx-pro-6000/profile.toml")).unwrap();
    let out = src.replace(
        "tables = \"../aiconfigurator/rtx_pro_6000_server\"",
        &format!("tables = \"{tables}\""),
    );
    assert_ne!(out, src);
    out
}

#[test]
fn tables_measured_on_another_gpu_are_refused_at_load() {
    let d = scratch("vllm-aic-gpu");
    let tables = root().join("data/calibration/aiconfigurator/rtx_pro_6000_server");
    let text = rtx_profile_with_tables(&tables.display().to_string())
        .replace("gpu = \"rtx-pro-6000-server\"", "gpu = \"h200-sxm\"");
    let p = write(&d, "wrong-gpu.toml", &text);
    let e = CalibrationProfile::from_file(&p).unwrap_err().to_string();
    assert!(
        e.contains("wrong-gpu.toml")
            && e.contains("aiconfigurator.tables")
            && e.contains("measured on 'NVIDIA RTX PRO 6000 Blackwell Server Edition'")
            && e.contains("GPU 'h200-sxm' (NVIDIA H200 SXM)"),
        "{e}"
    );
    let (ok, _, err) = decodesim_bin(&["simulate", "--calibration", p.to_str().unwrap()]);
    assert!(!ok && err.contains("measured on"), "{err}");
    // The same tables under the profile's own GPU load.
    let good = rtx_profile_with_tables(&tables.display().to_string());
    let p = write(&d, "right-gpu.toml", &good);
    CalibrationProfile::from_file(&p).unwrap();
}

#[test]
fn conflicting_duplicate_table_rows_are_an_error_naming_file_and_lines() {
    let d = scratch("vllm-aic-dups");
    let header = "dtype,m,n,k,latency_us\n";
    let dir = d.join("conflict");
    std::fs::create_dir_all(&dir).unwrap();
    write(
        &dir,
        "gemm.csv",
        &format!("{header}bfloat16,1,4096,4096,10.0\nbfloat16,2,4096,4096,11.0\nbfloat16,1,4096,4096,25.0\n"),
    );
    let e = AicTables::read(&dir).unwrap_err().to_string();
    assert!(
        e.contains("gemm.csv")
            && e.contains("lines 2 and 4")
            && e.contains("bfloat16 m=1 n=4096 k=4096")
            && e.contains("10 and 25 µs"),
        "{e}"
    );
    // Identical repeats price the same and are accepted.
    let dir = d.join("repeat");
    std::fs::create_dir_all(&dir).unwrap();
    write(
        &dir,
        "gemm.csv",
        &format!("{header}bfloat16,1,4096,4096,10.0\nbfloat16,2,4096,4096,11.0\nbfloat16,1,4096,4096,10.0\n"),
    );
    let t = AicTables::read(&dir).unwrap();
    assert!(t.gemm("bfloat16", 1, 4096, 4096).is_some());
    // Collective tables: the same size at the same rank count with two latencies.
    let dir = d.join("nccl");
    std::fs::create_dir_all(&dir).unwrap();
    write(
        &dir,
        "nccl_collectives.csv",
        "op,impl,mode,dtype,nranks,elements,bytes,latency_us\n\
         all_reduce,nccl,unspecified,half,8,1024,2048,20.0\n\
         all_reduce,nccl,unspecified,int8,8,2048,2048,99.0\n\
         all_reduce,nccl,unspecified,half,8,1024,2048,30.0\n",
    );
    let e = AicTables::read(&dir).unwrap_err().to_string();
    assert!(
        e.contains("nccl_collectives.csv") && e.contains("lines 2 and 4"),
        "{e}"
    );
}

#[test]
fn a_relative_tables_path_is_resolved_against_the_profile_folder() {
    let d = scratch("vllm-aic-relative");
    copy_dir(
        &root().join("data/calibration/aiconfigurator/rtx_pro_6000_server"),
        &d.join("tables/rtx"),
    );
    std::fs::create_dir_all(d.join("profiles")).unwrap();
    let p = write(
        &d.join("profiles"),
        "rtx.toml",
        &rtx_profile_with_tables("../tables/rtx"),
    );
    // The test runs in the crate root, where ../tables/rtx does not exist.
    assert!(!Path::new("../tables/rtx").exists());
    let prof = CalibrationProfile::from_file(&p).unwrap();
    assert_eq!(
        prof.aic.as_ref().unwrap().dir,
        d.join("tables/rtx").canonicalize().unwrap()
    );
    // From another working folder, by the binary.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .args([
            "simulate",
            "--calibration",
            p.to_str().unwrap(),
            "--format",
            "json",
        ])
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn no_profile_is_written_with_an_absolute_path() {
    // The output folder does not exist yet and shares only the root with the tables: the
    // profile still names them by a relative path, and loads back from where it is.
    let d = std::env::temp_dir().join(format!("decodesim-vllm-abs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let out = d.join("new/folder/burst.toml");
    let (ok, _, err) = decodesim_bin(&[
        "calibrate",
        "--from-burst",
        "122,14336,6810",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let text = std::fs::read_to_string(&out).unwrap();
    let v: toml::Value = toml::from_str(&text).unwrap();
    let tables = v["aiconfigurator"]["tables"].as_str().unwrap();
    assert!(
        !Path::new(tables).is_absolute() && tables.starts_with(".."),
        "tables = {tables}"
    );
    let p = CalibrationProfile::from_file(&out).unwrap();
    assert_eq!(
        p.aic.as_ref().unwrap().dir,
        root()
            .join("data/calibration/aiconfigurator/rtx_pro_6000_server")
            .canonicalize()
            .unwrap()
    );
    let _ = std::fs::remove_dir_all(&d);
}

fn config(extra: &str) -> String {
    format!(
        r#"{{"model_type":"deepseek_v3","num_hidden_layers":8,"hidden_size":512,"vocab_size":1000,
        "num_attention_heads":8,"num_key_value_heads":8,"intermediate_size":1024,
        "moe_intermediate_size":256,"n_routed_experts":16,"num_experts_per_tok":2,
        "kv_lora_rank":64,"q_lora_rank":128,"qk_nope_head_dim":32,"qk_rope_head_dim":16,
        "v_head_dim":32,"max_position_embeddings":8192{extra}}}"#
    )
}

fn moe_layers(m: &ModelSpec) -> Vec<usize> {
    (0..m.num_layers).filter(|&l| m.is_layer_moe(l)).collect()
}

#[test]
fn moe_layers_follow_vllms_rules() {
    let p = Path::new("x.json");
    // DeepSeek-V3 / Kimi: i >= first_k_dense_replace and i % moe_layer_freq == 0.
    let m = ModelSpec::from_json_str(
        &config(r#","first_k_dense_replace":1,"moe_layer_freq":2"#),
        p,
        "ds",
    )
    .unwrap();
    assert_eq!(moe_layers(&m), vec![2, 4, 6]);
    assert_eq!(m.moe_layer_count(), 3);
    let m = ModelSpec::from_json_str(&config(r#","first_k_dense_replace":3"#), p, "ds").unwrap();
    assert_eq!(moe_layers(&m), vec![3, 4, 5, 6, 7]);
    // Qwen-MoE: i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0.
    let qwen = |extra: &str| {
        format!(
            r#"{{"model_type":"qwen3_moe","num_hidden_layers":8,"hidden_size":512,"vocab_size":1000,
            "num_attention_heads":8,"num_key_value_heads":4,"head_dim":64,"intermediate_size":1024,
            "moe_intermediate_size":256,"num_experts":16,"num_experts_per_tok":2{extra}}}"#
        )
    };
    let m = ModelSpec::from_json_str(
        &qwen(r#","decoder_sparse_step":2,"mlp_only_layers":[3,5]"#),
        p,
        "qwen",
    )
    .unwrap();
    assert_eq!(moe_layers(&m), vec![1, 7]);
    assert_eq!(m.dense_intermediate, 1024);
    let m = ModelSpec::from_json_str(
        &qwen(r#","decoder_sparse_step":1,"mlp_only_layers":[]"#),
        p,
        "qwen",
    )
    .unwrap();
    assert_eq!(moe_layers(&m), (0..8).collect::<Vec<_>>());
    // A bad list names the field and the range.
    let e = ModelSpec::from_json_str(&qwen(r#","mlp_only_layers":[2,99]"#), p, "qwen")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("mlp_only_layers[1]") && e.contains("found 99") && e.contains("from 0 to 7"),
        "{e}"
    );
    let e = ModelSpec::from_json_str(&config(r#","moe_layer_freq":0"#), p, "ds")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("moe_layer_freq") && e.contains("from 1 to 8"),
        "{e}"
    );
}

#[test]
fn the_workload_and_memory_follow_the_moe_layers() {
    let d = scratch("vllm-moe-workload");
    let text = std::fs::read_to_string(root().join("models/qwen3-235b-a22b.json")).unwrap();
    let sparse = text.replace("\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 2");
    assert_ne!(sparse, text);
    let dense_every_other = write(&d, "qwen-sparse2.json", &sparse);
    let req = |model: &Path| ScenarioRequest {
        model: model.display().to_string(),
        system: "h200-8x-nvlink".into(),
        layers: Some(4),
        ..Default::default()
    };
    let (s, _) = req(&dense_every_other).load().unwrap();
    assert_eq!(
        (0..4)
            .filter(|&l| s.model.is_layer_moe(l))
            .collect::<Vec<_>>(),
        vec![1, 3]
    );
    let w = decodesim::workload::build(&s);
    let experts_in = |layer: i32| {
        w.ops
            .iter()
            .any(|o| o.layer == layer && o.name.contains("expert"))
    };
    assert!(!experts_in(0) && experts_in(1) && !experts_in(2) && experts_in(3));
    let all = root().join("models/qwen3-235b-a22b.json");
    let (s_all, _) = req(&all).load().unwrap();
    let fp = |s: &decodesim::scenario::Scenario| {
        decodesim::workload::memory::footprint(&s.model, 8, 1, 1, 2.0).weights_bytes
    };
    // Two dense MLP layers replace two MoE layers: far fewer weight bytes.
    assert!(fp(&s) < 0.7 * fp(&s_all), "{} vs {}", fp(&s), fp(&s_all));
}

fn gqa(heads: usize, kv: usize) -> String {
    format!(
        r#"{{"model_type":"llama","num_hidden_layers":2,"hidden_size":{h},"vocab_size":1000,
        "num_attention_heads":{heads},"num_key_value_heads":{kv},"head_dim":64,
        "intermediate_size":1024,"max_position_embeddings":8192}}"#,
        h = heads * 64
    )
}

#[test]
fn kv_heads_against_tp_follow_vllms_rule() {
    let d = scratch("vllm-kv-heads");
    let run = |name: &str, heads: usize, kv: usize, tp: &str| {
        let p = write(&d, name, &gqa(heads, kv));
        decodesim_bin(&[
            "simulate",
            "--model",
            p.to_str().unwrap(),
            "--system",
            "h200-8x-nvlink",
            "--tp",
            tp,
        ])
    };
    // 7 KV heads at TP 8: neither replicated evenly nor split: refused.
    let (ok, _, err) = run("kv7.json", 56, 7, "8");
    assert!(!ok);
    assert!(
        err.contains("--tp 8 is not a multiple of the 7 KV heads")
            && err.contains("kv7.json")
            && err.contains("num_key_value_heads"),
        "{err}"
    );
    // 12 KV heads at TP 8: TP below the heads must divide them.
    let (ok, _, err) = run("kv12.json", 24, 12, "8");
    assert!(!ok);
    assert!(
        err.contains("--tp 8 does not divide the 12 KV heads"),
        "{err}"
    );
    // 4 KV heads at TP 8: each replicated over 2 ranks, one head per rank.
    let (ok, _, err) = run("kv4.json", 32, 4, "8");
    assert!(ok, "{err}");
    let (ok, _, err) = run("kv16.json", 32, 16, "8");
    assert!(ok, "{err}");
    // The KV memory counts the replicated head: one per rank at TP 8, not 4/8.
    let m = ModelSpec::from_json_str(&gqa(32, 4), Path::new("kv4.json"), "kv4").unwrap();
    assert_eq!(
        m.kv_bytes_per_token_per_layer(8, 2.0),
        2.0 * 1.0 * 64.0 * 2.0
    );
    assert_eq!(
        m.kv_bytes_per_token_per_layer(2, 2.0),
        2.0 * 2.0 * 64.0 * 2.0
    );
}

#[test]
fn spec_decode_ep_applies_to_the_target_not_the_dense_draft() {
    use decodesim::whatif::draft::{Draft, Method};
    let req = ScenarioRequest {
        ep: Some(8),
        ..Default::default()
    };
    let (s, _) = req.load().unwrap();
    assert_eq!(s.layout.ep_size(), 8);
    let eagle = Draft::load(Method::Eagle3, None, &s.model).unwrap();
    assert!(eagle.model.moe.is_none());
    let ds = eagle.scenario(&s).unwrap();
    assert_eq!(
        ds.layout.ep_size(),
        1,
        "the dense EAGLE-3 head has no experts to spread"
    );
    assert_eq!(s.layout.ep_size(), 8, "the target keeps expert parallelism");
    // The CLI runs it (the draft used to inherit --ep and be refused as a dense model).
    let (ok, out, err) = decodesim_bin(&[
        "whatif",
        "spec-decode",
        "--ep",
        "8",
        "--draft-tokens",
        "2",
        "--acceptance-rate",
        "0.6",
    ]);
    assert!(ok, "{err}");
    assert!(!out.is_empty());
}
