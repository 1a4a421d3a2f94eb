//! The PC's virtio disks, driven through the legacy (transitional) PCI interface and polled:
//! each virtio block function the PCI walk finds, in the order Linux names them (`vda`,
//! `vdb`, ...), gets one queue in a page-aligned static and reads in requests of up to
//! `restorer::virtio::MAX_REQUEST` bytes, straight into the caller's buffer (identity mapped: its address
//! is what the device writes). Writes (the store's boot log) go out the same way from the
//! caller's buffer, and a flush follows them when the device caches writes (it offers
//! `F_FLUSH`, which is then accepted; a device whose driver does not accept it writes
//! through). [`Disks`] resets every device it set up when dropped, so the next kernel finds
//! them as after power-on. The arithmetic is `restorer::virtio`'s.

use super::pci as config;
use super::port::{inb, inl, inw, outb, outl, outw};
use crate::cpu::cycles as rdtsc;
use core::sync::atomic::{fence, AtomicBool, Ordering};
use restorer::disk::{check_read, Disk, DiskError, DiskMut, Span};
use restorer::pci::{self, Bar, Bdf};
use restorer::virtio::{
    blk, descriptor, queue_size_ok, reg, request_header, status, Layout, Limits, DESC_NEXT,
    DESC_WRITE, QUEUE_BYTES, SECTOR,
};

/// The most disks the restorer drives (a PC board has its root, stores and kernel pack).
pub const MAX_DISKS: usize = 8;
/// TSC cycles a request may take (some 20 s at the GHz rates TCG and hardware count at).
const TIMEOUT_CYCLES: u64 = 1 << 36;
/// `avail.flags`: the device need not interrupt (the restorer polls, interrupts off).
const NO_INTERRUPT: u16 = 1;

/// One disk's queue area.
#[repr(C, align(4096))]
struct QueueArea([u8; QUEUE_BYTES]);

/// One disk's request header and status byte (the device reads the first, writes the
/// second).
#[repr(C, align(16))]
struct Request {
    header: [u8; 16],
    status: u8,
}

// The devices read and write these behind the compiler's back: only ever reached through
// raw pointers, with volatile accesses and fences around each request.
static mut QUEUES: [QueueArea; MAX_DISKS] = [const { QueueArea([0; QUEUE_BYTES]) }; MAX_DISKS];
static mut REQUESTS: [Request; MAX_DISKS] = [const {
    Request {
        header: [0; 16],
        status: 0,
    }
}; MAX_DISKS];
/// Whether a [`Disks`] owns the statics.
static TAKEN: AtomicBool = AtomicBool::new(false);

/// Why the disks cannot be driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VirtioError {
    /// Another [`Disks`] still holds them.
    #[error("the virtio disks are already in use")]
    InUse,
    /// A virtio 1.0-only device: no legacy interface.
    #[error("the virtio disk at {0} has no legacy I/O BAR (a virtio 1.0-only device)")]
    NoLegacy(Bdf),
    /// A queue size the statics do not hold.
    #[error(
        "the virtio disk at {bdf} has a queue of {size} entries; the restorer takes a power \
         of two from 4 to 256"
    )]
    QueueSize {
        /// The device.
        bdf: Bdf,
        /// Its queue's entries.
        size: u16,
    },
}

