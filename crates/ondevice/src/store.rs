//! The device's image store (crate `flashstore`, docs/store.md): opening it safely, writing
//! a captured image into it with its description, signatures, and the order resume tries
//! images in. The store knows nothing of kernels; the description (crate `snapimg`) says
//! which kernel, machine and system an image belongs to.
//!
//! A store is only ever opened by its magic: a device without it (a renumbered disk, a
//! partition of something else, an old two-slot store) is refused before anything is
//! written to it. Only `snapboot store init` lays out a new one.

use bootparams::StoreAddress;
use devsys::locate::{LocateError, Located};
use devsys::snapshot::{SnapshotDev, SnapshotError};
use flashstore::{Committed, ImageRec, Store, StoreError, WriteOptions};
use imagekey::{KeyError, PublicKey, SecretKey};
use snapimg::{Description, DescriptionError, PAGE_SIZE};
use std::fs::{File, OpenOptions};
use std::path::Path;
use std::time::Duration;

/// The image a capture writes when no name is given.
pub const DEFAULT_IMAGE: &str = "current";
/// Where the initramfs carries the public key that images must be signed for. When it is
/// there, resume restores signed images only.
pub const PUBLIC_KEY_FILE: &str = "/etc/snapboot/image.pub";

/// Errors of the device's store and the images on it.
#[derive(Debug, thiserror::Error)]
pub enum StoreUseError {
    /// The store's address names no device (or two).
    #[error("store {address}")]
    Locate {
        address: StoreAddress,
        #[source]
        source: LocateError,
    },
    /// The store file or device could not be opened.
    #[error("opening {store}")]
    Open {
        /// The store's address and what it resolved to ([`Located`]'s words).
        store: String,
        #[source]
        source: std::io::Error,
    },
    /// The device holds no usable store, or the store refused an operation.
    #[error("store {store}")]
    Store {
        /// The store's address and what it resolved to ([`Located`]'s words).
        store: String,
        #[source]
        source: StoreError,
    },
    /// The store refused an operation on one of its images.
    #[error(transparent)]
    Image(#[from] StoreError),
    /// The description stored with the image is unusable.
    #[error(transparent)]
    Description(#[from] DescriptionError),
    /// Reading the kernel's page stream failed.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// The kernel's page stream is not what a hibernation image looks like.
    #[error("the kernel's page stream, at page {page}")]
    Stream {
        page: u64,
        #[source]
        source: snapimg::StreamError,
    },
    /// Signing or checking a signature failed.
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// Opens the store at `path` (for writing with `rw`). A device that does not carry the
/// store's magic, an old two-slot store and a truncated store are refused, each with its
/// reason, before anything is written.
pub fn open_store(path: &Path, rw: bool) -> Result<Store<File>, StoreUseError> {
    open_named(path, path.display().to_string(), rw)
}

/// Finds the store at `address` ([`devsys::locate::resolve`], waiting up to `wait` for its
/// device) and opens it as [`open_store`] does; every error names the address and what it
/// resolved to. Returns the store and where it is.
pub fn open_address(
    address: &StoreAddress,
    wait: Duration,
    rw: bool,
) -> Result<(Store<File>, Located), StoreUseError> {
    let at = devsys::locate::resolve(address, wait).map_err(|source| StoreUseError::Locate {
        address: address.clone(),
        source,
    })?;
    let store = open_located(&at, rw)?;
    Ok((store, at))
}

/// Opens the store at `at`, found already, as [`open_store`] does; every error names the
/// address and what it resolved to.
pub fn open_located(at: &Located, rw: bool) -> Result<Store<File>, StoreUseError> {
    open_named(&at.path, at.to_string(), rw)
}

fn open_named(path: &Path, store: String, rw: bool) -> Result<Store<File>, StoreUseError> {
    let file = OpenOptions::new().read(true).write(rw).open(path);
    let file = match file {
        Ok(f) => f,
        Err(source) => return Err(StoreUseError::Open { store, source }),
    };
    Store::open(file).map_err(|source| StoreUseError::Store { store, source })
}

/// Changes the boot log of the store at `address` without reading its catalog (see
/// [`flashstore::update_boot_log`]): a device without the store's magic is refused and
/// left as it is.
pub fn update_boot_log<T>(
    address: &StoreAddress,
    wait: Duration,
    change: impl FnOnce(&mut flashstore::BootLog) -> T,
) -> Result<T, StoreUseError> {
    let at = devsys::locate::resolve(address, wait).map_err(|source| StoreUseError::Locate {
        address: address.clone(),
        source,
    })?;
    update_located_boot_log(&at, change)
}

/// [`update_boot_log`] of the store found at `at` already.
pub fn update_located_boot_log<T>(
    at: &Located,
    change: impl FnOnce(&mut flashstore::BootLog) -> T,
) -> Result<T, StoreUseError> {
    let store = at.to_string();
    let mut file = match OpenOptions::new().read(true).write(true).open(&at.path) {
        Ok(f) => f,
        Err(source) => return Err(StoreUseError::Open { store, source }),
    };
    flashstore::update_boot_log(&mut file, change)
        .map_err(|source| StoreUseError::Store { store, source })
}

/// Streams the kernel's image pages from `dev` into image `name` on `store` and commits it
/// with its description (`describe` is given the number of pages read).
pub fn write_image(
    dev: &mut SnapshotDev,
    store: &mut Store<File>,
    name: &str,
    opts: WriteOptions,
    raw: Option<flashstore::Extent>,
    describe: impl FnOnce(u64) -> Result<Description, DescriptionError>,
) -> Result<Committed, StoreUseError> {
    let mut w = store.writer(name, opts)?;
    if let Some(e) = raw {
        w.attach_raw(e)?;
    }
    // The stream's structure (header, PFN index, data pages) is checked as it is read, so an
    // image that is not one the kernel can restore is never committed.
    let mut parser = snapimg::StreamParser::new();
    let mut page = [0u8; PAGE_SIZE];
    let mut pages = 0u64;
    while dev.read_page(&mut page)? {
        parser
            .push_page(&page)
            .map_err(|source| StoreUseError::Stream {
                page: pages,
                source,
            })?;
        w.push_page(&page)?;
        pages += 1;
    }
    parser.finish().map_err(|source| StoreUseError::Stream {
        page: pages,
        source,
    })?;
    let description = describe(pages)?;
    Ok(w.commit(description.encode())?)
}

/// The description of image `rec`, read from the store.
pub fn description(store: &Store<File>, rec: &ImageRec) -> Result<Description, StoreUseError> {
    let meta = store.image_meta(rec)?;
    Ok(Description::decode(&meta.user)?)
}

/// The kernel's header page of image `name` (page 0 of its stream), parsed.
pub fn stream_header(
    store: &Store<File>,
    name: &str,
) -> Result<snapimg::StreamHeader, StoreUseError> {
    let mut page = [0u8; PAGE_SIZE];
    if !store.reader(name)?.next_page(&mut page)? {
        return Err(StoreUseError::Stream {
            page: 0,
            source: snapimg::StreamError::Incomplete {
                received: 0,
                expected: 0,
            },
        });
    }
    snapimg::StreamHeader::parse(&page).map_err(|source| StoreUseError::Stream { page: 0, source })
}

/// What `snapboot store ls --json` and `snapboot image inspect --json` say of an image: the
/// JSON contract of both.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ImageSummary {
    /// The image's name.
    pub name: String,
    /// Store generation that committed it.
    pub generation: u64,
    /// Captures, `rm` and gc leave it alone.
    pub pinned: bool,
    /// It carries a signature.
    pub signed: bool,
    /// The device key it is encrypted with (`None`: in the clear).
    pub encrypted: Option<String>,
    /// Commit time, unix seconds.
    pub created_unix: u64,
    /// Kernel and machine it was captured on (`None`: its description is unusable, see
    /// `description_error`).
    pub identity: Option<snapimg::Identity>,
    /// Why the description is unusable.
    pub description_error: Option<String>,
    /// Pages of the kernel's stream.
    pub stream_pages: Option<u64>,
    /// What the image cost and saved.
    pub stats: flashstore::ImageStats,
    /// Uncompressed bytes of the kernel's stream.
    pub raw_bytes: u64,
    /// Chunks it references.
    pub chunks: usize,
    /// The raw region the store gave it, if any: byte offset on the device and length.
    pub raw_region: Option<RegionSummary>,
    /// A lazy image's swap region.
    pub swap: Option<SwapSummary>,
}

/// A byte range of the store device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RegionSummary {
    /// Byte offset on the device.
    pub offset: u64,
    /// Bytes.
    pub bytes: u64,
}

/// A lazy image's swap region, as [`ImageSummary`] shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SwapSummary {
    /// Byte offset on the device.
    pub offset: u64,
    /// Bytes.
    pub bytes: u64,
    /// Pages paged out into it at capture.
    pub used_pages: u64,
    /// UUID of its swap header, as `blkid` shows it.
    pub uuid: String,
    /// The dm-verity tree page-ins are checked against (`None`: not verified).
    pub verity: Option<VeritySummary>,
}

