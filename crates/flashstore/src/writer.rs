//! Writing an image: pages arrive in stream order; zero pages cost nothing, a page already
//! stored (in this image, or in another image when the dedupe policy allows) becomes a
//! reference, the rest are packed into chunks appended to idle clusters, log-style. Commit
//! writes the page list, the dedupe table and the catalog, then the superblock.
//!
//! Selective dedupe: referencing one page of another image's chunk means reading and
//! decompressing that whole chunk at restore, and images that reference a little of many old
//! chunks load slowly. [`Dedupe::Selective`] references an old chunk only when the
//! new image uses at least `min_use` percent of its pages: at commit, the pages of a chunk it
//! would use less are stored again, packed in stream order (re-pack), so every chunk a restore
//! reads is nearly all pages it needs. Optionally (`min_run`) a match must also be a run of
//! that many consecutive pages in consecutive slots of one chunk; shorter ones are stored
//! again, contiguous with their neighbours.
//!
//! Where a content is in several chunks, a match continues the pending run if that chunk's
//! next slot holds it, else takes the newest copy: a page the last image stored again sits
//! there with its neighbours, so the next re-capture finds the whole run in one chunk instead
//! of short pieces of the oldest image (which it would store again, every time).

use crate::error::StoreError;
use crate::medium::Medium;
use crate::store::{check_name, keep_live, recount, Store};
use std::collections::{BTreeSet, HashMap};
use storelayout::Damage;
use storelayout::{
    page_key, ChunkRec, DedupeTable, ImageMeta, ImageRec, ImageStats, Page, PageRef,
    DEFAULT_CHUNK_PAGES, PAGE,
};

pub use storelayout::{Compression, Dedupe, DEFAULT_MIN_USE};

/// How to write an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// Pages per chunk (what one checksum and one decompression cover).
    pub chunk_pages: u16,
    /// Chunk compression.
    pub compression: Compression,
    /// Storage dedupe against the other images.
    pub dedupe: Dedupe,
    /// Pin the image (never replaced, removed or collected until unpinned).
    pub pin: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            chunk_pages: DEFAULT_CHUNK_PAGES,
            compression: Compression::Lz4,
            dedupe: Dedupe::SELECTIVE,
            pin: false,
        }
    }
}

/// What a commit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The new image's record.
    pub image: ImageRec,
    /// Bytes the commit wrote: chunks, page list, dedupe table, catalog, superblock.
    pub written_bytes: u64,
}

/// A match against another image's chunk, waiting to see whether its run is long enough.
struct Pending {
    page: Box<Page>,
    key: [u8; 16],
    chunk: u64,
    slot: u16,
}

/// Pages a chunk closed early to fill its cluster holds at least: a smaller room is left as
/// slack rather than filled with tiny chunks.
const EARLY_CLOSE_PAGES: usize = 8;

/// Writes one image; nothing is visible until [`ImageWriter::commit`].
pub struct ImageWriter<'s, M: Medium> {
    store: &'s mut Store<M>,
    name: String,
    opts: WriteOptions,
    /// Page key → where that content is stored (old chunks and this image's).
    known: HashMap<[u8; 16], (u64, u16)>,
    /// Chunks other images wrote (dedupe against them follows the policy).
    old: BTreeSet<u64>,
    pages: Vec<PageRef>,
    run: Vec<Pending>,
    /// The chunk being filled: its id, pages and their keys.
    open: (u64, Vec<u8>, Vec<[u8; 16]>),
    new_chunks: Vec<ChunkRec>,
    new_keys: Vec<(u64, Vec<[u8; 16]>)>,
    referenced: BTreeSet<u64>,
    /// Pages of other images' chunks this image references (counted once each).
    shared: std::collections::HashSet<(u64, u16)>,
    /// Clusters this image wrote, plus those the committed state uses (which cannot change
    /// while the writer holds the store): never written again by this image.
    taken: BTreeSet<u64>,
    head: Option<(u64, u64)>,
    /// Stored bytes per 1000 raw bytes of the last chunk closed: what the open chunk is
    /// expected to shrink to ([`ImageWriter::fills_the_cluster`]).
    ratio: u64,
    stats: ImageStats,
    next_chunk: u64,
    table: DedupeTable,
    raw: Option<storelayout::Extent>,
}

