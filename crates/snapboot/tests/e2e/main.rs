//! End-to-end tests of the real CLI, most of them on the real board (QEMU, Debian's stock
//! kernel). One test binary, so the guest bundles and captured images are built once and
//! shared by every test.
//!
//! The test harness starts the tests in the order of their names (`module::test`), as many
//! at a time as there are cores: a long test whose module sorts last runs alone at the end
//! while the other cores idle. So the longest ones live in modules that sort early (the
//! `debian` workload on UEFI is `debian_uefi`, not `uefi`).

mod addressing;
mod analyze_cli;
mod arm64;
mod binding;
mod board;
mod cli;
mod common;
mod config;
mod debian;
mod debian_config;
mod debian_paths;
mod debian_uefi;
mod encrypted;
mod flash;
mod guards;
mod lifecycle;
mod package;
mod rauc_ab;
mod restore_kernel;
mod restorer;
mod snapshot;
mod trace;
