//! What the restorer and the host share: the disk it reads ([`disk`]; a store in a GPT
//! partition is found by [`gpt`]), the restore pack's
//! format ([`pack`]) and the kernel's e820 checksum ([`e820`]); the store's and image's
//! formats it reads ([`formats`]), the image it chooses and checks ([`image`]) and where
//! its pages go ([`plan`], read through a [`window`]); and the restorer's pure logic: the
//! PVH start info ([`pvh`]), PCI configuration ([`pci`]), the legacy virtio block interface
//! ([`virtio`]), and the cold boot of the stock kernel: the boot protocol ([`bzimage`]) and
//! where its parts go in RAM ([`placement`]); what the kernel pack's initramfs says of
//! images ([`stockinit`]): read as cpio ([`cpio`]), the trust rule ([`trust`]) and the boot
//! setup they are bound to ([`bootsetup`]); sizes in messages ([`units`]). `no_std`
//! (with `alloc`) so the freestanding restorer can use it.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod bootsetup;
pub mod bzimage;
pub mod cpio;
pub mod disk;
pub mod e820;
pub mod formats;
pub mod gpt;
pub mod image;
pub mod pci;
pub mod placement;
pub mod plan;
pub mod pvh;
pub mod stockinit;
pub mod trust;
pub mod units;
pub mod virtio;
pub mod window;
