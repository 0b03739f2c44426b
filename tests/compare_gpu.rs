//! `compare` holds the trace's GPU against the system's: a public MI300X trace against an H200
//! system is refused naming both GPUs (not printed as a percentage error), and a trace that
//! names no device says the GPU was not checked instead of passing over it.

use std::process::Command;

fn decodesim(args: &[&str]) -> (Option<i32>, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn an_mi300x_trace_against_an_h200_system_is_refused_naming_both_gpus() {
    let (code, out, err) = decodesim(&[
        "compare",
        "--system",
        "h200-8x-nvlink",
        "--trace",
        "tests/data/public/sglang_Qwen3-8B_decode.json.gz",
    ]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains(
            "GPU: scenario NVIDIA H200 SXM (h200-8x-nvlink, --system), trace AMD Instinct MI300X (deviceProperties)"
        ) && err.contains("--allow-mismatch"),
        "{err}"
    );
    assert!(!err.contains('%'), "no error percentage: {err}");
}

#[test]
fn a_trace_that_names_no_gpu_says_the_gpu_was_not_checked() {
    let (code, out, err) = decodesim(&[
        "compare",
        "--system",
        "h200-8x-nvlink",
        "--trace",
        "tests/data/public/inference_rank_1.json.gz",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("GPU: the trace names no device (no deviceProperties) (not checked)"),
        "{out}"
    );
}
