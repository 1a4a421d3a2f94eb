//! The store: open (newest valid superblock), the cluster map, commits, and the image-level
//! operations (list, remove, pin, gc, fsck).
//!
//! A commit writes everything new (chunks, the image's page list, the dedupe table, the
//! catalog) into clusters that are idle in the committed state, syncs, then writes the
//! superblock slot the committed state does *not* use, with the next generation, and syncs
//! again. Until that superblock write is durable the committed state is untouched; a torn
//! superblock fails its checksum and the other slot still names the previous state. Nothing a
//! crash leaves behind is referenced, so it is idle space, not a leak.

use crate::error::StoreError;
use crate::medium::Medium;
use crate::seal::DeviceKey;
use std::collections::{BTreeMap, BTreeSet};
use storelayout::pages::{check_page_list_bytes, parse_page_list};
use storelayout::Damage;
use storelayout::{
    decode, encode, Catalog, ChunkCheck, DedupeTable, Extent, ImageMeta, ImageRec, KeyId, KeySlot,
    Label, Superblock, BLOCK, DEFAULT_CLUSTER_BLOCKS,
};

/// How to lay out a new store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FormatOptions {
    /// Blocks (4 KiB) per cluster; match the flash's erase block where known.
    pub cluster_blocks: u32,
    /// Chunk checksums ([`ChunkCheck::Blake3`] for a store of signed images).
    pub check: ChunkCheck,
    /// The store's label (`snapboot.store=LABEL=`; empty: none).
    pub label: Label,
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions {
            cluster_blocks: DEFAULT_CLUSTER_BLOCKS,
            check: ChunkCheck::default(),
            label: Label::default(),
        }
    }
}

/// A store on a medium.
#[derive(Debug)]
pub struct Store<M: Medium> {
    pub(crate) medium: M,
    pub(crate) sb: Superblock,
    pub(crate) catalog: Catalog,
    /// The device key it is unlocked with ([`Store::unlock`]): images written are sealed
    /// with it, sealed images read with it.
    pub(crate) key: Option<DeviceKey>,
}

/// What `gc` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GcReport {
    /// Idle clusters discarded now.
    pub discarded: u64,
    /// Idle clusters in all.
    pub idle: u64,
}

/// Space on the store, in clusters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Clusters on the medium.
    pub clusters: u64,
    /// Clusters holding committed structures (cluster 0 included).
    pub used: u64,
    /// Clusters free for new data.
    pub idle: u64,
    /// Bytes of live chunks.
    pub chunk_bytes: u64,
    /// Live chunks.
    pub chunks: u64,
}

/// Names a structure stored in a cluster, for the cluster map and fsck.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Owner {
    Superblocks,
    Catalog,
    Dedupe,
    Meta(String),
    Raw(String),
    Chunks,
}

pub use storelayout::valid_name;

pub(crate) fn check_name(name: &str) -> Result<(), StoreError> {
    if valid_name(name) {
        Ok(())
    } else {
        Err(StoreError::BadName(name.into()))
    }
}

impl<M: Medium> Store<M> {
    /// Lays out an empty store on `medium` (everything on it is forgotten).
    pub fn format(mut medium: M, opts: FormatOptions) -> Result<Self, StoreError> {
        if opts.cluster_blocks < 2 {
            return Err(StoreError::Geometry(
                "a cluster needs at least 2 blocks".into(),
            ));
        }
        let len = medium.size().map_err(StoreError::io("sizing the medium"))?;
        let cb = u64::from(opts.cluster_blocks) * BLOCK;
        let clusters = len / cb;
        if clusters < 4 {
            return Err(StoreError::Geometry(format!(
                "{len} bytes hold {clusters} cluster(s) of {cb} bytes; a store needs at least 4"
            )));
        }
        let mut sb = Superblock {
            cluster_blocks: opts.cluster_blocks,
            clusters,
            generation: 0,
            catalog: Extent::default(),
            catalog_hash: [0; 32],
            label: opts.label,
            version: storelayout::VERSION,
        };
        // Both slots invalid first, so a half-formatted medium is no store at all.
        medium
            .write_at(&vec![0u8; 2 * BLOCK as usize], 0)
            .map_err(StoreError::io("clearing the superblocks"))?;
        let catalog = Catalog {
            check: opts.check,
            ..Catalog::default()
        };
        let bytes = encode(&catalog, "catalog")?;
        sb.catalog = Extent {
            cluster: 1,
            len: bytes.len() as u64,
        };
        sb.catalog_hash = *blake3::hash(&bytes).as_bytes();
        medium
            .write_at(&bytes, cb)
            .map_err(StoreError::io("writing the first catalog"))?;
        medium.sync().map_err(StoreError::io("syncing"))?;
        sb.generation = 1;
        medium
            .write_at(&sb.encode(), BLOCK)
            .map_err(StoreError::io("writing the superblock"))?;
        medium.sync().map_err(StoreError::io("syncing"))?;
        Ok(Store {
            medium,
            sb,
            catalog,
            key: None,
        })
    }

