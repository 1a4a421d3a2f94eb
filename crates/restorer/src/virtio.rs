//! A virtio block device through the legacy (transitional) PCI interface, as the restorer
//! drives it: registers in the I/O BAR, one virtqueue in one page-aligned area, polled (the
//! restorer runs with interrupts off). The port I/O and the statics are the binary's
//! (`hw::virtio`); this is the arithmetic: where the rings lie, what a descriptor and a
//! request looks like (read, write, flush), how large one may be, and how Linux names the
//! disks.
//!
//! ```text
//! legacy virtqueue of N entries (one area, 4096-aligned; N = 256: 3 pages)
//! 0                16*N                16*N+6+2*N   align 4096      +6+8*N
//! | descriptors    | avail: flags idx ring[N] event | .. | used: flags idx ring[N]{id,len} event |
//!
//! one request: a chain of descriptors
//! read:  [header: type IN, sector]  -> [data, device writes] x k -> [status, device writes]
//! write: [header: type OUT, sector] -> [data, device reads] x k  -> [status, device writes]
//! flush: [header: type FLUSH]       -> [status, device writes]
//! ```

/// Virtio's PCI vendor id.
pub const VENDOR: u16 = 0x1AF4;
/// A transitional virtio block device (legacy interface present).
pub const BLK_TRANSITIONAL: u16 = 0x1001;
/// A virtio 1.0-only block device (no legacy interface).
pub const BLK_MODERN: u16 = 0x1042;

/// Legacy registers: offsets in the I/O BAR.
pub mod reg {
    /// The device's features (32 bits, read).
    pub const DEVICE_FEATURES: u16 = 0x00;
    /// The features the driver accepts (32 bits).
    pub const GUEST_FEATURES: u16 = 0x04;
    /// The selected queue's area, in 4096-byte pages (32 bits; 0 releases it).
    pub const QUEUE_PFN: u16 = 0x08;
    /// The selected queue's entries (16 bits, read).
    pub const QUEUE_SIZE: u16 = 0x0C;
    /// Selects a queue (16 bits).
    pub const QUEUE_SELECT: u16 = 0x0E;
    /// Tells the device a queue has new requests (16 bits: the queue).
    pub const QUEUE_NOTIFY: u16 = 0x10;
    /// Device status (8 bits; writing 0 resets the device).
    pub const STATUS: u16 = 0x12;
    /// Interrupt status (8 bits; reading it acknowledges the interrupt).
    pub const ISR: u16 = 0x13;
    /// The device-specific configuration without MSI-X enabled.
    pub const CONFIG: u16 = 0x14;
    /// ... and with MSI-X enabled (two vector registers come first).
    pub const CONFIG_MSIX: u16 = 0x18;
}

/// Device status bits.
pub mod status {
    /// The driver has seen the device.
    pub const ACKNOWLEDGE: u8 = 1;
    /// The driver knows how to drive it.
    pub const DRIVER: u8 = 2;
    /// The driver is ready: the device may process requests.
    pub const DRIVER_OK: u8 = 4;
    /// The driver gave up on the device.
    pub const FAILED: u8 = 0x80;
}

/// Block device configuration (offsets from [`reg::CONFIG`]).
pub mod blk {
    /// Capacity in 512-byte sectors (64 bits).
    pub const CAPACITY: u16 = 0;
    /// The largest data descriptor, with [`F_SIZE_MAX`] (32 bits).
    pub const SIZE_MAX: u16 = 8;
    /// The most data descriptors in one request, with [`F_SEG_MAX`] (32 bits).
    pub const SEG_MAX: u16 = 12;
    /// Feature: [`SIZE_MAX`] holds.
    pub const F_SIZE_MAX: u32 = 1 << 1;
    /// Feature: [`SEG_MAX`] holds.
    pub const F_SEG_MAX: u32 = 1 << 2;
    /// Feature: the disk is read-only.
    pub const F_RO: u32 = 1 << 5;
    /// Feature: the device caches writes and takes a flush request (legacy `F_WCE`); a
    /// driver that does not accept it gets a device that writes through.
    pub const F_FLUSH: u32 = 1 << 9;
    /// Request type: read.
    pub const T_IN: u32 = 0;
    /// Request type: write.
    pub const T_OUT: u32 = 1;
    /// Request type: flush the device's write cache.
    pub const T_FLUSH: u32 = 4;
    /// Request status: done.
    pub const S_OK: u8 = 0;
}

