//! Why an analysis could not be made: a log or kernel config that cannot be read or parsed,
//! or nothing to analyse. Every variant names the file and the reason.

use std::path::PathBuf;
use thiserror::Error;

/// Why [`analyze_files`](crate::analyze_files) or [`load_config`](crate::load_config) failed.
#[derive(Debug, Error)]
pub enum AnalyzeError {
    /// No log was given.
    #[error("no boot log given: pass at least one timeline JSON, stamped log or dmesg capture")]
    NoInput,
    /// A file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A log could not be parsed as a timeline.
    #[error("cannot parse boot log {path}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's reason.
        #[source]
        source: boottrace::ParseError,
    },
    /// A kernel config cannot be read or is unusable (not gzip when it should be, not a
    /// `.config`, ...).
    #[error(transparent)]
    Config(#[from] kernelcheck::config::KernelConfigError),
    /// The report could not be serialised.
    #[error("cannot serialise the report to JSON")]
    Json(#[from] serde_json::Error),
}