    /// Opens the store: the valid superblock with the highest generation and its catalog.
    pub fn open(medium: M) -> Result<Self, StoreError> {
        let len = medium.size().map_err(StoreError::io("sizing the medium"))?;
        let c = storelayout::open_committed(&mut Reading(&medium), len).map_err(opening)?;
        Ok(Store {
            medium,
            sb: c.superblock,
            catalog: c.catalog,
            key: None,
        })
    }

    /// The store's label (empty: none).
    pub fn label(&self) -> &str {
        self.sb.label.as_str()
    }

    /// The committed generation.
    pub fn generation(&self) -> u64 {
        self.sb.generation
    }

    /// Bytes per cluster.
    pub fn cluster_bytes(&self) -> u64 {
        self.sb.cluster_bytes()
    }

    /// The catalog (images, chunks).
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Images in commit order.
    pub fn images(&self) -> &[ImageRec] {
        &self.catalog.images
    }

    /// The image named `name`.
    pub fn image(&self, name: &str) -> Option<&ImageRec> {
        self.catalog.images.iter().find(|i| i.name == name)
    }

    /// The most recently committed image.
    pub fn newest(&self) -> Option<&ImageRec> {
        self.catalog.newest()
    }

    /// Gives the medium back.
    pub fn into_medium(self) -> M {
        self.medium
    }

    /// The medium (read-only).
    pub fn medium(&self) -> &M {
        &self.medium
    }

    /// Which clusters the committed state uses, and for what. Overlaps are reported by fsck.
    pub(crate) fn cluster_map(&self) -> BTreeMap<u64, Vec<Owner>> {
        let cb = self.sb.cluster_bytes();
        let mut map: BTreeMap<u64, Vec<Owner>> = BTreeMap::new();
        map.entry(0).or_default().push(Owner::Superblocks);
        for c in self.sb.catalog.clusters(cb) {
            map.entry(c).or_default().push(Owner::Catalog);
        }
        if let Some((e, _)) = self.catalog.dedupe {
            for c in e.clusters(cb) {
                map.entry(c).or_default().push(Owner::Dedupe);
            }
        }
        for i in &self.catalog.images {
            for c in i.meta.clusters(cb) {
                map.entry(c).or_default().push(Owner::Meta(i.name.clone()));
            }
            for c in i.raw.iter().flat_map(|e| e.clusters(cb)) {
                map.entry(c).or_default().push(Owner::Raw(i.name.clone()));
            }
        }
        for ch in &self.catalog.chunks {
            let v = map.entry(ch.cluster).or_default();
            if !v.contains(&Owner::Chunks) {
                v.push(Owner::Chunks);
            }
        }
        map
    }

    /// Clusters the committed state uses.
    pub(crate) fn used_clusters(&self) -> BTreeSet<u64> {
        state_clusters(self.sb.catalog, &self.catalog, self.sb.cluster_bytes())
    }

    /// Space on the store.
    pub fn usage(&self) -> Usage {
        let used = self.used_clusters().len() as u64;
        Usage {
            clusters: self.sb.clusters,
            used,
            idle: self.sb.clusters.saturating_sub(used),
            chunk_bytes: self
                .catalog
                .chunks
                .iter()
                .map(|c| u64::from(c.stored_len))
                .sum(),
            chunks: self.catalog.chunks.len() as u64,
        }
    }

    /// Unlocks the store with a device key: every image written from now on is sealed with
    /// it, and sealed images can be read.
    pub fn unlock(&mut self, key: DeviceKey) {
        self.key = Some(key);
    }

