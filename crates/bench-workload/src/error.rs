//! Planning errors: each names where (file and line, or flag) and what is wrong.

use std::path::PathBuf;

/// Why a dataset could not be loaded or a plan not built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// A problem in an input file, at a line when known.
    #[error("{}: {message}", location(file, *line))]
    Input {
        /// The file.
        file: PathBuf,
        /// 1-based line, for line-oriented files.
        line: Option<u64>,
        /// What is wrong (names the field).
        message: String,
    },
    /// A flag or knob with an invalid value or combination.
    #[error("{flag}: {message}")]
    Flag {
        /// The flag, e.g. `--max-turns`.
        flag: String,
        /// What is wrong.
        message: String,
    },
    /// The tokenizer could not be loaded.
    #[error("tokenizer {what}: {message}")]
    Tokenizer {
        /// Which tokenizer.
        what: String,
        /// Why.
        message: String,
    },
    /// Selection left nothing to run.
    #[error("{0}")]
    Empty(String),
}

fn location(file: &std::path::Path, line: Option<u64>) -> String {
    match line {
        Some(l) => format!("{}:{l}", file.display()),
        None => file.display().to_string(),
    }
}

impl PlanError {
    /// An input error.
    pub fn input(file: impl Into<PathBuf>, line: Option<u64>, message: impl Into<String>) -> Self {
        PlanError::Input {
            file: file.into(),
            line,
            message: message.into(),
        }
    }

    /// A flag error.
    pub fn flag(flag: impl Into<String>, message: impl Into<String>) -> Self {
        PlanError::Flag {
            flag: flag.into(),
            message: message.into(),
        }
    }

    pub(crate) fn tokenizer(what: &str, message: impl std::fmt::Display) -> Self {
        PlanError::Tokenizer {
            what: what.to_string(),
            message: message.to_string(),
        }
    }
}