impl<M: Medium> Store<M> {
    /// Starts writing image `name`; it replaces an unpinned image of the same name at commit.
    pub fn writer(
        &mut self,
        name: &str,
        opts: WriteOptions,
    ) -> Result<ImageWriter<'_, M>, StoreError> {
        check_name(name)?;
        if opts.chunk_pages == 0 || u64::from(opts.chunk_pages) * PAGE as u64 > self.cluster_bytes()
        {
            return Err(StoreError::Geometry(format!(
                "{} pages per chunk do not fit a cluster of {} bytes",
                opts.chunk_pages,
                self.cluster_bytes()
            )));
        }
        if self.image(name).is_some_and(|i| i.pinned) {
            return Err(StoreError::Pinned(name.into()));
        }
        let table = self.dedupe_table()?;
        let mut known = HashMap::new();
        let mut old = BTreeSet::new();
        if opts.dedupe != Dedupe::Off {
            // A sealed image references sealed chunks only, and a clear one clear chunks
            // (their page keys differ anyway: a sealed image's are keyed).
            let sealing = self.key.is_some();
            let same_kind: BTreeSet<u64> = self
                .catalog
                .chunks
                .iter()
                .filter(|c| c.sealed == sealing)
                .map(|c| c.id)
                .collect();
            // The newest copy of a content wins: a page the last image stored again (with
            // its neighbours, because its run was short) sits next to them there, and a
            // re-capture finds the whole run in one chunk.
            for (id, keys) in table.chunks.iter().filter(|(id, _)| same_kind.contains(id)) {
                old.insert(*id);
                for (slot, k) in keys.iter().enumerate() {
                    known.insert(*k, (*id, slot as u16));
                }
            }
        }
        let next_chunk = self.catalog.next_chunk;
        Ok(ImageWriter {
            name: name.into(),
            opts,
            known,
            old,
            pages: Vec::new(),
            run: Vec::new(),
            open: (next_chunk, Vec::new(), Vec::new()),
            new_chunks: Vec::new(),
            new_keys: Vec::new(),
            referenced: BTreeSet::new(),
            shared: Default::default(),
            taken: self.used_clusters(),
            head: None,
            ratio: 1000,
            stats: ImageStats::default(),
            next_chunk: next_chunk + 1,
            table,
            raw: None,
            store: self,
        })
    }
}