    /// The id of the key the store is unlocked with.
    pub fn key_id(&self) -> Option<KeyId> {
        self.key.as_ref().map(DeviceKey::id)
    }

    /// The wrapped device keys the store carries.
    pub fn key_slots(&self) -> &[KeySlot] {
        &self.catalog.key_slots
    }

    /// Replaces the wrapped device keys the store carries, in one commit.
    pub fn set_key_slots(&mut self, slots: Vec<KeySlot>) -> Result<(), StoreError> {
        let mut catalog = self.catalog.clone();
        catalog.key_slots = slots;
        self.commit(catalog, None, &BTreeSet::new())?;
        Ok(())
    }

    /// The key that opens `rec` (none for an image in the clear), or why there is none.
    pub(crate) fn key_for(&self, rec: &ImageRec) -> Result<Option<&DeviceKey>, StoreError> {
        let Some(id) = rec.sealed else {
            return Ok(None);
        };
        match &self.key {
            None => Err(StoreError::Locked {
                image: rec.name.clone(),
                key: id,
            }),
            Some(k) if k.id() != id => Err(StoreError::WrongKey {
                image: rec.name.clone(),
                key: id,
                have: k.id(),
            }),
            Some(k) => Ok(Some(k)),
        }
    }

    /// An image's page list as stored (sealed or not), checked against its checksum.
    pub(crate) fn page_list_bytes(&self, rec: &ImageRec) -> Result<Vec<u8>, StoreError> {
        let what = format!("page list of image `{}`", rec.name);
        let bytes = read_extent(&self.medium, &self.sb, rec.meta, &what)?;
        check_page_list_bytes(rec, &bytes)?;
        Ok(bytes)
    }

    /// Reads and checks an image's page list (opening it when sealed).
    pub fn image_meta(&self, rec: &ImageRec) -> Result<ImageMeta, StoreError> {
        let key = self.key_for(rec)?;
        let bytes = self.page_list_bytes(rec)?;
        let bytes = match key {
            Some(k) => zeroize::Zeroizing::new(k.open_page_list(&rec.name, &bytes)?),
            None => zeroize::Zeroizing::new(bytes),
        };
        Ok(parse_page_list(rec, &bytes)?)
    }

    /// Reads and checks the dedupe table (empty when there is none).
    pub fn dedupe_table(&self) -> Result<DedupeTable, StoreError> {
        let Some((e, hash)) = self.catalog.dedupe else {
            return Ok(DedupeTable::default());
        };
        let bytes = read_extent(&self.medium, &self.sb, e, "dedupe table")?;
        if blake3::hash(&bytes).as_bytes() != &hash {
            return Err(Damage::DedupeChecksum.into());
        }
        Ok(decode(&bytes, "dedupe table")?)
    }

    /// Commits `catalog` (whose images, chunks and page lists are already written) with
    /// `dedupe` as its dedupe table. `taken`: clusters this transaction already wrote, which
    /// the catalog may not yet name. Returns the bytes written by the commit itself.
    pub(crate) fn commit(
        &mut self,
        mut catalog: Catalog,
        dedupe: Option<&DedupeTable>,
        taken: &BTreeSet<u64>,
    ) -> Result<u64, StoreError> {
        let mut avoid: BTreeSet<u64> = self.used_clusters();
        avoid.extend(taken.iter().copied());
        let mut written = 0u64;
        if let Some(table) = dedupe {
            let bytes = encode(table, "dedupe table")?;
            let e = self.place(&bytes, &mut avoid, "dedupe table")?;
            catalog.dedupe = Some((e, *blake3::hash(&bytes).as_bytes()));
            written += bytes.len() as u64;
        }
        // Clusters the new state uses (its own catalog included) are no longer trimmed; the
        // catalog only shrinks by that, so it still fits where it was placed.
        let guess = encode(&catalog, "catalog")?;
        let at = self.find_run(guess.len() as u64, &avoid)?;
        let cb = self.sb.cluster_bytes();
        let mut in_use = state_clusters(at, &catalog, cb);
        in_use.extend(at.clusters(cb));
        catalog.trimmed.retain(|c| !in_use.contains(c));
        let bytes = encode(&catalog, "catalog")?;
        let e = self.place(&bytes, &mut avoid, "catalog")?;
        written += bytes.len() as u64;
        self.medium
            .sync()
            .map_err(StoreError::io("syncing the new data"))?;
        let sb = Superblock {
            generation: self.sb.generation + 1,
            catalog: e,
            catalog_hash: *blake3::hash(&bytes).as_bytes(),
            version: storelayout::VERSION,
            ..self.sb
        };
        let slot = sb.generation % 2;
        self.medium
            .write_at(&sb.encode(), slot * BLOCK)
            .map_err(StoreError::io("writing the superblock"))?;
        self.medium
            .sync()
            .map_err(StoreError::io("syncing the superblock"))?;
        written += BLOCK;
        self.sb = sb;
        self.catalog = catalog;
        Ok(written)
    }

