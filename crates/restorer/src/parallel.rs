//! Chunks decoded on several CPUs at once. The jobs are the chunks unpacked straight into
//! their own consecutive pages (no other chunk writes there, so the order does not matter);
//! every CPU, the boot CPU too, takes the next job from one counter until none is left,
//! counts each finished job and, when one is damaged, keeps the lowest such index; each CPU
//! publishes what it spent ([`Tally`]) through its [`Slot`]. Platform-neutral: how the
//! other CPUs are started and stopped (PSCI on arm64) and how a job's pages are reached
//! ([`Pages`]) are the program's.
//!
//! ```text
//!  boot CPU:  split ─▶ start the others ─▶ its own chunks ─▶ work ─▶ wait: every job done,
//!                          │                                          every slot published,
//!                          ▼                                          every other CPU off
//!  other CPU:            entry ─▶ work ─▶ publish its tally ─▶ off
//! ```
//!
//! Nothing here allocates once the jobs are built (the program's allocator serves one
//! CPU): a CPU that finds a job damaged records its index and goes on, and the boot CPU
//! unpacks that chunk again itself to say why, as the one-CPU path would.

use crate::plan::{in_place, Target};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use storelayout::{ChunkCheck, ChunkRec, Damage};

/// Bytes of a page.
const PAGE: u64 = 4096;

/// One stored chunk of an image and the pages it goes to, its stored bytes at hand.
#[derive(Debug, Clone, Copy)]
pub struct Chunk<'a> {
    /// The plan's targets of this chunk.
    pub group: &'a [Target],
    /// The chunk.
    pub rec: &'a ChunkRec,
    /// Its stored bytes.
    pub stored: &'a [u8],
}

/// A chunk to unpack straight into [`ChunkRec::raw_len`] bytes of consecutive pages.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    /// The chunk.
    pub chunk: &'a ChunkRec,
    /// Its stored bytes.
    pub stored: &'a [u8],
    /// Physical address of its first page.
    pub to: u64,
}

/// An image's chunks split for [`Jobs`]: the jobs, and the chunks the boot CPU places
/// itself (through its chunk buffer, or into the restorer's own memory), both in plan
/// order.
#[derive(Debug, Default)]
pub struct Split<'a> {
    /// Chunks any CPU may unpack.
    pub jobs: Vec<Job<'a>>,
    /// Chunks for the boot CPU.
    pub rest: Vec<Chunk<'a>>,
}

impl<'a> Split<'a> {
    /// Splits `chunks`: a chunk whose targets fill consecutive pages slot by slot
    /// ([`in_place`]), each of which `free` calls free (not the restorer's), is a job.
    pub fn of(chunks: impl IntoIterator<Item = Chunk<'a>>, free: impl Fn(u64) -> bool) -> Self {
        let mut split = Split::default();
        for c in chunks {
            let pages = c.rec.pages;
            let first = in_place(c.group, pages).filter(|&p| (p..p + u64::from(pages)).all(&free));
            match first {
                Some(first) => split.jobs.push(Job {
                    chunk: c.rec,
                    stored: c.stored,
                    to: first * PAGE,
                }),
                None => split.rest.push(c),
            }
        }
        split
    }
}

/// Where jobs write: the program's physical pages, a test's buffers.
pub trait Pages: Sync {
    /// Runs `fill` over the `len` bytes at physical address `to` (a job's pages, which no
    /// other job writes), then makes what it wrote visible to whoever reads those pages
    /// next (arm64: cleaned to the point of coherency).
    fn fill(
        &self,
        to: u64,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<(), Damage>,
    ) -> Result<(), Damage>;
}

/// No job failed.
const NONE: usize = usize::MAX;

/// The jobs and the counters every CPU shares.
#[derive(Debug)]
pub struct Jobs<'a> {
    list: Vec<Job<'a>>,
    /// The store's checksum, when the jobs still have to be checked.
    check: Option<ChunkCheck>,
    /// The next job to take.
    next: AtomicUsize,
    /// Jobs finished (well or not).
    done: AtomicUsize,
    /// The lowest index of a job that failed, or [`NONE`].
    failed: AtomicUsize,
}

