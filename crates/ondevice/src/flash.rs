//! Images on a flash store (`flashstore`, seed 003): what capture writes there, and the
//! description snapboot keeps with each image (the kernel and machine it belongs to, and
//! what it is bound to). The store itself knows nothing of kernels; this module is the glue.

use crate::snapshot::{SnapshotDev, SnapshotError};
use flashstore::{Committed, ImageRec, Store, StoreError, WriteOptions};
use imagekey::{KeyError, PublicKey, SecretKey};
use serde::{Deserialize, Serialize};
use snapimg::{Binding, CaptureMeta, Identity, SwapRegion, PAGE_SIZE};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

/// The image a capture writes when no name is given.
pub const DEFAULT_IMAGE: &str = "current";
/// Where the initramfs carries the public key that images must be signed for. When it is
/// there, resume restores signed images only.
pub const PUBLIC_KEY_FILE: &str = "/etc/snapboot/image.pub";
/// Version of [`Description`]'s encoding.
const DESCRIPTION_VERSION: u32 = 1;
/// Room for the binding record (it is bounded far below this).
const BINDING_ROOM: usize = 64 << 10;

/// Errors of images on a flash store.
#[derive(Debug, thiserror::Error)]
pub enum FlashError {
    /// The store file or device could not be opened.
    #[error("opening {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The store refused or is damaged.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The description stored with the image does not parse.
    #[error("the image's description does not parse: {0}")]
    Description(String),
    /// The binding record could not be encoded or decoded.
    #[error("the image's binding record")]
    Binding(#[source] snapimg::BindingError),
    /// Reading the kernel's page stream failed.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// Signing failed.
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// What snapboot stores with an image besides its pages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Description {
    /// [`DESCRIPTION_VERSION`].
    pub version: u32,
    /// Kernel and machine of the capture.
    pub identity: Identity,
    /// Capture time, unix seconds.
    pub created_unix: u64,
    /// [`Binding::encode`]d record (empty: none).
    pub binding: Vec<u8>,
    /// Pages of the kernel's stream.
    pub stream_pages: u64,
    /// A lazy image's swap region (in the image's raw region of the store).
    pub swap: Option<SwapDesc>,
}

/// A lazy image's swap region, as the description records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwapDesc {
    /// Byte offset on the store device.
    pub offset: u64,
    /// Bytes.
    pub bytes: u64,
    /// Pages swapped out into it at capture.
    pub used_pages: u64,
    /// UUID in its swap header.
    pub uuid: [u8; 16],
    /// The dm-verity tree page-ins are checked against.
    pub verity: Option<snapimg::SwapVerity>,
}

impl From<&SwapRegion> for SwapDesc {
    fn from(r: &SwapRegion) -> Self {
        SwapDesc {
            offset: r.offset,
            bytes: r.bytes,
            used_pages: r.used_pages,
            uuid: r.uuid,
            verity: r.verity,
        }
    }
}

impl SwapDesc {
    /// As the lazy module takes it.
    pub fn region(&self) -> SwapRegion {
        SwapRegion {
            offset: self.offset,
            bytes: self.bytes,
            used_pages: self.used_pages,
            uuid: self.uuid,
            verity: self.verity,
        }
    }

    /// Whether the region lies in the raw region the store gave the image.
    pub fn inside(&self, store: &Store<File>, raw: Option<flashstore::Extent>) -> bool {
        raw.is_some_and(|e| {
            let at = store.raw_offset(e);
            self.offset >= at
                && self
                    .offset
                    .checked_add(self.bytes)
                    .is_some_and(|end| end <= at + e.len)
        })
    }
}

impl Description {
    /// The description of a capture.
    pub fn new(
        meta: &CaptureMeta,
        stream_pages: u64,
        swap: Option<&SwapRegion>,
    ) -> Result<Self, FlashError> {
        let binding = match &meta.binding {
            Some(b) => b.encode(BINDING_ROOM).map_err(FlashError::Binding)?,
            None => Vec::new(),
        };
        Ok(Description {
            version: DESCRIPTION_VERSION,
            identity: meta.identity.clone(),
            created_unix: meta.created_unix,
            binding,
            stream_pages,
            swap: swap.map(SwapDesc::from),
        })
    }

    /// Its bytes.
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_stdvec(self).expect("a description always encodes")
    }

    /// Back from [`Description::encode`].
    pub fn decode(b: &[u8]) -> Result<Self, FlashError> {
        let d: Description =
            postcard::from_bytes(b).map_err(|e| FlashError::Description(e.to_string()))?;
        if d.version != DESCRIPTION_VERSION {
            return Err(FlashError::Description(format!(
                "version {} (this snapboot reads {DESCRIPTION_VERSION})",
                d.version
            )));
        }
        Ok(d)
    }

    /// The binding record, if the image has one.
    pub fn binding(&self) -> Result<Option<Binding>, FlashError> {
        if self.binding.is_empty() {
            return Ok(None);
        }
        Binding::decode(&self.binding)
            .map(Some)
            .map_err(FlashError::Binding)
    }
}

