//! What the restorer and the host share: the disk it reads ([`disk`]), the restore pack's format ([`pack`]) and the
//! kernel's e820 checksum ([`e820`]); and the store's and image's formats it reads
//! ([`formats`]). `no_std` (with `alloc`) so the freestanding restorer can use it.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod disk;
pub mod e820;
pub mod formats;
pub mod image;
pub mod pack;
pub mod plan;
pub mod window;
