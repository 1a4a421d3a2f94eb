//! Checking the image to restore, from the store on a disk, by the one rule every restoring
//! path calls (crate `admission`): this module is the restorer's driver of it. It reads
//! what the rule asks for from the virtio disks ([`ImageSource`]: the page list, the bound
//! disks' fingerprints, a lazy image's swap region), then page 0 and the PFN index through
//! the stream parser capture used, has the header checked ([`admission::check_header`]:
//! the kernel's e820 checksum and RAM against this machine's firmware map) and makes the
//! [`Plan`]: where every page goes. The chunks themselves are checked as they are placed.

use crate::disk::{Disk, DiskError};
use crate::formats::{open_store, read_bytes};
use crate::plan::{plan, Plan, PlanError};
use admission::{chain, Candidate, Expected, Refused, Rules, Trust};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use snapimg::kstream::{ArchRecord, StreamParser};
use snapimg::{Binding, BootSetup, SwapRegion};
use storelayout::{Catalog, ChunkRec, ImageMeta, ImageRec, PageRef, Superblock, PAGE};

/// The system an image must fit: what the restorer knows of this boot.
pub struct Running<'a> {
    /// The kernel this device boots (from the kernel pack's bzImage) and this machine's
    /// firmware memory map ([`admission::Memory::E820`]). Its `online_cpus` is `None` (not
    /// checked): the restorer counts no CPUs of its own. On the PC it reads no MADT; the
    /// arm64 program's device tree lists the CPUs (`fdt::Machine::cpus`), whose count
    /// could fill it once it is carried here, as only this CPU's MPIDR is now.
    pub expected: Expected,
    /// This boot's command line (the restorer's own).
    pub cmdline: &'a str,
    /// Which images are trusted: the kernel pack's initramfs's rule ([`crate::stockinit`]).
    pub trust: Trust,
    /// The boot setup images must be bound to: the kernel pack's initramfs's.
    pub boot_setup: BootSetup,
}

/// Why the store cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The disk failed.
    #[error("{0}")]
    Disk(DiskError),
    /// No store on the disk, or a damaged one.
    #[error("{0}")]
    Store(String),
}

/// A store opened from a disk: its committed superblock and catalog.
pub struct Store {
    /// The committed superblock.
    pub sb: Superblock,
    /// Its catalog, checked against the superblock's BLAKE3.
    pub catalog: Catalog,
}

impl Store {
    /// Opens the store on `disk` (the whole disk): refused when neither superblock is
    /// valid, the disk is shorter than the store, or the catalog is damaged.
    pub fn open<D: Disk>(disk: &mut D) -> Result<Store, OpenError> {
        let size = disk.size();
        let c = open_store(disk, 0, size).map_err(|e| OpenError::Store(chain(&e)))?;
        Ok(Store {
            sb: c.superblock,
            catalog: c.catalog,
        })
    }

    /// The largest unpacked chunk's bytes: what a chunk buffer must hold.
    pub fn most_raw(&self) -> usize {
        self.catalog
            .chunks
            .iter()
            .map(|c| c.raw_len())
            .max()
            .unwrap_or(0)
    }

    /// Byte offset of chunk `c`'s stored bytes.
    pub fn chunk_at(&self, c: &ChunkRec) -> Result<u64, Refused> {
        Ok(self.sb.chunk_place(c)?)
    }

    /// The images in the order every path tries them ([`admission::candidates`]).
    pub fn candidates<'a, S: AsRef<str>>(&'a self, names: &'a [S]) -> Vec<Candidate<'a>> {
        admission::candidates(&self.catalog.images, names)
    }

    /// Reads chunk `c` and returns its pages (checked, unpacked).
    pub fn chunk<D: Disk>(&self, disk: &mut D, c: &ChunkRec) -> Result<Vec<u8>, Refused> {
        let stored =
            read_bytes(disk, 0, self.chunk_at(c)?, c.stored_len as usize).map_err(unreadable)?;
        let mut out = vec![0u8; c.raw_len()];
        storelayout::open_chunk(self.catalog.check, c, &stored, &mut out)?;
        Ok(out)
    }
}