impl<'a> Jobs<'a> {
    /// `list` to do, each checked against `check` first when given (else checked already).
    pub fn new(list: Vec<Job<'a>>, check: Option<ChunkCheck>) -> Self {
        Jobs {
            list,
            check,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            failed: AtomicUsize::new(NONE),
        }
    }

    /// How many jobs there are.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Job `i`.
    pub fn job(&self, i: usize) -> Option<&Job<'a>> {
        self.list.get(i)
    }

    /// Does one job after another, into `pages`, until none is left; `clock` times them
    /// (a counter, in ticks). Returns what this CPU did. Allocates nothing.
    pub fn work(&self, pages: &impl Pages, clock: &impl Fn() -> u64) -> Tally {
        let mut tally = Tally::default();
        loop {
            // Taking a job: Acquire pairs with the builder's publication of the list.
            let i = self.next.fetch_add(1, Ordering::AcqRel);
            let Some(job) = self.list.get(i) else {
                break;
            };
            let t0 = clock();
            let checked = self
                .check
                .is_none_or(|check| job.chunk.check_stored(check, job.stored).is_ok());
            let t1 = clock();
            let unpacked = checked
                && pages
                    .fill(job.to, job.chunk.raw_len(), &mut |out| {
                        job.chunk.unpack_into(job.stored, out)
                    })
                    .is_ok();
            let t2 = clock();
            tally.jobs += 1;
            tally.check_ticks += t1.wrapping_sub(t0);
            tally.unpack_ticks += t2.wrapping_sub(t1);
            if unpacked {
                tally.decoded_bytes += job.chunk.raw_len() as u64;
                tally.pages += u64::from(job.chunk.pages);
            } else {
                self.failed.fetch_min(i, Ordering::AcqRel);
            }
            // Publishing the job's pages: Release, for the boot CPU's Acquire in `finished`.
            self.done.fetch_add(1, Ordering::Release);
        }
        tally
    }

    /// Whether every job is done (their pages then visible to this CPU).
    pub fn finished(&self) -> bool {
        self.done.load(Ordering::Acquire) >= self.list.len()
    }

    /// The lowest index of a job that failed, once [`Jobs::finished`].
    pub fn failed(&self) -> Option<usize> {
        match self.failed.load(Ordering::Acquire) {
            NONE => None,
            i => Some(i),
        }
    }
}

/// What one CPU did of the jobs: counter ticks checking and unpacking, and what it wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Jobs taken (finished well or not).
    pub jobs: u64,
    /// Ticks checking stored bytes.
    pub check_ticks: u64,
    /// Ticks unpacking (and cleaning the pages written).
    pub unpack_ticks: u64,
    /// Bytes unpacked by the jobs that finished well.
    pub decoded_bytes: u64,
    /// Pages those jobs wrote.
    pub pages: u64,
}

impl Tally {
    /// The sum of two CPUs' tallies.
    pub fn plus(self, o: Tally) -> Tally {
        Tally {
            jobs: self.jobs + o.jobs,
            check_ticks: self.check_ticks + o.check_ticks,
            unpack_ticks: self.unpack_ticks + o.unpack_ticks,
            decoded_bytes: self.decoded_bytes + o.decoded_bytes,
            pages: self.pages + o.pages,
        }
    }
}

/// Where a CPU leaves its [`Tally`] for the boot CPU, once, when it has no job left.
#[derive(Debug, Default)]
pub struct Slot {
    ready: AtomicBool,
    values: [AtomicU64; 5],
}

impl Slot {
    /// An empty slot.
    pub const fn new() -> Self {
        Slot {
            ready: AtomicBool::new(false),
            values: [const { AtomicU64::new(0) }; 5],
        }
    }

