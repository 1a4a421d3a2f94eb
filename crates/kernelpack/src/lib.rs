//! The kernel pack: the stock kernel (an x86 bzImage or an arm64 Image) and its initramfs in one checked container,
//! written to a raw partition or a file.
//!
//! A restore kernel can restore an image but cannot boot the system cold: it has no modules,
//! no root filesystem driver, nothing of the application's kernel. When it cannot restore
//! (no image, a damaged one, one for another kernel or machine), it reads the kernel pack and
//! hands the cold boot to the stock kernel with `kexec_file_load`. The pack needs no
//! filesystem, so the restore kernel needs no filesystem driver to find it.
//!
//! ```text
//! offset  size  field
//! 0x000      8  magic "SBKPACK\0"
//! 0x008      4  format version (1), little endian like every number here
//! 0x00C      4  header length (4096)
//! 0x010      8  kernel offset (a multiple of 4096)
//! 0x018      8  kernel length in bytes
//! 0x020      8  initramfs offset (a multiple of 4096, after the kernel)
//! 0x028      8  initramfs length in bytes
//! 0x030     32  BLAKE3 of the kernel
//! 0x050     32  BLAKE3 of the initramfs
//! 0x070     64  the kernel's release (bzImage: setup header; Image: banner), NUL-padded
//! 0x0B0      8  initramfs summary offset (a multiple of 4096, after the initramfs)
//! 0x0B8      8  initramfs summary length in bytes (0: the pack has none)
//! 0x0C0     32  BLAKE3 of the initramfs summary
//! 0x0E0  ....   zero
//! 0xFE0     32  BLAKE3 of bytes 0x000..0xFE0
//! 0x1000 ....   kernel, zero padding to 4096, initramfs, zero padding to 4096,
//!               initramfs summary, zero padding to 4096
//! ```
//!
//! The initramfs summary is what the freestanding restorer takes from the initramfs (its
//! settings file, public key and boot setup: the `restorer` crate's `stockinit`), taken out
//! when the pack is written, so the restorer does not unpack the initramfs at every boot
//! (a second under TCG). It is as trustworthy as the initramfs beside it: the same writer,
//! the same header; a pack without one (all zero, as version 1 packs before it) has the
//! restorer read the initramfs itself.
//!
//! Reading checks the magic, then the version, then the header checksum, caps both lengths
//! before allocating, and checks each payload's BLAKE3: a pack that fails any check is never
//! handed to the kernel.
//!
//! Beside the pack, the crate holds the one reading of two things of a kernel that several
//! crates need: its bzImage setup header ([`bzimage`]: the restorer, the board, the pack)
//! and its configuration's lines ([`kconfig`]: the device, the board).
//!
//! Without the default `std` feature (the restorer, `no_std`), everything but reading and
//! writing packs through `std::io` (and a kernel's release, ELF checks) is there.
#![cfg_attr(not(feature = "std"), no_std)]

pub mod bzimage;
pub mod cmdline;
mod header;
pub mod kconfig;
#[cfg(feature = "std")]
mod rw;

pub use bzimage::{bzimage_release, bzimage_version, uname_of, SetupError, VERSION_HEAD};
pub use header::{
    Header, PackError, Payload, Release, HEADER_LEN, MAGIC, MAX_INITRD, MAX_KERNEL, MAX_SUMMARY,
    RELEASE_LEN, VERSION,
};
#[cfg(feature = "std")]
pub use rw::{is_static_elf, kernel_release, read, write, write_with_summary, Pack};

#[cfg(test)]
mod tests;
