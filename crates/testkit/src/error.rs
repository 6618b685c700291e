//! The test kit's [`Error`] and [`Result`]: what starting, reaching or driving a broker can fail
//! with.

use std::path::{Path, PathBuf};

/// Errors of the test kit. Each names what it was doing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file-system operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// The operation.
        what: &'static str,
        /// The path it worked on.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A program could not be started at all (not installed?).
    #[error("cannot run {what}: {source} (is it installed and on PATH?)")]
    Spawn {
        /// The program.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A step ran and failed.
    #[error("{what} failed\n{detail}")]
    Failed {
        /// The step.
        what: String,
        /// Output or log lines that explain it.
        detail: String,
    },
    /// A Kafka client call failed.
    #[error("{what}: {detail}")]
    Kafka {
        /// The call.
        what: String,
        /// The client's error.
        detail: String,
    },
}

impl Error {
    pub(crate) fn io(what: &'static str, path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            what,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Result alias of the test kit.
pub type Result<T, E = Error> = std::result::Result<T, E>;
