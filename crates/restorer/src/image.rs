//! Choosing and checking the image to restore, as `snapboot resume` does, from the store
//! on a disk: the committed superblock and its catalog (checksummed), the candidates in
//! resume's order, and for each the page list (checksummed, every entry in the catalog),
//! the description (version, the kernel, the command line and devices it is bound to), page
//! 0 and the PFN index (parsed and checked by the same stream parser as capture), the memory
//! map (the kernel's own e820 checksum) and the RAM size; for a lazy image, that its swap
//! region is its own raw region of the store and still holds what capture wrote
//! ([`snapimg::check_region`]). What passes becomes a [`Plan`]:
//! where every page goes. The chunks themselves are checked as they are placed.

use crate::disk::{Disk, DiskError};
use crate::formats::{open_store, read_bytes};
use crate::plan::{plan, Plan, PlanError};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use snapimg::kstream::{ArchRecord, StreamHeader, StreamParser};
use snapimg::Description;
use storelayout::{Catalog, ChunkRec, ImageRec, PageRef, Superblock, PAGE};

/// The system an image must fit: what the restorer knows of this boot.
pub struct Running<'a> {
    /// The kernel this device boots: release and version (from the kernel pack's bzImage).
    pub release: &'a str,
    /// `uname -v` of that kernel.
    pub version: &'a str,
    /// This boot's command line (the restorer's own).
    pub cmdline: &'a str,
    /// The e820 checksum of this machine's firmware memory map, as the kernel computes it.
    pub e820_checksum: u32,
    /// Pages of RAM in that map.
    pub ram_pages: u64,
    /// Which images are trusted, and the boot setup they must be bound to: the kernel
    /// pack's initramfs's ([`crate::stockinit`]).
    pub stock: &'a crate::stockinit::StockInit,
}

/// Why an image, or the store, is refused.
#[derive(Debug)]
pub enum Refused {
    /// The disk failed.
    Disk(DiskError),
    /// No store on the disk, or a damaged one.
    Store(String),
    /// The image is damaged or does not fit.
    Image(String),
}

impl core::fmt::Display for Refused {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Refused::Disk(e) => write!(f, "{e}"),
            Refused::Store(s) | Refused::Image(s) => f.write_str(s),
        }
    }
}

/// A lazy image's swap region that is not as its capture left it, as resume says it.
impl From<snapimg::RegionMismatch> for Refused {
    fn from(m: snapimg::RegionMismatch) -> Self {
        Refused::Image(format!("lazy image: {m}"))
    }
}

impl From<DiskError> for Refused {
    fn from(e: DiskError) -> Self {
        Refused::Disk(e)
    }
}