/// The data of one request.
enum Data<'a> {
    /// A read: the device writes these bytes.
    In(&'a mut [u8]),
    /// A write: the device reads them.
    Out(&'a [u8]),
    /// A flush: none.
    None,
}

/// One virtio disk, set up and ready to read (and write).
pub struct VirtioDisk {
    io: u16,
    /// The device's features (`blk::F_RO`, `blk::F_FLUSH`, ...).
    features: u32,
    slot: usize,
    layout: Layout,
    limits: Limits,
    bytes: u64,
    /// The part of the disk read: all of it, or the store's partition ([`Self::narrow`]).
    span: Span,
    next: u16,
    broken: bool,
}

fn queue_base(slot: usize) -> u64 {
    // SAFETY: only the address of the static is taken.
    unsafe { core::ptr::addr_of_mut!(QUEUES[slot]) as u64 }
}

fn request(slot: usize) -> *mut Request {
    // SAFETY: only the address of the static is taken.
    unsafe { core::ptr::addr_of_mut!(REQUESTS[slot]) }
}

fn reset(io: u16) {
    outb(io + reg::STATUS, 0);
}

impl VirtioDisk {
    /// Resets the device at `bdf`, gives it the queue of `slot` and sets it running.
    fn setup(bdf: Bdf, slot: usize) -> Result<VirtioDisk, VirtioError> {
        let Bar::Io(io) = pci::decode_bar(config::read32(bdf, pci::BAR0), 0) else {
            return Err(VirtioError::NoLegacy(bdf));
        };
        let cmd = config::read16(bdf, pci::COMMAND);
        config::write16(
            bdf,
            pci::COMMAND,
            cmd | pci::COMMAND_IO | pci::COMMAND_MASTER,
        );
        reset(io);
        outb(io + reg::STATUS, status::ACKNOWLEDGE);
        outb(io + reg::STATUS, status::ACKNOWLEDGE | status::DRIVER);
        let features = inl(io + reg::DEVICE_FEATURES);
        // A read needs no feature; the device's limits hold whether accepted or not. A
        // flush needs F_FLUSH accepted (without it the device writes through).
        outl(io + reg::GUEST_FEATURES, features & blk::F_FLUSH);
        outw(io + reg::QUEUE_SELECT, 0);
        let size = inw(io + reg::QUEUE_SIZE);
        if !queue_size_ok(size) {
            outb(io + reg::STATUS, status::FAILED);
            return Err(VirtioError::QueueSize { bdf, size });
        }
        let layout = Layout::new(size);
        let base = queue_base(slot);
        // SAFETY: the queue area of `slot` belongs to this disk alone (the `Disks` holding
        // the statics hands each slot out once) and the device was just reset.
        unsafe {
            core::ptr::write_bytes(base as *mut u8, 0, QUEUE_BYTES);
            core::ptr::write_volatile((base + layout.avail as u64) as *mut u16, NO_INTERRUPT);
        }
        // The area lies below 4 GiB (the restorer is linked at 1 MiB): its page number fits.
        outl(io + reg::QUEUE_PFN, (base >> 12) as u32);
        let cfg = io
            + if config::msix_enabled(bdf) {
                reg::CONFIG_MSIX
            } else {
                reg::CONFIG
            };
        let sectors =
            u64::from(inl(cfg + blk::CAPACITY)) | u64::from(inl(cfg + blk::CAPACITY + 4)) << 32;
        let limits = Limits::new(
            features,
            inl(cfg + blk::SIZE_MAX),
            inl(cfg + blk::SEG_MAX),
            size,
        );
        outb(
            io + reg::STATUS,
            status::ACKNOWLEDGE | status::DRIVER | status::DRIVER_OK,
        );
        Ok(VirtioDisk {
            io,
            features,
            slot,
            layout,
            limits,
            bytes: sectors.saturating_mul(SECTOR as u64),
            span: Span {
                offset: 0,
                size: sectors.saturating_mul(SECTOR as u64),
            },
            next: 0,
            broken: false,
        })
    }

    /// Reads or writes `data` from byte `offset` (whole sectors, inside the disk) in as few
    /// requests of type `kind` as the limits allow.
    fn transfer(&mut self, kind: u32, offset: u64, mut data: Data<'_>) -> Result<(), DiskError> {
        let len = match &data {
            Data::In(b) => b.len(),
            Data::Out(b) => b.len(),
            Data::None => 0,
        };
        let mut done = 0;
        while done < len {
            let sector = (offset + done as u64) / SECTOR as u64;
            if self.broken {
                return Err(DiskError::Timeout { sector });
            }
            let n = self.limits.request_bytes(len - done);
            let part = match &mut data {
                Data::In(b) => Data::In(&mut b[done..done + n]),
                Data::Out(b) => Data::Out(&b[done..done + n]),
                Data::None => Data::None,
            };
            self.submit(kind, sector, part)?;
            done += n;
        }
        Ok(())
    }

    /// Puts one request of type `kind` at `sector` on the queue and waits for it.
    fn submit(&mut self, kind: u32, sector: u64, data: Data<'_>) -> Result<(), DiskError> {
        let base = queue_base(self.slot);
        let l = self.layout;
        let req = request(self.slot);
        let put = |off: usize, d: [u8; 16]| {
            // SAFETY: `off` is a descriptor inside this disk's queue area, which the device
            // reads only after the notify below.
            unsafe { core::ptr::write_volatile((base + off as u64) as *mut [u8; 16], d) }
        };
        // SAFETY: the request slot is this disk's; the device touches it only between the
        // notify and the used ring's answer.
        unsafe {
            core::ptr::write_volatile(
                core::ptr::addr_of_mut!((*req).header),
                request_header(kind, sector),
            );
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*req).status), 0xFF);
        }
        put(l.desc(0), descriptor(req as u64, 16, DESC_NEXT, 1));
        let (addr, len, flags) = match data {
            Data::In(b) => (b.as_mut_ptr() as u64, b.len(), DESC_WRITE | DESC_NEXT),
            Data::Out(b) => (b.as_ptr() as u64, b.len(), DESC_NEXT),
            Data::None => (0, 0, DESC_NEXT),
        };
        let mut d = 1u16;
        let mut done = 0;
        while done < len {
            let n = (len - done).min(self.limits.segment);
            put(
                l.desc(d),
                descriptor(addr + done as u64, n as u32, flags, d + 1),
            );
            d += 1;
            done += n;
        }
        // SAFETY: only the status byte's address is taken.
        let status_at = unsafe { core::ptr::addr_of_mut!((*req).status) };
        put(l.desc(d), descriptor(status_at as u64, 1, DESC_WRITE, 0));
        // SAFETY: the available ring's slot and index lie in this disk's queue area.
        unsafe {
            core::ptr::write_volatile((base + l.avail_slot(self.next) as u64) as *mut u16, 0);
            fence(Ordering::SeqCst);
            core::ptr::write_volatile(
                (base + l.avail_idx() as u64) as *mut u16,
                self.next.wrapping_add(1),
            );
        }
        fence(Ordering::SeqCst);
        outw(self.io + reg::QUEUE_NOTIFY, 0);
        let used = (base + l.used_idx() as u64) as *const u16;
        let start = rdtsc();
        // SAFETY: the used ring's index lies in this disk's queue area; the device writes it.
        while unsafe { core::ptr::read_volatile(used) } != self.next.wrapping_add(1) {
            if rdtsc().wrapping_sub(start) > TIMEOUT_CYCLES {
                // Stop the device before anyone reuses the buffer, and read no more.
                reset(self.io);
                self.broken = true;
                return Err(DiskError::Timeout { sector });
            }
            core::hint::spin_loop();
        }
        fence(Ordering::SeqCst);
        self.next = self.next.wrapping_add(1);
        // Acknowledges an interrupt the device may have raised despite NO_INTERRUPT.
        let _ = inb(self.io + reg::ISR);
        // SAFETY: the device wrote the status before it advanced the used index.
        let st = unsafe { core::ptr::read_volatile(status_at) };
        if st != blk::S_OK {
            return Err(DiskError::Device { sector, status: st });
        }
        Ok(())
    }
}

