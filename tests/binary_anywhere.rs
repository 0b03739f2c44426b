//! An installed or copied binary works with no source tree: the bundled data is embedded and
//! extracted to a cache folder, names resolve, and no output carries a build-machine path.
//! `DECODESIM_NO_SOURCE_TREE` makes the binary ignore the source tree it was built from, which
//! still exists here.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

struct Installed {
    dir: PathBuf,
    bin: PathBuf,
}

/// The built binary copied once to a folder of its own. Once, before any test spawns a process:
/// a child forked while the copy is open for writing would hold it, and running the copy would
/// then fail with "text file busy".
fn copied_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        // Under target/tmp; copies left by earlier runs (one per run, the size of the binary)
        // are removed first.
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        for e in std::fs::read_dir(tmp).into_iter().flatten().flatten() {
            if e.file_name()
                .to_string_lossy()
                .starts_with("decodesim-anywhere-bin-")
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let dir = tmp.join(format!("decodesim-anywhere-bin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bin = dir.join("decodesim");
        std::fs::copy(env!("CARGO_BIN_EXE_decodesim"), &bin).unwrap();
        bin
    })
}

impl Installed {
    /// The copied binary with an empty cache folder of its own.
    fn new(tag: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("decodesim-anywhere-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("cache")).unwrap();
        Installed {
            dir,
            bin: copied_binary().to_path_buf(),
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .args(args)
            .current_dir("/")
            .env_remove("DECODESIM_HOME")
            .env("DECODESIM_NO_SOURCE_TREE", "1")
            .env("XDG_CACHE_HOME", self.dir.join("cache"))
            .output()
            .unwrap()
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn step_line(text: &str) -> String {
    text.lines()
        .find(|l| l.starts_with("step time"))
        .unwrap_or_else(|| panic!("no step time line in:\n{text}"))
        .to_string()
}

#[test]
fn a_copied_binary_simulates_the_default_scenario_as_the_source_tree_does() {
    let inst = Installed::new("simulate");
    let out = stdout(&inst.run(&["simulate"]));
    let from_tree = Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .arg("simulate")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("DECODESIM_HOME")
        .env_remove("DECODESIM_NO_SOURCE_TREE")
        .output()
        .unwrap();
    assert_eq!(step_line(&out), step_line(&stdout(&from_tree)));
    // The bundled profile is named by its place in the bundle, not the cache folder.
    assert!(
        out.contains("calibration: rtx-pro-6000 (data/calibration/rtx-pro-6000/profile.toml)"),
        "{out}"
    );
    // The data went to one versioned folder under the cache, with no temporary left behind.
    let entries: Vec<String> = std::fs::read_dir(inst.dir.join("cache/decodesim"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(
        entries[0].starts_with(&format!("{}-", env!("CARGO_PKG_VERSION"))),
        "{entries:?}"
    );
    // A second run reuses it.
    assert_eq!(
        step_line(&stdout(&inst.run(&["simulate"]))),
        step_line(&out)
    );
}

#[test]
fn a_copied_binary_lists_the_bundled_names_and_an_unknown_name_lists_them_too() {
    let inst = Installed::new("list");
    let list = stdout(&inst.run(&["list"]));
    for name in ["kimi-k2.5", "rtx-pro-6000-8x-pcie", "rtx-pro-6000"] {
        assert!(list.contains(name), "{name} missing from:\n{list}");
    }
    let bad = inst.run(&["simulate", "--model", "no-such-model"]);
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("unknown model 'no-such-model'"), "{err}");
    assert!(
        err.contains("kimi-k2.5") && err.contains("deepseek-v3"),
        "{err}"
    );
}

#[test]
fn json_output_of_a_copied_binary_carries_no_absolute_path() {
    let inst = Installed::new("json");
    let json = stdout(&inst.run(&["simulate", "--format", "json"]));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["scenario"]["model_file"], "models/kimi-k2.5.json");
    assert_eq!(
        v["calibration"]["path"],
        "data/calibration/rtx-pro-6000/profile.toml"
    );
    for forbidden in [
        env!("CARGO_MANIFEST_DIR").to_string(),
        inst.dir.display().to_string(),
    ] {
        assert!(!json.contains(&forbidden), "JSON names {forbidden}");
    }
    // No string value is an absolute path at all.
    fn walk(v: &serde_json::Value, at: &str, bad: &mut Vec<String>) {
        match v {
            serde_json::Value::String(s) if s.contains(" /") || s.starts_with('/') => {
                bad.push(format!("{at}: {s}"))
            }
            serde_json::Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    walk(x, &format!("{at}[{i}]"), bad)
                }
            }
            serde_json::Value::Object(o) => {
                for (k, x) in o {
                    walk(x, &format!("{at}.{k}"), bad)
                }
            }
            _ => {}
        }
    }
    let mut bad = Vec::new();
    walk(&v, "", &mut bad);
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn data_dir_reads_files_on_disk_and_a_wrong_one_is_named() {
    let inst = Installed::new("datadir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = stdout(&inst.run(&["--data-dir", root.to_str().unwrap(), "list"]));
    assert!(out.contains("kimi-k2.5"), "{out}");
    // Nothing was extracted: the files on disk were used.
    assert!(!inst.dir.join("cache/decodesim").exists());
    let bad = inst.run(&["simulate", "--data-dir", "/nonexistent-decodesim-data"]);
    assert_ne!(bad.status.code(), Some(0));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("/nonexistent-decodesim-data") && err.contains("models/ and data/"),
        "{err}"
    );
}