    /// First run of idle clusters (not in `avoid`) that holds `len` bytes.
    pub(crate) fn find_run(&self, len: u64, avoid: &BTreeSet<u64>) -> Result<Extent, StoreError> {
        let need = len.div_ceil(self.sb.cluster_bytes()).max(1);
        let mut start = 1;
        let mut run = 0;
        for c in 1..self.sb.clusters {
            if avoid.contains(&c) {
                run = 0;
                start = c + 1;
                continue;
            }
            run += 1;
            if run == need {
                return Ok(Extent {
                    cluster: start,
                    len,
                });
            }
        }
        let idle = (1..self.sb.clusters).filter(|c| !avoid.contains(c)).count() as u64;
        Err(StoreError::Full { needed: need, idle })
    }

    /// Finds `len` bytes of contiguous idle clusters for a raw region (a lazy image's swap
    /// area) that the caller fills directly, at byte [`Store::raw_offset`]. Nothing is
    /// recorded: the region belongs to the image whose writer is given it
    /// ([`crate::ImageWriter::attach_raw`]), and is idle again if that image never commits.
    pub fn reserve_raw(&self, len: u64) -> Result<Extent, StoreError> {
        if len == 0 {
            return Err(StoreError::Geometry("a raw region of 0 bytes".into()));
        }
        self.find_run(len, &self.used_clusters())
    }

    /// How chunks are checksummed on this store.
    pub fn chunk_check(&self) -> ChunkCheck {
        self.catalog.check
    }

    /// Byte offset of an extent on the medium.
    pub fn raw_offset(&self, e: Extent) -> u64 {
        self.sb.raw_offset(e)
    }

    /// The raw region of image `rec` as byte offset and length on the medium (`None`: it
    /// owns none).
    pub fn raw_region(&self, rec: &ImageRec) -> Option<(u64, u64)> {
        self.sb.raw_region(rec)
    }

    /// Idle bytes (clusters the committed state does not use).
    pub fn idle_bytes(&self) -> u64 {
        self.usage().idle * self.sb.cluster_bytes()
    }

    /// Writes `bytes` into a fresh run of idle clusters and marks them taken.
    pub(crate) fn place(
        &mut self,
        bytes: &[u8],
        avoid: &mut BTreeSet<u64>,
        what: &str,
    ) -> Result<Extent, StoreError> {
        let e = self.find_run(bytes.len() as u64, avoid)?;
        self.medium
            .write_at(bytes, e.cluster * self.sb.cluster_bytes())
            .map_err(StoreError::io(format!("writing the {what}")))?;
        avoid.extend(e.clusters(self.sb.cluster_bytes()));
        Ok(e)
    }

    /// Removes the image `name` (not when pinned); chunks no other image uses are dropped.
    pub fn remove(&mut self, name: &str) -> Result<(), StoreError> {
        let rec = self
            .image(name)
            .ok_or_else(|| StoreError::NoImage(name.into()))?;
        if rec.pinned {
            return Err(StoreError::Pinned(name.into()));
        }
        let mut catalog = self.catalog.clone();
        catalog.images.retain(|i| i.name != name);
        recount(&mut catalog);
        let table = self.dedupe_table()?;
        let table = keep_live(table, &catalog);
        self.commit(catalog, Some(&table), &BTreeSet::new())?;
        Ok(())
    }

    /// Pins or unpins the image `name`.
    pub fn pin(&mut self, name: &str, pinned: bool) -> Result<(), StoreError> {
        self.update_image(name, |rec| rec.pinned = pinned)
    }

