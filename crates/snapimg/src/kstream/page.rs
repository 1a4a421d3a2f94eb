//! One page of the stream and the byte layout of its header page: the page size, the
//! offsets of `struct swsusp_info`'s fields and of the architecture records written over
//! its start, and the little-endian read of an `unsigned long` field. The header
//! (`super::header`) and the architecture records (`super::arch`) both read pages through it.

/// Size of one page of the stream (x86_64 `PAGE_SIZE`).
pub const PAGE_SIZE: usize = 4096;
/// One page of the stream.
pub type Page = [u8; PAGE_SIZE];

/// Byte offsets inside the header page (x86_64, LP64 layout).
pub mod offsets {
    /// `struct new_utsname uts` (6 × 65 bytes).
    pub const UTS: usize = 0;
    /// Length of `struct new_utsname`.
    pub const UTS_LEN: usize = 6 * 65;
    /// `u32 version_code` (390 padded up to 4-byte alignment).
    pub const VERSION_CODE: usize = 392;
    /// `unsigned long num_physpages`.
    pub const NUM_PHYSPAGES: usize = 400;
    /// `int cpus` (never set by current kernels: zero).
    pub const CPUS: usize = 408;
    /// `unsigned long image_pages` (412 padded to 8).
    pub const IMAGE_PAGES: usize = 416;
    /// `unsigned long pages`.
    pub const PAGES: usize = 424;
    /// `unsigned long size` (bytes, `pages << PAGE_SHIFT`).
    pub const SIZE: usize = 432;
    /// End of the meaningful part of `struct swsusp_info`.
    pub const END: usize = 440;
    /// `restore_data_record.jump_address`.
    pub const X86_JUMP_ADDRESS: usize = 0;
    /// `restore_data_record.jump_address_phys`.
    pub const X86_JUMP_ADDRESS_PHYS: usize = 8;
    /// `restore_data_record.cr3`.
    pub const X86_CR3: usize = 16;
    /// `restore_data_record.magic`.
    pub const X86_MAGIC: usize = 24;
    /// `restore_data_record.e820_checksum` (crc32 of the firmware e820 map).
    pub const X86_E820_CHECKSUM: usize = 32;
    /// End of `struct restore_data_record`.
    pub const X86_RECORD_END: usize = 40;
    /// arm64 `arch_hibernate_hdr.ttbr1_el1` (after the 65-byte `uts_version`, aligned to 8).
    pub const ARM64_TTBR1_EL1: usize = 72;
    /// arm64 `arch_hibernate_hdr.reenter_kernel`.
    pub const ARM64_REENTER_KERNEL: usize = 80;
    /// arm64 `arch_hibernate_hdr.__hyp_stub_vectors`.
    pub const ARM64_HYP_STUB_VECTORS: usize = 88;
    /// arm64 `arch_hibernate_hdr.sleep_cpu_mpidr`.
    pub const ARM64_SLEEP_CPU_MPIDR: usize = 96;
    /// End of arm64's `struct arch_hibernate_hdr`.
    pub const ARM64_RECORD_END: usize = 104;
    /// `MAX_ARCH_HEADER_SIZE`: `sizeof(struct new_utsname) + 4`.
    pub const MAX_ARCH_HEADER: usize = UTS_LEN + 4;
}

const _: () = assert!(offsets::VERSION_CODE >= offsets::UTS + offsets::UTS_LEN);
const _: () = assert!(offsets::X86_RECORD_END <= offsets::MAX_ARCH_HEADER);
const _: () = assert!(offsets::ARM64_RECORD_END <= offsets::MAX_ARCH_HEADER);
const _: () = assert!(offsets::MAX_ARCH_HEADER <= offsets::NUM_PHYSPAGES);
const _: () = assert!(offsets::END <= PAGE_SIZE);

/// The little-endian `u64` (an x86_64 or arm64 `unsigned long`) at byte `off` of `page`.
pub(crate) fn le_u64(page: &[u8], off: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&page[off..off + 8]);
    u64::from_le_bytes(b)
}
