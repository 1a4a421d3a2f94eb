//! The store: slot selection, formatting, invalidation, and the entry
//! points for writing and reading images.
//!
//! A *store* is a plain file or a raw block device of fixed size holding two
//! 4 KiB header slots (A at 0, B at 4096) and two image areas (A, B) of equal
//! size after them. Slot A describes the image in area A, slot B the one in
//! area B. A new image is always written into the area of the slot that does
//! *not* hold the newest header: that slot is zeroed first, the image is
//! written and synced, then the new header (generation + 1) is written into
//! the slot and synced. A power cut at any point leaves the previous newest
//! header and its area untouched. Readers take the valid header with the
//! highest generation and never fall back to an older one on their own
//! ([`Store::reader_for`] exists for explicit fallback).
//!
//! Slot A's area starts right after the two slots, slot B's area right after
//! A's; both are `area_capacity()` bytes, derived from the store size. The
//! header records its area offset explicitly and readers use that.

use std::fs::{File, OpenOptions};
use std::io::{self, Cursor, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

use crate::error::{io_err, ImageError};
use crate::header::Header;
use crate::info::{check_identity, CaptureMeta, ImageInfo, SlotState};
use crate::kstream::PAGE_SIZE;
use crate::layout::{Slot, AREAS_START, FLAG_INVALIDATED, MIN_STORE_SIZE, SLOT_SIZE};
use crate::swap::{SwapPlan, MIN_SWAP_PAGES, SWAP_IMAGE_RESERVE_PAGES};

/// Positional reads that several threads may issue at once (`pread`).
pub trait ReadAt: Send + Sync {
    /// Fill `buf` from byte `offset`, or fail (`UnexpectedEof` past the end).
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl ReadAt for File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }
}

/// What a store lives on: a file, a block device, or memory in tests.
pub trait Device: Read + Write + Seek {
    /// Make written data durable (`fdatasync` for files and block devices).
    fn sync(&mut self) -> io::Result<()>;
    /// Size in bytes (seeking to the end works for block devices too).
    fn size(&mut self) -> io::Result<u64> {
        self.seek(SeekFrom::End(0))
    }
    /// A handle that worker threads can read from concurrently, if the device
    /// has one (files and block devices: a duplicated descriptor used with
    /// `pread`). Without it, the reader reads on the calling thread.
    fn shared_reader(&self) -> Option<Arc<dyn ReadAt>> {
        None
    }
}

impl Device for File {
    fn sync(&mut self) -> io::Result<()> {
        self.sync_data()
    }
    fn shared_reader(&self) -> Option<Arc<dyn ReadAt>> {
        let dup = self.try_clone().ok()?;
        Some(Arc::new(dup))
    }
}

impl Device for Cursor<Vec<u8>> {
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<D: Device + ?Sized> Device for &mut D {
    fn sync(&mut self) -> io::Result<()> {
        (**self).sync()
    }
    fn size(&mut self) -> io::Result<u64> {
        (**self).size()
    }
    fn shared_reader(&self) -> Option<Arc<dyn ReadAt>> {
        (**self).shared_reader()
    }
}

/// A snapboot image store on a [`Device`].
#[derive(Debug)]
pub struct Store<D: Device> {
    pub(crate) dev: D,
    pub(crate) size: u64,
    writable: bool,
}

impl Store<File> {
    /// Open an existing store (file or block device); `rw` allows writing.
    pub fn open(path: &Path, rw: bool) -> Result<Self, ImageError> {
        let file = OpenOptions::new()
            .read(true)
            .write(rw)
            .open(path)
            .map_err(io_err(format!("opening {}", path.display())))?;
        let mut store = Store::new(file)?;
        store.writable = rw;
        Ok(store)
    }

    /// Create (or truncate) a plain file of `size` bytes and format it.
    pub fn create_file(path: &Path, size: u64) -> Result<Self, ImageError> {
        if size < MIN_STORE_SIZE {
            return Err(ImageError::StoreTooSmall {
                size,
                min: MIN_STORE_SIZE,
            });
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(io_err(format!("creating {}", path.display())))?;
        file.set_len(size)
            .map_err(io_err(format!("sizing {}", path.display())))?;
        Store::format(file)
    }
}

impl<D: Device> Store<D> {
    /// Use `dev` as a writable store as it is.
    pub fn new(mut dev: D) -> Result<Self, ImageError> {
        let size = dev.size().map_err(io_err("measuring the store"))?;
        Ok(Store {
            dev,
            size,
            writable: true,
        })
    }

    /// Clear both header slots of `dev`, discarding any image in it.
    pub fn format(dev: D) -> Result<Self, ImageError> {
        let mut store = Store::new(dev)?;
        if store.size < MIN_STORE_SIZE {
            return Err(ImageError::StoreTooSmall {
                size: store.size,
                min: MIN_STORE_SIZE,
            });
        }
        store.write_at(
            0,
            &[0u8; 2 * SLOT_SIZE as usize],
            "clearing the header slots",
        )?;
        store.sync()?;
        Ok(store)
    }