/// A lazy image's verity tree, as [`ImageSummary`] shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct VeritySummary {
    /// Pages covered from the start of the swap area.
    pub data_blocks: u64,
    /// First block of the tree in the region.
    pub hash_start: u64,
    /// Root digest (SHA-256), hex.
    pub root: String,
    /// Salt, hex.
    pub salt: String,
}

/// What the store says of image `rec`, with its description.
pub fn summary(store: &Store<File>, rec: &ImageRec) -> ImageSummary {
    let d = description(store, rec);
    let swap = d.as_ref().ok().and_then(|d| d.swap);
    ImageSummary {
        name: rec.name.clone(),
        generation: rec.generation,
        pinned: rec.pinned,
        signed: !rec.signature.is_empty(),
        encrypted: rec.sealed.map(|k| k.to_string()),
        created_unix: rec.created_unix,
        identity: d.as_ref().ok().map(|d| d.identity.clone()),
        description_error: d.as_ref().err().map(|e| boottrace::error_chain(e)),
        stream_pages: d.as_ref().ok().map(|d| d.stream_pages),
        stats: rec.stats,
        raw_bytes: rec.stats.pages * PAGE_SIZE as u64,
        chunks: rec.chunks.len(),
        raw_region: rec.raw.map(|e| RegionSummary {
            offset: store.raw_offset(e),
            bytes: e.len,
        }),
        swap: swap.map(|w| SwapSummary {
            offset: w.offset,
            bytes: w.bytes,
            used_pages: w.used_pages,
            uuid: w.uuid_text(),
            verity: w.verity.map(|v| VeritySummary {
                data_blocks: v.data_blocks,
                hash_start: v.hash_start,
                root: snapimg::hex(&v.root),
                salt: snapimg::hex(&v.salt),
            }),
        }),
    }
}

