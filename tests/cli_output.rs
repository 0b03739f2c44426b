//! Output is written or fails loudly: a full disk on standard output is an error naming it, a
//! closed pipe ends quietly, devices and FIFOs are written in place (never renamed over),
//! folders are refused naming the flag, a signal during a write leaves no temporary file and
//! the previous file intact, and `sweep --output` writes the format its extension names.

mod common;

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_decodesim"))
}

/// Runs with standard output on /dev/full: (exit code, stderr).
fn to_dev_full(args: &[&str]) -> (Option<i32>, String) {
    let full = std::fs::File::options()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = bin().args(args).stdout(full).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn h200_capture(name: &str, scratch: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/traces/h200");
    let dir = common::scratch(scratch);
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        let f = e.file_name().to_string_lossy().into_owned();
        if f.starts_with(&format!("{name}_rank")) {
            std::fs::copy(e.path(), dir.join(&f)).unwrap();
        }
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2, "{name}");
    dir
}

const SPEC_DECODE: [&str; 10] = [
    "whatif",
    "spec-decode",
    "--acceptance-rate",
    "0.6",
    "--draft-tokens",
    "1,2",
    "--crossover-batches",
    "none",
    "--mc-users",
    "20",
];

#[test]
fn a_full_disk_on_standard_output_is_an_error_for_every_command() {
    let traces = h200_capture("refstep_b16_c8192_default", "out_full_traces");
    let t = traces.to_str().unwrap();
    let profile = common::scratch("out_full_calibrate").join("p.toml");
    let calib = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/calibration/h200");
    let cases: Vec<Vec<&str>> = vec![
        vec!["simulate"],
        vec!["simulate", "--format", "json"],
        vec!["sweep", "--batch", "1,2"],
        vec!["sweep", "--batch", "1,2", "--format", "csv"],
        vec!["capacity", "--points", "3"],
        SPEC_DECODE.to_vec(),
        vec!["whatif", "--vary", "batch=1,2"],
        vec!["list"],
        vec!["trace", "summarize", t],
        vec![
            "compare",
            "--trace",
            t,
            "--system",
            "h200-2x-nvlink",
            "--allow-mismatch",
        ],
        vec!["validate", "--traces", t],
        vec![
            "calibrate",
            "--measurements",
            calib.to_str().unwrap(),
            "--out",
            profile.to_str().unwrap(),
        ],
    ];
    for args in &cases {
        let (code, err) = to_dev_full(args);
        assert_eq!(code, Some(1), "{args:?} must fail on a full disk: {err}");
        assert!(
            err.contains("error: cannot write standard output: No space left on device"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn a_closed_pipe_ends_quietly_with_success() {
    for args in [
        vec!["simulate"],
        vec!["list"],
        vec!["sweep", "--batch", "1,2,3", "--format", "csv"],
    ] {
        let mut child = bin()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes away before anything is written: every write gets EPIPE.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?} said something: {err}");
    }
}

fn is_char_device(p: &str) -> bool {
    std::fs::metadata(p).unwrap().file_type().is_char_device()
}

#[test]
fn dev_null_is_written_in_place_and_stays_a_device() {
    for args in [
        vec!["simulate", "--timeline", "/dev/null", "--format", "csv"],
        vec![
            "sweep",
            "--batch",
            "1",
            "--format",
            "csv",
            "--output",
            "/dev/null",
        ],
    ] {
        let out = bin().args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(is_char_device("/dev/null"), "{args:?} replaced /dev/null");
    }
    // No temporary file was made beside it.
    let left: Vec<_> = std::fs::read_dir("/dev")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".null.tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn dev_full_as_an_output_file_is_a_write_error() {
    let out = bin()
        .args(["simulate", "--timeline", "/dev/full", "--format", "csv"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot write /dev/full: No space left on device"),
        "{err}"
    );
    assert!(is_char_device("/dev/full"));
}

#[test]
fn a_fifo_is_written_in_place_for_its_reader() {
    let dir = common::scratch("out_fifo");
    let fifo = dir.join("timeline.json");
    let st = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(st.success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(&fifo).unwrap())
    };
    let out = bin()
        .args(["simulate", "--format", "csv", "--timeline"])
        .arg(&fifo)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = reader.join().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&bytes).expect("a whole Chrome trace");
    assert!(
        v["traceEvents"].as_array().is_some_and(|e| e.len() > 100),
        "{} bytes",
        bytes.len()
    );
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "a temp file left"
    );
}

#[test]
fn a_folder_as_an_output_is_refused_naming_the_flag() {
    let dir = common::scratch("out_folder");
    let d = dir.to_str().unwrap();
    let calib = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/calibration/h200");
    let mut spec = SPEC_DECODE.to_vec();
    spec.extend(["--timeline", d]);
    for (args, flag) in [
        (vec!["simulate", "--timeline", d], "--timeline"),
        (spec, "--timeline"),
        (vec!["sweep", "--format", "csv", "--output", d], "--output"),
        (
            vec![
                "calibrate",
                "--measurements",
                calib.to_str().unwrap(),
                "--out",
                d,
            ],
            "--out",
        ),
        (vec!["capacity", "--plot-tpot", d], "--plot-tpot"),
    ] {
        let out = bin().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "error: {flag} {d}: is a folder; expected a file to write"
            )),
            "{args:?}: {err}"
        );
    }
    assert!(dir.is_dir());
}