    /// Changes the record of image `name` (nothing it references) in one commit.
    pub(crate) fn update_image(
        &mut self,
        name: &str,
        change: impl FnOnce(&mut ImageRec),
    ) -> Result<(), StoreError> {
        let mut catalog = self.catalog.clone();
        let rec = catalog
            .images
            .iter_mut()
            .find(|i| i.name == name)
            .ok_or_else(|| StoreError::NoImage(name.into()))?;
        change(rec);
        self.commit(catalog, None, &BTreeSet::new())?;
        Ok(())
    }

    /// Discards every idle cluster not discarded yet (a hole in a file), then records them
    /// as trimmed. Never needed on the resume path.
    pub fn gc(&mut self) -> Result<GcReport, StoreError> {
        let used = self.used_clusters();
        let trimmed: BTreeSet<u64> = self.catalog.trimmed.iter().copied().collect();
        let cb = self.sb.cluster_bytes();
        let mut report = GcReport::default();
        let mut newly = Vec::new();
        for c in 1..self.sb.clusters {
            if used.contains(&c) {
                continue;
            }
            report.idle += 1;
            if trimmed.contains(&c) {
                continue;
            }
            self.medium
                .discard(c * cb, cb)
                .map_err(StoreError::io(format!("discarding cluster {c}")))?;
            newly.push(c);
        }
        report.discarded = newly.len() as u64;
        if newly.is_empty() {
            return Ok(report);
        }
        self.medium
            .sync()
            .map_err(StoreError::io("syncing discards"))?;
        let mut catalog = self.catalog.clone();
        catalog.trimmed.extend(newly);
        catalog.trimmed.sort_unstable();
        catalog.trimmed.dedup();
        self.commit(catalog, None, &BTreeSet::new())?;
        Ok(report)
    }
}

/// The valid superblock with the highest generation on `medium`, or why there is none.
pub(crate) fn newest_superblock<M: Medium>(medium: &M) -> Result<Superblock, StoreError> {
    storelayout::read_superblock(&mut Reading(medium)).map_err(opening)
}

/// A medium read through the one read-at shape of `storelayout`.
struct Reading<'m, M>(&'m M);

impl<M: Medium> storelayout::ReadAt for Reading<'_, M> {
    type Error = std::io::Error;
    fn read_at(&mut self, at: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.0.read_at(buf, at)
    }
}

/// What opening a store says, in the store's words.
fn opening(e: storelayout::OpenError<std::io::Error>) -> StoreError {
    match e {
        storelayout::OpenError::Read { what, error } => StoreError::Io {
            context: format!("reading the {what}"),
            source: error,
        },
        storelayout::OpenError::NoStore(n) => n.into(),
        storelayout::OpenError::Truncated { needed, len } => StoreError::Truncated { needed, len },
        storelayout::OpenError::Damaged(d) => d.into(),
    }
}

/// The label of the store on `medium` (empty: none), reading its superblocks only: what
/// finding a store by `LABEL=` needs of every block device. A medium without a valid
/// superblock is refused as [`Store::open`] refuses it.
pub fn read_label<M: Medium>(medium: &M) -> Result<String, StoreError> {
    newest_superblock(medium).map(|sb| sb.label.as_str().to_string())
}

/// Clusters a state with this catalog (at `catalog_at`) uses, cluster 0 included.
pub(crate) fn state_clusters(catalog_at: Extent, catalog: &Catalog, cb: u64) -> BTreeSet<u64> {
    let mut s: BTreeSet<u64> = BTreeSet::from([0]);
    s.extend(catalog_at.clusters(cb));
    if let Some((e, _)) = catalog.dedupe {
        s.extend(e.clusters(cb));
    }
    for i in &catalog.images {
        s.extend(i.meta.clusters(cb));
        if let Some(r) = i.raw {
            s.extend(r.clusters(cb));
        }
    }
    s.extend(catalog.chunks.iter().map(|c| c.cluster));
    s
}

/// Usage counts from the images' chunk lists; chunks nobody uses are dropped.
pub(crate) fn recount(catalog: &mut Catalog) {
    let mut refs: BTreeMap<u64, u32> = BTreeMap::new();
    for i in &catalog.images {
        for &c in &i.chunks {
            *refs.entry(c).or_default() += 1;
        }
    }
    catalog.chunks.retain_mut(|c| match refs.get(&c.id) {
        Some(&n) => {
            c.refs = n;
            true
        }
        None => false,
    });
}