/// Descriptor flag: the chain goes on at `next`.
pub const DESC_NEXT: u16 = 1;
/// Descriptor flag: the device writes this buffer.
pub const DESC_WRITE: u16 = 2;
/// Alignment of the used ring and of the queue's area.
pub const QUEUE_ALIGN: usize = 4096;
/// The largest queue the restorer's statics hold (QEMU's virtio-blk default).
pub const MAX_QUEUE: u16 = 256;
/// The most bytes one request reads: large enough that the per-request cost (a port write,
/// the device's wake-up) vanishes next to the copy.
pub const MAX_REQUEST: usize = 4 << 20;
/// The most data descriptors one request uses.
pub const MAX_SEGMENTS: u16 = 64;
/// Bytes of a sector, the unit of a request's position.
pub const SECTOR: usize = 512;

const fn align_up(v: usize, a: usize) -> usize {
    v.div_ceil(a) * a
}

/// Where a legacy virtqueue of `size` entries keeps its parts, in bytes from its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Entries.
    pub size: u16,
    /// The available ring (driver to device).
    pub avail: usize,
    /// The used ring (device to driver).
    pub used: usize,
    /// Bytes of the whole area.
    pub bytes: usize,
}

impl Layout {
    /// The layout the legacy interface implies for `size` entries.
    pub const fn new(size: u16) -> Layout {
        let n = size as usize;
        let avail = 16 * n;
        let used = align_up(avail + 6 + 2 * n, QUEUE_ALIGN);
        Layout {
            size,
            avail,
            used,
            bytes: used + align_up(6 + 8 * n, QUEUE_ALIGN),
        }
    }

    /// Descriptor `i`.
    pub fn desc(&self, i: u16) -> usize {
        16 * usize::from(i)
    }

    /// The available ring's index (the next slot the driver fills).
    pub fn avail_idx(&self) -> usize {
        self.avail + 2
    }

    /// The available ring's slot for request number `idx`.
    pub fn avail_slot(&self, idx: u16) -> usize {
        self.avail + 4 + 2 * usize::from(idx % self.size)
    }

    /// The used ring's index (requests the device finished).
    pub fn used_idx(&self) -> usize {
        self.used + 2
    }
}

/// Bytes the statics hold for one queue: room for [`MAX_QUEUE`] entries.
pub const QUEUE_BYTES: usize = Layout::new(MAX_QUEUE).bytes;

/// Whether a device's queue size fits the restorer's area: a power of two, at most
/// [`MAX_QUEUE`], and room for a header, a data and a status descriptor.
pub fn queue_size_ok(size: u16) -> bool {
    size.is_power_of_two() && (4..=MAX_QUEUE).contains(&size)
}

/// A descriptor as the device reads it.
pub fn descriptor(addr: u64, len: u32, flags: u16, next: u16) -> [u8; 16] {
    let mut d = [0u8; 16];
    d[..8].copy_from_slice(&addr.to_le_bytes());
    d[8..12].copy_from_slice(&len.to_le_bytes());
    d[12..14].copy_from_slice(&flags.to_le_bytes());
    d[14..].copy_from_slice(&next.to_le_bytes());
    d
}

/// The header of a request of type `kind` ([`blk::T_IN`], ...) at `sector` (0 for a flush).
pub fn request_header(kind: u32, sector: u64) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[..4].copy_from_slice(&kind.to_le_bytes());
    h[8..].copy_from_slice(&sector.to_le_bytes());
    h
}

/// How large one request may be: the device's limits (what its features say) and ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of one data descriptor, a multiple of [`SECTOR`].
    pub segment: usize,
    /// Data descriptors in one request.
    pub segments: u16,
}

impl Limits {
    /// The limits of a device offering `features`, with `size_max` and `seg_max` from its
    /// configuration, on a queue of `queue` entries.
    pub fn new(features: u32, size_max: u32, seg_max: u32, queue: u16) -> Limits {
        let segment = if features & blk::F_SIZE_MAX != 0 {
            (size_max as usize / SECTOR * SECTOR).clamp(SECTOR, MAX_REQUEST)
        } else {
            MAX_REQUEST
        };
        let mut segments = MAX_SEGMENTS.min(queue.saturating_sub(2)).max(1);
        if features & blk::F_SEG_MAX != 0 && seg_max > 0 {
            segments = segments.min(seg_max.min(u32::from(u16::MAX)) as u16);
        }
        Limits { segment, segments }
    }

    /// Bytes of the next request when `remaining` (whole sectors) are left to read.
    pub fn request_bytes(&self, remaining: usize) -> usize {
        remaining
            .min(MAX_REQUEST)
            .min(self.segment * usize::from(self.segments))
    }
}

