//! No output overwrites an input or another output: an output flag naming the file an input
//! flag reads (by its path, a symbolic link or a hard link), a folder an output replaces that
//! holds an input, or two outputs naming one file, is refused before anything runs, with exit
//! 1, both flags named, and every file left as it was.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("decodesim-oni-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the binary in `dir`: (exit code, stderr).
fn run(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Asserts a refusal naming both flags, with `file` holding `bytes` still.
fn refused(dir: &Path, args: &[&str], flags: [&str; 2], file: &Path, bytes: &[u8]) {
    let (code, err) = run(dir, args);
    assert_eq!(code, Some(1), "{args:?}: {err}");
    for f in flags {
        assert!(err.contains(f), "{args:?}: {f} not named in {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        std::fs::read(file).unwrap(),
        bytes,
        "{args:?} changed {file:?}"
    );
}

fn nccl_file() -> PathBuf {
    root().join("tests/data/nccl-tests/all_reduce_perf_8gpu.txt")
}

#[test]
fn an_output_naming_an_input_is_refused_and_the_input_kept() {
    let d = tmp("same");
    let profile = root().join("data/calibration/rtx-pro-6000-estimate/profile.toml");
    let p = d.join("P.toml");
    std::fs::copy(&profile, &p).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    std::os::unix::fs::symlink(&p, d.join("link.toml")).unwrap();
    std::fs::hard_link(&p, d.join("hard.toml")).unwrap();
    for out in ["P.toml", "./P.toml", "link.toml", "hard.toml"] {
        refused(
            &d,
            &[
                "simulate",
                "--layers",
                "2",
                "--calibration",
                "P.toml",
                "--timeline",
                out,
            ],
            ["--timeline", "--calibration"],
            &p,
            &bytes,
        );
    }
    // A sweep's grid file.
    let g = d.join("G.toml");
    std::fs::write(&g, "batch = [1, 2]\n").unwrap();
    refused(
        &d,
        &["sweep", "--grid", "G.toml", "--output", "G.toml"],
        ["--output", "--grid"],
        &g,
        b"batch = [1, 2]\n",
    );
    // Calibration inputs.
    let x = d.join("X.json");
    std::fs::copy(root().join("tests/data/bench-serve/kimi-tp8-c1.json"), &x).unwrap();
    let xb = std::fs::read(&x).unwrap();
    refused(
        &d,
        &[
            "calibrate",
            "--from-throughput",
            "X.json",
            "--out",
            "X.json",
        ],
        ["--out", "--from-throughput"],
        &x,
        &xb,
    );
    let f = d.join("F.txt");
    std::fs::copy(nccl_file(), &f).unwrap();
    let fb = std::fs::read(&f).unwrap();
    refused(
        &d,
        &["calibrate", "--from-nccl-tests", "F.txt", "--out", "F.txt"],
        ["--out", "--from-nccl-tests"],
        &f,
        &fb,
    );
    // Nothing else was written beside them.
    let names: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 6, "{names:?}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_model_named_in_a_grid_file_is_an_input_too() {
    let d = tmp("grid");
    let m = d.join("m.json");
    std::fs::copy(root().join("models/kimi-k2.5.json"), &m).unwrap();
    let mb = std::fs::read(&m).unwrap();
    std::fs::write(d.join("G.toml"), "model = \"m.json\"\nbatch = [1, 2]\n").unwrap();
    refused(
        &d,
        &["sweep", "--grid", "G.toml", "--output", "m.json"],
        ["--output", "--model"],
        &m,
        &mb,
    );
    // And the same file named directly.
    refused(
        &d,
        &[
            "sweep", "--model", "m.json", "--batch", "1", "--output", "m.json",
        ],
        ["--output", "--model"],
        &m,
        &mb,
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn two_outputs_to_one_file_are_refused() {
    let d = tmp("two");
    let (code, err) = run(
        &d,
        &[
            "capacity",
            "--plot-throughput",
            "p.svg",
            "--plot-tpot",
            "p.svg",
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--plot-throughput p.svg") && err.contains("--plot-tpot p.svg"),
        "{err}"
    );
    assert!(err.contains("two outputs name one file"), "{err}");
    assert!(!d.join("p.svg").exists(), "nothing is written");
    assert!(!err.contains("wrote"), "{err}");
    // Two spellings of one new file are one file.
    let (code, err) = run(
        &d,
        &[
            "whatif",
            "spec-decode",
            "--timeline",
            "t.json",
            "--plot",
            "./t.json",
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--timeline") && err.contains("--plot"),
        "{err}"
    );
    assert!(!d.join("t.json").exists());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_calibration_may_not_replace_the_tables_its_base_profile_reads() {
    let d = tmp("tables");
    let f = nccl_file().display().to_string();
    let (code, err) = run(
        &d,
        &[
            "calibrate",
            "--from-nccl-tests",
            &f,
            "--out",
            "D/profile.toml",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let table = d.join("D/tables/nccl_collectives.csv");
    let before = std::fs::read(&table).unwrap();
    // A second profile in the same folder on top of the first would replace the tables/
    // folder the first (its base) prices from.
    let (code, err) = run(
        &d,
        &[
            "calibrate",
            "--from-nccl-tests",
            &f,
            "--profile",
            "D/profile.toml",
            "--out",
            "D/second.toml",
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--out (its tables/ folder)") && err.contains("--profile"),
        "{err}"
    );
    assert!(err.contains("would be replaced"), "{err}");
    assert_eq!(std::fs::read(&table).unwrap(), before);
    assert!(!d.join("D/second.toml").exists());
    // An input file inside that folder is refused the same way.
    let inside = d
        .join("D/tables/nccl_collectives.csv")
        .display()
        .to_string();
    let (code, err) = run(
        &d,
        &[
            "calibrate",
            "--from-nccl-tests",
            &inside,
            "--out",
            "D/profile.toml",
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--from-nccl-tests"), "{err}");
    assert_eq!(std::fs::read(&table).unwrap(), before);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn devices_and_distinct_files_are_not_refused() {
    let d = tmp("fine");
    // /dev/null is written in place, never replaced: naming it twice loses nothing.
    let (code, err) = run(
        &d,
        &["simulate", "--layers", "2", "--timeline", "/dev/null"],
    );
    assert_eq!(code, Some(0), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}
