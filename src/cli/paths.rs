//! Outputs never overwrite inputs or each other. Every command lists the files it reads and
//! the files (or folders) it writes, and [`Paths::check`] refuses, before any work, an output
//! that is the same file as an input (same device and inode, so a symbolic or hard link to it
//! is caught too), a folder output that holds an input (it is replaced whole), and two outputs
//! naming one file (one would silently win). FIFOs and character devices (`/dev/null`) are
//! written in place and never replaced, so they take part in neither check.

use crate::error::{Error, Result};
use crate::sim::ScenarioRequest;
use std::path::{Component, Path, PathBuf};

/// What an output replaces: one file, or a whole folder (the `tables/` a profile prices from).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replaces {
    File,
    Folder,
}

/// The files a command reads and writes, each with the flag that named it.
#[derive(Debug, Default)]
pub(crate) struct Paths {
    inputs: Vec<(String, PathBuf)>,
    outputs: Vec<(String, PathBuf, Replaces)>,
}

/// A path's identity: the file it reaches (device, inode) when it exists, else its absolute,
/// lexically clean form under its folder's real path (two spellings of one new file agree).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Identity {
    Inode(u64, u64),
    Path(PathBuf),
}

#[cfg(unix)]
fn inode(meta: &std::fs::Metadata) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    Some((meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn inode(_: &std::fs::Metadata) -> Option<(u64, u64)> {
    None
}

/// `path` made absolute and real as far as it exists: the longest existing ancestor is
/// canonicalized (links resolved) and the rest appended without `.` or `..`.
fn real_path(path: &Path) -> PathBuf {
    if let Ok(p) = std::fs::canonicalize(path) {
        return p;
    }
    let abs = std::env::current_dir()
        .map(|d| d.join(path))
        .unwrap_or_else(|_| path.to_path_buf());
    let mut clean = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                clean.pop();
            }
            c => clean.push(c),
        }
    }
    let mut missing = Vec::new();
    let mut base = clean.as_path();
    while let Some(parent) = base.parent() {
        missing.push(base.file_name().map(|n| n.to_os_string()));
        if let Ok(p) = std::fs::canonicalize(parent) {
            let mut out = p;
            for n in missing.into_iter().rev().flatten() {
                out.push(n);
            }
            return out;
        }
        base = parent;
    }
    clean
}

fn identity(path: &Path) -> Identity {
    match std::fs::metadata(path).ok().as_ref().and_then(inode) {
        Some((dev, ino)) => Identity::Inode(dev, ino),
        None => Identity::Path(real_path(path)),
    }
}