    /// Leaves `t` (Release: the boot CPU's [`Slot::take`] sees it whole).
    pub fn publish(&self, t: &Tally) {
        let v = [
            t.jobs,
            t.check_ticks,
            t.unpack_ticks,
            t.decoded_bytes,
            t.pages,
        ];
        for (slot, v) in self.values.iter().zip(v) {
            slot.store(v, Ordering::Relaxed);
        }
        self.ready.store(true, Ordering::Release);
    }

    /// The tally left, if one was.
    pub fn take(&self) -> Option<Tally> {
        if !self.ready.load(Ordering::Acquire) {
            return None;
        }
        let v = |i: usize| self.values[i].load(Ordering::Relaxed);
        Some(Tally {
            jobs: v(0),
            check_ticks: v(1),
            unpack_ticks: v(2),
            decoded_bytes: v(3),
            pages: v(4),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    /// A test's memory: one buffer per job's first page.
    struct Buffers(BTreeMap<u64, Mutex<Vec<u8>>>);

    impl Pages for Buffers {
        fn fill(
            &self,
            to: u64,
            len: usize,
            fill: &mut dyn FnMut(&mut [u8]) -> Result<(), Damage>,
        ) -> Result<(), Damage> {
            let mut b = self.0[&to].lock().unwrap();
            assert_eq!(b.len(), len, "a job's pages at {to:#x}");
            fill(&mut b)
        }
    }

    fn rec(id: u64, stored: &[u8], pages: u16) -> ChunkRec {
        ChunkRec {
            id,
            cluster: 1,
            offset: 0,
            stored_len: stored.len() as u32,
            pages,
            lz4: false,
            hash: ChunkCheck::Xxh3.digest(stored),
            refs: 1,
            sealed: false,
        }
    }

    fn targets(chunk: u64, pfns: &[u64]) -> Vec<Target> {
        pfns.iter()
            .enumerate()
            .map(|(slot, &pfn)| Target {
                at: (1, 0),
                chunk,
                slot: slot as u16,
                pfn,
            })
            .collect()
    }

    #[test]
    fn only_whole_runs_of_free_pages_are_jobs() {
        let stored = vec![1u8; 2 * PAGE as usize];
        let (a, b, c) = (rec(1, &stored, 2), rec(2, &stored, 2), rec(3, &stored, 2));
        // In place at 0x100; scattered; in place but its second page is the restorer's.
        let (ga, gb, gc) = (
            targets(1, &[0x100, 0x101]),
            targets(2, &[0x200, 0x300]),
            targets(3, &[0x400, 0x401]),
        );
        let chunks = [(&ga, &a), (&gb, &b), (&gc, &c)].map(|(g, r)| Chunk {
            group: g,
            rec: r,
            stored: &stored,
        });
        let split = Split::of(chunks, |pfn| pfn != 0x401);
        assert_eq!(split.jobs.len(), 1);
        assert_eq!(
            (split.jobs[0].chunk.id, split.jobs[0].to),
            (1, 0x100 * PAGE)
        );
        let rest: Vec<u64> = split.rest.iter().map(|c| c.rec.id).collect();
        assert_eq!(rest, [2, 3]);
    }

    /// 40 chunks of 1 to 4 pages, every byte saying its chunk and page; `bad` of them with
    /// a wrong checksum, `short` with too few stored bytes.
    fn synthetic(bad: &[usize], short: &[usize]) -> (Vec<ChunkRec>, Vec<Vec<u8>>) {
        let mut recs = Vec::new();
        let mut stored = Vec::new();
        for i in 0..40usize {
            let pages = 1 + (i % 4) as u16;
            let mut bytes: Vec<u8> = (0..usize::from(pages) * PAGE as usize)
                .map(|b| (i * 7 + b / PAGE as usize) as u8)
                .collect();
            let mut r = rec(i as u64, &bytes, pages);
            if bad.contains(&i) {
                r.hash[0] ^= 1;
            }
            if short.contains(&i) {
                bytes.truncate(100);
                r.hash = ChunkCheck::Xxh3.digest(&bytes);
            }
            recs.push(r);
            stored.push(bytes);
        }
        (recs, stored)
    }

    fn run_on_threads(jobs: &Jobs, mem: &Buffers, threads: usize) -> Vec<Tally> {
        let clock = || 5u64;
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        let slot = Slot::new();
                        let t = jobs.work(mem, &clock);
                        slot.publish(&t);
                        slot.take().unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    fn setup<'a>(recs: &'a [ChunkRec], stored: &'a [Vec<u8>]) -> (Vec<Job<'a>>, Buffers) {
        let mut at = 0x1000 * PAGE;
        let mut list = Vec::new();
        let mut mem = BTreeMap::new();
        for (r, s) in recs.iter().zip(stored) {
            list.push(Job {
                chunk: r,
                stored: s,
                to: at,
            });
            mem.insert(at, Mutex::new(vec![0u8; r.raw_len()]));
            at += u64::from(r.pages) * PAGE;
        }
        (list, Buffers(mem))
    }

    #[test]
    fn every_job_is_done_once_on_several_threads() {
        let (recs, stored) = synthetic(&[], &[]);
        let (list, mem) = setup(&recs, &stored);
        let jobs = Jobs::new(list, Some(ChunkCheck::Xxh3));
        let tallies = run_on_threads(&jobs, &mem, 4);
        assert!(jobs.finished());
        assert_eq!(jobs.failed(), None);
        let sum = tallies.iter().fold(Tally::default(), |a, t| a.plus(*t));
        assert_eq!(sum.jobs, 40);
        let pages: u64 = recs.iter().map(|r| u64::from(r.pages)).sum();
        assert_eq!(sum.pages, pages);
        assert_eq!(sum.decoded_bytes, pages * PAGE);
        for (r, s) in recs.iter().zip(&stored) {
            let (to, _) = mem
                .0
                .iter()
                .find(|(_, b)| b.lock().unwrap()[..] == s[..])
                .unwrap_or_else(|| panic!("chunk {} was not written", r.id));
            assert_eq!(mem.0[to].lock().unwrap().len(), r.raw_len());
        }
    }

    #[test]
    fn the_lowest_failed_job_is_kept_and_the_others_still_done() {
        let (recs, stored) = synthetic(&[31, 7], &[12]);
        let (list, mem) = setup(&recs, &stored);
        let jobs = Jobs::new(list, Some(ChunkCheck::Xxh3));
        let tallies = run_on_threads(&jobs, &mem, 3);
        assert!(jobs.finished());
        assert_eq!(jobs.failed(), Some(7));
        let sum = tallies.iter().fold(Tally::default(), |a, t| a.plus(*t));
        assert_eq!(sum.jobs, 40);
        let bad_pages: u64 = [7usize, 12, 31]
            .iter()
            .map(|&i| u64::from(recs[i].pages))
            .sum();
        let pages: u64 = recs.iter().map(|r| u64::from(r.pages)).sum();
        assert_eq!(sum.pages, pages - bad_pages);
        // Checked already: the wrong checksums pass, the short chunk still fails to unpack.
        let (list, mem) = setup(&recs, &stored);
        let jobs = Jobs::new(list, None);
        run_on_threads(&jobs, &mem, 2);
        assert_eq!(jobs.failed(), Some(12));
        // No job at all: finished at once, nothing taken.
        let jobs = Jobs::new(Vec::new(), None);
        assert!(jobs.finished() && jobs.is_empty());
        assert_eq!(jobs.work(&mem, &|| 0), Tally::default());
    }

    #[test]
    fn a_slot_gives_nothing_until_published() {
        let s = Slot::new();
        assert_eq!(s.take(), None);
        let t = Tally {
            jobs: 3,
            check_ticks: 4,
            unpack_ticks: 5,
            decoded_bytes: 6,
            pages: 7,
        };
        s.publish(&t);
        assert_eq!(s.take(), Some(t));
        assert_eq!(t.plus(t).unpack_ticks, 10);
    }
}
