//! Numbers held to physics: floors and ceilings (not only "above 0"), counts that cannot
//! overflow when summed, loops that end on any input, a routing log that cannot tell its
//! concentration says so, bursts faster than the link are refused, capacity targets that
//! overflow are refused and a target no configuration meets exits non-zero. Each case asserts
//! the exit status and the message naming the flag or file (and line) and the allowed range.

mod common;

use common::{decodesim_bin, scratch};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn fails_with(args: &[&str], needles: &[&str]) -> String {
    let (ok, _, err) = decodesim_bin(args);
    assert!(!ok, "{args:?} should fail");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: error {err:?} lacks {n:?}");
    }
    err
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Runs the binary with a deadline: a loop that never ends fails the test instead of hanging
/// it. (success, stdout, stderr).
fn run_within(args: &[&str], limit: Duration) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            return (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} still running after {limit:?}: a loop that does not end");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn link_flags_have_a_physical_floor_and_ceiling() {
    for v in ["1e-300", "5e-324", "0.05", "20000"] {
        fails_with(
            &["simulate", "--link-gbps", v],
            &[
                &format!("--link-gbps {v}"),
                "at least 0.1 and at most 10,000 GB/s per direction",
            ],
        );
    }
    fails_with(
        &["simulate", "--link-latency-us", "2000"],
        &["--link-latency-us 2000", "at most 1,000 µs per hop"],
    );
    // The floor itself is a link (slower than 1 Gigabit Ethernet, but priced).
    let (ok, out, err) = decodesim_bin(&["simulate", "--link-gbps", "0.1", "--format", "json"]);
    assert!(ok, "{err}");
    assert!(out.contains("step_time_us"), "{out}");
}

#[test]
fn system_and_gpu_files_are_held_to_physics() {
    let d = scratch("physics-system");
    let src = std::fs::read_to_string("data/systems/h200-8x-nvlink.toml").unwrap();
    let slow = src.replace("nvlink_gbps = 450.0", "nvlink_gbps = 1e-300");
    assert_ne!(slow, src);
    let p = write(&d, "slow.toml", &slow);
    fails_with(
        &["simulate", "--system", p.to_str().unwrap()],
        &[
            "slow.toml",
            "interconnect.nvlink_gbps",
            "1e-300",
            "at least 10 GB/s per direction",
        ],
    );
    // GPU figures: a positive but absurd bandwidth is a unit mistake.
    let gpu = std::fs::read_to_string("data/systems/gpus/h200-sxm.toml").unwrap();
    let bad = gpu.replace(
        "memory_bandwidth_gbps = 4800.0",
        "memory_bandwidth_gbps = 1e-300",
    );
    assert_ne!(bad, gpu);
    let p = write(&d, "gpu.toml", &bad);
    let e = decodesim::scenario::GpuSpec::from_file(&p)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("gpu.toml")
            && e.contains("memory_bandwidth_gbps")
            && e.contains("at least 10 and at most 100,000 GB/s"),
        "{e}"
    );
}

#[test]
fn profile_bandwidths_and_efficiencies_have_floors() {
    let d = scratch("physics-profile");
    let src = std::fs::read_to_string("data/calibration/h200/profile.toml").unwrap();
    // The profile names its table relative to its folder: point it back at the bundled one.
    let src = src.replace(
        "measurements = \"kernels.csv\"",
        &format!(
            "measurements = \"{}\"",
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("data/calibration/h200/kernels.csv")
                .display()
        ),
    );
    let re = regex::Regex::new(r"bus_bw_gbps = [0-9.e+-]+").unwrap();
    let slow = re.replacen(&src, 1, "bus_bw_gbps = 1e-300").into_owned();
    let p = write(&d, "slow.toml", &slow);
    fails_with(
        &[
            "simulate",
            "--system",
            "h200-8x-nvlink",
            "--calibration",
            p.to_str().unwrap(),
        ],
        &[
            "slow.toml",
            "collectives[0].bus_bw_gbps",
            "1e-300",
            "[0.1, 4800] GB/s",
        ],
    );
    let re = regex::Regex::new(r"mem_efficiency = [0-9.e+-]+").unwrap();
    let bad = re.replacen(&src, 1, "mem_efficiency = 1e-300").into_owned();
    let p = write(&d, "eff.toml", &bad);
    fails_with(
        &[
            "simulate",
            "--system",
            "h200-8x-nvlink",
            "--calibration",
            p.to_str().unwrap(),
        ],
        &["eff.toml", "mem_efficiency", "1e-300", "[0.001, 1]"],
    );
}