/// A disk that failed while an image was read.
fn unreadable(e: DiskError) -> Refused {
    Refused::Unreadable(e.to_string())
}

/// An image that passed every check before its pages: what to place and how to enter it.
pub struct Chosen {
    /// Its name.
    pub name: String,
    /// How the image kernel is entered (its stream header's architecture record).
    pub entry: Entry,
    /// Pages of the stream (page 0 and the PFN index included).
    pub stream_pages: u64,
    /// Where every page goes.
    pub plan: Plan,
    /// A lazy image's swap region (checked): where the image kernel pages the rest in from.
    pub swap: Option<SwapRegion>,
    /// The firmware's runtime regions at the image kernel's virtual addresses, as capture
    /// recorded them (empty: the image kernel did not use runtime services).
    pub efi_runtime: Vec<snapimg::EfiRuntimeRegion>,
    /// arm64: the image kernel's `cpu_resume`, physical, as capture recorded it.
    pub resume_entry: Option<u64>,
}

pub use crate::disk::DiskSet;

/// How the image kernel is entered, from its stream header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// x86_64: jump to `restore_registers` with the image kernel's CR3 in `%r9`.
    X86_64 {
        /// Virtual address of `restore_registers`.
        jump_address: u64,
        /// Its physical address.
        jump_address_phys: u64,
        /// The image kernel's page tables.
        cr3: u64,
    },
    /// arm64: the image kernel's own page tables and re-entry, and the CPU it slept on.
    Arm64 {
        /// Physical address of `swapper_pg_dir`.
        ttbr1_el1: u64,
        /// Virtual address of `_cpu_resume`.
        reenter_kernel: u64,
        /// Physical address of the EL2 stub vectors (0: the kernel ran without EL2).
        hyp_stub_vectors: u64,
        /// MPIDR of the CPU that hibernated: the image is entered on it.
        sleep_cpu_mpidr: u64,
    },
}

/// Size and binding fingerprint of the device the kernel named `name`: a whole disk (`vda`)
/// or a GPT partition of one (`vda2`, found by its number in the disk's table); anything
/// else reads as missing (size 0), so an image bound to it is refused.
fn fingerprint<S: DiskSet>(disks: &mut S, name: &str) -> (u64, [u8; 32]) {
    let missing = (0, [0; 32]);
    let Some((index, number)) = crate::virtio::vd_part(name) else {
        return missing;
    };
    let Some(d) = disks.disk(index) else {
        return missing;
    };
    let span = match number {
        None => crate::disk::Span {
            offset: 0,
            size: d.size(),
        },
        Some(n) => match crate::gpt::numbered(d, n) {
            Some(span) => span,
            None => return missing,
        },
    };
    let mut part = crate::disk::Part { disk: d, span };
    match snapimg::fingerprint::device_digest(span.size, |at, buf| part.read(at, buf)) {
        Ok(digest) => (span.size, digest),
        Err(_) => missing,
    }
}

/// The restorer's [`admission::ImageSource`]: the store on disk `at` of `disks`.
struct Source<'s, S: DiskSet> {
    disks: &'s mut S,
    at: usize,
    store: &'s Store,
    run: &'s Running<'s>,
    /// The page list read, kept for the plan.
    meta: Option<ImageMeta>,
}

impl<S: DiskSet> Source<'_, S> {
    fn disk(&mut self) -> Result<&mut S::Disk, Refused> {
        let at = self.at;
        self.disks
            .disk(at)
            .ok_or_else(|| Refused::Unreadable(format!("disk {at} is gone")))
    }
}

