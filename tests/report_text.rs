//! Output a person reads: µs (not "us") in every text report, the calibration provenance on one
//! line unless `--verbose`, each warning on one line in human units, and every file written
//! named on standard error.

use std::path::Path;
use std::process::{Command, Output};

fn decodesim(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .args(args)
        .current_dir(dir)
        .env("DECODESIM_HOME", env!("CARGO_MANIFEST_DIR"))
        .env_remove("DECODESIM_NO_SOURCE_TREE")
        .output()
        .expect("decodesim runs")
}

fn ok(args: &[&str], dir: &Path) -> (String, String) {
    let out = decodesim(args, dir);
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert!(out.status.success(), "{args:?} failed:\n{stderr}");
    (stdout, stderr)
}

/// A fresh scratch folder, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let d = std::env::temp_dir().join(format!(
            "decodesim-report-text-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `us` as a unit: a word of its own ("12.0 us", "(us)", "us/rank").
fn us_as_unit(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| {
            l.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                .any(|w| w == "us")
        })
        .collect()
}

#[test]
fn text_reports_write_microseconds_as_mu_s() {
    let tmp = Scratch::new("units");
    let burst = tmp.path().join("burst.toml");
    let machine = tmp.path().join("machine.toml");
    let aic = tmp.path().join("aic.toml");
    let runs: Vec<(Vec<&str>, String)> = vec![
        (
            vec![
                "whatif",
                "spec-decode",
                "--batch",
                "1",
                "--draft-tokens",
                "1",
                "--acceptance-rate",
                "0.5",
                "--crossover-batches",
                "none",
                "--draws",
                "0",
            ],
            "draft (µs)".into(),
        ),
        (
            vec!["sweep", "--batch", "1,2", "--context", "1024"],
            "step 13,008.8 µs".into(),
        ),
        (
            vec![
                "calibrate",
                "--from-burst",
                "122,14336,6810",
                "--out",
                burst.to_str().unwrap(),
            ],
            "measured µs each".into(),
        ),
        (
            vec![
                "calibrate",
                "--from-nccl-tests",
                "tests/data/nccl-tests/all_reduce_perf_8gpu.txt",
                "--out",
                machine.to_str().unwrap(),
            ],
            "measured µs".into(),
        ),
        (
            vec![
                "calibrate",
                "--from-aiconfigurator",
                "data/calibration/aiconfigurator/rtx_pro_6000_server",
                "--system",
                "rtx-pro-6000-8x-pcie",
                "--out",
                aic.to_str().unwrap(),
            ],
            "µs/rank".into(),
        ),
    ];
    for (args, expected) in runs {
        let (stdout, stderr) = ok(&args, root());
        let text = format!("{stdout}{stderr}");
        assert!(
            text.contains(&expected),
            "{args:?}: no '{expected}' in\n{text}"
        );
        let bad = us_as_unit(&text);
        assert!(
            bad.is_empty(),
            "{args:?} writes 'us' as a unit:\n{}",
            bad.join("\n")
        );
    }
}

#[test]
fn provenance_is_one_line_unless_verbose() {
    let (short, _) = ok(&["simulate", "--draws", "0"], root());
    let lines: Vec<&str> = short.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("calibration: rtx-pro-6000 "))
        .expect("calibration line");
    let summary = lines[at + 1];
    assert_eq!(
        summary,
        "  measured (AIConfigurator rtx_pro_6000_server); from 'rtx-pro-6000-transfer'; … (--verbose for the full provenance)"
    );
    // The next line is the blank line before the step time: one line of provenance.
    assert_eq!(lines[at + 2], "");
    assert!(!short.contains("tables collected"), "{short}");

    let (long, _) = ok(&["simulate", "--draws", "0", "--verbose"], root());
    assert!(long.contains("tables collected 2026-07-25"), "{long}");
    assert!(long.contains("gemm.csv (2294 rows, BF16 GEMMs)"), "{long}");
    assert!(
        !long.contains("--verbose for the full provenance"),
        "{long}"
    );

    // calibrate prints the same one-line summary, the full text with --verbose.
    let tmp = Scratch::new("provenance");
    let out = tmp.path().join("p.toml");
    let args = [
        "calibrate",
        "--from-aiconfigurator",
        "data/calibration/aiconfigurator/rtx_pro_6000_server",
        "--system",
        "rtx-pro-6000-8x-pcie",
        "--out",
        out.to_str().unwrap(),
    ];
    let (cal, _) = ok(&args, root());
    let prov: Vec<&str> = cal
        .lines()
        .filter(|l| l.starts_with("provenance: "))
        .collect();
    assert_eq!(prov.len(), 1, "{cal}");
    assert!(
        prov[0].ends_with("(--verbose for the full provenance)"),
        "{cal}"
    );
    assert!(prov[0].chars().count() < 160, "{}", prov[0]);
    let mut verbose = args.to_vec();
    verbose.push("--verbose");
    let (cal, _) = ok(&verbose, root());
    assert!(cal.contains("provenance: measured (AIConfigurator rtx_pro_6000_server): custom_allreduce.csv (138 rows"), "{cal}");
}