impl<M: Medium> ImageWriter<'_, M> {
    /// Gives the image the raw region `e` (from [`Store::reserve_raw`], already filled by
    /// the caller): chunks are never written there, and the commit records it. Call before
    /// the first page.
    pub fn attach_raw(&mut self, e: storelayout::Extent) -> Result<(), StoreError> {
        let cb = self.store.cluster_bytes();
        if self.raw.is_some() || self.stats.pages > 0 {
            return Err(StoreError::Geometry(
                "a raw region is attached once, before the first page".into(),
            ));
        }
        if e.cluster == 0 || e.clusters(cb).end > self.store.sb.clusters {
            return Err(StoreError::Geometry(format!(
                "raw region at cluster {} of {} bytes lies outside the store",
                e.cluster, e.len
            )));
        }
        if let Some(c) = e.clusters(cb).find(|c| self.taken.contains(c)) {
            return Err(Damage::RawOverlap {
                start: e.cluster,
                cluster: c,
            }
            .into());
        }
        self.taken.extend(e.clusters(cb));
        self.raw = Some(e);
        Ok(())
    }

    /// Adds the next page of the stream.
    pub fn push_page(&mut self, page: &Page) -> Result<(), StoreError> {
        self.stats.pages += 1;
        if page.iter().all(|&b| b == 0) {
            self.flush_run()?;
            self.stats.zero_pages += 1;
            self.pages.push(PageRef::Zero);
            return Ok(());
        }
        let key = self.page_key(page);
        // Continue the pending run when its chunk's next slot holds this content, even if a
        // newer copy exists elsewhere.
        let next = self
            .run
            .last()
            .map(|p| (p.chunk, p.slot + 1))
            .filter(|&(c, s)| self.old_key(c, s) == Some(&key));
        match next.or_else(|| self.known.get(&key).copied()) {
            Some((chunk, slot)) if self.old.contains(&chunk) => {
                let min = match self.opts.dedupe {
                    Dedupe::Selective { min_run, .. } => min_run.max(1),
                    _ => 1,
                };
                let extends = self
                    .run
                    .last()
                    .is_none_or(|p| p.chunk == chunk && p.slot + 1 == slot);
                if !extends {
                    self.flush_run()?;
                }
                self.run.push(Pending {
                    page: Box::new(*page),
                    key,
                    chunk,
                    slot,
                });
                if min == 1 {
                    self.flush_run()?;
                }
                Ok(())
            }
            Some((chunk, slot)) => {
                // Stored earlier by this image: memory dedupe.
                self.flush_run()?;
                self.pages.push(PageRef::At { chunk, slot });
                self.referenced.insert(chunk);
                Ok(())
            }
            None => {
                self.flush_run()?;
                self.store_page(page, key)
            }
        }
    }

    /// A page's dedupe key: keyed by the device key when the image is sealed.
    fn page_key(&self, page: &Page) -> [u8; 16] {
        match &self.store.key {
            Some(k) => k.page_key(page),
            None => page_key(page),
        }
    }

    /// The content key of slot `slot` of the old chunk `chunk`.
    fn old_key(&self, chunk: u64, slot: u16) -> Option<&[u8; 16]> {
        let i = self
            .table
            .chunks
            .binary_search_by_key(&chunk, |(id, _)| *id)
            .ok()?;
        self.table.chunks[i].1.get(usize::from(slot))
    }

    /// Resolves the pending run: long enough (or full dedupe) → references, else stored again.
    fn flush_run(&mut self) -> Result<(), StoreError> {
        if self.run.is_empty() {
            return Ok(());
        }
        let run = std::mem::take(&mut self.run);
        let long = match self.opts.dedupe {
            Dedupe::Selective { min_run, .. } => run.len() >= usize::from(min_run.max(1)),
            Dedupe::Full => true,
            Dedupe::Off => false,
        };
        for p in run {
            if long {
                if self.shared.insert((p.chunk, p.slot)) {
                    self.stats.unique_pages += 1;
                    self.stats.shared_pages += 1;
                }
                self.pages.push(PageRef::At {
                    chunk: p.chunk,
                    slot: p.slot,
                });
                self.referenced.insert(p.chunk);
            } else {
                self.store_page(&p.page, p.key)?;
            }
        }
        Ok(())
    }

    fn store_page(&mut self, page: &Page, key: [u8; 16]) -> Result<(), StoreError> {
        let (chunk, slot) = self.pack(page, key)?;
        self.pages.push(PageRef::At { chunk, slot });
        self.stats.unique_pages += 1;
        self.stats.new_pages += 1;
        Ok(())
    }

    /// Puts a page into the open chunk; returns where it went.
    fn pack(&mut self, page: &Page, key: [u8; 16]) -> Result<(u64, u16), StoreError> {
        let (id, data, keys) = &mut self.open;
        let slot = keys.len() as u16;
        data.extend_from_slice(page);
        keys.push(key);
        let (id, full) = (*id, keys.len() == usize::from(self.opts.chunk_pages));
        let full = full || self.fills_the_cluster();
        // Later copies of this content in this image refer here.
        self.known.insert(key, (id, slot));
        self.referenced.insert(id);
        if full {
            self.close_chunk()?;
        }
        Ok((id, slot))
    }

    /// Whether the open chunk, compressed as the last one was, would fill what is left of
    /// the cluster at the log head: it is then closed early, so the cluster's tail holds
    /// pages instead of slack and the image's chunks lie back to back (a restore reads them
    /// in long requests, `crate::pipeline`). A room of fewer than [`EARLY_CLOSE_PAGES`]
    /// pages' worth is left as slack: the chunk goes to the next cluster whole.
    fn fills_the_cluster(&self) -> bool {
        let pages = self.open.2.len();
        if pages < EARLY_CLOSE_PAGES {
            return false;
        }
        let room = match self.head {
            Some((_, fill)) => self.store.cluster_bytes().saturating_sub(fill),
            None => return false,
        };
        let overhead = if self.store.key.is_some() {
            crate::seal::SEAL_OVERHEAD as u64
        } else {
            0
        };
        // One page more would not fit: close now.
        let predicted = |pages: usize| (pages * PAGE) as u64 * self.ratio / 1000 + overhead;
        predicted(pages) <= room && predicted(pages + 1) > room
    }

    /// The re-pack of selective dedupe (module docs): pages in old chunks this image uses
    /// less than `min_use` of are stored again, in stream order. An old chunk is read (and
    /// checked) once, and dropped after its last use.
    fn repack(&mut self) -> Result<(), StoreError> {
        let floor = match self.opts.dedupe {
            Dedupe::Selective { min_use, .. } if min_use > 0 => u64::from(min_use.min(100)),
            _ => return Ok(()),
        };
        let mut used: HashMap<u64, BTreeSet<u16>> = HashMap::new();
        let mut last_use: HashMap<u64, usize> = HashMap::new();
        for (i, p) in self.pages.iter().enumerate() {
            if let PageRef::At { chunk, slot } = *p {
                if self.old.contains(&chunk) {
                    used.entry(chunk).or_default().insert(slot);
                    last_use.insert(chunk, i);
                }
            }
        }
        let recs: HashMap<u64, ChunkRec> = self
            .store
            .catalog
            .chunks
            .iter()
            .filter(|c| used.contains_key(&c.id))
            .map(|c| (c.id, *c))
            .collect();
        let sparse: BTreeSet<u64> = used
            .iter()
            .filter(|(id, slots)| {
                recs.get(id)
                    .is_some_and(|c| (slots.len() as u64) * 100 < floor * u64::from(c.pages))
            })
            .map(|(id, _)| *id)
            .collect();
        let mut loaded: HashMap<u64, Vec<u8>> = HashMap::new();
        let mut moved: HashMap<(u64, u16), (u64, u16)> = HashMap::new();
        for i in 0..self.pages.len() {
            let PageRef::At { chunk, slot } = self.pages[i] else {
                continue;
            };
            if !sparse.contains(&chunk) {
                continue;
            }
            let to = match moved.get(&(chunk, slot)) {
                Some(&to) => to,
                None => {
                    let raw = match loaded.entry(chunk) {
                        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                        std::collections::hash_map::Entry::Vacant(e) => {
                            e.insert(crate::reader::read_chunk(self.store, &recs[&chunk])?)
                        }
                    };
                    let at = usize::from(slot) * PAGE;
                    let page: Page = raw
                        .get(at..at + PAGE)
                        .and_then(|b| b.try_into().ok())
                        .ok_or_else(|| StoreError::from(Damage::SlotShort { chunk, slot }))?;
                    let to = self.pack(&page, self.page_key(&page))?;
                    moved.insert((chunk, slot), to);
                    self.stats.shared_pages -= 1;
                    self.stats.new_pages += 1;
                    to
                }
            };
            self.pages[i] = PageRef::At {
                chunk: to.0,
                slot: to.1,
            };
            if last_use.get(&chunk) == Some(&i) {
                loaded.remove(&chunk);
            }
        }
        for id in &sparse {
            self.referenced.remove(id);
        }
        Ok(())
    }

    /// Compresses and appends the open chunk.
    fn close_chunk(&mut self) -> Result<(), StoreError> {
        if self.open.2.is_empty() {
            return Ok(());
        }
        let next = (self.next_chunk, Vec::new(), Vec::new());
        self.next_chunk += 1;
        let (id, raw, keys) = std::mem::replace(&mut self.open, next);
        let raw_len = raw.len();
        let packed = lz4_flex::block::compress(&raw);
        let (stored, lz4) = if self.opts.compression == Compression::Lz4 && packed.len() < raw.len()
        {
            (packed, true)
        } else {
            (raw, false)
        };
        let pages = keys.len() as u16;
        self.ratio = (stored.len() as u64 * 1000)
            .div_ceil(raw_len.max(1) as u64)
            .max(1);
        let stored = match &self.store.key {
            Some(k) => k.seal_chunk(id, pages, lz4, &stored)?,
            None => stored,
        };
        let (cluster, offset) = self.append(&stored)?;
        self.stats.stored_bytes += stored.len() as u64;
        self.new_chunks.push(ChunkRec {
            id,
            cluster,
            offset: offset as u32,
            stored_len: stored.len() as u32,
            pages,
            lz4,
            hash: self.store.catalog.check.digest(&stored),
            refs: 0,
            sealed: self.store.key.is_some(),
        });
        self.new_keys.push((id, keys));
        Ok(())
    }

    /// Appends `bytes` at the log head: the open cluster if it fits, else the next idle one
    /// (a chunk never straddles clusters).
    fn append(&mut self, bytes: &[u8]) -> Result<(u64, u64), StoreError> {
        let cb = self.store.cluster_bytes();
        let len = bytes.len() as u64;
        let (cluster, fill) = match self.head {
            Some((c, fill)) if fill + len <= cb => (c, fill),
            prev => {
                let from = prev.map_or(1, |(c, _)| c + 1);
                let c = next_idle(from, self.store.sb.clusters, &self.taken)
                    .ok_or(StoreError::Full { needed: 1, idle: 0 })?;
                self.taken.insert(c);
                (c, 0)
            }
        };
        self.store
            .medium
            .write_at(bytes, cluster * cb + fill)
            .map_err(StoreError::io(format!(
                "writing a chunk to cluster {cluster}"
            )))?;
        self.head = Some((cluster, fill + len.div_ceil(512) * 512));
        Ok((cluster, fill))
    }

    /// Commits the image with `user` as its description. On error the store is as it was
    /// (what was written lies in clusters nothing references).
    pub fn commit(mut self, user: Vec<u8>) -> Result<Committed, StoreError> {
        self.flush_run()?;
        self.repack()?;
        self.close_chunk()?;
        let meta = ImageMeta {
            name: self.name.clone(),
            user,
            pages: std::mem::take(&mut self.pages),
        };
        let bytes = storelayout::encode(&meta, "page list")?;
        let bytes = match &self.store.key {
            Some(k) => k.seal_page_list(&self.name, &bytes)?,
            None => bytes,
        };
        let at = self.store.place(&bytes, &mut self.taken, "page list")?;
        let mut catalog = self.store.catalog.clone();
        catalog.images.retain(|i| i.name != self.name);
        catalog.chunks.extend(self.new_chunks.iter().copied());
        catalog.next_chunk = self.next_chunk;
        let generation = self.store.generation() + 1;
        let rec = ImageRec {
            name: self.name.clone(),
            generation,
            pinned: self.opts.pin,
            created_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            meta: at,
            meta_hash: *blake3::hash(&bytes).as_bytes(),
            chunks: self.referenced.iter().copied().collect(),
            stats: self.stats,
            signature: Vec::new(),
            raw: self.raw,
            sealed: self.store.key_id(),
        };
        catalog.images.push(rec.clone());
        recount(&mut catalog);
        let mut table = std::mem::take(&mut self.table);
        table.chunks.extend(std::mem::take(&mut self.new_keys));
        let table = keep_live(table, &catalog);
        let written = self.store.commit(catalog, Some(&table), &self.taken)?;
        Ok(Committed {
            written_bytes: self.stats.stored_bytes + bytes.len() as u64 + written,
            image: rec,
        })
    }
}

fn next_idle(from: u64, clusters: u64, avoid: &BTreeSet<u64>) -> Option<u64> {
    (from..clusters)
        .chain(1..from.min(clusters))
        .find(|c| !avoid.contains(c))
}
