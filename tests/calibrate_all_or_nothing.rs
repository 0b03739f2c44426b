//! A calibration's profile and its tables are written as one unit: a refused run leaves the
//! profile that was there loadable and byte for byte the same, and no temporary folder behind.
//! Errors name the user's file and line, never the generated table. An nccl-tests file of one
//! collective keeps the base profile's measured rows of the others (and says which rows are
//! measured); a file of several logs is read log by log, each checked against its own header.

mod common;

use common::snapshot;
use decodesim::calibrate::nccl_tests::{self, Column, NcclTestsRequest};
use decodesim::cost::aic::comm_price;
use decodesim::sim::ScenarioRequest;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("decodesim-aon-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn fixture(name: &str) -> PathBuf {
    root().join("tests/data/nccl-tests").join(name)
}

const AR: &str = "all_reduce_perf_8gpu.txt";
const AG: &str = "all_gather_perf_8gpu.txt";

fn calibrate(files: &[PathBuf], out: &Path) -> (Option<i32>, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .args(["calibrate", "--from-nccl-tests"])
        .args(files)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
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

/// The fixture's rows relabelled as another type (`half`, `bfloat16`).
fn as_type(text: &str, ty: &str) -> String {
    text.replace(" float ", &format!(" {ty} "))
}

#[test]
fn a_refused_calibration_leaves_the_profile_and_tables_that_were_there() {
    let d = tmp("refused");
    let out = d.join("D/profile.toml");
    let (code, _, err) = calibrate(&[fixture(AR), fixture(AG)], &out);
    assert_eq!(code, Some(0), "{err}");
    loads(&out);
    let before = snapshot(&d.join("D"));
    assert!(before.contains_key(Path::new("tables/nccl_collectives.csv")));

    // Two files that read well alone but contradict each other (the same all_reduce sizes at
    // 8 ranks in two 2-byte types, different times; the table prices by bytes): refused once
    // both are read, naming both files and lines, and before anything in D is replaced.
    let text = std::fs::read_to_string(fixture(AR)).unwrap();
    let half = d.join("ar_half.txt");
    std::fs::write(&half, as_type(&text, "half")).unwrap();
    let bf16 = d.join("ar_bf16.txt");
    std::fs::write(
        &bf16,
        as_type(&text, "bfloat16").replace("   20.00 ", "   21.00 "),
    )
    .unwrap();
    assert!(
        as_type(&text, "half") != text,
        "the type column was relabelled"
    );
    let (code, _, err) = calibrate(&[half.clone(), bf16.clone()], &out);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("ar_half.txt line 19"), "{err}");
    assert!(err.contains("ar_bf16.txt line 19"), "{err}");
    assert!(!err.contains("tables/nccl_collectives.csv"), "{err}");
    assert_eq!(snapshot(&d.join("D")), before, "D changed");
    loads(&out);

    // A malformed file: the same.
    let bad = d.join("bad.txt");
    std::fs::write(&bad, text.replace("    24.10 ", "    -1.0 ")).unwrap();
    let (code, _, err) = calibrate(&[bad], &out);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("bad.txt") && err.contains("line"), "{err}");
    assert_eq!(snapshot(&d.join("D")), before, "D changed");
    // No temporary folder left beside the tables.
    let names: Vec<String> = std::fs::read_dir(d.join("D"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");

    // A good run replaces both together.
    let (code, _, err) = calibrate(&[fixture(AR)], &out);
    assert_eq!(code, Some(0), "{err}");
    loads(&out);
    assert_ne!(snapshot(&d.join("D")), before);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn one_collective_measured_keeps_the_base_profiles_measured_others() {
    let d = tmp("keep");
    let out = d.join("p/profile.toml");
    let (s, base) = ScenarioRequest::default().load().unwrap();
    let r = nccl_tests::from_nccl_tests(&NcclTestsRequest {
        files: vec![fixture(AR)],
        column: Column::OutOfPlace,
        base: base.clone(),
        system: s.system.clone(),
        out: out.clone(),
        name: None,
        channels: None,
    })
    .unwrap();
    let keys = |v: &[((String, u32), usize)]| -> Vec<(String, u32)> {
        v.iter().map(|(k, _)| k.clone()).collect()
    };
    assert_eq!(keys(&r.measured), vec![("all_reduce".to_string(), 8)]);
    assert!(
        keys(&r.kept).contains(&("all_gather".to_string(), 8)),
        "{:?}",
        r.kept
    );
    assert!(!keys(&r.kept).contains(&("all_reduce".to_string(), 8)));
    // A 10 MiB all_gather at 8 ranks is priced from the base's measured rows, as before.
    let price = |p: &decodesim::cost::CalibrationProfile| {
        let c = p.aic.as_ref().unwrap().nccl_curve("all_gather", 8).unwrap();
        comm_price(&c.pts, 10.0 * 1048576.0).unwrap().us
    };
    let (_, mine) = ScenarioRequest {
        calibration: Some(out.display().to_string()),
        ..Default::default()
    }
    .load()
    .unwrap();
    assert_eq!(price(&mine), price(&base));
    // The all_reduce curve is the file's.
    let c = mine
        .aic
        .as_ref()
        .unwrap()
        .nccl_curve("all_reduce", 8)
        .unwrap();
    assert_eq!(c.pts[0].1, 20.0);

    // The command says exactly what is measured, and from where.
    let (code, stdout, err) = calibrate(&[fixture(AR)], &d.join("q/profile.toml"));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        stdout.contains("measured by these files: all_reduce at 8 ranks (24 rows)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("kept from the base profile's measured table")
            && stdout.contains("all_gather at 8 ranks"),
        "{stdout}"
    );
    let manifest = std::fs::read_to_string(d.join("q/tables/MANIFEST.txt")).unwrap();
    assert!(
        manifest.contains("also keeps the base profile's measured rows"),
        "{manifest}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// The two fixtures run one after the other into one file.
fn two_logs() -> String {
    std::fs::read_to_string(fixture(AR)).unwrap()
        + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 10.0\n#\n"
        + &std::fs::read_to_string(fixture(AG)).unwrap()
}

#[test]
fn a_file_of_two_logs_is_read_as_two_collectives() {
    let d = tmp("two");
    let f = d.join("both.txt");
    std::fs::write(&f, two_logs()).unwrap();
    let s = nccl_tests::read_sections(&f).unwrap();
    let got: Vec<_> = s
        .iter()
        .map(|x| (x.op.as_str(), x.nranks, x.rows.len()))
        .collect();
    assert_eq!(got, vec![("all_reduce", 8, 24), ("all_gather", 8, 24)]);
    assert_eq!(s[0].line, 1);
    assert!(s[1].line > 30, "{}", s[1].line);
    // `parse`, for one log, refuses two.
    let e = nccl_tests::read(&f).unwrap_err().to_string();
    assert!(e.contains("2 logs in one file"), "{e}");
    // The calibration measures both from the one file.
    let (code, stdout, err) = calibrate(std::slice::from_ref(&f), &d.join("p/profile.toml"));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        stdout.contains("all_reduce at 8 ranks (24 rows), all_gather at 8 ranks (24 rows)")
            || stdout.contains("all_gather at 8 ranks (24 rows), all_reduce at 8 ranks (24 rows)"),
        "{stdout}"
    );
    assert!(stdout.contains("log from line"), "{stdout}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn logs_run_together_are_checked_against_their_headers() {
    let d = tmp("headers");
    // The second log without its header lines: its rank lines repeat the first's.
    let headless: String = two_logs()
        .lines()
        .enumerate()
        .filter(|(i, l)| {
            *i < 30
                || !(l.contains("nccl-tests version")
                    || l.contains("Collective test starting")
                    || l.contains("nThread"))
        })
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    let f = d.join("headless.txt");
    std::fs::write(&f, headless).unwrap();
    let (code, _, err) = calibrate(&[f], &d.join("p/profile.toml"));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("headless.txt") && err.contains("rank 0 listed again"),
        "{err}"
    );
    assert!(!d.join("p").exists(), "nothing written");
    // More rank lines than the header's GPUs per process make whole processes of.
    let text = std::fs::read_to_string(fixture(AR))
        .unwrap()
        .replace("nThread 1 nGpus 8", "nThread 1 nGpus 3");
    let f = d.join("odd.txt");
    std::fs::write(&f, text).unwrap();
    let (code, _, err) = calibrate(&[f], &d.join("p/profile.toml"));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("odd.txt") && err.contains("3 GPU(s) per process"),
        "{err}"
    );
    // The GPU of each log is checked: a second log run on another GPU is refused by its lines.
    let other = two_logs();
    let n = other.matches("NVIDIA RTX PRO 6000").count();
    assert_eq!(n, 16);
    let mut k = 0;
    let swapped: String = other
        .lines()
        .map(|l| {
            let l = if l.contains("NVIDIA RTX PRO 6000") {
                k += 1;
                if k > 8 {
                    l.replace(
                        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                        "NVIDIA H100 80GB HBM3",
                    )
                } else {
                    l.to_string()
                }
            } else {
                l.to_string()
            };
            l + "\n"
        })
        .collect();
    let f = d.join("h100.txt");
    std::fs::write(&f, swapped).unwrap();
    let (code, _, err) = calibrate(&[f], &d.join("p/profile.toml"));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("h100.txt") && err.contains("H100"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}