#[test]
fn routing_counts_that_overflow_are_refused_by_file_and_line() {
    let d = scratch("physics-routing");
    let p = write(
        &d,
        "huge.csv",
        "# counts that sum to infinity\nexpert,tokens\n0,1e308\n1,1e308\n",
    );
    fails_with(
        &["simulate", "--routing", p.to_str().unwrap()],
        &[
            "huge.csv",
            "line 3, column tokens",
            "1e308",
            "at most 1,000,000,000,000,000",
        ],
    );
    let p = write(
        &d,
        "hist.csv",
        "tokens,experts_touched,steps\n32,200,1e308\n",
    );
    fails_with(
        &["simulate", "--routing", p.to_str().unwrap()],
        &["hist.csv", "line 2, column steps", "1e308"],
    );
    let p = write(&d, "tok.csv", "tokens,experts_touched,steps\n1e300,200,1\n");
    fails_with(
        &["simulate", "--routing", p.to_str().unwrap()],
        &[
            "tok.csv",
            "line 2, column tokens",
            "at most 10,000,000 tokens",
        ],
    );
    let p = write(&d, "idx.csv", "expert,tokens\n1e308,5\n");
    fails_with(
        &["simulate", "--routing", p.to_str().unwrap()],
        &["idx.csv", "line 2, column expert", "at most 4,095"],
    );
}

#[test]
fn a_routing_file_with_one_dominant_expert_ends() {
    // One expert with all the mass and the rest at the half-token floor: drawing 8 distinct
    // experts by rejection would take ~1e15 draws per token. It must end, and route top-8.
    let d = scratch("physics-dominant");
    let p = write(&d, "dominant.csv", "expert,tokens\n0,1e15\n");
    let (ok, out, err) = run_within(
        &[
            "simulate",
            "--routing",
            p.to_str().unwrap(),
            "--format",
            "json",
        ],
        Duration::from_secs(60),
    );
    assert!(ok, "{err}");
    assert!(out.contains("step_time_us"), "{out}");
    // The sampler itself: every token still gets 8 distinct experts.
    let r = decodesim::scenario::routing::Routing::parse(p.to_str().unwrap()).unwrap();
    let res = decodesim::workload::routing::resolve(&r, 384, 8, 2);
    let s = decodesim::workload::routing::sample(&res, &[true, true], 384, 8, 64, 1);
    assert_eq!(s.expert_tokens[1].iter().sum::<u32>(), 64 * 8);
    assert_eq!(
        s.expert_tokens[1][0], 64,
        "the dominant expert takes every token"
    );
}

