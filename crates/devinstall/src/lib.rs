//! Setting snapboot up on a device: [`install`] puts its files into a system (or lists them
//! for a package) and takes them out again; [`bootloader`] asks the boot loader for the
//! capture boot and sets up the restore kernel as GRUB's default entry. Both write what the
//! device's boot later reads; neither runs at boot.

#![deny(unsafe_code)]

pub mod bootloader;
pub mod install;
