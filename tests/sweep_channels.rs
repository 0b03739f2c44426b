//! Layout settings swept as lists (`sweep --nccl-min-nchannels`, `--allreduce`): each value is
//! its own scenario with a column naming it, from the flag or a grid file, and a bad count is
//! refused naming the flag.

mod common;

use common::decodesim_exit as decodesim;

fn ok(args: &[&str]) -> String {
    let (code, out, err) = decodesim(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

/// The CSV's rows as (column → value) maps.
fn csv_rows(text: &str) -> Vec<std::collections::HashMap<String, String>> {
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().expect("a header").split(',').collect();
    lines
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            assert_eq!(cells.len(), head.len(), "{l}");
            head.iter()
                .zip(cells)
                .map(|(h, c)| (h.to_string(), c.to_string()))
                .collect()
        })
        .collect()
}

fn tokens_per_s(row: &std::collections::HashMap<String, String>) -> f64 {
    row["tokens_per_s"].parse().unwrap()
}

#[test]
fn each_channel_count_is_its_own_row_and_more_channels_are_faster() {
    let plain = csv_rows(&ok(&["sweep", "--batch", "128", "--format", "csv"]));
    assert_eq!(plain.len(), 1);
    assert!(!plain[0].contains_key("nccl_min_nchannels"));

    let swept = csv_rows(&ok(&[
        "sweep",
        "--batch",
        "128",
        "--nccl-min-nchannels",
        "2,32",
        "--format",
        "csv",
    ]));
    assert_eq!(swept.len(), 2 * plain.len());
    let channels: Vec<&str> = swept
        .iter()
        .map(|r| r["nccl_min_nchannels"].as_str())
        .collect();
    assert_eq!(channels, ["2", "32"]);
    // Batch 128's all-reduces are large enough on PCIe that 32 channels move their bytes faster
    // than 2.
    let (two, many) = (tokens_per_s(&swept[0]), tokens_per_s(&swept[1]));
    assert!(many > two, "32 channels {many} tok/s, 2 channels {two}");

    // The 32-channel row is that scenario as `simulate` prices it (the fast path's 0.5%).
    let sim: serde_json::Value = serde_json::from_str(&ok(&[
        "simulate",
        "--batch",
        "128",
        "--nccl-min-nchannels",
        "32",
        "--format",
        "json",
    ]))
    .unwrap();
    let want = sim["tokens_per_s"].as_f64().unwrap();
    assert!(
        (many / want - 1.0).abs() < 0.005,
        "sweep {many} tok/s, simulate {want}"
    );

    let json: serde_json::Value = serde_json::from_str(&ok(&[
        "sweep",
        "--batch",
        "128",
        "--nccl-min-nchannels",
        "2,32",
        "--format",
        "json",
        "--include-infeasible",
    ]))
    .unwrap();
    let rows = json["rows"].as_array().unwrap();
    assert_eq!(rows[0]["nccl_min_nchannels"], 2);
    assert_eq!(rows[1]["nccl_min_nchannels"], 32);
    assert_eq!(json["best"]["tokens_per_s"]["nccl_min_nchannels"], 32);
}

#[test]
fn a_bad_channel_count_is_refused_naming_the_flag() {
    for bad in ["0", "abc", "65"] {
        let (code, out, err) = decodesim(&["sweep", "--nccl-min-nchannels", bad]);
        assert_eq!(code, 1, "{bad}: {out}");
        assert!(
            err.contains(&format!("--nccl-min-nchannels {bad}")),
            "{bad}: {err}"
        );
        assert!(out.is_empty(), "{bad}: {out}");
    }
}

#[test]
fn a_grid_file_sweeps_the_channel_counts_as_the_flag_does() {
    let dir = std::env::temp_dir().join(format!("decodesim-channels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let grid = dir.join("grid.toml");
    std::fs::write(&grid, "batch = 128\nnccl_min_nchannels = [2, 32]\n").unwrap();
    let from_grid = ok(&["sweep", "--grid", grid.to_str().unwrap(), "--format", "csv"]);
    let from_flags = ok(&[
        "sweep",
        "--batch",
        "128",
        "--nccl-min-nchannels",
        "2,32",
        "--format",
        "csv",
    ]);
    assert_eq!(from_grid, from_flags);

    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "nccl-min-nchannels = [2, 0]\n").unwrap();
    let (code, _, err) = decodesim(&["sweep", "--grid", bad.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("bad.toml") && err.contains("'nccl-min-nchannels'"),
        "{err}"
    );
}

/// `sweep --allreduce nccl,custom`: a layout setting like the channels, from its knob row
/// alone. On the default 8x PCIe machine the PCIe custom all-reduce carries a batch-1 step's
/// 14 KiB all-reduces faster than NCCL, and hands a batch-128 step's 1.8 MB ones to NCCL (its
/// 56 KiB cutoff): the same step there.
#[test]
fn the_allreduce_choice_is_a_layout_setting() {
    let out = ok(&[
        "sweep",
        "--allreduce",
        "nccl,custom",
        "--batch",
        "1,128",
        "--context",
        "1",
        "--kv-cache-dtype",
        "fp8",
        "--format",
        "csv",
    ]);
    let rows = csv_rows(&out);
    assert_eq!(rows.len(), 4, "{out}");
    let at = |ar: &str, batch: &str| {
        let r = rows
            .iter()
            .find(|r| r["allreduce"] == ar && r["batch"] == batch)
            .unwrap_or_else(|| panic!("{ar} {batch}: {out}"));
        tokens_per_s(r)
    };
    assert!(at("custom", "1") > 1.05 * at("nccl", "1"), "{out}");
    assert_eq!(at("custom", "128"), at("nccl", "128"), "{out}");
    // The custom row is the timeline's answer within the fast path's 0.5%.
    let sim = ok(&[
        "simulate",
        "--allreduce",
        "custom",
        "--batch",
        "1",
        "--context",
        "1",
        "--kv-cache-dtype",
        "fp8",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&sim).unwrap();
    let t = v["tokens_per_s"].as_f64().unwrap();
    assert!(
        (at("custom", "1") / t - 1.0).abs() < 0.005,
        "{} vs {t}",
        at("custom", "1")
    );
}