#[test]
fn a_histogram_that_cannot_tell_the_concentration_warns_with_its_interval() {
    // Kimi: 384 experts, top-8. Every expert touched at 1,024 and 4,096 tokens per step: uniform
    // routing does that (384 (1 - (1 - 8/384)^1024) = 384.0), and so does a power law up to
    // about 0.9, so the log cannot tell them apart.
    let d = scratch("physics-saturated");
    let p = write(
        &d,
        "all.csv",
        "tokens,experts_touched,steps\n1024,384,100\n4096,384,100\n",
    );
    let (ok, out, err) = decodesim_bin(&["simulate", "--routing", p.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(
        out.contains("routing file")
            && out.contains("all.csv")
            && out.contains("every expert touched in every row")
            && out.contains("concentration alpha in [0.00, ")
            && out.contains("using uniform"),
        "{out}"
    );
    let r = decodesim::scenario::routing::Routing::parse(p.to_str().unwrap()).unwrap();
    let f = decodesim::workload::routing::histogram_fit(&r, 384, 8).unwrap();
    assert!(f.saturated && f.undetermined(), "{f:?}");
    assert_eq!(f.alpha, 0.0);
    assert!(f.interval[0] == 0.0 && f.interval[1] >= 0.5, "{f:?}");
    // A histogram that does tell (uniform routing's own expectation) gives no warning.
    let p = write(
        &d,
        "uniform.csv",
        "tokens,experts_touched,steps\n8,60.3,100\n32,188.2,100\n",
    );
    let r = decodesim::scenario::routing::Routing::parse(p.to_str().unwrap()).unwrap();
    let f = decodesim::workload::routing::histogram_fit(&r, 384, 8).unwrap();
    assert!(!f.saturated, "{f:?}");
    assert!(f.interval[1] - f.interval[0] < 0.5, "{f:?}");
    assert!(f.warning().is_none(), "{f:?}");
}

#[test]
fn acceptance_and_request_mix_counts_cannot_overflow() {
    let d = scratch("physics-counts");
    let p = write(&d, "acc.csv", "acceptance_length,count\n1,1e308\n2,1e308\n");
    fails_with(
        &[
            "whatif",
            "spec-decode",
            "--acceptance-lengths",
            p.to_str().unwrap(),
        ],
        &[
            "acc.csv",
            "row 2 column count",
            "1e308",
            "at most 1,000,000,000,000,000",
        ],
    );
    let p = write(
        &d,
        "mix.csv",
        "input_len,output_len,weight\n1000,100,1e308\n2000,200,1e308\n",
    );
    fails_with(
        &["capacity", "--request-mix", p.to_str().unwrap()],
        &[
            "mix.csv",
            "line 2",
            "weight '1e308'",
            "at most 1,000,000,000,000,000",
        ],
    );
}

#[test]
fn a_burst_faster_than_the_link_is_refused_and_contradictory_ones_warn() {
    let d = scratch("physics-burst");
    // 8 x H200 over NVLink (450 GB/s per direction, 0.6 us per hop): 100 allreduces of 64 MiB
    // need at least 0.6 + 7/8 x 67,108,864 / 450e3 = 131 us each; 100 us for all of them is
    // 1 us each.
    let p = write(
        &d,
        "fast.csv",
        "count,bytes,total_us\n100,14336,8000\n# too fast:\n100,67108864,100\n",
    );
    let out = d.join("never.toml");
    fails_with(
        &[
            "calibrate",
            "--from-burst",
            p.to_str().unwrap(),
            "--system",
            "h200-8x-nvlink",
            "--out",
            out.to_str().unwrap(),
        ],
        &[
            "fast.csv: line 4",
            "faster than the link allows",
            "at least 131.",
            "nvlink path at TP=8",
        ],
    );
    assert!(!out.exists());
    // Two bursts of one size 10x apart: a warning naming both lines; the fit still runs.
    let p = write(
        &d,
        "contra.csv",
        "count,bytes,total_us\n100,14336,2000\n100,14336,20000\n",
    );
    let out = d.join("contra.toml");
    let (ok, stdout, err) = decodesim_bin(&[
        "calibrate",
        "--from-burst",
        p.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(
        stdout.contains("warning: contradictory bursts of 14336 B")
            && stdout.contains("contra.csv: line 2")
            && stdout.contains("contra.csv: line 3")
            && stdout.contains("10.0x apart"),
        "{stdout}"
    );
}

#[test]
fn capacity_targets_that_overflow_are_refused_by_flag() {
    fails_with(
        &["capacity", "--target-tokens-per-s", "1e30"],
        &[
            "--target-tokens-per-s 1e30",
            "at most 1,000,000,000 tokens/s",
        ],
    );
    fails_with(
        &["capacity", "--users", "4000000000"],
        &["--users 4000000000", "from 1 to 100,000,000"],
    );
    fails_with(
        &[
            "capacity",
            "--target-tokens-per-s",
            "100",
            "--max-tpot-ms",
            "1e-9",
        ],
        &["--max-tpot-ms", "at least 0.01"],
    );
    fails_with(
        &[
            "capacity",
            "--target-tokens-per-s",
            "100",
            "--gpu-hour-usd",
            "1e308",
        ],
        &["--gpu-hour-usd", "at most 1,000 USD per GPU-hour"],
    );
}

#[test]
fn a_target_no_configuration_meets_exits_non_zero_after_the_report() {
    // One 8x RTX PRO 6000 system cannot give 100,000 tokens/s of Kimi-K2.5.
    let (ok, out, err) = decodesim_bin(&[
        "capacity",
        "--target-tokens-per-s",
        "100000",
        "--max-systems",
        "1",
    ]);
    assert!(!ok, "an unmet target must exit non-zero: {out}");
    assert!(
        err.contains("no configuration meets the target") && err.contains("throughput binds"),
        "{err}"
    );
    // The report that says why is still written.
    assert!(out.contains("throughput binds"), "{out}");
    // A target that is met exits 0.
    let (ok, out, err) = decodesim_bin(&["capacity", "--target-tokens-per-s", "50"]);
    assert!(ok, "{err}");
    assert!(out.contains("cheapest:"), "{out}");
}

#[test]
fn nccl_knobs_are_held_to_nccls_own_ranges() {
    // The flags' parser refuses them by name and range...
    fails_with(
        &["simulate", "--nccl-max-nchannels", "0"],
        &["--nccl-max-nchannels", "1..=64"],
    );
    // ...and the scenario itself, for paths that do not pass the parser (`--vary`, grids).
    use decodesim::scenario::deployment::CommKnobs;
    let load = |comm: CommKnobs| {
        decodesim::sim::ScenarioRequest {
            comm,
            ..Default::default()
        }
        .load()
        .unwrap_err()
        .to_string()
    };
    let e = load(CommKnobs {
        nccl_max_nchannels: Some(65),
        ..Default::default()
    });
    assert!(
        e.contains("--nccl-max-nchannels 65") && e.contains("from 1 to 64"),
        "{e}"
    );
    let e = load(CommKnobs {
        nccl_buffsize: Some(1),
        ..Default::default()
    });
    assert!(
        e.contains("--nccl-buffsize 1") && e.contains("from 1,024 to 17,179,869,184"),
        "{e}"
    );
}
