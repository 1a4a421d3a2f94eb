//! Reclaiming partly dead clusters (compaction).
//!
//! Chunks die whole (when no image references them any more), but a cluster holds many
//! chunks, so removing or replacing an image leaves clusters that are partly live: their
//! dead bytes cannot be written again until every chunk in the cluster is gone. Compaction
//! copies the live chunks of the emptiest clusters, in chunk-id order (the order images wrote
//! them, so a restore still reads them front to back), into idle clusters, checking each
//! chunk's checksum on the way, and commits the new locations. It is an ordinary commit:
//! nothing committed is overwritten, the old clusters stay intact until the superblock names
//! the new catalog, and a crash at any point leaves the previous state. Only a chunk's
//! location changes, not its id, checksum or contents, so image signatures stay valid.

use crate::error::StoreError;
use crate::medium::Medium;
use crate::pipeline::ChunkTimes;
use crate::reader::read_stored;
use crate::store::Store;
use std::collections::{BTreeMap, BTreeSet};
use storelayout::{encode, ChunkRec};

/// Chunks start on 512-byte boundaries inside a cluster (as the writer appends them).
const ALIGN: u64 = 512;

/// What [`Store::compact`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompactReport {
    /// Partly live clusters whose chunks were moved (now idle).
    pub emptied: u64,
    /// Idle clusters the moved chunks now fill.
    pub filled: u64,
    /// Chunks moved.
    pub chunks: u64,
    /// Bytes of chunks moved (read and written once each).
    pub bytes: u64,
    /// Commits made (one per round).
    pub commits: u64,
}

impl CompactReport {
    /// Clusters gained: emptied minus filled.
    pub fn gained(&self) -> u64 {
        self.emptied.saturating_sub(self.filled)
    }
}

impl<M: Medium> Store<M> {
    /// Live bytes in every cluster that holds chunks (as the writer lays them out, aligned).
    pub fn cluster_fill(&self) -> BTreeMap<u64, u64> {
        let mut fill: BTreeMap<u64, u64> = BTreeMap::new();
        for c in &self.catalog.chunks {
            *fill.entry(c.cluster).or_default() += u64::from(c.stored_len).div_ceil(ALIGN) * ALIGN;
        }
        fill
    }

    /// Moves the live chunks of clusters filled less than `below_percent` into as few idle
    /// clusters as they need, in rounds of one commit each, while a round gains clusters.
    /// A round that would gain none is not committed. Needs a few idle clusters to work in.
    /// A chunk whose checksum fails stops compaction with the reason (nothing is moved in
    /// that round).
    pub fn compact(&mut self, below_percent: u8) -> Result<CompactReport, StoreError> {
        let mut total = CompactReport::default();
        loop {
            let round = self.compact_round(below_percent)?;
            if round.commits == 0 {
                return Ok(total);
            }
            total.emptied += round.emptied;
            total.filled += round.filled;
            total.chunks += round.chunks;
            total.bytes += round.bytes;
            total.commits += round.commits;
        }
    }

    fn compact_round(&mut self, below_percent: u8) -> Result<CompactReport, StoreError> {
        let cb = self.cluster_bytes();
        let limit = cb * u64::from(below_percent.min(100)) / 100;
        let mut sparse: Vec<(u64, u64)> = self
            .cluster_fill()
            .into_iter()
            .filter(|&(_, live)| live < limit)
            .map(|(cluster, live)| (live, cluster))
            .collect();
        sparse.sort_unstable();
        // Room to work in: idle clusters, less what the new catalog needs.
        let mut avoid = self.used_clusters();
        let catalog_clusters = (encode(&self.catalog, "catalog")?.len() as u64)
            .div_ceil(cb)
            .max(1);
        let room = self.usage().idle.saturating_sub(catalog_clusters);
        // The emptiest clusters, as many as the room allows, packed the way they will be
        // written (chunk-id order, a chunk never straddles clusters).
        let mut chosen: BTreeSet<u64> = BTreeSet::new();
        let mut need = 0;
        for &(_, cluster) in &sparse {
            chosen.insert(cluster);
            let n = packed_clusters(&self.catalog.chunks, &chosen, cb);
            if n > room {
                chosen.remove(&cluster);
                break;
            }
            need = n;
        }
        if chosen.len() as u64 <= need {
            return Ok(CompactReport::default());
        }

        let mut moved: Vec<ChunkRec> = self
            .catalog
            .chunks
            .iter()
            .filter(|c| chosen.contains(&c.cluster))
            .copied()
            .collect();
        moved.sort_unstable_by_key(|c| c.id);
        let mut report = CompactReport {
            emptied: chosen.len() as u64,
            ..CompactReport::default()
        };
        avoid.extend(chosen.iter().copied());
        let mut head: Option<(u64, u64)> = None;
        let mut filled = BTreeSet::new();
        let mut times = ChunkTimes::default();
        let mut relocated: BTreeMap<u64, (u64, u32)> = BTreeMap::new();
        for c in &moved {
            let stored = read_stored(self, c, &mut times)?;
            let len = stored.len() as u64;
            let (cluster, fill) = match head {
                Some((h, fill)) if fill + len <= cb => (h, fill),
                _ => {
                    let f = self.find_run(1, &avoid)?;
                    avoid.insert(f.cluster);
                    filled.insert(f.cluster);
                    (f.cluster, 0)
                }
            };
            self.medium
                .write_at(&stored, cluster * cb + fill)
                .map_err(StoreError::io(format!(
                    "writing chunk {} to cluster {cluster}",
                    c.id
                )))?;
            relocated.insert(c.id, (cluster, fill as u32));
            head = Some((cluster, fill + len.div_ceil(ALIGN) * ALIGN));
            report.chunks += 1;
            report.bytes += len;
        }
        report.filled = filled.len() as u64;
        if report.filled >= report.emptied {
            // Packing came out worse than planned: what was written is unreferenced.
            return Ok(CompactReport::default());
        }
        let mut catalog = self.catalog.clone();
        for c in &mut catalog.chunks {
            if let Some(&(cluster, offset)) = relocated.get(&c.id) {
                c.cluster = cluster;
                c.offset = offset;
            }
        }
        self.commit(catalog, None, &filled)?;
        report.commits = 1;
        Ok(report)
    }
}

/// Clusters the chunks of `from` fill when appended in id order (`chunks` is sorted by id).
fn packed_clusters(chunks: &[ChunkRec], from: &BTreeSet<u64>, cb: u64) -> u64 {
    let mut clusters = 0;
    let mut fill = cb;
    for c in chunks.iter().filter(|c| from.contains(&c.cluster)) {
        let len = u64::from(c.stored_len);
        if fill + len > cb {
            clusters += 1;
            fill = 0;
        }
        fill += len.div_ceil(ALIGN) * ALIGN;
    }
    clusters
}