/// Whether `path` holds a flash store (by its first superblock's magic; a damaged first
/// superblock with a good second one is still found by [`Store::open`], so this only
/// decides which reader to use).
pub fn is_flash_store(path: &Path) -> bool {
    let mut magic = [0u8; 8];
    let second = flashstore::BLOCK;
    File::open(path).is_ok_and(|f| {
        use std::os::unix::fs::FileExt;
        [0, second]
            .iter()
            .any(|&at| f.read_exact_at(&mut magic, at).is_ok() && &magic == flashstore::MAGIC)
    })
}

/// Opens the flash store at `path`.
pub fn open_store(path: &Path, rw: bool) -> Result<Store<File>, FlashError> {
    let file = OpenOptions::new()
        .read(true)
        .write(rw)
        .open(path)
        .map_err(|source| FlashError::Open {
            path: path.into(),
            source,
        })?;
    Ok(Store::open(file)?)
}

/// Streams the kernel's image pages from `dev` into image `name` on `store` and commits it.
pub fn write_image(
    dev: &mut SnapshotDev,
    store: &mut Store<File>,
    name: &str,
    opts: WriteOptions,
    meta: &CaptureMeta,
    raw: Option<flashstore::Extent>,
    swap: Option<SwapRegion>,
) -> Result<Committed, FlashError> {
    let mut w = store.writer(name, opts)?;
    if let Some(e) = raw {
        w.attach_raw(e)?;
    }
    let mut page = [0u8; PAGE_SIZE];
    let mut pages = 0u64;
    while dev.read_page(&mut page)? {
        w.push_page(&page)?;
        pages += 1;
    }
    let description = Description::new(meta, pages, swap.as_ref())?;
    Ok(w.commit(description.encode())?)
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
) -> Result<Option<flashstore::CompactReport>, FlashError> {
    if store.idle_bytes() >= need {
        return Ok(None);
    }
    Ok(Some(store.compact(RECLAIM_BELOW_PERCENT)?))
}

/// Signs image `name` on the store at `path` with `key` (after reading it whole).
pub fn sign_image(path: &Path, name: &str, key: &SecretKey) -> Result<ImageRec, FlashError> {
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
) -> Result<(), FlashError> {
    let digest = store.signed_digest(rec)?;
    Ok(key.verify(&digest, &rec.signature)?)
}

/// The public key images must be signed for: `None` when the initramfs has none.
pub fn configured_key(path: &Path) -> Result<Option<PublicKey>, KeyError> {
    if !path.exists() {
        return Ok(None);
    }
    PublicKey::load(path).map(Some)
}

/// The order in which resume tries the store's images: the `wanted` names first (those the
/// store has), then the others, newest first.
pub fn candidates(images: &[ImageRec], wanted: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in wanted {
        if !out.contains(w) {
            out.push(w.clone());
        }
    }
    let mut rest: Vec<&ImageRec> = images.iter().filter(|i| !out.contains(&i.name)).collect();
    rest.sort_by_key(|i| std::cmp::Reverse(i.generation));
    out.extend(rest.into_iter().map(|i| i.name.clone()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(name: &str, generation: u64) -> ImageRec {
        ImageRec {
            name: name.into(),
            generation,
            pinned: false,
            created_unix: 0,
            meta: flashstore::Extent { cluster: 1, len: 1 },
            meta_hash: [0; 32],
            chunks: Vec::new(),
            stats: Default::default(),
            signature: Vec::new(),
            raw: None,
        }
    }

    /// A file store holding image `b`, which kept every other chunk of the removed image
    /// `a`: the clusters `a` wrote are partly live.
    fn store_with_holes(dir: &Path) -> Store<File> {
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
        let mut s = Store::format(f, fmt).unwrap();
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

    #[test]
    fn wanted_images_come_first_then_the_newest() {
        let images = [rec("factory", 2), rec("current", 9), rec("old", 5)];
        assert_eq!(candidates(&images, &[]), ["current", "old", "factory"]);
        assert_eq!(
            candidates(&images, &["factory".into()]),
            ["factory", "current", "old"]
        );
        // A wanted name the store lacks stays in the order: resume names it as missing.
        assert_eq!(
            candidates(&images, &["new".into(), "old".into(), "new".into()]),
            ["new", "old", "current", "factory"]
        );
    }

    #[test]
    fn descriptions_round_trip_and_bad_ones_are_named() {
        let meta = CaptureMeta {
            identity: Identity {
                release: "6.1.0-56-amd64".into(),
                version: "#1 SMP".into(),
                machine: "x86_64".into(),
                ram_bytes: 1 << 30,
            },
            created_unix: 1_700_000_000,
            binding: None,
        };
        let d = Description::new(&meta, 1234, None).unwrap();
        let back = Description::decode(&d.encode()).unwrap();
        assert_eq!(back, d);
        assert_eq!(back.binding().unwrap(), None);
        let e = Description::decode(b"\x07garbage").unwrap_err().to_string();
        assert!(e.starts_with("the image's description"), "{e}");
        let mut v2 = d.clone();
        v2.version = 2;
        let e = Description::decode(&v2.encode()).unwrap_err().to_string();
        assert!(e.contains("version 2"), "{e}");
    }
}
