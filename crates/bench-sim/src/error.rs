//! The simulator's error type.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Errors starting a [`SimServer`](crate::SimServer).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The listening socket could not be bound.
    #[error("cannot bind {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The tokenizer could not be loaded.
    #[error("cannot load tokenizer {}: {message}", path.display())]
    Tokenizer {
        /// The path given (a `tokenizer.json` or a directory holding one).
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The request log could not be opened.
    #[error("cannot open request log {}", path.display())]
    RequestLog {
        /// The log file.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The fault log could not be opened.
    #[error("cannot open fault log {}", path.display())]
    FaultLog {
        /// The log file.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// A TLS certificate or key could not be read or used.
    #[error("TLS: {0}")]
    Tls(String),
    /// The configuration is unusable (e.g. `block_size` 0).
    #[error("invalid simulator configuration: {0}")]
    Config(String),
}
