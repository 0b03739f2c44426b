//! The one way report text leaves the process. Every byte for standard output goes through
//! [`print`] (or [`Stdout`] where a `Write` is wanted) and the command's result through
//! [`finish`], which flushes and maps the outcome:
//!
//! - a closed pipe (`decodesim ... | head`) ends quietly with success, as `cat` would under
//!   SIGPIPE (Rust ignores SIGPIPE, so the write returns EPIPE; `println!` would panic on it);
//! - any other write error (`> /dev/full`: no space left) ends with an error naming standard
//!   output and a non-zero exit, instead of exit 0 with nothing written.
//!
//! Warnings about flags that do nothing go to standard error through [`warn`].

use crate::error::{Error, Result};
use std::io::Write;
use std::path::PathBuf;

/// The name standard output has in errors ("cannot write standard output: ...").
const STDOUT_NAME: &str = "standard output";

fn stdout_error(source: std::io::Error) -> Error {
    Error::Write {
        path: PathBuf::from(STDOUT_NAME),
        source,
    }
}

/// Writes report text to standard output; an error stops the command (see [`finish`]).
pub(crate) fn print(text: &str) -> Result<()> {
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .map_err(stdout_error)
}

/// Standard output as a `Write` for the commands that stream into one.
pub(crate) struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        std::io::stdout().lock().write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        std::io::stdout().lock().write_all(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stdout().lock().flush()
    }
}

/// A warning on standard error: a flag that changes nothing here, a value given twice. An
/// unwritable standard error is ignored (there is nowhere else to say it).
pub(crate) fn warn(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "warning: {message}");
}

/// Says where a file was written: one line on standard error (`wrote timeline to t.json`), so
/// standard output stays the report alone (`--format json > out.json` is still JSON).
pub fn wrote(what: &str, path: &std::path::Path) {
    let _ = writeln!(
        std::io::stderr().lock(),
        "wrote {what} to {}",
        crate::units::path(path)
    );
}

/// Refuses, before any work, an output flag naming what cannot be written (a folder, a block
/// device, a socket), with the flag in the message. FIFOs and character devices are written in
/// place (`--timeline /dev/null` discards), regular files atomically ([`crate::files`]).
pub(crate) fn check_output_flag(flag: &'static str, path: Option<&std::path::Path>) -> Result<()> {
    let Some(path) = path else { return Ok(()) };
    match crate::files::output_problem(path) {
        Some(problem) => Err(Error::Flag {
            flag,
            value: crate::units::echo(&path.display().to_string()),
            expected: problem,
        }),
        None => Ok(()),
    }
}

/// Whether an error is standard output's pipe closing under us.
fn is_closed_pipe(e: &Error) -> bool {
    match e {
        Error::Write { path, source } => {
            path.as_os_str() == STDOUT_NAME && source.kind() == std::io::ErrorKind::BrokenPipe
        }
        Error::Output(source) => source.kind() == std::io::ErrorKind::BrokenPipe,
        _ => false,
    }
}

/// Flushes standard output after a command and maps the outcome: a closed pipe is success,
/// any other failure to write standard output is an error naming it.
pub(crate) fn finish(result: Result<()>) -> Result<()> {
    let flushed = std::io::stdout().lock().flush().map_err(stdout_error);
    let result = result.and(flushed);
    match result {
        Err(e) if is_closed_pipe(&e) => Ok(()),
        // The streaming commands (`trace`, `compare`) report a failed write as `Output`.
        Err(Error::Output(source)) => Err(stdout_error(source)),
        other => other,
    }
}

/// A progress bar on standard error for a study of `total` steps, only when standard error is
/// a terminal (never in a pipe, a file or a test): `what` names the steps (`timelines`).
pub(crate) fn progress_bar(total: u64, what: &str) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() || total < 2 {
        return None;
    }
    let b = indicatif::ProgressBar::new(total);
    let template = format!("{{bar:40}} {{pos}}/{{len}} {what} ({{rate}}, {{eta}})");
    let style = indicatif::ProgressStyle::with_template(&template).ok()?;
    b.set_style(style.with_key("rate", super::sweep::rate_key));
    Some(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_pipe_is_success_and_a_full_disk_is_not() {
        let pipe = || std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        assert!(finish(Err(stdout_error(pipe()))).is_ok());
        assert!(finish(Err(Error::Output(pipe()))).is_ok());
        // A closed pipe on a file being written is a real error.
        let file = Error::Write {
            path: PathBuf::from("out.csv"),
            source: pipe(),
        };
        assert!(finish(Err(file)).is_err());
        let full = std::io::Error::from_raw_os_error(28);
        let e = finish(Err(Error::Output(full))).unwrap_err();
        assert!(
            e.to_string().starts_with("cannot write standard output:"),
            "{e}"
        );
    }
}
