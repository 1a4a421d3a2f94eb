//! The error of assembling a workload's root filesystem tree, shared by the workload
//! (`crate::workload`) and the parts it stages: busybox (`crate::busybox`) and the `app`
//! workload's python (`crate::python`).

use crate::dynlink::LinkError;
use crate::foreign::ForeignError;
use std::path::{Path, PathBuf};

/// Errors while assembling a workload's root filesystem tree.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// Unknown built-in workload name.
    #[error(
        "unknown workload `{0}` (built in: shell, app, debian; or use --rootfs DIR --start CMD)"
    )]
    Unknown(String),
    /// A host file the workload needs is missing.
    #[error("{what} not found at {path} (see the README's set-up)")]
    Missing { what: String, path: PathBuf },
    /// A host command failed.
    #[error("`{cmd}` failed: {reason}")]
    Command { cmd: String, reason: String },
    /// A `--rootfs` tree lacks what the board's boot needs.
    #[error("root filesystem tree {root}: {reason} (README, \"Your own application\")")]
    BadTree {
        /// The tree.
        root: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Debian's packages of a foreign architecture could not be had.
    #[error(transparent)]
    Foreign(#[from] ForeignError),
    /// A staged program's libraries are not all in the root.
    #[error(transparent)]
    Link(#[from] LinkError),
    /// A foreign busybox whose applets cannot be known without running it.
    #[error("busybox {}: {reason}", path.display())]
    BusyboxApplets {
        /// The foreign binary.
        path: PathBuf,
        /// Why its applet list is not known.
        reason: String,
    },
    /// An entry of the application's environment (`board build --env`) that is not
    /// `KEY=VALUE`, or one given to a workload whose application does not take it.
    #[error("--env {entry:?}: {reason}")]
    BadEnv {
        /// The entry as given.
        entry: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Filesystem error.
    #[error("{path}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Maps an I/O error on `path` to [`WorkloadError::Io`].
pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WorkloadError + '_ {
    move |source| WorkloadError::Io {
        path: path.to_path_buf(),
        source,
    }
}
