//! NCCL's channels as a setting (`--nccl-min-nchannels`, `--nccl-max-nchannels`): the bytes term of
//! a collective measured at the profile's channel count moves in proportion to the channels the
//! message fills (NCCL gives each channel a share of bytes before it adds one), no faster than the
//! link the ring crosses, and under `--nccl-proto auto` NCCL runs the protocol
//! its tuner picked at the measured channels: NCCL_MIN/MAX_NCHANNELS copy channels after the
//! topology search the tuner reads (cost::allreduce::Channels).

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

fn collective_at(extra: &[&str]) -> serde_json::Value {
    let mut v = vec!["simulate", "--context", "1", "--format", "json"];
    v.extend(extra);
    let (code, out, err) = decodesim_exit(&v);
    assert_eq!(code, 0, "{v:?}: {err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    j["collectives"][0].clone()
}

#[test]
fn the_measured_protocol_choice_stays_under_more_channels() {
    // 1.8 MB at batch 128: the measured tuner runs Simple (LL up to 512 KiB, Simple from 1 MiB)
    // and still does at 8 channels, whose bytes term falls to the link: 14/8 x 1,835,008 B at
    // 45 GB/s = 71.36 µs beside the Simple rows' latency.
    let base = [
        "--batch",
        "128",
        "--nccl-proto",
        "auto",
        "--nccl-algo",
        "auto",
    ];
    let stock = collective_at(&base);
    assert_eq!(stock["bytes"], 1_835_008);
    assert_eq!(stock["proto"], "auto: Simple");
    let eight = collective_at(&[&base[..], &["--nccl-min-nchannels", "8"]].concat());
    assert_eq!(eight["proto"], "auto: Simple");
    let (t2, t8) = (
        stock["time_us"].as_f64().unwrap(),
        eight["time_us"].as_f64().unwrap(),
    );
    let wire = 14.0 / 8.0 * 1_835_008.0 / (LINK_GBPS * 1e3);
    assert!((t2 - 200.1).abs() < 0.05, "{t2}");
    assert!((t8 - 95.93).abs() < 0.01, "{t8}");
    assert!(
        t8 - wire > 0.0 && t8 - wire < 30.0,
        "latency part {}",
        t8 - wire
    );
}

#[test]
fn the_laws_pick_at_the_measured_channels_and_run_at_the_set_ones() {
    // Tree is priced by the profile's laws. 114,688 B at batch 8: the tuner's model at the
    // measured 2 channels picks Simple (43.0 µs against LL's 54.3); at 8 channels LL alone
    // would price 31.4 µs (its 4 KiB a channel spread over all 8), but NCCL's tuner never sees
    // those channels, so Simple runs, on the 3 channels its 32 KiB a channel fill: 39.3 µs.
    let at = |proto: &str, ch: Option<&str>| {
        let mut a = vec!["--batch", "8", "--nccl-algo", "tree", "--nccl-proto", proto];
        if let Some(c) = ch {
            a.extend(["--nccl-min-nchannels", c]);
        }
        let c = collective_at(&a);
        (
            c["proto"].as_str().unwrap().to_string(),
            c["time_us"].as_f64().unwrap(),
        )
    };
    let (p2, t2) = at("auto", None);
    let (p8, t8) = at("auto", Some("8"));
    let (_, ll8) = at("LL", Some("8"));
    assert_eq!((p2.as_str(), p8.as_str()), ("Simple", "Simple"));
    assert!(
        (t2 - 43.0).abs() < 0.05 && (t8 - 39.3).abs() < 0.05,
        "{t2} {t8}"
    );
    assert!(ll8 < t8, "LL at 8 channels {ll8} against Simple {t8}");
}

#[test]
fn a_message_too_small_to_fill_more_channels_gains_nothing() {
    // 57,344 B at batch 4 on the ring's LL rows: NCCL gives a channel 512 threads x 8 B x 8
    // ranks = 32 KiB, so this message runs on one channel at 2 or at 8, and costs the same.
    let at = |ch: &str| {
        collective_at(&[
            "--batch",
            "4",
            "--allreduce",
            "nccl",
            "--nccl-proto",
            "LL",
            "--nccl-min-nchannels",
            ch,
        ])["time_us"]
            .as_f64()
            .unwrap()
    };
    assert_eq!(at("2"), at("8"));
    // 114,688 B fills 3 of them: x3/2 on the bytes term against the measured 2, not x4.
    let base = collective_at(&["--batch", "8", "--nccl-proto", "LL"]);
    let eight = collective_at(&[
        "--batch",
        "8",
        "--nccl-proto",
        "LL",
        "--nccl-min-nchannels",
        "8",
    ]);
    let (t2, t8) = (
        base["time_us"].as_f64().unwrap(),
        eight["time_us"].as_f64().unwrap(),
    );
    let want = LL_LATENCY_US + (t2 - LL_LATENCY_US) * 2.0 / 3.0;
    assert!((t8 - want).abs() < 1e-6, "{t8} vs {want}");
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