/// The index of the disk Linux names `name` (`/dev/vdc` or `vdc`: 2): virtio disks are
/// named in the order the PCI bus enumerates them. Single letters only.
pub fn vd_index(name: &str) -> Option<usize> {
    let rest = name.strip_prefix("/dev/").unwrap_or(name);
    match rest.strip_prefix("vd")?.as_bytes() {
        [c @ b'a'..=b'z'] => Some(usize::from(c - b'a')),
        _ => None,
    }
}

/// The disk and partition number a Linux name (`/dev/vdb`, `vda2`) gives: `(1, None)`,
/// `(0, Some(2))`.
pub fn vd_part(name: &str) -> Option<(usize, Option<u32>)> {
    let rest = name.strip_prefix("/dev/").unwrap_or(name);
    let rest = rest.strip_prefix("vd")?;
    let letter = *rest.as_bytes().first()?;
    if !letter.is_ascii_lowercase() {
        return None;
    }
    let index = usize::from(letter - b'a');
    match &rest[1..] {
        "" => Some((index, None)),
        n if n.bytes().all(|b| b.is_ascii_digit()) && !n.starts_with('0') => {
            Some((index, Some(n.parse().ok()?)))
        }
        _ => None,
    }
}

/// The letter of disk `index` in its Linux name (`/dev/vd` + letter).
pub fn vd_letter(index: usize) -> char {
    char::from(b'a' + (index % 26) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_give_the_disk_and_the_partition() {
        assert_eq!(vd_part("/dev/vdb"), Some((1, None)));
        assert_eq!(vd_part("vda2"), Some((0, Some(2))));
        assert_eq!(vd_part("vda12"), Some((0, Some(12))));
        assert_eq!(vd_part("vda0"), None);
        assert_eq!(vd_part("sda1"), None);
        assert_eq!(vd_part("vdA"), None);
    }

    /// The sizes the virtio spec's legacy formula gives (QEMU's default queue: 256).
    #[test]
    fn legacy_layout_puts_the_used_ring_on_its_own_page() {
        let l = Layout::new(256);
        assert_eq!((l.avail, l.used, l.bytes), (4096, 8192, 12288));
        assert_eq!(QUEUE_BYTES, 12288);
        let small = Layout::new(16);
        assert_eq!((small.avail, small.used, small.bytes), (256, 4096, 8192));
        assert_eq!(l.avail_slot(257), 4096 + 4 + 2);
        assert_eq!(l.used_idx(), 8194);
        assert_eq!(l.desc(3), 48);
        assert!(queue_size_ok(256) && queue_size_ok(4));
        assert!(!queue_size_ok(512) && !queue_size_ok(100) && !queue_size_ok(0));
    }

    #[test]
    fn a_request_and_a_descriptor_are_little_endian() {
        let h = request_header(blk::T_IN, 0x0102_0304_0506_0708);
        assert_eq!(h[..8], [0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(h[8..], [8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(request_header(blk::T_OUT, 1)[..4], [1, 0, 0, 0]);
        assert_eq!(
            request_header(blk::T_FLUSH, 0),
            [4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        let d = descriptor(0x1234_5000, 512, DESC_WRITE | DESC_NEXT, 2);
        assert_eq!(d[..8], 0x1234_5000u64.to_le_bytes());
        assert_eq!(d[8..12], [0, 2, 0, 0]);
        assert_eq!(d[12..], [3, 0, 2, 0]);
    }

    /// QEMU offers SEG_MAX (queue - 2) and no SIZE_MAX: one descriptor carries a whole
    /// request. A device with SIZE_MAX gets several descriptors of at most that size.
    #[test]
    fn requests_respect_the_device_limits_and_ours() {
        let qemu = Limits::new(blk::F_SEG_MAX, 0, 254, 256);
        assert_eq!(qemu.segments, MAX_SEGMENTS);
        assert_eq!(qemu.request_bytes(100 << 20), MAX_REQUEST);
        assert_eq!(qemu.request_bytes(4096), 4096);
        let small = Limits::new(blk::F_SIZE_MAX | blk::F_SEG_MAX, 65_536 + 100, 8, 256);
        assert_eq!(
            small,
            Limits {
                segment: 65_536,
                segments: 8
            }
        );
        assert_eq!(small.request_bytes(1 << 20), 8 * 65_536);
        let tiny_queue = Limits::new(0, 0, 0, 4);
        assert_eq!(tiny_queue.segments, 2);
    }

    #[test]
    fn linux_names_virtio_disks_by_letter() {
        assert_eq!(vd_index("/dev/vda"), Some(0));
        assert_eq!(vd_index("vdd"), Some(3));
        assert_eq!(vd_index("/dev/vdaa"), None);
        assert_eq!(vd_index("/dev/sda"), None);
        assert_eq!(vd_index("/dev/vd"), None);
        assert_eq!(vd_letter(2), 'c');
    }
}
