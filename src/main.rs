use std::io::Write;
use std::process::ExitCode;

/// On SIGINT, SIGTERM or SIGHUP: remove the temporary files of unfinished atomic writes (so no
/// `.NAME.tmp.*` is left and the file at the final name keeps its previous content), then exit
/// with the shell's code for that signal (128 + its number: 130, 143, 129).
fn remove_temp_files_on_signals() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    // Without the handler the signal still ends the process (temporary files may be left), so a
    // failure to install it is no reason to refuse the command.
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            // Held until exit: no atomic write starts a new temporary file meanwhile.
            let _held = decodesim::files::remove_temp_files();
            std::process::exit(128 + signal);
        }
    });
}

fn main() -> ExitCode {
    remove_temp_files_on_signals();
    let cli = decodesim::cli::parse();
    match decodesim::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!: it panics when standard error is closed.
            let _ = writeln!(std::io::stderr().lock(), "error: {e}");
            ExitCode::FAILURE
        }
    }
}