/// Clusters filled less than this are compacted when a capture finds the store low on idle
/// space (and by `snapboot store gc`).
pub const RECLAIM_BELOW_PERCENT: u8 = 50;

/// Before a capture: when fewer idle bytes are left than `need` (the most the new image can
/// take), reclaims partly dead clusters by compaction. Returns what it did, `None` when
/// there was room. Never runs on the resume path.
pub fn reclaim_if_low(
    store: &mut Store<File>,
    need: u64,
) -> Result<Option<flashstore::CompactReport>, StoreError> {
    if store.idle_bytes() >= need {
        return Ok(None);
    }
    Ok(Some(store.compact(RECLAIM_BELOW_PERCENT)?))
}

/// Signs image `name` on the store at `path` with `key` (after reading it whole).
pub fn sign_image(path: &Path, name: &str, key: &SecretKey) -> Result<ImageRec, StoreUseError> {
    let mut store = open_store(path, true)?;
    let rec = store
        .image(name)
        .ok_or_else(|| StoreError::NoImage(name.into()))?
        .clone();
    let digest = store.signed_digest(&rec)?;
    store.set_signature(name, key.sign(&digest))?;
    Ok(store.image(name).cloned().unwrap_or(rec))
}

/// Checks image `rec`'s signature against `key`.
pub fn check_signature(
    store: &Store<File>,
    rec: &ImageRec,
    key: &PublicKey,
) -> Result<(), StoreUseError> {
    let digest = store.signed_digest(rec)?;
    Ok(key
        .verify(&digest, &rec.signature)
        .map_err(KeyError::from)?)
}

