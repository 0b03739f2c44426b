//! NCCL's channels as a setting (`--nccl-min-nchannels`, `--nccl-max-nchannels`): the bytes term of
//! a collective measured at the profile's channel count moves in proportion to the channels run,
//! no faster than the link the ring crosses, and under `--nccl-proto auto` the LL/Simple switch
//! moves with them (cost::allreduce::Channels).

mod common;

use common::decodesim_exit;

fn all_reduce(extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "simulate",
        "--batch",
        "32",
        "--context",
        "1",
        "--format",
        "json",
    ];
    args.extend(extra);
    let (code, out, err) = decodesim_exit(&args);
    assert_eq!(code, 0, "{args:?}: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    v["collectives"]
        .as_array()
        .expect("collectives")
        .iter()
        .find(|c| c["op"] == "all_reduce")
        .expect("all_reduce")
        .clone()
}

/// The LL rows' latency in the shipped RTX PRO 6000 table (AIConfigurator
/// rtx_pro_6000_server nccl_collectives.csv, 8 ranks: 24.57 µs at 512 B, 24.19 µs at 1 KiB, so the
/// first segment's intercept is its first row) and the system's cross-socket P2P link.
const LL_LATENCY_US: f64 = 24.57;
const LINK_GBPS: f64 = 45.0;

#[test]
fn more_channels_shrink_the_bytes_term_down_to_the_link() {
    let stock = all_reduce(&[]);
    assert_eq!(stock["bytes"], 458_752);
    let t0 = stock["time_us"].as_f64().unwrap();
    // The measured row: 138.8 µs at the profile's 2 channels.
    assert!((t0 - 138.79).abs() < 0.01, "{t0}");

    // 4 channels: the bytes term halves (114.2 → 57.1 µs), within the link.
    let four = all_reduce(&["--nccl-min-nchannels", "4"])["time_us"]
        .as_f64()
        .unwrap();
    let want = LL_LATENCY_US + (t0 - LL_LATENCY_US) / 2.0;
    assert!((four - want).abs() < 1e-6, "{four} vs {want}");

    // 8 channels would quarter it (28.6 µs), but LL moves 14/8 x 458,752 B per rank at half
    // the 45 GB/s link at most: 35.7 µs.
    let eight = all_reduce(&["--nccl-min-nchannels", "8"]);
    let wire = 14.0 / 8.0 * 458_752.0;
    let want = LL_LATENCY_US + wire / (0.5 * LINK_GBPS * 1e3);
    let t8 = eight["time_us"].as_f64().unwrap();
    assert!((t8 - want).abs() < 1e-6, "{t8} vs {want}");
    assert!((t8 - 60.25).abs() < 0.01, "{t8}");
    assert!(
        eight["source"]
            .as_str()
            .unwrap()
            .contains("at 8 NCCL channels against the 2 measured"),
        "{eight}"
    );
    // The link bounds it: 64 channels buy nothing more.
    let t64 = all_reduce(&["--nccl-min-nchannels", "64"])["time_us"]
        .as_f64()
        .unwrap();
    assert_eq!(t64, t8);

    // One channel: the bytes term doubles.
    let one = all_reduce(&["--nccl-max-nchannels", "1"])["time_us"]
        .as_f64()
        .unwrap();
    let want = LL_LATENCY_US + 2.0 * (t0 - LL_LATENCY_US);
    assert!((one - want).abs() < 1e-6, "{one} vs {want}");
}

#[test]
fn the_protocol_switch_moves_with_the_channels() {
    // 1.8 MB at batch 128: the stock tuner runs Simple (LL up to 512 KiB, Simple from 1 MiB);
    // at 8 channels NCCL's model moves the switch x4, to 2.9 MB, and LL carries it.
    let mut args = vec!["--nccl-proto", "auto", "--nccl-algo", "auto"];
    let at = |a: &[&str]| {
        let mut v = vec![
            "simulate",
            "--batch",
            "128",
            "--context",
            "1",
            "--format",
            "json",
        ];
        v.extend(a);
        let (code, out, err) = decodesim_exit(&v);
        assert_eq!(code, 0, "{err}");
        let j: serde_json::Value = serde_json::from_str(&out).unwrap();
        j["collectives"][0].clone()
    };
    let stock = at(&args);
    assert_eq!(stock["bytes"], 1_835_008);
    assert_eq!(stock["proto"], "auto: Simple");
    args.extend(["--nccl-min-nchannels", "8"]);
    let eight = at(&args);
    assert_eq!(eight["proto"], "auto: LL");
    assert!(eight["time_us"].as_f64().unwrap() < stock["time_us"].as_f64().unwrap());
}

#[test]
fn a_minimum_above_the_maximum_is_refused() {
    let (code, _, err) = decodesim_exit(&[
        "simulate",
        "--nccl-min-nchannels",
        "9",
        "--nccl-max-nchannels",
        "4",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("--nccl-min-nchannels 9") && err.contains("at most --nccl-max-nchannels (4)"),
        "{err}"
    );
    let (code, _, err) = decodesim_exit(&["simulate", "--nccl-min-nchannels", "65"]);
    assert_ne!(code, 0);
    assert!(err.contains("--nccl-min-nchannels"), "{err}");
}
