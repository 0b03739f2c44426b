//! Classes of bad input beyond the per-format suites: each a clear error naming the file and the
//! field (or the flag), never a silent wrong answer.

mod common;
use common::decodesim_bin;
use std::path::PathBuf;

fn scratch(name: &str, file: &str, text: &str) -> PathBuf {
    let dir = common::scratch(name);
    let p = dir.join(file);
    std::fs::write(&p, text).unwrap();
    p
}

/// `text` with the first line that starts with `key` replaced by `line`.
fn with_line(text: &str, key: &str, line: &str) -> String {
    let i = text.find(key).unwrap();
    let j = i + text[i..].find('\n').unwrap();
    format!("{}{line}{}", &text[..i], &text[j..])
}

fn fails(args: &[&str], must: &[&str]) {
    let (ok, out, err) = decodesim_bin(args);
    assert!(!ok, "{args:?} succeeded: {out}");
    for m in must {
        assert!(err.contains(m), "{args:?}: '{m}' not in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

/// A two-socket PCIe system must state the cross-socket P2P bandwidth: 0 would be priced at the
/// same-socket rate without a word.
#[test]
fn a_two_socket_pcie_system_without_a_cross_socket_bandwidth_is_refused() {
    let text = std::fs::read_to_string("data/systems/rtx-pro-6000-8x-pcie.toml").unwrap();
    let bad = with_line(&text, "p2p_gbps_cross_socket", "p2p_gbps_cross_socket = 0");
    let p = scratch("cross0", "cross0.toml", &bad);
    fails(
        &["simulate", "--system", p.to_str().unwrap(), "--draws", "0"],
        &["cross0.toml", "p2p_gbps_cross_socket", "sockets"],
    );
}

/// Two `[[collectives]]` entries for one (op, path, algo, proto): the second would be ignored.
#[test]
fn a_profile_with_two_entries_for_one_collective_is_refused() {
    let text =
        std::fs::read_to_string("data/calibration/rtx-pro-6000-estimate/profile.toml").unwrap();
    let i = text.find("[[collectives]]").unwrap();
    let j = i + 1 + text[i + 1..].find("\n[").unwrap();
    let dup = format!("{}\n{}", text, &text[i..j]);
    let p = scratch("dup_coll", "dup.toml", &dup);
    fails(
        &[
            "simulate",
            "--calibration",
            p.to_str().unwrap(),
            "--draws",
            "0",
        ],
        &["dup.toml", "collectives[", "second entry"],
    );
}

/// An acceptance histogram of length 1 only cannot tell how many drafts were proposed.
#[test]
fn an_acceptance_histogram_of_bonus_tokens_only_is_refused() {
    let p = scratch("acc1", "only1.csv", "acceptance_length,count\n1,10\n");
    fails(
        &[
            "whatif",
            "spec-decode",
            "--acceptance-lengths",
            p.to_str().unwrap(),
        ],
        &["only1.csv", "acceptance_length", "length 1"],
    );
    // A zero-count row of length k + 1 states k: accepted.
    let p = scratch("acc1", "k2.csv", "acceptance_length,count\n1,10\n3,0\n");
    let (ok, _, err) = decodesim_bin(&[
        "whatif",
        "spec-decode",
        "--acceptance-lengths",
        p.to_str().unwrap(),
        "--draft-tokens",
        "2",
        "--draws",
        "0",
        "--layers",
        "4",
        "--crossover-batches",
        "none",
    ]);
    assert!(ok, "{err}");
}

/// nccl-tests output of another GPU, or faster than any link of the system, is refused.
#[test]
fn nccl_tests_of_another_gpu_or_beyond_the_links_are_refused() {
    let text = std::fs::read_to_string("tests/data/nccl-tests/all_reduce_perf_8gpu.txt").unwrap();
    let out = common::scratch("nt_bad").join("p.toml");
    let h200 = text.replace(
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "NVIDIA H200",
    );
    let p = scratch("nt_bad", "h200.txt", &h200);
    fails(
        &[
            "calibrate",
            "--from-nccl-tests",
            p.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        &["h200.txt", "# Rank lines", "NVIDIA H200", "--system"],
    );
    // Every time divided by 1,000 (ms read as µs): hundreds of GB/s over PCIe.
    let fast: String = text
        .lines()
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            if !l.trim_start().starts_with('#')
                && cols.len() >= 12
                && cols[0].parse::<u64>().is_ok()
            {
                let mut c: Vec<String> = cols.iter().map(|s| s.to_string()).collect();
                for k in [5, 9] {
                    let k = if cols.len() == 13 { k } else { k - 1 };
                    let v: f64 = c[k].parse().unwrap();
                    c[k] = format!("{:.4}", v / 1000.0);
                }
                c.join("  ")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let p = scratch("nt_bad", "fast.txt", &fast);
    fails(
        &[
            "calibrate",
            "--from-nccl-tests",
            p.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        &["fast.txt", "line ", "GB/s", "fastest link"],
    );
}

/// Messages that name the real reason: a capacity plan whose every layout was set aside, a
/// profile path that is not a file, a routing table of zeros, the draft-model flag per command.
#[test]
fn refusals_name_the_real_reason() {
    let (ok, out, err) = decodesim_bin(&["capacity", "--draws", "0", "--layouts", "tp3"]);
    assert!(!ok);
    assert!(
        err.contains("no candidate layout could be simulated"),
        "{err}"
    );
    assert!(!err.contains("memory binds"), "{err}");
    assert!(out.contains("does not divide"), "{out}");
    fails(
        &["simulate", "--calibration", "/dev/null", "--draws", "0"],
        &["/dev/null", "not a regular file"],
    );
    let p = scratch("zeros", "zeros.csv", "expert,tokens\n0,0\n1,0\n");
    let (ok, _, err) =
        decodesim_bin(&["simulate", "--routing", p.to_str().unwrap(), "--draws", "0"]);
    assert!(!ok);
    assert!(err.contains("zeros.csv") && !err.contains("None"), "{err}");
    fails(
        &[
            "sweep",
            "--batch",
            "1",
            "--method",
            "draft-model",
            "--draft-tokens",
            "1",
            "--acceptance-rate",
            "0.5",
        ],
        &["--draft in `sweep`"],
    );
}

/// Group-limited routing that cannot be: groups that do not split the experts evenly, or too
/// few groups to hold the top-k.
#[test]
fn impossible_expert_groups_are_refused() {
    let text = std::fs::read_to_string("models/deepseek-v3.json").unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["n_group"] = 7.into();
    let p = scratch("groups", "g7.json", &v.to_string());
    fails(
        &["simulate", "--model", p.to_str().unwrap(), "--draws", "0"],
        &["g7.json", "n_group", "divisor of the 256"],
    );
    v["n_group"] = 256.into();
    v["topk_group"] = 1.into();
    let p = scratch("groups", "g256.json", &v.to_string());
    fails(
        &["simulate", "--model", p.to_str().unwrap(), "--draws", "0"],
        &["g256.json", "topk_group", "top-8"],
    );
}

/// Huge and tiny values are echoed as typed (`1e308`, `1e-300`), not as 300 digits.
#[test]
fn extreme_values_are_echoed_as_typed() {
    let (ok, _, err) = decodesim_bin(&[
        "capacity",
        "--gpu-memory-utilization",
        "1e-300",
        "--draws",
        "0",
    ]);
    assert!(!ok);
    assert!(err.contains("1e-300") && err.len() < 600, "{err}");
    let text =
        std::fs::read_to_string("data/calibration/rtx-pro-6000-estimate/profile.toml").unwrap();
    let bad = with_line(&text, "m_half = ", "m_half = 1e308");
    let p = scratch("huge", "huge.toml", &bad);
    fails(
        &[
            "simulate",
            "--calibration",
            p.to_str().unwrap(),
            "--draws",
            "0",
        ],
        &["huge.toml", "m_half", "1e308"],
    );
    let (_, _, err) = decodesim_bin(&["simulate", "--calibration", p.to_str().unwrap()]);
    assert!(err.len() < 600, "{err}");
}

/// A GPU file whose driver total (`memory_total_mib`) is not the memory its `memory_gb` states
/// is refused; every bundled GPU agrees with itself.
#[test]
fn a_gpu_whose_two_memory_figures_disagree_is_refused() {
    for e in std::fs::read_dir("data/systems/gpus").unwrap() {
        let p = e.unwrap().path();
        decodesim::scenario::GpuSpec::from_file(&p).unwrap();
    }
    let text = std::fs::read_to_string("data/systems/gpus/h200-sxm.toml").unwrap();
    let bad = with_line(&text, "memory_total_mib", "memory_total_mib = 4194304.0");
    let p = scratch("gpu_mem", "h200-4tib.toml", &bad);
    let e = decodesim::scenario::GpuSpec::from_file(&p)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("h200-4tib.toml") && e.contains("memory_total_mib") && e.contains("memory_gb"),
        "{e}"
    );
}
