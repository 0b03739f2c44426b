//! The step times of the captured configurations without the profiler: `step_times.csv` beside
//! the traces (or `validate --step-times FILE`), one row per configuration.
//!
//! A profiled step is not the step a server runs. Under torch.profiler the host's
//! `cudaGraphLaunch` takes several times longer and the GPU idles while it submits the graph,
//! so a short step (batch 1: 1.5 ms) is 3–8% longer in its trace than in timed replays of the
//! same graph. `validate` holds its predicted step time against the unprofiled timing where the
//! file gives one, and the trace only for what the trace alone shows: the categories' shares.

use crate::error::{Error, Result};
use crate::files::{field, HandCsv};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file `validate` reads beside the traces when `--step-times` is not given.
pub const FILE_NAME: &str = "step_times.csv";

const EXPECTED: &str = "the columns configuration,step_us (and optionally replays)";

/// Unprofiled step times by configuration name (`refstep_b<B>_c<CTX>_<setting>`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepTimes {
    /// Where they were read from; None when there is no file.
    pub path: Option<PathBuf>,
    /// µs per configuration.
    pub us: BTreeMap<String, f64>,
}

impl StepTimes {
    /// `explicit`, else `dir/step_times.csv` when it exists, else none.
    pub fn find(dir: &Path, explicit: Option<&Path>) -> Result<StepTimes> {
        match explicit {
            Some(p) => Self::read(p),
            None => {
                let p = dir.join(FILE_NAME);
                if p.is_file() {
                    Self::read(&p)
                } else {
                    Ok(StepTimes::default())
                }
            }
        }
    }

    pub fn read(path: &Path) -> Result<StepTimes> {
        let t = HandCsv::read(path, EXPECTED)?;
        Self::from_table(&t, path)
    }

    fn from_table(t: &HandCsv, path: &Path) -> Result<StepTimes> {
        let idx = t.require(&["configuration", "step_us"], EXPECTED)?;
        let mut us = BTreeMap::new();
        for (line, f) in &t.rows {
            let name = field(f, idx[0]);
            if name.is_empty() {
                return Err(Error::field(
                    path,
                    format!("line {line}, column configuration"),
                    "empty; expected a configuration name such as refstep_b1_c1024_default",
                ));
            }
            let text = field(f, idx[1]);
            let v: f64 = text.parse().map_err(|_| {
                Error::field(
                    path,
                    format!("line {line}, column step_us"),
                    format!(
                        "found '{}', expected a step time in µs",
                        crate::units::echo(text)
                    ),
                )
            })?;
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::field(
                    path,
                    format!("line {line}, column step_us"),
                    format!("found {v}, expected a positive step time in µs"),
                ));
            }
            if us.insert(name.to_string(), v).is_some() {
                return Err(Error::field(
                    path,
                    format!("line {line}, column configuration"),
                    format!(
                        "'{}' is listed twice; expected one row per configuration",
                        crate::units::echo(name)
                    ),
                ));
            }
        }
        if us.is_empty() {
            return Err(Error::field(path, "rows", "no data rows"));
        }
        Ok(StepTimes {
            path: Some(path.to_path_buf()),
            us,
        })
    }

    /// The unprofiled step of `configuration`, if the file gives one.
    pub fn get(&self, configuration: &str) -> Option<f64> {
        self.us.get(configuration).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<StepTimes> {
        let p = Path::new("step_times.csv");
        StepTimes::from_table(&HandCsv::parse(text, p, EXPECTED)?, p)
    }

    #[test]
    fn reads_rows_and_comments() {
        let s = parse("# from timed replays\nconfiguration,step_us,replays\nrefstep_b1_c1024_default,1494.0,30\n").unwrap();
        assert_eq!(s.get("refstep_b1_c1024_default"), Some(1494.0));
        assert_eq!(s.get("refstep_b4_c1024_default"), None);
    }

    #[test]
    fn bad_rows_name_line_and_column() {
        let e = parse("configuration,step_us\nrefstep_b1_c1024_default,fast\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("step_times.csv")
                && e.contains("line 2, column step_us")
                && e.contains("'fast'"),
            "{e}"
        );
        let e = parse("configuration,step_us\na,-3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("positive step time"), "{e}");
        let e = parse("configuration,step_us\na,3\na,4\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3") && e.contains("listed twice"), "{e}");
        let e = parse("config,us\na,3\n").unwrap_err().to_string();
        assert!(
            e.contains("header") && e.contains("configuration,step_us"),
            "{e}"
        );
        let e = parse("configuration,step_us\n").unwrap_err().to_string();
        assert!(e.contains("no data rows"), "{e}");
    }
}