/// Starts a long write to `target` (a 512-layer timeline, tens of MB), sends `signal` once its
/// temporary file exists, and returns the exit code.
fn interrupt_a_long_write(dir: &Path, target: &Path, signal: &str) -> Option<i32> {
    let mut child = bin()
        .args([
            "simulate",
            "--system",
            "h200-8x-nvlink",
            "--layers",
            "512",
            "--format",
            "csv",
            "--timeline",
        ])
        .arg(target)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    loop {
        let tmp = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().contains(".tmp."));
        if tmp {
            break;
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!("the write ended ({st}) before its temporary file was seen");
        }
        assert!(
            started.elapsed().as_secs() < 300,
            "no temporary file within 300 s"
        );
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    let st = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    child.wait().unwrap().code()
}

#[test]
fn a_signal_during_a_write_leaves_no_temp_file_and_the_old_file_intact() {
    for (signal, code) in [("TERM", 143), ("INT", 130)] {
        let dir = common::scratch(&format!("out_signal_{signal}"));
        let target = dir.join("timeline.json");
        std::fs::write(&target, "the previous timeline").unwrap();
        let got = interrupt_a_long_write(&dir, &target, signal);
        assert_eq!(got, Some(code), "SIG{signal}");
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["timeline.json".to_string()], "SIG{signal}");
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "the previous timeline",
            "SIG{signal}"
        );
    }
}

#[test]
fn sweep_output_takes_the_format_of_its_extension() {
    let dir = common::scratch("out_sweep_ext");
    let csv = dir.join("rows.csv");
    let json = dir.join("rows.JSON");
    for p in [&csv, &json] {
        let out = bin()
            .args(["sweep", "--batch", "1,2", "--output"])
            .arg(p)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stdout.is_empty(), "rows went to the file only");
    }
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut r = csv::Reader::from_reader(text.as_bytes());
    assert_eq!(&r.headers().unwrap()[3], "batch");
    let batches: Vec<String> = r.records().map(|x| x.unwrap()[3].to_string()).collect();
    assert_eq!(batches, ["1", "2"]);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(v.to_string().contains("\"batch\":2"), "{v}");

    // An extension that names no format is refused before the sweep, and nothing is written.
    let txt = dir.join("rows.txt");
    let out = bin()
        .args(["sweep", "--batch", "1", "--output"])
        .arg(&txt)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--output") && err.contains("rows.txt") && err.contains(".csv or .json"),
        "{err}"
    );
    assert!(!txt.exists());
    // An explicit --format wins over the extension.
    let out = bin()
        .args(["sweep", "--batch", "1", "--format", "csv", "--output"])
        .arg(&txt)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(std::fs::read_to_string(&txt)
        .unwrap()
        .starts_with("model,system,"));
}