#[test]
fn each_warning_is_one_line_in_human_units() {
    let (sim, _) = ok(&["simulate", "--draws", "0"], root());
    let warnings: Vec<&str> = sim
        .split("\nwarnings\n")
        .nth(1)
        .expect("a warnings section")
        .lines()
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(warnings.len() >= 2, "{warnings:?}");
    for w in &warnings {
        assert!(
            w.starts_with("  - "),
            "a warning spills onto a second line: {w:?}"
        );
    }
    // The logits all-gather of 32 x 327,680 bytes, as a person reads it.
    assert!(
        warnings.iter().any(|w| w.starts_with(
            "  - all_gather of 10.0 MiB is outside the LL rows of data/calibration/aiconfigurator/rtx_pro_6000_server/nccl_collectives.csv at 8 ranks (512 B..512.0 KiB): extrapolated"
        )),
        "{warnings:?}"
    );
    assert!(!sim.contains("10485760 bytes"), "{sim}");

    // capacity wrapped its warnings over several lines; each is one line now.
    let (cap, _) = ok(&["capacity", "--draws", "0", "--points", "3"], root());
    let warnings: Vec<&str> = cap
        .split("\nwarnings\n")
        .nth(1)
        .expect("a warnings section")
        .lines()
        .take_while(|l| !l.is_empty() && !l.starts_with("throughput at"))
        .collect();
    assert!(!warnings.is_empty());
    for w in &warnings {
        assert!(
            w.starts_with("  - "),
            "a warning spills onto a second line: {w:?}"
        );
    }
    assert!(!cap.contains(" bytes is outside"), "{cap}");
}

#[test]
fn every_file_written_is_named_on_standard_error() {
    let tmp = Scratch::new("wrote");
    let d = tmp.path();
    // simulate --timeline: the report (here JSON) stays alone on standard output.
    let (stdout, stderr) = ok(
        &[
            "simulate",
            "--batch",
            "1",
            "--draws",
            "0",
            "--format",
            "json",
            "--timeline",
            "t.json",
        ],
        d,
    );
    serde_json::from_str::<serde_json::Value>(&stdout).expect("standard output is the JSON alone");
    assert_eq!(stderr, "wrote timeline to t.json\n");
    assert!(d.join("t.json").is_file());

    let (stdout, stderr) = ok(
        &[
            "whatif",
            "spec-decode",
            "--batch",
            "1",
            "--draft-tokens",
            "1",
            "--acceptance-rate",
            "0.5",
            "--crossover-batches",
            "1,2",
            "--draws",
            "0",
            "--plot",
            "s.svg",
            "--timeline",
            "k.json",
        ],
        d,
    );
    assert!(!stdout.contains("written to"), "{stdout}");
    assert!(stderr.contains("wrote timeline to k.json\n"), "{stderr}");
    assert!(stderr.contains("wrote plot to s.svg\n"), "{stderr}");

    let (_, stderr) = ok(
        &[
            "sweep",
            "--batch",
            "1,2",
            "--context",
            "1024",
            "--output",
            "s.csv",
        ],
        d,
    );
    assert_eq!(stderr, "wrote sweep to s.csv\n");
    assert_eq!(
        std::fs::read_to_string(d.join("s.csv"))
            .unwrap()
            .lines()
            .count(),
        3
    );

    let (stdout, stderr) = ok(
        &[
            "capacity",
            "--draws",
            "0",
            "--points",
            "3",
            "--plot-memory",
            "m.svg",
        ],
        d,
    );
    assert!(!stdout.contains("written to"), "{stdout}");
    assert!(stderr.contains("wrote plot to m.svg\n"), "{stderr}");

    let traces = root().join("data/traces/h200");
    let mut args: Vec<String> = vec!["compare".into(), "--trace".into()];
    for e in std::fs::read_dir(&traces).unwrap() {
        let p = e.unwrap().path();
        if p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("refstep_b64_c8192_default_rank")
        {
            args.push(p.display().to_string());
        }
    }
    for a in [
        "--model",
        "kimi-k2.5-bf16",
        "--layers",
        "4",
        "--system",
        "h200-2x-nvlink",
        "--runtime",
        "reference",
        "--batch",
        "64",
        "--context",
        "8192",
        "--plot",
        "c.svg",
    ] {
        args.push(a.into());
    }
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let (_, stderr) = ok(&args, d);
    assert!(stderr.contains("wrote plot to c.svg\n"), "{stderr}");
}
