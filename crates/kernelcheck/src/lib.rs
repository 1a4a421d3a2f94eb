//! What snapboot needs of a kernel: a kernel's build configuration ([`config`]) and the one
//! list of checks on it ([`check`]) that the device runs on its running kernel and the host
//! on a config file.

#![deny(unsafe_code)]

pub mod check;
pub mod config;