impl VirtioDisk {
    /// From now on reads and writes only `span` of the disk, as a disk of its own (a store in a
    /// partition: `restorer::gpt`).
    pub fn narrow(&mut self, span: Span) {
        self.span = span;
    }
}

impl Disk for VirtioDisk {
    fn size(&self) -> u64 {
        self.span.size
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        let offset = self.span.place(offset, buf.len())?;
        check_read(offset, buf.len(), self.bytes)?;
        self.transfer(blk::T_IN, offset, Data::In(buf))
    }

    fn request_limit(&self) -> Option<u64> {
        // `transfer` sends requests of `request_bytes(remaining)`: this many, the last less.
        Some(self.limits.request_bytes(usize::MAX) as u64)
    }
}

impl DiskMut for VirtioDisk {
    fn write(&mut self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        let offset = self.span.place(offset, buf.len())?;
        check_read(offset, buf.len(), self.bytes)?;
        if self.features & blk::F_RO != 0 {
            return Err(DiskError::ReadOnly);
        }
        self.transfer(blk::T_OUT, offset, Data::Out(buf))
    }

    fn flush(&mut self) -> Result<(), DiskError> {
        if self.features & blk::F_FLUSH == 0 {
            return Ok(());
        }
        if self.broken {
            return Err(DiskError::Timeout { sector: 0 });
        }
        self.submit(blk::T_FLUSH, 0, Data::None)
    }
}

/// The virtio disks, `vda` first. Dropping it resets every device.
pub struct Disks {
    list: [Option<VirtioDisk>; MAX_DISKS],
    len: usize,
}

impl Disks {
    /// How many there are.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Disk `index` (`vda` is 0).
    pub fn get_mut(&mut self, index: usize) -> Option<&mut VirtioDisk> {
        self.list.get_mut(index)?.as_mut()
    }

    /// Resets every device (what dropping does too), for a caller that leaves without
    /// dropping: the restore's jump into the image kernel.
    pub fn reset_all(&mut self) {
        for d in self.list.iter().flatten() {
            reset(d.io);
        }
    }
}

impl restorer::image::DiskSet for Disks {
    type Disk = VirtioDisk;

    fn disk(&mut self, index: usize) -> Option<&mut VirtioDisk> {
        self.get_mut(index)
    }
}

impl Drop for Disks {
    fn drop(&mut self) {
        self.reset_all();
        TAKEN.store(false, Ordering::Release);
    }
}

/// Finds and sets up every virtio disk (at most [`MAX_DISKS`]: later ones are left alone,
/// and the names of those listed stay right). Fails if a [`Disks`] is alive.
pub fn disks() -> Result<Disks, VirtioError> {
    if TAKEN.swap(true, Ordering::Acquire) {
        return Err(VirtioError::InUse);
    }
    let mut found = Disks {
        list: [const { None }; MAX_DISKS],
        len: 0,
    };
    let mut err = None;
    config::for_each_function(&mut |bdf, id| {
        let (vendor, device) = (id as u16, (id >> 16) as u16);
        let blk =
            device == restorer::virtio::BLK_TRANSITIONAL || device == restorer::virtio::BLK_MODERN;
        if vendor != restorer::virtio::VENDOR || !blk || found.len == MAX_DISKS || err.is_some() {
            return;
        }
        match VirtioDisk::setup(bdf, found.len) {
            Ok(d) => {
                found.list[found.len] = Some(d);
                found.len += 1;
            }
            Err(e) => err = Some(e),
        }
    });
    match err {
        Some(e) => Err(e),
        None => Ok(found),
    }
}
