use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = decodesim::cli::Cli::parse();
    match decodesim::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