/// A display with its causes, as resume prints them (`a: b: c`).
fn chain(e: &dyn core::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// A damaged part of the store (the catalog's places, a page list, a chunk): reasons that
/// say "store is damaged" themselves ([`storelayout::ReadError`]) are kept as they are.
fn damaged(e: &dyn core::error::Error) -> Refused {
    let text = e.to_string();
    if text.starts_with("store is damaged") || text.contains("encrypted") {
        Refused::Image(text)
    } else {
        Refused::Image(format!("store is damaged: {text}"))
    }
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
    pub fn open<D: Disk>(disk: &mut D) -> Result<Store, Refused> {
        let size = disk.size();
        let c = open_store(disk, 0, size).map_err(|e| Refused::Store(chain(&e)))?;
        Ok(Store {
            sb: c.superblock,
            catalog: c.catalog,
        })
    }

    /// Byte offset of chunk `c`'s stored bytes.
    pub fn chunk_at(&self, c: &ChunkRec) -> Result<u64, Refused> {
        self.sb.chunk_place(c).map_err(|e| damaged(&e))
    }

    /// The images in the order resume tries them: the names asked for (`snapboot.image=`)
    /// that the store has, then the others, newest first.
    pub fn candidates(&self, names: &[&str]) -> Vec<&ImageRec> {
        let mut out: Vec<&ImageRec> = names
            .iter()
            .filter_map(|n| self.catalog.images.iter().find(|i| i.name == *n))
            .collect();
        let mut rest: Vec<&ImageRec> = self
            .catalog
            .images
            .iter()
            .filter(|i| !names.contains(&i.name.as_str()))
            .collect();
        rest.sort_by_key(|i| core::cmp::Reverse(i.generation));
        out.extend(rest);
        out
    }

    /// Reads chunk `c` and returns its pages (checked, unpacked).
    pub fn chunk<D: Disk>(&self, disk: &mut D, c: &ChunkRec) -> Result<Vec<u8>, Refused> {
        let stored = read_bytes(disk, 0, self.chunk_at(c)?, c.stored_len as usize)?;
        let mut out = vec![0u8; c.raw_len()];
        storelayout::open_chunk(self.catalog.check, c, &stored, &mut out)
            .map_err(|e| damaged(&e))?;
        Ok(out)
    }
}

/// An image that passed every check before its pages: what to place and how to enter it.
pub struct Chosen {
    /// Its name.
    pub name: String,
    /// The image kernel's entry: `restore_registers` (virtual, physical) and its CR3.
    pub jump_address: u64,
    /// Physical address of `restore_registers`.
    pub jump_address_phys: u64,
    /// The image kernel's page tables.
    pub cr3: u64,
    /// Pages of the stream (page 0 and the PFN index included).
    pub stream_pages: u64,
    /// Where every page goes.
    pub plan: Plan,
    /// A lazy image's swap region (checked): where the image kernel pages the rest in from.
    pub swap: Option<snapimg::SwapRegion>,
}

/// The PC's disks, `vda` first: the store's and the ones an image is bound to.
pub trait DiskSet {
    /// A disk.
    type Disk: Disk;
    /// Disk `index` (`vda` is 0), if there is one.
    fn disk(&mut self, index: usize) -> Option<&mut Self::Disk>;
}

/// Size and binding fingerprint of the device the kernel named `name` (`vda`): a virtio
/// disk; anything else reads as missing (size 0), so an image bound to it is refused.
fn fingerprint<S: DiskSet>(disks: &mut S, name: &str) -> (u64, [u8; 32]) {
    let Some(d) = crate::virtio::vd_index(name).and_then(|i| disks.disk(i)) else {
        return (0, [0; 32]);
    };
    let size = d.size();
    match snapimg::fingerprint::device_digest(size, |at, buf| d.read(at, buf)) {
        Ok(digest) => (size, digest),
        Err(_) => (0, [0; 32]),
    }
}

/// Checks image `rec` of `store` (on disk `at` of `disks`) against `run`, in resume's
/// order, up to its pages.
pub fn check<S: DiskSet>(
    disks: &mut S,
    at: usize,
    store: &Store,
    rec: &ImageRec,
    run: &Running,
) -> Result<Chosen, Refused> {
    let no_disk = || Refused::Store(format!("disk {at} is gone"));
    // Trust first, before anything of the image is read (resume's order).
    run.stock
        .trust
        .check(&store.catalog, rec)
        .map_err(Refused::Image)?;
    let (place, len) = store
        .sb
        .extent_place(rec.meta, "page list")
        .map_err(|e| damaged(&e))?;
    let stored = read_bytes(disks.disk(at).ok_or_else(no_disk)?, 0, place, len)?;
    let meta =
        storelayout::read_page_list(&store.catalog, rec, &stored).map_err(|e| damaged(&e))?;
    drop(stored);
    let d = Description::decode(&meta.user).map_err(|e| Refused::Image(chain(&e)))?;
    let id = &d.identity;
    for (field, image, here) in [
        ("release", id.release.as_str(), run.release),
        ("version", id.version.as_str(), run.version),
        ("machine", id.machine.as_str(), "x86_64"),
    ] {
        if image != here {
            return Err(Refused::Image(format!(
                "image does not fit this system: kernel {field} differs: image was captured on {image:?}, running {here:?}"
            )));
        }
    }
    let binding = d
        .binding()
        .map_err(|e| Refused::Image(chain(&e)))?
        .ok_or_else(|| {
            Refused::Image(
                "the image records no root filesystem or boot setup to check (captured by an older snapboot): capture it again".into(),
            )
        })?;
    let mut here = binding.clone();
    here.boot_setup = run.stock.boot_setup.clone();
    here.cmdline = snapimg::binding::bound_cmdline(run.cmdline);
    for dev in &mut here.devices {
        let (bytes, digest) = fingerprint(disks, &dev.device);
        dev.bytes = bytes;
        dev.digest = digest;
    }
    binding
        .check(&here)
        .map_err(|e| Refused::Image(format!("image was captured on a different system: {e}")))?;
    if let Some(sw) = &d.swap {
        // A lazy image: the rest of its memory is paged in from its swap region by the
        // device-mapper stack inside the image kernel, which works by itself after the
        // restore on the same store disk (the binding checked the disks). What resume
        // checks of the region before restoring, the restorer checks too.
        let disk = disks.disk(at).ok_or_else(no_disk)?;
        snapimg::check_region(sw, store.sb.raw_region(rec), |what, at, page| {
            disk.read(at, page).map_err(|e| {
                Refused::Image(format!("lazy image: reading the {what} at byte {at}: {e}"))
            })
        })?;
    }

    // Page 0 and the PFN index, through the stream parser capture used.
    let index_pages = |n: u64| meta.pages.iter().take(n as usize);
    let mut parser = StreamParser::new();
    let mut pfns: Vec<(u64, bool)> = Vec::new();
    let mut held: Option<(u64, Vec<u8>)> = None;
    let mut page_of = |r: &PageRef| -> Result<Vec<u8>, Refused> {
        match *r {
            PageRef::Zero => Ok(vec![0u8; PAGE]),
            PageRef::At { chunk, slot } => {
                if held.as_ref().is_none_or(|(id, _)| *id != chunk) {
                    let c = store.catalog.chunk(chunk).ok_or_else(|| {
                        Refused::Image(format!(
                            "store is damaged: chunk {chunk} is not in the catalog"
                        ))
                    })?;
                    let disk = disks.disk(at).ok_or_else(no_disk)?;
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
        .ok_or_else(|| Refused::Image("the image has no pages".into()))?;
    let page0 = page_of(first)?;
    let stream_error = |e: &dyn core::error::Error| {
        Refused::Image(format!("the image's stream header: {}", chain(e)))
    };
    parser
        .push_page(page0.as_slice().try_into().expect("a page"))
        .map_err(|e| stream_error(&e))?;
    let header: StreamHeader = parser.header().expect("page 0 parsed").clone();
    let meta_pages = header.meta_pages().get();
    for r in index_pages(1 + meta_pages).skip(1) {
        let page = page_of(r)?;
        parser
            .push_page(page.as_slice().try_into().expect("a page"))
            .map_err(|e| stream_error(&e))?;
        pfns.extend(snapimg::kstream::index_entries(
            page.as_slice().try_into().expect("a page"),
        ));
    }
    let ArchRecord::X86_64 {
        jump_address,
        jump_address_phys,
        cr3,
        e820_checksum,
        ..
    } = header.arch
    else {
        return Err(Refused::Image(
            "the image's stream header is not an x86_64 kernel's".into(),
        ));
    };
    if e820_checksum != u64::from(run.e820_checksum) {
        return Err(Refused::Image(format!(
            "image does not fit this system: the memory map differs: the image kernel's e820 checksum is {e820_checksum:#x}, this machine's {:#x}",
            run.e820_checksum
        )));
    }
    if header.num_physpages.get() > run.ram_pages {
        return Err(Refused::Image(format!(
            "image does not fit this system: RAM size differs: the image kernel had {} pages, this machine has {} pages of RAM",
            header.num_physpages.get(),
            run.ram_pages
        )));
    }
    if meta.pages.len() as u64 != header.pages.get() {
        return Err(Refused::Image(format!(
            "store is damaged: the page list holds {} pages, the stream header says {}",
            meta.pages.len(),
            header.pages.get()
        )));
    }
    let data = meta.pages[1 + meta_pages as usize..]
        .iter()
        .map(|r| match *r {
            PageRef::Zero => None,
            PageRef::At { chunk, slot } => Some((chunk, slot)),
        });
    let locate = |id: u64| store.catalog.chunk(id).map(|c| (c.cluster, c.offset));
    let plan = plan(data, pfns, locate)
        .map_err(|e: PlanError| Refused::Image(format!("store is damaged: {e}")))?;
    Ok(Chosen {
        name: rec.name.clone(),
        jump_address,
        jump_address_phys,
        cr3,
        stream_pages: header.pages.get(),
        plan,
        swap: d.swap,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::MemDisk;
    use flashstore::{FormatOptions, MemMedium, Store as Writer, WriteOptions};
    use snapimg::binding::{Binding, BootSetup, BoundDevice};
    use snapimg::{Identity, MemoryMap, SwapRegion, SyntheticStream, PAGE_SIZE};

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
            boot_setup: BootSetup {
                init: [1; 32],
                files: [2; 32],
                snapboot_build_id: vec![3; 20],
            },
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
            let d = Description::new(identity.clone(), 1, Some(&binding), pages, swap).unwrap();
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
        Running {
            release: "6.1.0-56-amd64",
            version: "#1 SMP PREEMPT_DYNAMIC Debian 6.1.192-2",
            cmdline,
            e820_checksum: (SEED & 0xffff_ffff) as u32,
            ram_pages: 1 << 18,
            stock: Box::leak(Box::new(stock(2))),
        }
    }

    /// The stock initramfs's rules: no key, and the boot setup the images are bound to
    /// when `files` is 2.
    fn stock(files: u8) -> crate::stockinit::StockInit {
        crate::stockinit::StockInit {
            trust: crate::trust::Trust::Any,
            boot_setup: BootSetup {
                init: [1; 32],
                files: [files; 32],
                snapboot_build_id: vec![3; 20],
            },
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
        let rec = s.candidates(&[])[0].clone();
        check(&mut disks, 1, &s, &rec, run)
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
        let order: Vec<&str> = s
            .candidates(&["old", "missing"])
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(order, ["old", "current", "factory"]);
    }

    #[test]
    fn another_kernel_command_line_disk_or_memory_map_is_refused_with_the_reason() {
        let (bytes, _) = store(&["current"]);
        let why = |run: &Running| check_first(&bytes, run).err().unwrap().to_string();
        let mut r = running(CMDLINE);
        r.release = "6.1.0-57-amd64";
        assert!(why(&r).contains("kernel release differs: image was captured on \"6.1.0-56-amd64\", running \"6.1.0-57-amd64\""), "{}", why(&r));
        let other = "console=ttyS0 root=/dev/vdc snapboot.store=/dev/vdb";
        assert!(
            why(&running(other)).contains("kernel command line differs"),
            "{}",
            why(&running(other))
        );
        let mut r = running(CMDLINE);
        r.e820_checksum ^= 1;
        assert!(why(&r).contains("memory map differs"), "{}", why(&r));
        let mut r = running(CMDLINE);
        r.ram_pages = 100;
        assert!(why(&r).contains("RAM size differs"), "{}", why(&r));
        let mut r = running(CMDLINE);
        let other = stock(4);
        r.stock = &other;
        assert!(why(&r).contains("the initramfs's file set"), "{}", why(&r));
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
        let rec = s.candidates(&[])[0].clone();
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