    /// Store size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes available to one image (each of the two areas).
    pub fn area_capacity(&self) -> u64 {
        (self.size.saturating_sub(AREAS_START) / 2) / PAGE_SIZE as u64 * PAGE_SIZE as u64
    }

    /// Byte offset of the area belonging to `slot`.
    pub fn area_offset(&self, slot: Slot) -> u64 {
        match slot {
            Slot::A => AREAS_START,
            Slot::B => AREAS_START + self.area_capacity(),
        }
    }

    /// The state of both slots, A then B.
    pub fn slots(&mut self) -> Result<[SlotState; 2], ImageError> {
        let a = self.slot_state(Slot::A)?;
        let b = self.slot_state(Slot::B)?;
        Ok([a, b])
    }

    fn slot_state(&mut self, slot: Slot) -> Result<SlotState, ImageError> {
        Ok(match self.read_header(slot)? {
            None if self.size < slot.offset() + SLOT_SIZE => SlotState::Missing,
            None => SlotState::Empty,
            Some(Err(e)) => SlotState::Invalid(e),
            Some(Ok(h)) => SlotState::Valid(Box::new(h.info(slot))),
        })
    }

    /// `None`: empty or missing; `Some(Err)`: present but invalid.
    pub(crate) fn read_header(
        &mut self,
        slot: Slot,
    ) -> Result<Option<Result<Header, ImageError>>, ImageError> {
        if self.size < slot.offset() + SLOT_SIZE {
            return Ok(None);
        }
        let mut buf = vec![0u8; SLOT_SIZE as usize];
        self.read_at(
            slot.offset(),
            &mut buf,
            &format!("reading header slot {slot}"),
        )?;
        Ok(match Header::decode(&buf) {
            Ok(None) => None,
            Ok(Some(h)) => Some(Ok(h)),
            Err(e) => Some(Err(e)),
        })
    }

    /// Valid headers, and the newest one (highest generation).
    pub(crate) fn newest_header(&mut self) -> Result<Option<(Slot, Header)>, ImageError> {
        let mut best: Option<(Slot, Header)> = None;
        for slot in Slot::ALL {
            if let Some(Ok(h)) = self.read_header(slot)? {
                let newer = match &best {
                    None => true,
                    Some((_, b)) => h.generation > b.generation,
                };
                if newer {
                    best = Some((slot, h));
                }
            }
        }
        Ok(best)
    }

    pub(crate) fn no_image(&mut self) -> Result<ImageError, ImageError> {
        let [a, b] = self.slots()?;
        Ok(ImageError::NoImage {
            reason: format!("slot A: {a}; slot B: {b}"),
        })
    }

    /// The header of the image a resume would use, without reading the image.
    ///
    /// Errors with [`ImageError::NoImage`] (with both slots' reasons) or
    /// [`ImageError::Invalidated`]. Never falls back to an older image.
    pub fn newest(&mut self) -> Result<ImageInfo, ImageError> {
        match self.newest_header()? {
            None => Err(self.no_image()?),
            Some((slot, h)) if h.invalidated() => Err(ImageError::Invalidated {
                generation: h.generation,
                slot,
            }),
            Some((slot, h)) => Ok(h.info(slot)),
        }
    }

    /// Reserve the swap region of the next (lazy) image: the last `bytes`
    /// (rounded down to whole pages) of the area the next writer will use.
    ///
    /// That is the slot not holding the newest header (A if none), as for
    /// [`Store::writer_with`]. The region needs at least
    /// [`MIN_SWAP_PAGES`] pages and must leave [`SWAP_IMAGE_RESERVE_PAGES`]
    /// pages of the area to the image ([`ImageError::BadSwapRegion`] says how
    /// much fits). The target slot's header is then cleared and synced: its
    /// image is about to be overwritten by the swap region. The newest image,
    /// in the other area, stays the newest and bootable, and the next writer
    /// picks the same slot; pass the region to it in [`WriteOptions::swap`].
    pub fn plan_swap(&mut self, bytes: u64) -> Result<SwapPlan, ImageError> {
        let (slot, _) = self.next_target()?;
        let page = PAGE_SIZE as u64;
        let bytes = bytes / page * page;
        let capacity = self.area_capacity();
        let min = MIN_SWAP_PAGES * page;
        let max = capacity.saturating_sub(SWAP_IMAGE_RESERVE_PAGES * page);
        if max < min {
            return Err(ImageError::BadSwapRegion {
                reason: format!(
                    "store areas of {capacity} bytes are too small for a swap region: \
                     it needs {min} bytes ({MIN_SWAP_PAGES} pages) and the image \
                     {SWAP_IMAGE_RESERVE_PAGES} pages"
                ),
            });
        }
        if bytes < min || bytes > max {
            return Err(ImageError::BadSwapRegion {
                reason: format!(
                    "{bytes} bytes requested; an area of {capacity} bytes fits a region \
                     of {min}..={max} bytes ({MIN_SWAP_PAGES}.. pages, leaving \
                     {SWAP_IMAGE_RESERVE_PAGES} pages to the image)"
                ),
            });
        }
        let area_offset = self.area_offset(slot);
        let plan = SwapPlan {
            slot,
            area_offset,
            offset: area_offset + capacity - bytes,
            bytes,
        };
        self.clear_slot(slot)?;
        Ok(plan)
    }

