//! The initramfs archive as the kernel unpacks it (`init/initramfs.c`): the bytes a boot
//! loader hands the kernel in, the root the kernel would build out.
//!
//! Those bytes are segments one after another, with zero bytes between them: each either
//! an uncompressed newc cpio archive ([`newc`]; Debian's initramfs-tools and dracut put
//! the CPU microcode first in one) or a compressed stream holding such archives
//! ([`compression`]: zstd, gzip and lz4 are unpacked; xz, bzip2, lzma and lzo are named
//! and refused). Every entry lands in one [`Root`] ([`root`]): a later entry of a path
//! replaces an earlier one as the kernel's would, hard links share their data, and each
//! path keeps its mode, mtime and data. [`unpack`] caps what decompression may allocate and
//! names every failure with the byte it happened at ([`ArchiveError`]).
//!
//! `no_std` with `alloc`: the freestanding restorer reads the kernel pack's initramfs
//! with it, the host tests check it against the real archives.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod compression;
pub mod error;
pub mod newc;
pub mod root;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod unpack;

pub use compression::Compression;
pub use error::{ArchiveError, Place};
pub use root::{Entry, Kind, Root, Segment};
pub use unpack::{unpack, unpack_with_limit, DEFAULT_LIMIT};
