//! The x86 boot protocol from the loader's side, for the 64-bit entry
//! (Linux's Documentation/arch/x86/boot.rst): the bzImage's setup header, what it asks of
//! the loader, and the zero page (`struct boot_params`) the kernel is entered with.
//!
//! ```text
//! bzImage                                   zero page (4096 bytes, zeroed first)
//! 0      setup: (setup_sects + 1) * 512     0x002  ext_mem_k      0x070  acpi_rsdp_addr
//! 0x1F1  setup header .. 0x202 + [0x201]    0x0C0  ext_ramdisk_image / _size, ext_cmd_line_ptr
//! ...                                       0x1E0  alt_mem_k      0x1E8  e820_entries
//! setup  protected-mode kernel: loaded at   0x1F1  the setup header, copied from the bzImage,
//!        an address aligned to              then type_of_loader, loadflags, ramdisk_*, cmd_line_ptr
//!        kernel_alignment; entered at +0x200 0x2D0  e820_table: 128 x (addr u64, size u64, type u32)
//! ```
//!
//! The header is read by the one reader of it, [`kernelpack::bzimage`]; this module adds
//! what the 64-bit entry requires of it ([`parse`]) and the zero page.

use crate::e820::{Entry, MAX_ENTRIES, RAM};
pub use kernelpack::bzimage::{SetupError, SetupHeader, BOOT_FLAG, SETUP_HEADER};
/// Bytes of the bzImage's start the header is read from (its first two sectors).
pub const HEAD: usize = 1024;
/// The oldest boot protocol with a 64-bit entry's flags (2.12).
pub const MIN_VERSION: u16 = 0x020C;
/// `loadflags`: the protected-mode kernel runs at 1 MiB or above (a bzImage).
pub const LOADED_HIGH: u8 = 1;
/// `xloadflags`: the kernel has the 64-bit entry at its load address + [`ENTRY_64`].
pub const XLF_KERNEL_64: u16 = 1;
/// The 64-bit entry's offset from the load address.
pub const ENTRY_64: u64 = 0x200;
/// Bytes of the zero page.
pub const ZERO_PAGE: usize = 4096;
/// `type_of_loader` of a loader without an assigned id.
pub const LOADER_UNDEFINED: u8 = 0xFF;
/// The setup header must end before the zero page's next field (`edd_mbr_sig_buffer`).
const HEADER_END_MAX: usize = 0x290;
const E820_TABLE: usize = 0x2D0;

/// Why the kernel cannot be booted as this bzImage says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BootError {
    /// Not a setup header (too short, no `HdrS`).
    #[error(transparent)]
    Header(#[from] SetupError),
    /// No boot flag.
    #[error("the kernel is not a bzImage (boot flag {0:#06x} at 0x1fe, not 0xaa55)")]
    NoBootFlag(u16),
    /// Too old a boot protocol.
    #[error("the kernel speaks boot protocol {:x}.{:02x}; the 64-bit entry needs 2.12", .0 >> 8, .0 & 0xFF)]
    Version(u16),
    /// No 64-bit entry.
    #[error("the kernel has no 64-bit entry (xloadflags {0:#x})")]
    No64BitEntry(u16),
    /// Not a kernel loaded at 1 MiB or above.
    #[error("the kernel is not a bzImage loaded high (loadflags {0:#x})")]
    NotLoadedHigh(u8),
    /// The setup header claims more than its place in the zero page.
    #[error("the setup header ends at {0:#x}, past its place in the zero page")]
    HeaderEnd(usize),
    /// `kernel_alignment` is not a power of two.
    #[error("the kernel's alignment {0:#x} is not a power of two")]
    Alignment(u32),
    /// The setup sectors are the whole kernel or more.
    #[error("the kernel's setup of {setup} bytes leaves nothing of its {len} bytes")]
    Setup {
        /// Bytes of setup.
        setup: u64,
        /// Bytes of the bzImage.
        len: u64,
    },
    /// The command line is longer than the kernel takes.
    #[error("the command line of {len} bytes is longer than the kernel's {max}")]
    Cmdline {
        /// Its bytes.
        len: usize,
        /// The kernel's `cmdline_size`.
        max: u32,
    },
    /// The memory map has more entries than the zero page holds.
    #[error("the memory map has {0} entries, the zero page holds {MAX_ENTRIES}")]
    MemoryMap(usize),
    /// No free RAM for a part.
    #[error(
        "no room for the {what} ({bytes} bytes, {align:#x}-aligned) in RAM from {from:#x} \
         to {to:#x}"
    )]
    NoRoom {
        /// Which part.
        what: &'static str,
        /// Its bytes.
        bytes: u64,
        /// Its alignment.
        align: u64,
        /// The lowest address allowed.
        from: u64,
        /// The end allowed.
        to: u64,
    },
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Reads the header in `head`, the bzImage's first [`HEAD`] bytes, and checks what the
/// 64-bit entry needs of it: the boot flag, boot protocol 2.12 or later, the 64-bit entry,
/// a kernel loaded high, a header that fits the zero page, a power-of-two alignment.
pub fn parse(head: &[u8]) -> Result<SetupHeader, BootError> {
    let h = SetupHeader::parse(head)?;
    if h.boot_flag != BOOT_FLAG {
        return Err(BootError::NoBootFlag(h.boot_flag));
    }
    if h.version < MIN_VERSION {
        return Err(BootError::Version(h.version));
    }
    if h.xloadflags & XLF_KERNEL_64 == 0 {
        return Err(BootError::No64BitEntry(h.xloadflags));
    }
    if h.loadflags & LOADED_HIGH == 0 {
        return Err(BootError::NotLoadedHigh(h.loadflags));
    }
    if h.end > HEADER_END_MAX {
        return Err(BootError::HeaderEnd(h.end));
    }
    if !h.kernel_alignment.is_power_of_two() {
        return Err(BootError::Alignment(h.kernel_alignment));
    }
    Ok(h)
}