/// A FIFO or device: written in place, never replaced, so naming it twice loses nothing.
fn written_in_place(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

fn shown(flag: &str, path: &Path) -> String {
    format!("{flag} {}", crate::units::echo(&path.display().to_string()))
}

impl Paths {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A file the command reads.
    pub(crate) fn input(&mut self, flag: &str, path: &Path) -> &mut Self {
        self.inputs.push((flag.to_string(), path.to_path_buf()));
        self
    }

    pub(crate) fn input_opt(&mut self, flag: &str, path: Option<&Path>) -> &mut Self {
        if let Some(p) = path {
            self.input(flag, p);
        }
        self
    }

    /// A flag whose text is a name or a path (`--draft-model`): a path only when a file is
    /// there.
    pub(crate) fn input_if_file(&mut self, flag: &str, text: Option<&str>) -> &mut Self {
        if let Some(t) = text.filter(|t| Path::new(t).is_file()) {
            self.input(flag, Path::new(t));
        }
        self
    }

    /// Trace files or folders of them: a folder stands for the traces it lists.
    pub(crate) fn traces(&mut self, flag: &str, paths: &[PathBuf]) -> &mut Self {
        for p in paths {
            self.input(flag, p);
            if let Ok(list) = std::fs::read_dir(p) {
                for e in list.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if crate::trace::format::is_trace_name(&name) {
                        self.input(flag, &e.path());
                    }
                }
            }
        }
        self
    }

    /// A calibration profile (name or path) and the tables and measurements it reads.
    pub(crate) fn profile(&mut self, flag: &str, name: &str) -> &mut Self {
        let Ok(path) = crate::scenario::catalog::resolve_profile(name) else {
            return self; // the command reports the unknown profile itself
        };
        self.input(flag, &path);
        // Only the paths are wanted, so the TOML is read as plain values, not checked: a
        // profile that does not load is refused by the command with its own message.
        let Ok(text) = crate::files::read_text(&path, crate::files::InputKind::Profile) else {
            return self;
        };
        let Ok(v) = text.parse::<toml::Table>() else {
            return self;
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let tables = v
            .get("aiconfigurator")
            .and_then(|s| s.get("tables"))
            .and_then(|t| t.as_str());
        if let Some(t) = tables {
            self.input(&format!("{flag} (its tables)"), &dir.join(t));
        }
        if let Some(m) = v.get("measurements").and_then(|m| m.as_str()) {
            self.input(&format!("{flag} (its measurements)"), &dir.join(m));
        }
        self
    }

    /// A model (name or path) as the scenario resolves it.
    pub(crate) fn model(&mut self, flag: &str, name: &str) -> &mut Self {
        if let Ok(p) = crate::scenario::catalog::resolve_model(name) {
            self.input(flag, &p);
        }
        self
    }

    /// A system (name or path) as the scenario resolves it; its file, if it resolves.
    pub(crate) fn system(&mut self, flag: &str, name: &str) -> Option<PathBuf> {
        let p = crate::scenario::catalog::resolve_system(name).ok()?;
        self.input(flag, &p);
        Some(p)
    }

    /// The files a scenario reads: model, system, profile, a routing file.
    pub(crate) fn scenario(&mut self, r: &ScenarioRequest) -> &mut Self {
        self.model("--model", &r.model);
        let system = self.system("--system", &r.system);
        match &r.calibration {
            Some(c) => {
                self.profile("--calibration", c);
            }
            // The system's own profile is read as well when none is named.
            None => {
                let own = system
                    .and_then(|p| {
                        crate::files::read_text(&p, crate::files::InputKind::SystemToml).ok()
                    })
                    .and_then(|t| t.parse::<toml::Table>().ok())
                    .and_then(|v| v.get("calibration")?.as_str().map(str::to_string));
                if let Some(name) = own {
                    self.profile("the system's profile", &name);
                }
            }
        }
        match &r.routing {
            Some(crate::scenario::routing::Routing::Popularity { source, .. })
            | Some(crate::scenario::routing::Routing::Histogram { source, .. }) => {
                self.input("--routing", source);
            }
            _ => {}
        }
        self
    }

    /// A file the command writes.
    pub(crate) fn output(&mut self, flag: &str, path: Option<&Path>) -> &mut Self {
        if let Some(p) = path {
            self.outputs
                .push((flag.to_string(), p.to_path_buf(), Replaces::File));
        }
        self
    }

    /// A folder the command replaces whole: every input inside it would be lost.
    pub(crate) fn output_folder(&mut self, flag: &str, path: &Path) -> &mut Self {
        self.outputs
            .push((flag.to_string(), path.to_path_buf(), Replaces::Folder));
        self
    }

    /// Refuses an output over an input, a folder output holding an input, and two outputs to
    /// one file.
    pub(crate) fn check(&self) -> Result<()> {
        let outputs: Vec<_> = self
            .outputs
            .iter()
            .filter(|(_, p, _)| !written_in_place(p))
            .map(|(f, p, r)| (f, p, *r, identity(p)))
            .collect();
        for (i, (flag, path, _, id)) in outputs.iter().enumerate() {
            if let Some((f2, p2, _, _)) = outputs[..i].iter().find(|o| o.3 == *id) {
                return Err(Error::Conflict {
                    first: shown(f2, p2),
                    second: shown(flag, path),
                    problem:
                        "two outputs name one file, so one would be lost; give each its own path"
                            .into(),
                });
            }
        }
        for (in_flag, in_path) in &self.inputs {
            let in_id = identity(in_path);
            let in_real = real_path(in_path);
            for (flag, path, replaces, id) in &outputs {
                let inside = *replaces == Replaces::Folder && in_real.starts_with(real_path(path));
                if *id == in_id || inside {
                    let problem = if inside {
                        "the output folder holds the input and would be replaced; write elsewhere"
                    } else {
                        "the output is the input file, which writing it would destroy; write elsewhere"
                    };
                    return Err(Error::Conflict {
                        first: shown(flag, path),
                        second: shown(in_flag, in_path),
                        problem: problem.into(),
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("decodesim-paths-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn an_output_over_an_input_is_refused_through_links() {
        let d = tmp("links");
        let f = d.join("p.toml");
        std::fs::write(&f, "x").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(&f, d.join("l.toml")).unwrap();
        std::fs::hard_link(&f, d.join("h.toml")).unwrap();
        for out in ["p.toml", "l.toml", "h.toml"] {
            let mut p = Paths::new();
            p.input("--grid", &f).output("--output", Some(&d.join(out)));
            let e = p.check().unwrap_err().to_string();
            assert!(e.contains("--output") && e.contains("--grid"), "{e}");
        }
        let mut p = Paths::new();
        p.input("--grid", &f)
            .output("--output", Some(&d.join("new.csv")));
        assert!(p.check().is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn two_outputs_to_one_new_file_are_refused() {
        let d = tmp("two");
        let a = d.join("p.svg");
        let b = d.join("./sub/../p.svg");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        let mut p = Paths::new();
        p.output("--plot-throughput", Some(&a))
            .output("--plot-tpot", Some(&b));
        let e = p.check().unwrap_err().to_string();
        assert!(
            e.contains("--plot-throughput") && e.contains("--plot-tpot"),
            "{e}"
        );
        // /dev/null is written in place: naming it twice loses nothing.
        let mut p = Paths::new();
        p.output("--plot-throughput", Some(Path::new("/dev/null")))
            .output("--plot-tpot", Some(Path::new("/dev/null")));
        assert!(p.check().is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_replaced_folder_holding_an_input_is_refused() {
        let d = tmp("folder");
        std::fs::create_dir_all(d.join("tables")).unwrap();
        std::fs::write(d.join("tables/nccl.csv"), "x").unwrap();
        let mut p = Paths::new();
        p.input("--profile (its tables)", &d.join("tables"))
            .output_folder("--out (its tables/)", &d.join("tables"));
        assert!(p.check().is_err());
        let mut p = Paths::new();
        p.input("--from-nccl-tests", &d.join("tables/nccl.csv"))
            .output_folder("--out (its tables/)", &d.join("tables"));
        let e = p.check().unwrap_err().to_string();
        assert!(e.contains("would be replaced"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
