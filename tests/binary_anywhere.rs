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

/// The copied binary run with the environment given (nothing of the caller's data variables).
fn run_with(bin: &Path, args: &[&str], env: &[(&str, &Path)], cwd: &Path) -> Output {
    let mut c = Command::new(bin);
    c.args(args)
        .current_dir(cwd)
        .env_remove("DECODESIM_HOME")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("CARGO_MANIFEST_DIR")
        .env("DECODESIM_NO_SOURCE_TREE", "1");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// The bundled files under `dir` whose name ends with `suffix`.
fn files_ending(dir: &Path, suffix: &str, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files_ending(&p, suffix, out);
        } else if p.to_string_lossy().ends_with(suffix) {
            out.push(p);
        }
    }
}

#[test]
fn a_truncated_file_in_the_cache_is_detected_and_extracted_again_never_a_different_step() {
    let inst = Installed::new("truncated");
    for profile in ["rtx-pro-6000", "h200"] {
        let args = [
            "simulate",
            "--calibration",
            profile,
            "--system",
            if profile == "h200" {
                "h200-8x-nvlink"
            } else {
                "rtx-pro-6000-8x-pcie"
            },
        ];
        let first = stdout(&inst.run(&args));
        let cache = inst.dir.join("cache/decodesim");
        let mut moe = Vec::new();
        files_ending(&cache, "moe.csv", &mut moe);
        assert!(!moe.is_empty(), "no moe.csv under {}", cache.display());
        for f in &moe {
            let bytes = std::fs::read(f).unwrap();
            std::fs::write(f, &bytes[..bytes.len() / 2]).unwrap();
        }
        let again = inst.run(&args);
        assert_eq!(step_line(&stdout(&again)), step_line(&first), "{profile}");
        let err = String::from_utf8_lossy(&again.stderr);
        assert!(
            err.contains("warning: the cached copy of the bundled data")
                && err.contains("moe.csv")
                && err.contains("extracted again"),
            "{err}"
        );
        // Repaired: the next run is silent.
        let third = inst.run(&args);
        assert!(third.stderr.is_empty(), "{third:?}");
    }
}

#[test]
fn a_file_added_to_the_cache_is_never_listed() {
    let inst = Installed::new("planted-model");
    stdout(&inst.run(&["list"]));
    let cache = inst.dir.join("cache/decodesim");
    let version = std::fs::read_dir(&cache)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    std::fs::copy(
        version.join("models/kimi-k2.5.json"),
        version.join("models/planted-kimi.json"),
    )
    .unwrap();
    let out = inst.run(&["list"]);
    let text = stdout(&out);
    assert!(!text.contains("planted-kimi"), "{text}");
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("models/planted-kimi.json: not a bundled file"));
    assert!(!version.join("models/planted-kimi.json").exists());
}

#[test]
fn a_cache_folder_others_can_write_or_a_stranger_owns_is_never_used() {
    use std::os::unix::fs::PermissionsExt;
    let inst = Installed::new("planted-tmp");
    // HOME cannot hold a cache (nothing can be created under /proc), so the temp folder is
    // the last place left; a folder is planted there.
    let home = Path::new("/proc/decodesim-no-home");
    let tmp = inst.dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let uid = std::fs::metadata(&tmp)
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap();
    // Our own uid as the binary names it: the folder a first run creates.
    let first = run_with(
        copied_binary(),
        &["list"],
        &[("HOME", home), ("TMPDIR", &tmp)],
        Path::new("/"),
    );
    stdout(&first);
    let planted = tmp.join(format!("decodesim-{uid}"));
    assert!(planted.is_dir());
    let mode = std::fs::metadata(&planted).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o077, 0, "created with mode {mode:o}");
    // The same folder made writable by everyone, as a stranger's plant would be: refused.
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).unwrap();
    let bad = run_with(
        copied_binary(),
        &["simulate"],
        &[("HOME", home), ("TMPDIR", &tmp)],
        Path::new("/"),
    );
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    assert!(bad.stdout.is_empty());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("can be written by others") && err.contains("--data-dir"),
        "{err}"
    );
    // Owned by another user (root can hand it over; others skip this half).
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o700)).unwrap();
    if uid == 0 {
        let st = Command::new("chown")
            .args(["-R", "4242", planted.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(st.success());
        let bad = run_with(
            copied_binary(),
            &["simulate"],
            &[("HOME", home), ("TMPDIR", &tmp)],
            Path::new("/"),
        );
        assert_eq!(bad.status.code(), Some(1), "{bad:?}");
        let err = String::from_utf8_lossy(&bad.stderr);
        assert!(err.contains("belongs to user id 4242"), "{err}");
    }
}

#[test]
fn a_relative_xdg_cache_home_is_ignored() {
    let inst = Installed::new("relative-xdg");
    let home = inst.dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let out = run_with(
        copied_binary(),
        &["list"],
        &[("HOME", &home), ("XDG_CACHE_HOME", Path::new("relcache"))],
        &inst.dir,
    );
    stdout(&out);
    assert!(!inst.dir.join("relcache").exists());
    assert!(home.join(".cache/decodesim").is_dir());
}

#[test]
fn an_installed_binary_reads_the_embedded_copy_not_the_source_tree() {
    // A copy outside the tree's target/ (as `cargo install` puts it): the cache is extracted,
    // though the source tree it was built from is right here.
    let inst = Installed::new("installed");
    let bin_dir = inst.dir.join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let bin = bin_dir.join("decodesim");
    std::fs::copy(copied_binary(), &bin).unwrap();
    let cache = inst.dir.join("cache");
    let run = |bin: &Path| {
        Command::new(bin)
            .arg("list")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env_remove("DECODESIM_HOME")
            .env_remove("DECODESIM_NO_SOURCE_TREE")
            .env_remove("CARGO_MANIFEST_DIR")
            .env("XDG_CACHE_HOME", &cache)
            .output()
            .unwrap()
    };
    stdout(&run(&bin));
    assert!(
        cache.join("decodesim").is_dir(),
        "the installed copy did not extract"
    );
    // The binary inside the tree's target/ reads the tree: nothing more is extracted.
    std::fs::remove_dir_all(cache.join("decodesim")).unwrap();
    stdout(&run(Path::new(env!("CARGO_BIN_EXE_decodesim"))));
    assert!(!cache.join("decodesim").exists());
}

#[test]
fn decodesim_home_that_is_no_data_folder_is_refused_as_data_dir_is() {
    let inst = Installed::new("home-var");
    for (value, why) in [
        ("/nonexistent", "DECODESIM_HOME does not exist"),
        ("/", "DECODESIM_HOME holds neither models/ nor data/"),
    ] {
        let bad = run_with(
            copied_binary(),
            &["simulate"],
            &[("DECODESIM_HOME", Path::new(value))],
            Path::new("/"),
        );
        assert_eq!(bad.status.code(), Some(1), "{bad:?}");
        assert!(bad.stdout.is_empty());
        let err = String::from_utf8_lossy(&bad.stderr);
        assert!(
            err.contains(why) && err.contains("expected a folder holding models/ and data/"),
            "{err}"
        );
        assert!(!err.contains("choices"), "{err}");
    }
    drop(inst);
}
