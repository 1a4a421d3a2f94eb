//! The restore pack: one hibernation image laid out for the restorer, which QEMU loads as
//! the PVH module. The host writes it from a checked store image (`snapboot board
//! restore-pack`); the restorer reads it in place.
//!
//! ```text
//! offset            size          field
//! 0                 8             magic "SNAPRST1"
//! 8                 8             jump_address       (image kernel's restore_registers, virtual)
//! 16                8             jump_address_phys  (its physical address)
//! 24                8             cr3                (image kernel's page tables)
//! 32                8             restore_magic      (x86_64 RESTORE_MAGIC)
//! 40                8             e820_checksum      (CRC32 of the image kernel's firmware map)
//! 48                8             num_physpages      (RAM pages of the image kernel's machine)
//! 56                8             entries            (PFN list length)
//! 64                8             data_pages         (entries without ZERO_FLAG)
//! 72                8             checksum           ([`Checksum`] of everything after page 0)
//! 80..4096                        zero
//! 4096              8*entries     PFN list, increasing; ZERO_FLAG: the page is all zeros
//! (next page)       4096*data     the data pages, in list order
//! ```

/// First bytes of a pack.
pub const MAGIC: [u8; 8] = *b"SNAPRST1";
/// x86_64 `RESTORE_MAGIC` (arch/x86/power/hibernate.c, 6.1).
pub const X86_RESTORE_MAGIC: u64 = 0x2345_6789_ABCD_EF02;
/// Page size.
pub const PAGE: u64 = 4096;
/// A PFN list entry flag: the page is all zeros and has no data page.
pub const ZERO_FLAG: u64 = 1 << 63;
/// Bytes of the header's fields.
pub const HEADER_FIELDS: usize = 80;

/// The pack's header (page 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackHeader {
    /// Virtual address the image kernel is entered at.
    pub jump_address: u64,
    /// Its physical address.
    pub jump_address_phys: u64,
    /// The image kernel's CR3.
    pub cr3: u64,
    /// The arch header's magic.
    pub restore_magic: u64,
    /// The arch header's e820 checksum.
    pub e820_checksum: u64,
    /// RAM pages the image kernel saw.
    pub num_physpages: u64,
    /// PFN list entries.
    pub entries: u64,
    /// Data pages.
    pub data_pages: u64,
    /// Checksum of the bytes after page 0.
    pub checksum: u64,
}

/// Why a pack is not readable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackError {
    /// Shorter than its header.
    Short {
        /// Bytes there.
        bytes: u64,
    },
    /// Does not start with [`MAGIC`].
    Magic,
    /// Its length is not what the header says.
    Length {
        /// Bytes there.
        bytes: u64,
        /// Bytes the header implies.
        expected: u64,
    },
}

impl core::fmt::Display for PackError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PackError::Short { bytes } => write!(f, "pack of {bytes} bytes has no header"),
            PackError::Magic => write!(f, "not a restore pack (magic)"),
            PackError::Length { bytes, expected } => {
                write!(f, "pack is {bytes} bytes, its header says {expected}")
            }
        }
    }
}

fn word(bytes: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
    u64::from_le_bytes(w)
}

