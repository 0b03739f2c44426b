//! A disk that fills while a calibration writes its tables leaves what was there: the profile
//! and its tables byte for byte the same (and loadable), no temporary folder behind, and an
//! error naming what could not be written, with exit 1.
//!
//! The full disk is a file-size limit (RLIMIT_FSIZE, `ulimit -f`) on the child, with SIGXFSZ
//! ignored so that a write past the limit fails with EFBIG ("File too large") as a full disk
//! fails with ENOSPC, after the smaller tables were written: portable on Linux, no root.

#![cfg(target_os = "linux")]

mod common;

use common::snapshot;
use decodesim::sim::ScenarioRequest;
use std::path::{Path, PathBuf};
use std::process::Command;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("decodesim-full-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/nccl-tests")
        .join(name)
}

/// `calibrate --from-nccl-tests FILES --out OUT`, its files limited to `limit_kib` KiB each
/// when given (SIGXFSZ ignored: the ignored disposition survives the exec).
fn calibrate(files: &[PathBuf], out: &Path, limit_kib: Option<u64>) -> (Option<i32>, String) {
    let mut args = vec!["calibrate".to_string(), "--from-nccl-tests".to_string()];
    args.extend(files.iter().map(|f| f.display().to_string()));
    args.extend(["--out".to_string(), out.display().to_string()]);
    let o = match limit_kib {
        None => Command::new(env!("CARGO_BIN_EXE_decodesim"))
            .args(&args)
            .output()
            .unwrap(),
        // `ulimit -f` counts 512-byte blocks in POSIX sh (dash) and 1,024-byte ones in bash:
        // stated in bytes through `ulimit -f` of whichever sh this is would be guesswork, so
        // the limit is set in blocks of 512 and is at most twice as large as asked.
        Some(kib) => Command::new("sh")
            .arg("-c")
            .arg(format!(
                "trap '' XFSZ; ulimit -f {}; exec \"$0\" \"$@\"",
                kib * 2
            ))
            .arg(env!("CARGO_BIN_EXE_decodesim"))
            .args(&args)
            .output()
            .unwrap(),
    };
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn loads(profile: &Path) {
    ScenarioRequest {
        calibration: Some(profile.display().to_string()),
        layers: Some(2),
        ..Default::default()
    }
    .load()
    .unwrap();
}

#[test]
fn a_disk_that_fills_while_the_tables_are_written_leaves_what_was_there() {
    let d = tmp("tables");
    let out = d.join("D/profile.toml");
    let ar = fixture("all_reduce_perf_8gpu.txt");
    let ag = fixture("all_gather_perf_8gpu.txt");
    let (code, err) = calibrate(&[ar.clone(), ag], &out, None);
    assert_eq!(code, Some(0), "{err}");
    loads(&out);
    let before = snapshot(&d.join("D"));
    // The tables hold files on both sides of the limit: the small ones are written, then the
    // first large one fails part-way, as on a disk that fills.
    let sizes: Vec<usize> = before
        .iter()
        .filter(|(p, _)| p.starts_with("tables"))
        .map(|(_, b)| b.len())
        .collect();
    let limit_kib = 48;
    assert!(
        sizes.iter().any(|&n| n < limit_kib as usize * 1024)
            && sizes.iter().any(|&n| n > 2 * limit_kib as usize * 1024),
        "table sizes {sizes:?} do not straddle the limit"
    );

    // A good calibration that would change both (all_reduce alone) on a disk that fills.
    let (code, err) = calibrate(std::slice::from_ref(&ar), &out, Some(limit_kib));
    assert_eq!(code, Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.starts_with("error: ") && err.contains("File too large"),
        "the error says what failed: {err}"
    );
    assert!(
        err.contains("cannot write ") && err.contains("tables/"),
        "the error names the table it could not write: {err}"
    );
    assert!(
        !err.contains(".tmp."),
        "a temporary name is no use to the user: {err}"
    );
    assert_eq!(snapshot(&d.join("D")), before, "D changed");
    loads(&out);
    // No temporary folder or file left beside the profile and its tables.
    let mut names: Vec<String> = std::fs::read_dir(d.join("D"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["profile.toml", "tables"]);

    // The same run with room to write replaces both.
    let (code, err) = calibrate(&[ar], &out, None);
    assert_eq!(code, Some(0), "{err}");
    loads(&out);
    assert_ne!(snapshot(&d.join("D")), before);
    std::fs::remove_dir_all(&d).unwrap();
}
