//! `decodesim sweep --grid FILE.toml`: the flags' keys in a file, the same scenarios as the
//! flags, and errors that name the file, the key and what it takes.

use clap::Parser;
use decodesim::cli::sweep::{request, SweepArgs};
use decodesim::cli::{Cli, Command};
use std::path::PathBuf;

fn args(argv: &[&str]) -> SweepArgs {
    let mut full = vec!["decodesim", "sweep"];
    full.extend_from_slice(argv);
    match Cli::try_parse_from(full).unwrap().command {
        Command::Sweep(a) => a,
        _ => unreachable!(),
    }
}

fn grid(tag: &str, text: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("decodesim-grid-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join(format!("{tag}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

// The crate's own `Result`, as its API returns it: boxing the error here would only hide what
// a caller gets.
#[allow(clippy::result_large_err)]
fn from_grid(tag: &str, text: &str) -> decodesim::Result<decodesim::whatif::sweep::SweepRequest> {
    let p = grid(tag, text);
    request(&args(&["--grid", p.to_str().unwrap()]))
}

#[test]
fn a_grid_file_gives_the_same_scenarios_as_the_flags() {
    let flags = request(&args(&[
        "--batch",
        "1..=256",
        "--context",
        "1024,4096,32768",
        "--nccl-proto",
        "LL,Simple",
        "--cuda-graphs",
        "on,off",
        "--draft-tokens",
        "0..=5",
        "--acceptance-rate",
        "0.35",
        "--kv-cache-dtype",
        "fp8",
    ]))
    .unwrap();
    // Strings in the flags' syntax, arrays, booleans, and underscores for dashes.
    for (tag, text) in [
        (
            "strings",
            r#"batch = "1..=256"
context = "1024,4096,32768"
nccl-proto = "LL,Simple"
cuda-graphs = "on,off"
draft-tokens = "0..=5"
acceptance-rate = 0.35
kv-cache-dtype = "fp8"
"#,
        ),
        (
            "arrays",
            r#"batch = ["1..=128", "129..=256"]
context = [1024, 4096, 32768]
nccl_proto = ["LL", "Simple"]
cuda_graphs = [true, false]
draft_tokens = [0, 1, 2, 3, 4, 5]
acceptance_rate = 0.35
kv_cache_dtype = "fp8"
"#,
        ),
    ] {
        let g = from_grid(tag, text).unwrap();
        assert_eq!(format!("{g:?}"), format!("{flags:?}"), "{tag}");
        assert_eq!(g.len(), 256 * 3 * 2 * 2 * 6);
    }
    // Keys left out keep the flags' defaults.
    let d = from_grid("defaults", "batch = 8\n").unwrap();
    let f = request(&args(&["--batch", "8"])).unwrap();
    assert_eq!(format!("{d:?}"), format!("{f:?}"));
}

#[test]
fn bad_keys_and_values_are_named() {
    let cases: [(&str, &str, &[&str]); 8] = [
        (
            "unknown",
            "batches = 8\n",
            &["batches", "unknown key", "batch, context"],
        ),
        (
            "range",
            "batch = \"0..4\"\n",
            &["'batch'", "0 is out of range", "1..="],
        ),
        (
            "proto",
            "nccl-proto = [\"LL\", \"Fast\"]\n",
            &["'nccl-proto'", "Fast", "LL128"],
        ),
        (
            "graphs",
            "cuda-graphs = \"maybe\"\n",
            &["'cuda-graphs'", "on or off"],
        ),
        ("tp", "tp = \"8\"\n", &["'tp'", "whole number"]),
        ("kind", "model = 3\n", &["'model'", "string"]),
        ("output", "pareto = true\n", &["'pareto'", "flag"]),
        (
            "rate",
            "acceptance-rate = 1.5\n",
            &["'acceptance-rate'", "[0, 1]"],
        ),
    ];
    for (tag, text, wants) in cases {
        let e = from_grid(tag, text).unwrap_err().to_string();
        assert!(e.contains(&format!("{tag}.toml")), "{tag}: {e}");
        for w in wants {
            assert!(e.contains(w), "{tag}: '{w}' not in: {e}");
        }
    }
    let e = from_grid(
        "both",
        "acceptance-rate = 0.3\nacceptance-per-position = [0.8]\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("not both"), "{e}");
    assert!(from_grid("syntax", "batch = 1..4\n")
        .unwrap_err()
        .to_string()
        .contains("TOML"));
    // The grid replaces the grid flags: giving both is refused by the parser.
    let p = grid("ok", "batch = 8\n");
    assert!(Cli::try_parse_from([
        "decodesim",
        "sweep",
        "--grid",
        p.to_str().unwrap(),
        "--batch",
        "4"
    ])
    .is_err());
}
