//! The fixed frame of every store: the format constants and the two header slots.

use serde::Serialize;
use std::fmt;

/// Magic at offset 0 of a header slot.
pub const MAGIC: [u8; 8] = *b"SNAPBOOT";
/// The image format version this build writes and reads; a store holding any other
/// version is refused with [`crate::ImageError::UnsupportedVersion`].
pub const FORMAT_VERSION: u32 = 2;
/// Length of every BLAKE3 hash stored (full 256-bit output).
pub const HASH_LEN: usize = 32;
/// Header flag: the image was invalidated (boot-once image already used).
pub const FLAG_INVALIDATED: u64 = 1;
/// Longest identity string accepted (the kernel's utsname fields hold 64).
pub const MAX_IDENTITY_LEN: usize = 64;
/// Size of one header slot.
pub const SLOT_SIZE: u64 = 4096;
/// Offset of the first image area (after both slots).
pub const AREAS_START: u64 = 2 * SLOT_SIZE;
/// Smallest store: both slots plus two areas of 16 pages.
pub const MIN_STORE_SIZE: u64 = AREAS_START + 2 * 16 * 4096;

/// Which header slot (and area).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Slot {
    /// Slot at offset 0, area right after the slots.
    A,
    /// Slot at offset 4096, second area.
    B,
}

impl Slot {
    /// Both slots in order.
    pub const ALL: [Slot; 2] = [Slot::A, Slot::B];
    /// Byte offset of the slot in the store.
    pub fn offset(self) -> u64 {
        match self {
            Slot::A => 0,
            Slot::B => SLOT_SIZE,
        }
    }
    /// The other slot.
    pub fn other(self) -> Slot {
        match self {
            Slot::A => Slot::B,
            Slot::B => Slot::A,
        }
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Slot::A => "A",
            Slot::B => "B",
        })
    }
}