    /// Target slot, generation and area offset of the next image.
    pub(crate) fn prepare_write(
        &mut self,
        meta: &CaptureMeta,
    ) -> Result<(Slot, u64, u64), ImageError> {
        check_identity(&meta.identity)?;
        let (slot, generation) = self.next_target()?;
        Ok((slot, generation, self.area_offset(slot)))
    }

    /// Slot and generation of the next image: the slot not holding the
    /// newest header (A if none). Errors if the store is read-only or too
    /// small, or if that slot's area overlaps the newest image or its swap
    /// region.
    fn next_target(&mut self) -> Result<(Slot, u64), ImageError> {
        self.require_writable()?;
        if self.size < MIN_STORE_SIZE {
            return Err(ImageError::StoreTooSmall {
                size: self.size,
                min: MIN_STORE_SIZE,
            });
        }
        let newest = self.newest_header()?;
        let (slot, generation, keep) = match &newest {
            None => (Slot::A, 1, None),
            Some((s, h)) => (
                s.other(),
                h.generation.saturating_add(1),
                (!h.invalidated()).then_some((h.area_offset, h.store_end())),
            ),
        };
        let area = self.area_offset(slot);
        if let Some((start, end)) = keep {
            if area < end && start < area + self.area_capacity() {
                return Err(ImageError::Overlap { slot });
            }
        }
        Ok((slot, generation))
    }

    /// Invalidate the newest image (boot-once): it will not be restored
    /// again, and no older image takes its place. Returns its generation,
    /// or `None` if there was no valid image.
    ///
    /// The other slot is cleared first, then the newest is rewritten with
    /// [`FLAG_INVALIDATED`]; a power cut in between leaves no bootable image
    /// rather than an old one.
    pub fn invalidate(&mut self) -> Result<Option<u64>, ImageError> {
        self.require_writable()?;
        let Some((slot, mut header)) = self.newest_header()? else {
            return Ok(None);
        };
        if self.read_header(slot.other())?.is_some() {
            self.clear_slot(slot.other())?;
        }
        header.flags |= FLAG_INVALIDATED;
        let bytes = header.encode()?;
        self.write_at(
            slot.offset(),
            &bytes,
            &format!("writing header slot {slot}"),
        )?;
        self.sync()?;
        Ok(Some(header.generation))
    }

    /// Give back the device.
    pub fn into_inner(self) -> D {
        self.dev
    }

    fn require_writable(&self) -> Result<(), ImageError> {
        if self.writable {
            Ok(())
        } else {
            Err(ImageError::ReadOnly)
        }
    }

    pub(crate) fn clear_slot(&mut self, slot: Slot) -> Result<(), ImageError> {
        let zero = [0u8; SLOT_SIZE as usize];
        self.write_at(
            slot.offset(),
            &zero,
            &format!("clearing header slot {slot}"),
        )?;
        self.sync()
    }

    /// Seeks to `offset` after checking that `len` bytes from there fit in the store;
    /// returns the end offset.
    fn seek_within(&mut self, offset: u64, len: usize, what: &str) -> Result<u64, ImageError> {
        let end = offset.saturating_add(len as u64);
        if end > self.size {
            return Err(ImageError::Truncated {
                expected: end,
                actual: self.size,
            });
        }
        self.dev
            .seek(SeekFrom::Start(offset))
            .map_err(io_err(what))?;
        Ok(end)
    }

    pub(crate) fn write_at(
        &mut self,
        offset: u64,
        buf: &[u8],
        what: &str,
    ) -> Result<(), ImageError> {
        self.seek_within(offset, buf.len(), what)?;
        self.dev.write_all(buf).map_err(io_err(what))
    }

    pub(crate) fn read_at(
        &mut self,
        offset: u64,
        buf: &mut [u8],
        what: &str,
    ) -> Result<(), ImageError> {
        let end = self.seek_within(offset, buf.len(), what)?;
        self.dev.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => ImageError::Truncated {
                expected: end,
                actual: self.size,
            },
            _ => ImageError::Io {
                context: what.to_string(),
                source: e,
            },
        })
    }

    pub(crate) fn sync(&mut self) -> Result<(), ImageError> {
        self.dev.flush().map_err(io_err("flushing the store"))?;
        self.dev.sync().map_err(io_err("syncing the store"))
    }
}