impl<S: DiskSet> admission::ImageSource for Source<'_, S> {
    fn page_list(&mut self, rec: &ImageRec) -> Result<(&[u8], u64), Refused> {
        let (place, len) = self.store.sb.extent_place(rec.meta, "page list")?;
        let stored = read_bytes(self.disk()?, 0, place, len).map_err(unreadable)?;
        let meta = storelayout::read_page_list(&self.store.catalog, rec, &stored)?;
        let meta = self.meta.insert(meta);
        Ok((&meta.user, meta.pages.len() as u64))
    }

    fn running_binding(&mut self, image: &Binding) -> Result<Binding, Refused> {
        let mut here = image.clone();
        here.boot_setup = self.run.boot_setup.clone();
        here.cmdline = snapimg::binding::bound_cmdline(self.run.cmdline);
        for dev in &mut here.devices {
            let (bytes, digest) = fingerprint(self.disks, &dev.device);
            dev.bytes = bytes;
            dev.digest = digest;
        }
        Ok(here)
    }

    fn check_swap_region(&mut self, rec: &ImageRec, sw: &SwapRegion) -> Result<(), Refused> {
        // A lazy image: the rest of its memory is paged in from its swap region by the
        // device-mapper stack inside the image kernel, which works by itself after the
        // restore on the same store disk (the binding checked the disks).
        let region = self.store.sb.raw_region(rec);
        let disk = self.disk()?;
        snapimg::check_region(sw, region, |what, at, page| {
            disk.read(at, page)
                .map_err(|e| Refused::SwapRegion(format!("reading the {what} at byte {at}: {e}")))
        })
    }
}

