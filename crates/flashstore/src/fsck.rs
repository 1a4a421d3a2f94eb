//! Checking a whole store: every structure's checksum, every chunk's data, usage counts
//! against the images, cluster ownership (no overlaps, no leaks), the dedupe table against
//! the pages it describes.

use crate::medium::Medium;
use crate::reader::{read_chunk, read_stored};
use crate::store::{Owner, Store};
use std::collections::{BTreeMap, BTreeSet};
use storelayout::KeyId;
use storelayout::{page_key, PageRef, PAGE};

/// What fsck found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FsckReport {
    /// Everything wrong, one line each; empty means clean.
    pub problems: Vec<String>,
    /// Images checked.
    pub images: u64,
    /// Chunks checked.
    pub chunks: u64,
    /// Clusters in use.
    pub used_clusters: u64,
    /// Sealed images and chunks under a key the store is not unlocked with: their
    /// checksums were checked, their contents not (they cannot be opened here).
    pub unopened_images: u64,
    pub unopened_chunks: u64,
}

impl FsckReport {
    /// Nothing wrong.
    pub fn clean(&self) -> bool {
        self.problems.is_empty()
    }
}

impl<M: Medium> Store<M> {
    /// Checks everything (reads every chunk).
    pub fn fsck(&self) -> FsckReport {
        let mut r = FsckReport::default();
        let mut bad = |s: String| r.problems.push(s);
        let cat = &self.catalog;
        let cb = self.cluster_bytes();

        // Chunk table: sorted unique ids below next_chunk, inside the store.
        let mut prev = None;
        for c in &cat.chunks {
            if prev.is_some_and(|p| p >= c.id) {
                bad(format!("chunk table not sorted at chunk {}", c.id));
            }
            prev = Some(c.id);
            if c.id >= cat.next_chunk {
                bad(format!(
                    "chunk {} is at or past next id {}",
                    c.id, cat.next_chunk
                ));
            }
        }
        let chunks: BTreeMap<u64, _> = cat.chunks.iter().map(|c| (c.id, *c)).collect();

        // Images: page lists, chunk lists, names.
        let mut refs: BTreeMap<u64, u32> = BTreeMap::new();
        let mut names = BTreeSet::new();
        let mut chunk_key: BTreeMap<u64, Option<KeyId>> = BTreeMap::new();
        let mut unopened = 0;
        for img in &cat.images {
            r.images += 1;
            if !names.insert(img.name.clone()) {
                bad(format!("two images named `{}`", img.name));
            }
            for &c in &img.chunks {
                *refs.entry(c).or_default() += 1;
            }
            for &c in &img.chunks {
                match chunk_key.insert(c, img.sealed) {
                    Some(k) if k != img.sealed => bad(format!(
                        "chunk {c} is used by images sealed differently (image `{}`)",
                        img.name
                    )),
                    _ => {}
                }
                if chunks
                    .get(&c)
                    .is_some_and(|ch| ch.sealed != img.sealed.is_some())
                {
                    bad(format!(
                        "image `{}` is {} but its chunk {c} is not",
                        img.name,
                        if img.sealed.is_some() {
                            "sealed"
                        } else {
                            "in the clear"
                        }
                    ));
                }
            }
            if self.key_for(img).is_err() {
                // Sealed under a key not at hand: only what needs no key is checked.
                unopened += 1;
                if let Err(e) = self.page_list_bytes(img) {
                    bad(format!("image `{}`: {e}", img.name));
                }
                continue;
            }
            match self.image_meta(img) {
                Err(e) => bad(format!("image `{}`: {e}", img.name)),
                Ok(meta) => {
                    let mut used = BTreeSet::new();
                    for (i, p) in meta.pages.iter().enumerate() {
                        if let PageRef::At { chunk, slot } = *p {
                            used.insert(chunk);
                            match chunks.get(&chunk) {
                                None => bad(format!(
                                    "image `{}` page {i} refers to missing chunk {chunk}",
                                    img.name
                                )),
                                Some(c) if slot >= c.pages => bad(format!(
                                    "image `{}` page {i} refers to slot {slot} of chunk {chunk} ({} pages)",
                                    img.name, c.pages
                                )),
                                Some(_) => {}
                            }
                        }
                    }
                    let listed: BTreeSet<u64> = img.chunks.iter().copied().collect();
                    if listed != used {
                        bad(format!(
                            "image `{}` lists {} chunks, its pages use {}",
                            img.name,
                            listed.len(),
                            used.len()
                        ));
                    }
                }
            }
        }
        for c in &cat.chunks {
            let n = refs.get(&c.id).copied().unwrap_or(0);
            if n == 0 {
                bad(format!("chunk {} is referenced by no image (leaked)", c.id));
            } else if n != c.refs {
                bad(format!(
                    "chunk {} counts {} users, images say {n}",
                    c.id, c.refs
                ));
            }
        }

        // Clusters: one owner each (chunks share theirs), chunks do not overlap.
        let map = self.cluster_map();
        for (c, owners) in &map {
            if *c >= self.sb.clusters {
                bad(format!(
                    "cluster {c} is past the end ({})",
                    self.sb.clusters
                ));
            }
            if owners.len() > 1 {
                bad(format!("cluster {c} is used by {owners:?}"));
            }
            if *c == 0 && owners != &vec![Owner::Superblocks] {
                bad(format!("cluster 0 is used by {owners:?}"));
            }
        }
        let mut per_cluster: BTreeMap<u64, Vec<(u64, u64, u64)>> = BTreeMap::new();
        for ch in &cat.chunks {
            let a = u64::from(ch.offset);
            per_cluster.entry(ch.cluster).or_default().push((
                a,
                a + u64::from(ch.stored_len),
                ch.id,
            ));
        }
        for (cl, mut v) in per_cluster {
            v.sort_unstable();
            for w in v.windows(2) {
                if w[1].0 < w[0].1 {
                    bad(format!(
                        "chunks {} and {} overlap in cluster {cl}",
                        w[0].2, w[1].2
                    ));
                }
            }
            if v.last().is_some_and(|l| l.1 > cb) {
                bad(format!("a chunk runs past the end of cluster {cl}"));
            }
        }
        for t in &cat.trimmed {
            if map.contains_key(t) {
                bad(format!("cluster {t} is marked discarded but holds data"));
            }
        }
        r.used_clusters = map.len() as u64;
        r.unopened_images = unopened;

        // Every chunk's data, and the dedupe table against it.
        let table = match self.dedupe_table() {
            Ok(t) => t.chunks.into_iter().collect::<BTreeMap<_, _>>(),
            Err(e) => {
                bad(format!("{e}"));
                BTreeMap::new()
            }
        };
        for id in table.keys() {
            if !chunks.contains_key(id) {
                bad(format!("dedupe table lists chunk {id}, which is not live"));
            }
        }
        for ch in &cat.chunks {
            r.chunks += 1;
            let key = chunk_key.get(&ch.id).copied().flatten();
            if ch.sealed && key != self.key_id() {
                r.unopened_chunks += 1;
                if let Err(e) = read_stored(self, ch, &mut Default::default()) {
                    bad(format!("{e}"));
                }
                continue;
            }
            let page_key = |p: &storelayout::Page| match (&self.key, ch.sealed) {
                (Some(k), true) => k.page_key(p),
                _ => page_key(p),
            };
            match read_chunk(self, ch) {
                Err(e) => bad(format!("{e}")),
                Ok(raw) => match table.get(&ch.id) {
                    None => bad(format!("chunk {} is missing from the dedupe table", ch.id)),
                    Some(keys) => {
                        let ok = keys.len() == usize::from(ch.pages)
                            && raw
                                .chunks_exact(PAGE)
                                .zip(keys)
                                .all(|(p, k)| p.try_into().is_ok_and(|p| &page_key(p) == k));
                        if !ok {
                            bad(format!(
                                "dedupe keys of chunk {} do not match its pages",
                                ch.id
                            ));
                        }
                    }
                },
            }
        }
        r
    }
}
