//! The restorer's logic, `no_std` (with `alloc`) so the freestanding program (src/main.rs)
//! and the host's tests share it: the disk it reads and writes ([`disk`], read through a
//! [`window`]; a store in a GPT partition is found by [`gpt`]), the store's and image's
//! formats ([`formats`]), the image it chooses and checks ([`image`]) and where its pages
//! go ([`plan`]); what the kernel pack's initramfs says of images ([`stockinit`]): unpacked as
//! the kernel would (crate `initramfs`), the trust rule ([`trust`]) and the boot setup they are bound to
//! ([`bootsetup`]); the store's boot log it keeps as a restoring boot does ([`bootrecord`]:
//! the crash-loop guard, the status for the next kernel) and the clock that stamps it
//! ([`rtc`]); the kernel's e820 checksum ([`e820`]); the PVH start info ([`pvh`]), PCI
//! configuration ([`pci`]) and the legacy virtio block interface ([`virtio`]); the cold
//! boot of the stock kernel: the boot protocol ([`bzimage`]) and where its parts go in RAM
//! ([`placement`]); where pages wait for the last copy ([`safepages`]); sizes in messages
//! ([`units`]); the load phase's throughput, as every restoring path prints it
//! ([`telemetry`]); the chunks shared out among several CPUs ([`parallel`]).
#![cfg_attr(not(test), no_std)]
// Everything that touches hardware (port I/O, MMIO, raw physical memory) is the program's
// (src/main.rs, src/hw/, src/fallback.rs); the logic here is safe code.
#![forbid(unsafe_code)]

extern crate alloc;

pub mod bootrecord;
pub mod bootsetup;
pub mod bzimage;
pub mod disk;
pub mod e820;
pub mod efimap;
pub mod fdt;
pub mod formats;
pub mod gpt;
pub mod image;
pub mod parallel;
pub mod pci;
pub mod placement;
pub mod plan;
pub mod pvh;
pub mod rtc;
pub mod safepages;
pub mod stockinit;
pub mod stockpack;
pub mod telemetry;
pub mod trust;
pub mod units;
pub mod virtio;
pub mod window;