/// Checks `candidate` of `store` (on disk `at` of `disks`) by the one rule under `rules`,
/// then its stream header, and plans its pages.
pub fn check<S: DiskSet>(
    disks: &mut S,
    at: usize,
    store: &Store,
    candidate: Candidate<'_>,
    run: &Running,
    rules: &Rules<'_>,
) -> Result<Chosen, Refused> {
    let mut src = Source {
        disks,
        at,
        store,
        run,
        meta: None,
    };
    let admitted = admission::admit(&mut src, candidate, &store.catalog, rules)?;
    let rec = candidate.image()?;
    let meta = src.meta.take().expect("admit read the page list");
    let disks = src.disks;

    // Page 0 and the PFN index, through the stream parser capture used.
    let mut parser = StreamParser::new();
    let mut pfns: Vec<(u64, bool)> = Vec::new();
    let mut held: Option<(u64, Vec<u8>)> = None;
    let mut page_of = |r: &PageRef| -> Result<Vec<u8>, Refused> {
        match *r {
            PageRef::Zero => Ok(vec![0u8; PAGE]),
            PageRef::At { chunk, slot } => {
                if held.as_ref().is_none_or(|(id, _)| *id != chunk) {
                    let c = store.catalog.chunk(chunk).ok_or_else(|| {
                        Refused::Damaged(format!("chunk {chunk} is not in the catalog"))
                    })?;
                    let disk = disks
                        .disk(at)
                        .ok_or_else(|| Refused::Unreadable(format!("disk {at} is gone")))?;
                    held = Some((chunk, store.chunk(disk, c)?));
                }
                let (_, pages) = held.as_ref().expect("just loaded");
                let at = usize::from(slot) * PAGE;
                Ok(pages[at..at + PAGE].to_vec())
            }
        }
    };
    let first = meta
        .pages
        .first()
        .ok_or_else(|| Refused::Damaged("the image has no pages".into()))?;
    let page0 = page_of(first)?;
    parser
        .push_page(page0.as_slice().try_into().expect("a page"))
        .map_err(Refused::Header)?;
    let header = parser.header().expect("page 0 parsed").clone();
    admission::check_header(&header, admitted.pages, &run.expected)?;
    let meta_pages = header.meta_pages().get();
    for r in meta.pages.iter().take(1 + meta_pages as usize).skip(1) {
        let page = page_of(r)?;
        parser
            .push_page(page.as_slice().try_into().expect("a page"))
            .map_err(Refused::Header)?;
        pfns.extend(snapimg::kstream::index_entries(
            page.as_slice().try_into().expect("a page"),
        ));
    }
    let entry = match header.arch {
        ArchRecord::X86_64 {
            jump_address,
            jump_address_phys,
            cr3,
            ..
        } => Entry::X86_64 {
            jump_address,
            jump_address_phys,
            cr3,
        },
        ArchRecord::Arm64 {
            ttbr1_el1,
            reenter_kernel,
            hyp_stub_vectors,
            sleep_cpu_mpidr,
            ..
        } => Entry::Arm64 {
            ttbr1_el1,
            reenter_kernel,
            hyp_stub_vectors,
            sleep_cpu_mpidr,
        },
        ArchRecord::Utsname { .. } => {
            return Err(Refused::OtherArch {
                expected: "x86_64 or arm64",
            })
        }
    };
    let data = meta.pages[1 + meta_pages as usize..]
        .iter()
        .map(|r| match *r {
            PageRef::Zero => None,
            PageRef::At { chunk, slot } => Some((chunk, slot)),
        });
    let locate = |id: u64| store.catalog.chunk(id).map(|c| (c.cluster, c.offset));
    let plan = plan(data, pfns, locate).map_err(|e: PlanError| Refused::Damaged(e.to_string()))?;
    Ok(Chosen {
        name: rec.name.clone(),
        entry,
        stream_pages: header.pages.get(),
        plan,
        swap: admitted.description.swap,
        efi_runtime: admitted.description.identity.memory.efi_runtime,
        resume_entry: admitted.description.resume_entry,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::MemDisk;
    use flashstore::{FormatOptions, MemMedium, Store as Writer, WriteOptions};
    use snapimg::binding::{Binding, BootSetup, BoundDevice};
    use snapimg::{Description, Identity, MemoryMap, SwapRegion, SyntheticStream, PAGE_SIZE};

    const SEED: u64 = 0x5eed;
    const CMDLINE: &str = "console=ttyS0 root=/dev/vda snapboot.store=/dev/vdb quiet";

    /// A store holding `names`, each the same synthetic x86_64 stream of 300 data pages,
    /// bound to CMDLINE and the root disk `vda` [`ROOT`].
    fn store(names: &[&str]) -> (Vec<u8>, SyntheticStream) {
        let (bytes, stream, _) = store_with(names, false);
        (bytes, stream)
    }

    /// Pages of a lazy image's swap region in [`lazy_store`].
    const SWAP_PAGES: u64 = 16;

    /// A store holding one lazy image `current` (the stream of [`store`]) whose swap region
    /// is its raw region of [`SWAP_PAGES`], with the swap header capture writes; and that
    /// region.
    fn lazy_store() -> (Vec<u8>, SwapRegion) {
        let (mut bytes, _, region) = store_with(&["current"], true);
        let r = region.unwrap();
        let header = snapimg::swap_header(SWAP_PAGES, &r.uuid);
        bytes[r.offset as usize..][..PAGE].copy_from_slice(&header);
        (bytes, r)
    }

    /// [`store`]; with `lazy`, each image gets a raw region as its swap region, whose
    /// header the caller writes (the last image's region is returned).
    fn store_with(names: &[&str], lazy: bool) -> (Vec<u8>, SyntheticStream, Option<SwapRegion>) {
        let mut store = Writer::format(MemMedium::new(8 << 20), FormatOptions::default()).unwrap();
        let stream = SyntheticStream::new(300, SEED);
        let bytes = stream.to_bytes();
        let identity = Identity {
            release: "6.1.0-56-amd64".into(),
            version: "#1 SMP PREEMPT_DYNAMIC Debian 6.1.192-2".into(),
            machine: "x86_64".into(),
            ram_bytes: 1 << 30,
            memory: MemoryMap::default(),
        };
        let binding = Binding {
            boot_setup: BootSetup::new(Vec::new(), vec![3; 20]),
            cmdline: snapimg::bound_cmdline(CMDLINE),
            devices: vec![BoundDevice {
                mount: "/".into(),
                device: "vda".into(),
                fstype: "ext4".into(),
                bytes: 8192,
                digest: root_digest(&ROOT),
            }],
        };
        let pages = (bytes.len() / PAGE_SIZE) as u64;
        let mut last = None;
        for name in names {
            let raw = lazy.then(|| store.reserve_raw(SWAP_PAGES * PAGE as u64).unwrap());
            let swap = raw.map(|e| SwapRegion {
                offset: store.raw_offset(e),
                bytes: e.len,
                used_pages: 5,
                uuid: [0x4c; 16],
                verity: None,
            });
            last = swap;
            let d = Description::new(
                identity.clone(),
                1,
                Some(&binding),
                pages,
                swap,
                (None, None),
            )
            .unwrap();
            let mut w = store.writer(name, WriteOptions::default()).unwrap();
            if let Some(e) = raw {
                w.attach_raw(e).unwrap();
            }
            for p in bytes.chunks_exact(PAGE_SIZE) {
                w.push_page(p.try_into().unwrap()).unwrap();
            }
            w.commit(d.encode()).unwrap();
        }
        (store.into_medium().bytes, stream, last)
    }

    fn running(cmdline: &str) -> Running<'_> {
        let stock = stock(2);
        Running {
            expected: Expected {
                release: "6.1.0-56-amd64".into(),
                version: "#1 SMP PREEMPT_DYNAMIC Debian 6.1.192-2".into(),
                machine: "x86_64".into(),
                memory: admission::Memory::E820 {
                    checksum: (SEED & 0xffff_ffff) as u32,
                    also: None,
                    ram_pages: 1 << 18,
                },
                cpus: Vec::new(),
                online_cpus: None,
                boot_path: None,
            },
            cmdline,
            trust: stock.trust,
            boot_setup: stock.boot_setup,
        }
    }

    /// A boot log with no count, and the default limit.
    fn no_log() -> storelayout::BootLog {
        storelayout::BootLog::default()
    }

    /// The stock initramfs's rules: no key, and the boot setup the images are bound to
    /// when `files` is 2.
    fn stock(files: u8) -> crate::stockinit::StockInit {
        crate::stockinit::StockInit {
            trust: Trust::ANY,
            boot_setup: if files == 2 {
                BootSetup::new(Vec::new(), vec![3; 20])
            } else {
                let init = snapimg::listing::FileDigest {
                    path: "init".into(),
                    digest: [files; snapimg::listing::ENTRY_DIGEST],
                };
                BootSetup::new(vec![init], vec![3; 20])
            },
            config: None,
        }
    }

    /// The root disk the images are bound to: `vda`.
    const ROOT: [u8; 8192] = [0x55; 8192];

    fn root_digest(root: &[u8]) -> [u8; 32] {
        snapimg::fingerprint::device_digest(root.len() as u64, |at, buf: &mut [u8]| {
            buf.copy_from_slice(&root[at as usize..at as usize + buf.len()]);
            Ok::<(), ()>(())
        })
        .unwrap()
    }

    impl<'a> DiskSet for Vec<MemDisk<'a>> {
        type Disk = MemDisk<'a>;
        fn disk(&mut self, index: usize) -> Option<&mut MemDisk<'a>> {
            self.get_mut(index)
        }
    }

    /// Checks the newest image of the store `bytes` as `vdb`, with `root` as `vda`.
    fn check_with_root(bytes: &[u8], root: &[u8], run: &Running) -> Result<Chosen, Refused> {
        let mut disks = vec![MemDisk(root), MemDisk(bytes)];
        let s = Store::open(&mut disks[1]).unwrap();
        let candidate = s.candidates::<&str>(&[])[0];
        let log = no_log();
        let rules = Rules {
            log: (&log, bootstatus::DEFAULT_ATTEMPTS),
            trust: &run.trust,
            expected: &run.expected,
            rollback: false,
        };
        check(&mut disks, 1, &s, candidate, run, &rules)
    }

    fn check_first(bytes: &[u8], run: &Running) -> Result<Chosen, Refused> {
        check_with_root(bytes, &ROOT, run)
    }

    #[test]
    fn an_image_that_fits_is_planned_page_for_page() {
        let (bytes, stream) = store(&["current"]);
        let c = check_first(&bytes, &running(CMDLINE)).unwrap();
        assert_eq!(c.name, "current");
        assert_eq!(c.stream_pages, stream.pages().get());
        let placed = c.plan.targets.len() + c.plan.zeros.len();
        assert_eq!(placed, 300);
        // Every data page goes to the PFN the stream lists for it, with its bytes.
        let mut disk = MemDisk(&bytes);
        let s = Store::open(&mut disk).unwrap();
        let data = stream.to_bytes();
        let first_data = (1 + stream.header().meta_pages().get()) as usize;
        for group in c.plan.by_chunk() {
            let pages = s
                .chunk(&mut disk, s.catalog.chunk(group[0].chunk).unwrap())
                .unwrap();
            for t in group {
                let k = (0..300)
                    .find(|&k| stream.pfn(k).unwrap().0 == t.pfn)
                    .unwrap() as usize;
                let want = &data[(first_data + k) * PAGE..][..PAGE];
                assert_eq!(
                    &pages[usize::from(t.slot) * PAGE..][..PAGE],
                    want,
                    "PFN {:#x}",
                    t.pfn
                );
            }
        }
    }

    #[test]
    fn names_asked_for_come_first_then_the_newest() {
        let (bytes, _) = store(&["factory", "old", "current"]);
        let mut disk = MemDisk(&bytes);
        let s = Store::open(&mut disk).unwrap();
        let wanted = ["old", "missing"];
        let candidates = s.candidates(&wanted);
        let order: Vec<&str> = candidates.iter().map(|c| c.name()).collect();
        assert_eq!(order, ["old", "missing", "current", "factory"]);
        assert!(matches!(candidates[1], Candidate::Missing("missing")));
    }

    #[test]
    fn another_kernel_command_line_disk_or_memory_map_is_refused_with_the_reason() {
        let (bytes, _) = store(&["current"]);
        let why = |run: &Running| check_first(&bytes, run).err().unwrap().to_string();
        let mut r = running(CMDLINE);
        r.expected.release = "6.1.0-57-amd64".into();
        assert!(why(&r).contains("kernel release differs: image was captured on \"6.1.0-56-amd64\", running \"6.1.0-57-amd64\""), "{}", why(&r));
        let other = "console=ttyS0 root=/dev/vdc snapboot.store=/dev/vdb";
        assert!(
            why(&running(other)).contains("kernel command line differs"),
            "{}",
            why(&running(other))
        );
        let mut r = running(CMDLINE);
        r.expected.memory = admission::Memory::E820 {
            checksum: (SEED & 0xffff_ffff) as u32 ^ 1,
            also: None,
            ram_pages: 1 << 18,
        };
        assert!(why(&r).contains("memory map differs"), "{}", why(&r));
        let mut r = running(CMDLINE);
        r.expected.memory = admission::Memory::E820 {
            checksum: (SEED & 0xffff_ffff) as u32,
            also: None,
            ram_pages: 100,
        };
        assert!(why(&r).contains("RAM size differs"), "{}", why(&r));
        let mut r = running(CMDLINE);
        r.boot_setup = stock(4).boot_setup;
        assert!(
            why(&r).contains("the initramfs differs (only in this boot: /init)"),
            "{}",
            why(&r)
        );
        let mut other = ROOT;
        other[0] ^= 1;
        let e = check_with_root(&bytes, &other, &running(CMDLINE))
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("root filesystem / (vda) differs"),
            "{e}"
        );
    }

    #[test]
    fn a_damaged_page_list_or_store_is_refused() {
        let (mut bytes, _) = store(&["current"]);
        let mut disk = MemDisk(&bytes);
        let s = Store::open(&mut disk).unwrap();
        let rec = s.candidates::<&str>(&[])[0].image().unwrap().clone();
        let (at, _) = s.sb.extent_place(rec.meta, "page list").unwrap();
        bytes[at as usize + 3] ^= 0x40;
        let e = check_first(&bytes, &running(CMDLINE))
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with("store is damaged"), "{e}");
        let zeros = vec![0u8; 1 << 20];
        let e = Store::open(&mut MemDisk(&zeros)).err().unwrap().to_string();
        assert!(e.contains("no snapboot store here"), "{e}");
    }

    #[test]
    fn a_lazy_image_is_planned_when_its_swap_region_holds_its_header_and_refused_when_not() {
        let (mut bytes, r) = lazy_store();
        let c = check_first(&bytes, &running(CMDLINE)).unwrap();
        assert_eq!(c.plan.targets.len() + c.plan.zeros.len(), 300);
        // The header overwritten (a swap area made over it, say): refused as resume does.
        bytes[r.offset as usize + PAGE - 10..][..10].copy_from_slice(b"SWAPSPACE0");
        let e = check_first(&bytes, &running(CMDLINE)).err().unwrap();
        assert_eq!(
            e.to_string(),
            format!(
                "lazy image: swap region at byte {} no longer holds this image's swap area \
                 (header overwritten)",
                r.offset
            )
        );
    }
}