impl PackHeader {
    /// The header's fields, little-endian, as page 0 starts.
    pub fn encode(&self) -> [u8; HEADER_FIELDS] {
        let mut out = [0u8; HEADER_FIELDS];
        out[..8].copy_from_slice(&MAGIC);
        let fields = [
            self.jump_address,
            self.jump_address_phys,
            self.cr3,
            self.restore_magic,
            self.e820_checksum,
            self.num_physpages,
            self.entries,
            self.data_pages,
            self.checksum,
        ];
        for (i, v) in fields.iter().enumerate() {
            out[8 + i * 8..16 + i * 8].copy_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// Reads the header of the pack `bytes` (all of it: its length is checked too).
    pub fn decode(bytes: &[u8]) -> Result<Self, PackError> {
        if bytes.len() < PAGE as usize {
            return Err(PackError::Short {
                bytes: bytes.len() as u64,
            });
        }
        if bytes[..8] != MAGIC {
            return Err(PackError::Magic);
        }
        let h = PackHeader {
            jump_address: word(bytes, 1),
            jump_address_phys: word(bytes, 2),
            cr3: word(bytes, 3),
            restore_magic: word(bytes, 4),
            e820_checksum: word(bytes, 5),
            num_physpages: word(bytes, 6),
            entries: word(bytes, 7),
            data_pages: word(bytes, 8),
            checksum: word(bytes, 9),
        };
        let expected = h.total_bytes();
        if expected != bytes.len() as u64 {
            return Err(PackError::Length {
                bytes: bytes.len() as u64,
                expected,
            });
        }
        Ok(h)
    }

    /// Where the data pages start.
    pub fn data_offset(&self) -> u64 {
        PAGE + (self.entries.saturating_mul(8)).div_ceil(PAGE) * PAGE
    }

    /// The pack's length.
    pub fn total_bytes(&self) -> u64 {
        self.data_offset()
            .saturating_add(self.data_pages.saturating_mul(PAGE))
    }
}

/// A fast checksum of 64-bit words (it detects a damaged pack; the store's BLAKE3 checks
/// were made when the pack was written): one rotate, xor and multiply per word, so checking
/// an image costs little next to copying it under emulation.
#[derive(Debug, Clone, Copy)]
pub struct Checksum(u64);

impl Default for Checksum {
    fn default() -> Self {
        Checksum(0x5eed_5eed_5eed_5eed)
    }
}

impl Checksum {
    /// Adds `bytes` (a multiple of 8 long; a shorter tail is ignored).
    pub fn update(&mut self, bytes: &[u8]) {
        for w in bytes.chunks_exact(8) {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            self.0 = (self.0.rotate_left(23) ^ u64::from_le_bytes(a))
                .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    /// The value.
    pub fn value(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> PackHeader {
        PackHeader {
            jump_address: 0xffff_ffff_8100_0000,
            jump_address_phys: 0x100_0000,
            cr3: 0x1234_5000,
            restore_magic: X86_RESTORE_MAGIC,
            e820_checksum: 0xdead_beef,
            num_physpages: 131_000,
            entries: 513,
            data_pages: 3,
            checksum: 7,
        }
    }

    fn pack(h: &PackHeader) -> Vec<u8> {
        let mut b = vec![0u8; h.total_bytes() as usize];
        b[..HEADER_FIELDS].copy_from_slice(&h.encode());
        b
    }

    #[test]
    fn a_header_reads_back_and_places_the_data_after_the_pfn_list() {
        let h = header();
        assert_eq!(h.data_offset(), 3 * PAGE, "513 entries take two pages");
        assert_eq!(h.total_bytes(), 6 * PAGE);
        assert_eq!(PackHeader::decode(&pack(&h)), Ok(h));
    }

    #[test]
    fn a_bad_magic_a_short_or_a_cut_pack_is_refused() {
        let h = header();
        let mut b = pack(&h);
        assert_eq!(
            PackHeader::decode(&b[..100]),
            Err(PackError::Short { bytes: 100 })
        );
        assert_eq!(
            PackHeader::decode(&b[..5 * PAGE as usize]),
            Err(PackError::Length {
                bytes: 5 * PAGE,
                expected: 6 * PAGE
            })
        );
        b[0] = b'X';
        assert_eq!(PackHeader::decode(&b), Err(PackError::Magic));
    }

    #[test]
    fn the_checksum_sees_one_flipped_bit_and_order() {
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let sum = |d: &[u8]| {
            let mut c = Checksum::default();
            c.update(d);
            c.value()
        };
        let mut flipped = data.clone();
        flipped[1000] ^= 4;
        assert_ne!(sum(&data), sum(&flipped));
        let mut swapped = data.clone();
        swapped[..8].copy_from_slice(&data[8..16]);
        swapped[8..16].copy_from_slice(&data[..8]);
        assert_ne!(sum(&data), sum(&swapped));
    }
}