/// The dedupe table without entries for chunks the catalog no longer has.
pub(crate) fn keep_live(mut t: DedupeTable, catalog: &Catalog) -> DedupeTable {
    let live: BTreeSet<u64> = catalog.chunks.iter().map(|c| c.id).collect();
    t.chunks.retain(|(id, _)| live.contains(id));
    t
}

pub(crate) fn read_extent<M: Medium>(
    medium: &M,
    sb: &Superblock,
    e: Extent,
    what: &str,
) -> Result<Vec<u8>, StoreError> {
    let (at, len) = sb.extent_place(e, what)?;
    let mut b = vec![0u8; len];
    medium
        .read_at(&mut b, at)
        .map_err(StoreError::io(format!("reading the {what}")))?;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemMedium, WriteOptions};
    use storelayout::VERSION;

    fn labelled(label: &str) -> Store<MemMedium> {
        let opts = FormatOptions {
            label: Label::new(label).unwrap(),
            ..FormatOptions::default()
        };
        Store::format(MemMedium::new(4 << 20), opts).unwrap()
    }

    fn commit_one(s: &mut Store<MemMedium>, name: &str) {
        let mut w = s.writer(name, WriteOptions::default()).unwrap();
        w.push_page(&[7u8; crate::PAGE]).unwrap();
        w.commit(Vec::new()).unwrap();
    }

    fn version_of(m: &MemMedium, slot: u64) -> u32 {
        let mut b = [0u8; 12];
        m.read_at(&mut b, slot * BLOCK).unwrap();
        u32::from_le_bytes(b[8..12].try_into().unwrap())
    }

    #[test]
    fn the_label_survives_commits_and_reopening_and_is_read_alone() {
        let mut s = labelled("factory");
        commit_one(&mut s, "a");
        commit_one(&mut s, "b");
        let s = Store::open(s.into_medium()).unwrap();
        assert_eq!(s.label(), "factory");
        assert_eq!(read_label(s.medium()).unwrap(), "factory");
        assert_eq!(
            read_label(&MemMedium::new(1 << 20))
                .unwrap_err()
                .to_string(),
            StoreError::NotAStore.to_string()
        );
    }

    #[test]
    fn stores_an_older_snapboot_wrote_open_and_their_next_commit_writes_version_3() {
        for old in [1, 2] {
            let mut s = labelled(if old == 1 { "" } else { "two" });
            commit_one(&mut s, "a");
            // Both slots and the catalog as an older snapboot left them: a format-2 catalog
            // (no sealing) where today's was.
            let (sb, cat, mut m) = (s.sb, s.catalog.clone(), s.into_medium());
            let bytes = storelayout::versions::encode_v2(&cat);
            m.write_at(&bytes, sb.catalog.cluster * sb.cluster_bytes())
                .unwrap();
            let sb = Superblock {
                catalog: Extent {
                    len: bytes.len() as u64,
                    ..sb.catalog
                },
                catalog_hash: *blake3::hash(&bytes).as_bytes(),
                ..sb
            };
            let older = Superblock {
                generation: sb.generation - 1,
                ..sb
            };
            for v in [sb, older] {
                m.write_at(&v.encode_old(old), (v.generation % 2) * BLOCK)
                    .unwrap();
            }
            assert_eq!((version_of(&m, 0), version_of(&m, 1)), (old, old));
            let mut s = Store::open(m).unwrap();
            assert_eq!(s.label(), if old == 1 { "" } else { "two" });
            assert_eq!(s.images().len(), 1);
            assert_eq!(s.images()[0].sealed, None);
            assert!(s.catalog.chunks.iter().all(|c| !c.sealed));
            assert!(s.fsck().clean());
            commit_one(&mut s, "b");
            let next = s.generation() % 2;
            assert_eq!(version_of(s.medium(), next), VERSION);
            let s = Store::open(s.into_medium()).unwrap();
            assert_eq!(s.images().len(), 2);
            assert!(s.fsck().clean(), "{:?}", s.fsck());
        }
    }
}
