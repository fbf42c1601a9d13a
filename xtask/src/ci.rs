//! `cargo xtask ci`: runs `bash .ci/run` from the workspace root, the one list of CI checks,
//! and exits with its status.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// Runs `.ci/run`; its exit code is ours (128 + the signal if a signal ended it).
pub fn run(args: &[String]) -> ExitCode {
    if !args.is_empty() {
        eprintln!("xtask ci: takes no arguments (got {args:?})");
        return ExitCode::from(2);
    }
    let root = root();
    eprintln!("xtask ci: bash .ci/run (in {})", root.display());
    let status = match Command::new("bash")
        .arg(".ci/run")
        .current_dir(&root)
        .status()
    {
        Ok(status) => status,
        Err(e) => {
            eprintln!("xtask ci: cannot run bash .ci/run: {e}");
            return ExitCode::FAILURE;
        }
    };
    if status.success() {
        return ExitCode::SUCCESS;
    }
    let code = status.code().or_else(|| {
        use std::os::unix::process::ExitStatusExt;
        status.signal().map(|s| 128 + s)
    });
    eprintln!("xtask ci: .ci/run failed ({status})");
    // A failure never maps to 0, even if the code does not fit in a byte.
    ExitCode::from(
        code.and_then(|c| u8::try_from(c).ok())
            .filter(|&c| c != 0)
            .unwrap_or(1),
    )
}