/// What the zero page tells the kernel besides its own header.
#[derive(Debug, Clone, Copy)]
pub struct BootArgs<'a> {
    /// Where the NUL-terminated command line is.
    pub cmdline: u64,
    /// Where the initramfs is.
    pub initrd: u64,
    /// Its bytes.
    pub initrd_len: u64,
    /// The ACPI RSDP (0: the kernel looks for it).
    pub rsdp: u64,
    /// The memory map, as the firmware gave it.
    pub e820: &'a [Entry],
}

/// Fills the zero page `zp` for entering the kernel whose first bytes are `head` (header
/// `hdr`): all zero, the setup header copied from the image, then what the loader writes.
pub fn fill_zero_page(
    zp: &mut [u8; ZERO_PAGE],
    head: &[u8],
    hdr: &SetupHeader,
    args: &BootArgs,
) -> Result<(), BootError> {
    if args.e820.len() > MAX_ENTRIES {
        return Err(BootError::MemoryMap(args.e820.len()));
    }
    zp.fill(0);
    zp[SETUP_HEADER..hdr.end].copy_from_slice(&head[SETUP_HEADER..hdr.end]);
    zp[0x210] = LOADER_UNDEFINED;
    // Only the kernel's own bit: no heap (the 16-bit setup does not run), not quiet.
    zp[0x211] = hdr.loadflags & LOADED_HIGH;
    put32(zp, 0x218, args.initrd as u32);
    put32(zp, 0x21C, args.initrd_len as u32);
    put32(zp, 0x0C0, (args.initrd >> 32) as u32);
    put32(zp, 0x0C4, (args.initrd_len >> 32) as u32);
    put32(zp, 0x228, args.cmdline as u32);
    put32(zp, 0x0C8, (args.cmdline >> 32) as u32);
    put64(zp, 0x070, args.rsdp);
    zp[0x1E8] = args.e820.len() as u8;
    for (i, e) in args.e820.iter().enumerate() {
        let at = E820_TABLE + 20 * i;
        put64(zp, at, e.addr);
        put64(zp, at + 8, e.size);
        put32(zp, at + 16, e.kind);
    }
    // KiB of RAM above 1 MiB, for a kernel that looked before the e820 table (kexec does
    // the same).
    if let Some(e) = args
        .e820
        .iter()
        .find(|e| e.kind == RAM && e.addr <= 0x10_0000 && e.addr + e.size > 0x10_0000)
    {
        let kib = (e.addr + e.size - 0x10_0000) >> 10;
        put32(zp, 0x1E0, kib.min(u64::from(u32::MAX)) as u32);
        put16(zp, 0x002, kib.min(0xFC00) as u16);
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The `N` bytes at `at`, for a little-endian number.
    fn le<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
        b[at..at + N].try_into().unwrap()
    }

    fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_le_bytes(le(b, at))
    }

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(le(b, at))
    }

    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(le(b, at))
    }

    /// A setup header like Debian's 6.1 bzImage's (boot protocol 2.15, relocatable, 2 MiB
    /// alignment, 16 MiB preferred, ~64 MiB init_size).
    pub(crate) fn head() -> [u8; HEAD] {
        let mut b = [0u8; HEAD];
        b[0x1F1] = 39;
        b[0x1FE..0x200].copy_from_slice(&0xAA55u16.to_le_bytes());
        b[0x201] = 0x6A;
        b[0x202..0x206].copy_from_slice(b"HdrS");
        b[0x206..0x208].copy_from_slice(&0x020Fu16.to_le_bytes());
        b[0x211] = LOADED_HIGH | 0x80;
        b[0x214..0x218].copy_from_slice(&0x10_0000u32.to_le_bytes());
        b[0x22C..0x230].copy_from_slice(&0x7FFF_FFFFu32.to_le_bytes());
        b[0x230..0x234].copy_from_slice(&0x20_0000u32.to_le_bytes());
        b[0x234] = 1;
        b[0x235] = 0x15;
        b[0x236..0x238].copy_from_slice(&0x7Fu16.to_le_bytes());
        b[0x238..0x23C].copy_from_slice(&0x7FFu32.to_le_bytes());
        b[0x258..0x260].copy_from_slice(&0x100_0000u64.to_le_bytes());
        b[0x260..0x264].copy_from_slice(&0x3F9_8000u32.to_le_bytes());
        b[0x264..0x268].copy_from_slice(&0x7C_8DB0u32.to_le_bytes());
        b
    }

    #[test]
    fn a_debian_header_is_what_the_64_bit_entry_boots() {
        let h = parse(&head()).unwrap();
        assert_eq!(Ok(h), SetupHeader::parse(&head()));
        assert_eq!((h.setup_bytes(), h.end), (40 * 512, 0x26C));
    }

    #[test]
    fn what_the_64_bit_entry_cannot_boot_is_refused_with_the_field() {
        let refused = |at: usize, v: &[u8]| {
            let mut b = head();
            b[at..at + v.len()].copy_from_slice(v);
            parse(&b).unwrap_err()
        };
        assert_eq!(
            refused(0x202, b"HdrX"),
            BootError::Header(SetupError::NoMagic { found: *b"HdrX" })
        );
        assert_eq!(refused(0x1FE, &[0, 0]), BootError::NoBootFlag(0));
        assert_eq!(refused(0x206, &[0x0B, 0x02]), BootError::Version(0x020B));
        assert_eq!(refused(0x236, &[0x7E, 0]), BootError::No64BitEntry(0x7E));
        assert_eq!(refused(0x211, &[0x80]), BootError::NotLoadedHigh(0x80));
        assert_eq!(refused(0x201, &[0xA0]), BootError::HeaderEnd(0x2A2));
        assert_eq!(
            refused(0x230, &0x30_0000u32.to_le_bytes()),
            BootError::Alignment(0x30_0000)
        );
        assert_eq!(
            BootError::Version(0x020B).to_string(),
            "the kernel speaks boot protocol 2.0b; the 64-bit entry needs 2.12"
        );
        assert_eq!(
            parse(&head()[..0x250]),
            Err(BootError::Header(SetupError::Short {
                len: 0x250,
                need: 0x264
            }))
        );
    }

    #[test]
    fn the_zero_page_carries_the_header_the_loader_fields_and_the_map_as_given() {
        let b = head();
        let h = parse(&b).unwrap();
        let map = [
            Entry {
                addr: 0,
                size: 0x9_FC00,
                kind: RAM,
            },
            Entry {
                addr: 0x10_0000,
                size: 0x1FF0_0000,
                kind: RAM,
            },
            Entry {
                addr: 0xFEFF_C000,
                size: 0x4000,
                kind: 2,
            },
        ];
        let mut zp = [0xAAu8; ZERO_PAGE];
        let args = BootArgs {
            cmdline: 0x20_1000,
            initrd: 0x1F00_0000,
            initrd_len: 8_011_776,
            rsdp: 0xF_5A00,
            e820: &map,
        };
        fill_zero_page(&mut zp, &b, &h, &args).unwrap();
        assert_eq!(u16_at(&zp, 0x002), 0xFC00, "ext_mem_k: capped at 63 MiB");
        assert!(zp[..2].iter().chain(&zp[4..0x70]).all(|&x| x == 0));
        assert_eq!(u64_at(&zp, 0x070), 0xF_5A00);
        assert_eq!(u32_at(&zp, 0x1E0), 0x1FF0_0000 >> 10);
        assert_eq!(zp[0x1E8], 3);
        assert_eq!(zp[0x1EF], 0, "sentinel");
        assert_eq!(zp[0x1F1..0x210], b[0x1F1..0x210]);
        assert_eq!(zp[0x212..0x218], b[0x212..0x218]);
        assert_eq!(zp[0x22C..0x26C], b[0x22C..0x26C]);
        assert_eq!((zp[0x210], zp[0x211]), (LOADER_UNDEFINED, LOADED_HIGH));
        assert_eq!(u32_at(&zp, 0x218), 0x1F00_0000);
        assert_eq!(u32_at(&zp, 0x21C), 8_011_776);
        assert_eq!(u32_at(&zp, 0x228), 0x20_1000);
        assert_eq!(u32_at(&zp, 0x0C8), 0);
        assert_eq!(zp[0x26C..0x2D0], [0u8; 0x64]);
        assert_eq!(u64_at(&zp, 0x2D0 + 20), 0x10_0000);
        assert_eq!(u64_at(&zp, 0x2D0 + 28), 0x1FF0_0000);
        assert_eq!(u32_at(&zp, 0x2D0 + 56), 2);
        assert!(zp[0x2D0 + 60..].iter().all(|&x| x == 0));

        let long = [map[0]; MAX_ENTRIES + 1];
        let args = BootArgs {
            e820: &long,
            ..args
        };
        assert_eq!(
            fill_zero_page(&mut zp, &b, &h, &args),
            Err(BootError::MemoryMap(MAX_ENTRIES + 1))
        );
    }
}
