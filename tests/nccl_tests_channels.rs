//! The channels NCCL ran a user's nccl-tests logs on become the written profile's measured count
//! (`[nccl] default_nchannels`), from NCCL's own INFO lines or `--nccl-channels`, so that
//! `--nccl-min-nchannels` scales the user's measurement from the count it ran at; where nothing
//! states it the report warns and the profile says whose count it kept.

mod common;

use common::decodesim_exit;
use decodesim::calibrate::nccl_tests::{self, Column, MeasuredChannels, NcclTestsRequest};
use decodesim::sim::ScenarioRequest;
use std::path::{Path, PathBuf};

fn fixture() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/nccl-tests/all_reduce_perf_8gpu.txt"),
    )
    .unwrap()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("decodesim-ch-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The fixture with NCCL_DEBUG=INFO lines as NCCL prints them before the table: `count` ring
/// channels, a connection line (whose `/0` is a connection index, not a count) and, unless
/// `ring_only`, the `N coll channels` summary.
fn with_info(count: u32, ring_only: bool) -> String {
    let mut info = String::new();
    for c in 0..count {
        info.push_str(&format!(
            "gpu-node-1:41223:41223 [0] NCCL INFO Channel {c:02}/{count:02} :    0   1   2   3   4   5   6   7\n"
        ));
    }
    info.push_str(
        "gpu-node-1:41223:41280 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n",
    );
    if !ring_only {
        info.push_str(&format!("gpu-node-1:41223:41280 [0] NCCL INFO {count} coll channels, {count} collnet channels, 0 nvls channels, {count} p2p channels, 2 p2p channels per peer\n"));
    }
    fixture().replacen(
        "#\n#                                                              out-of-place",
        &format!(
            "{info}#\n#                                                              out-of-place"
        ),
        1,
    )
}

fn request(files: Vec<PathBuf>, out: &Path, channels: Option<u32>) -> NcclTestsRequest {
    let (s, base) = ScenarioRequest::default().load().unwrap();
    NcclTestsRequest {
        files,
        column: Column::OutOfPlace,
        base,
        system: s.system.clone(),
        out: out.to_path_buf(),
        name: None,
        channels,
    }
}

#[test]
fn nccls_info_lines_state_the_channels() {
    let d = tmp("info");
    let text = with_info(4, false);
    assert_ne!(text, fixture(), "the INFO lines went in");
    let f = d.join("all_reduce_perf.txt");
    std::fs::write(&f, &text).unwrap();
    let log = nccl_tests::read(&f).unwrap();
    let (n, line) = log.channels.expect("channels read");
    assert_eq!(n, 4);
    assert!(text
        .lines()
        .nth(line - 1)
        .unwrap()
        .contains("4 coll channels"));
    // Ring lines alone give the same count; the connection line's /0 is not read as one.
    let g = d.join("ring_only.txt");
    std::fs::write(&g, with_info(4, true)).unwrap();
    assert_eq!(nccl_tests::read(&g).unwrap().channels.map(|c| c.0), Some(4));
    // No INFO lines: nothing stated.
    let h = d.join("plain.txt");
    std::fs::write(&h, fixture()).unwrap();
    assert_eq!(nccl_tests::read(&h).unwrap().channels, None);

    let r =
        nccl_tests::from_nccl_tests(&request(vec![f.clone()], &d.join("p.toml"), None)).unwrap();
    assert!(
        matches!(&r.channels, MeasuredChannels::Stated { count: 4, from } if from.contains("all_reduce_perf.txt")),
        "{:?}",
        r.channels
    );
    let nccl = r.profile.nccl.as_ref().unwrap();
    assert_eq!(nccl.default_nchannels, 4);
    assert!(!nccl.source.contains("ASSUMPTION"), "{}", nccl.source);

    // Priced from that profile, 4 channels are what was measured: no change, and said so.
    let p = d.join("p.toml");
    let (code, out, err) = decodesim_exit(&[
        "simulate",
        "--calibration",
        p.to_str().unwrap(),
        "--batch",
        "128",
        "--context",
        "1",
        "--nccl-min-nchannels",
        "4",
        "--draws",
        "0",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("NCCL runs the 4 channels the profile was measured with"),
        "{out}"
    );
}

#[test]
fn the_flag_states_the_channels_and_must_agree_with_the_log() {
    let d = tmp("flag");
    let plain = d.join("plain.txt");
    std::fs::write(&plain, fixture()).unwrap();
    let r = nccl_tests::from_nccl_tests(&request(vec![plain], &d.join("p.toml"), Some(8))).unwrap();
    assert_eq!(r.profile.nccl.as_ref().unwrap().default_nchannels, 8);
    assert!(r
        .profile
        .nccl
        .as_ref()
        .unwrap()
        .source
        .ends_with("8 channels: --nccl-channels 8"));

    let info = d.join("info.txt");
    std::fs::write(&info, with_info(4, false)).unwrap();
    let e = nccl_tests::from_nccl_tests(&request(vec![info.clone()], &d.join("q.toml"), Some(8)))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("info.txt") && e.contains("says 4 channels") && e.contains("--nccl-channels 8"),
        "{e}"
    );
    assert!(!d.join("q.toml").exists(), "a refused run writes nothing");

    // Two logs of different NCCL settings cannot share one profile's count.
    let two = d.join("two.txt");
    std::fs::write(
        &two,
        with_info(2, false).replace("all_reduce_perf", "all_gather_perf"),
    )
    .unwrap();
    let e = nccl_tests::from_nccl_tests(&request(vec![info, two], &d.join("r.toml"), None))
        .unwrap_err()
        .to_string();
    assert!(e.contains("2 channels here but on 4"), "{e}");
}

#[test]
fn unstated_channels_are_warned_of_and_the_kept_count_named() {
    let d = tmp("unstated");
    let f = d.join("plain.txt");
    std::fs::write(&f, fixture()).unwrap();
    let p = d.join("p.toml");
    let (code, out, err) = decodesim_exit(&[
        "calibrate",
        "--from-nccl-tests",
        f.to_str().unwrap(),
        "--out",
        p.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("warning: the logs do not say how many channels NCCL ran on")
            && out.contains("keeps the base profile's 2"),
        "{out}"
    );
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(
        text.contains("the count is profile 'rtx-pro-6000''s"),
        "{text}"
    );
    let (code, _, err) = decodesim_exit(&[
        "calibrate",
        "--from-burst",
        "122,14336,6810",
        "--nccl-channels",
        "4",
        "--out",
        d.join("b.toml").to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("--nccl-channels") && err.contains("--from-nccl-tests"),
        "{err}"
    );
}
