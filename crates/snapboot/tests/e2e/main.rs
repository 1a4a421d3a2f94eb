//! End-to-end tests of the real CLI, most of them on the real board (QEMU, Debian's stock
//! kernel). One test binary, so the guest bundles and captured images are built once and
//! shared by every test.

mod addressing;
mod analyze_cli;
mod arm64;
mod binding;
mod board;
mod cli;
mod common;
mod config;
mod debian;
mod encrypted;
mod flash;
mod guards;
mod lifecycle;
mod restore_kernel;
mod restorer;
mod snapshot;
mod trace;
mod uefi;