/// The public key images must be signed for: `None` when the initramfs has none.
pub fn configured_key(path: &Path) -> Result<Option<PublicKey>, KeyError> {
    if !path.exists() {
        return Ok(None);
    }
    PublicKey::load(path).map(Some)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An empty 16 MiB store in file `s.store` of `dir`.
    pub(crate) fn file_store(dir: &Path) -> Store<File> {
        let path = dir.join("s.store");
        let f = File::create(&path).unwrap();
        f.set_len(16 << 20).unwrap();
        drop(f);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let fmt = flashstore::FormatOptions {
            cluster_blocks: 16,
            ..Default::default()
        };
        Store::format(f, fmt).unwrap()
    }

    #[test]
    fn the_header_page_of_a_stored_arm64_image_is_read_back() {
        let d = tempfile::tempdir().unwrap();
        let mut s = file_store(d.path());
        let arch = snapimg::StreamHeader::arm64(1, 1, "#1 SMP", 2).arch;
        let stream = snapimg::SyntheticStream::new(40, 5).with_arch(arch);
        let opts = WriteOptions {
            chunk_pages: 8,
            ..WriteOptions::default()
        };
        let mut w = s.writer("arm", opts).unwrap();
        for page in stream.to_bytes().chunks_exact(PAGE_SIZE) {
            w.push_page(page.try_into().unwrap()).unwrap();
        }
        w.commit(Vec::new()).unwrap();
        assert_eq!(&stream_header(&s, "arm").unwrap(), stream.header());
        assert!(stream_header(&s, "missing").is_err());
    }

    /// A file store holding image `b`, which kept every other chunk of the removed image
    /// `a`: the clusters `a` wrote are partly live.
    fn store_with_holes(dir: &Path) -> Store<File> {
        let mut s = file_store(dir);
        let noisy = |i: u64, seed: u64| {
            let mut p = [0u8; PAGE_SIZE];
            for (j, w) in p[..1024].chunks_exact_mut(8).enumerate() {
                w.copy_from_slice(&(i.wrapping_mul(0x9E37_79B9) ^ seed ^ j as u64).to_le_bytes());
            }
            p
        };
        let opts = WriteOptions {
            chunk_pages: 8,
            dedupe: flashstore::Dedupe::Full,
            ..WriteOptions::default()
        };
        let mut w = s.writer("a", opts).unwrap();
        for i in 0..256 {
            w.push_page(&noisy(i, 1)).unwrap();
        }
        w.commit(Vec::new()).unwrap();
        let mut w = s.writer("b", opts).unwrap();
        for i in 0..256 {
            let seed = if (i / 8) % 2 == 0 { 1 } else { 2 };
            w.push_page(&noisy(i, seed)).unwrap();
        }
        w.commit(Vec::new()).unwrap();
        s.remove("a").unwrap();
        s
    }

    #[test]
    fn reclaim_compacts_only_when_idle_space_runs_low() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = store_with_holes(dir.path());
        let used = s.usage().used;
        assert_eq!(reclaim_if_low(&mut s, 0).unwrap(), None);
        assert_eq!(s.usage().used, used, "room enough: nothing moved");
        let need = s.idle_bytes() + 1;
        let r = reclaim_if_low(&mut s, need).unwrap().expect("compacted");
        assert!(r.gained() > 0, "{r:?}");
        assert_eq!(s.usage().used, used - r.gained());
        assert!(s.fsck().clean());
    }
}
