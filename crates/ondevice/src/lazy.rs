//! Lazy images ("improved snapshot boot": only what stays resident is in the image) on a stock kernel: just before capture the
//! kernel pages most user memory out to a swap area that lives in the store, so the image
//! holds only what stayed resident; after a restore the kernel's own page-fault handler pages
//! the rest back in when it is touched.
//!
//! The image is restored again at every power-on, so the swap area must read back exactly as
//! it was at capture, forever. A plain swap device would not: the restored system frees swap
//! slots and reuses them. So the swap device is a device-mapper stack whose persistent part
//! is written only during capture:
//!
//! ```text
//!   swapon /dev/mapper/snapboot-swap
//!          |
//!   snapboot-swap         while paging out: linear -> snapboot-swap-crypt (encrypted images)
//!                                              or -> snapboot-swap-origin (clear ones)
//!                         at capture:       snapshot origin=that same device, cow=zramN (N)
//!          |                                   writes after restore land in the zram COW (RAM,
//!          |                                   part of the image), never on the store
//!   snapboot-swap-crypt   encrypted images only: page 0 (swap header) linear, the rest
//!          |              crypt (swap key) over the device below:
//!          |                while paging out: snapboot-swap-origin (ciphertext goes down)
//!          |                at capture:       snapboot-swap-checked (ciphertext checked first)
//!   snapboot-swap-checked at capture, with a tree: linear -> snapboot-swap-verity (the written
//!          |              part), error past it; snapboot-swap-verity: verity over the origin
//!   snapboot-swap-origin  linear -> store device, sectors [region offset, +region size)
//!          |
//!   store: | superblocks | ... chunks of images ... | raw region of this image = swap region |
//! ```
//!
//! An encrypted capture (`snapboot.encrypt=`) encrypts the swap region too: the verity tree
//! is built over what is on the store, the ciphertext, and the crypt device decrypts only
//! pages verity passed (encrypt, then authenticate: the root in the sealed description pins
//! every byte of the region). The crypt key is a fresh random one per capture (the *swap
//! key*): it is written nowhere. It is in the kernel's memory (the crypt target's) when the
//! snapshot is taken, so it is inside the image, whose memory is sealed with the device key:
//! only a holder of the device key can read the image, and hence the swap key, and hence the
//! region. snapboot's own copies of it are wiped once the tables are loaded.
//!
//! The table switch happens before `SNAPSHOT_CREATE_IMAGE`, so every restore of the image
//! starts with the snapshot table: the swap region on the store is only ever read.
//! The region is clusters the store reserved as the new image's raw region
//! (`flashstore::Store::reserve_raw`), so every committed image, and its own swap region,
//! stays intact until the new one is committed.

use crate::profile::{self, PageSet};
use devsys::dm::{Control, DevNum, DmError, Target, SECTOR};
use devsys::sys::swap::{swapoff, swapon, MAX_PRIORITY};
use devsys::sys::MemoryLock;
use snapimg::{swap_header, verity, SwapRegion, SwapVerity, PAGE_SIZE};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;
use zeroize::{Zeroize, Zeroizing};

/// Name of the persistent half of the stack (linear onto the store).
pub const ORIGIN_NAME: &str = "snapboot-swap-origin";
/// Name of the swap device (linear, then a snapshot of the origin).
pub const SWAP_NAME: &str = "snapboot-swap";
/// Name of the verified view of the origin's written part (verity).
pub const VERITY_NAME: &str = "snapboot-swap-verity";
/// Name of the swap area's verified view: linear onto the verity device, then `error`
/// past the written part (a verity table takes no other targets beside it).
pub const CHECKED_NAME: &str = "snapboot-swap-checked";
/// Name of the swap area in the clear over its ciphertext (encrypted captures only).
pub const CRYPT_NAME: &str = "snapboot-swap-crypt";

pub use bootparams::{ProfileMode, Reclaim};

/// Settings of a lazy capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LazyOptions {
    /// How much to page out.
    pub reclaim: Reclaim,
    /// Size of the swap region; `None`: [`bootparams::settings::SWAPSIZE_DEFAULT`].
    pub region_bytes: Option<u64>,
    /// Build a dm-verity tree so every page-in is checked.
    pub verity: bool,
    /// What a re-capture does with the pages touched since the restore.
    pub profile: ProfileMode,
}

/// Errors of the lazy-capture steps; each says which step failed.
#[derive(Debug, thiserror::Error)]
pub enum LazyError {
    /// Lazy images need the store on a block device (the swap area is mapped onto it).
    #[error("lazy capture needs the store on a block device: {path}")]
    NotBlock {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    /// A device-mapper step failed.
    #[error(transparent)]
    Dm(#[from] DmError),
    /// A file under /proc, /sys or /dev could not be used.
    #[error("{step}: {path}")]
    Io {
        step: &'static str,
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    /// A required kernel feature is missing.
    #[error("{0}")]
    Missing(String),
    /// The swap region's dm-crypt layer could not be set up.
    #[error(
        "encrypting the swap region ({}): are the dm_crypt module and its cipher's modules \
         loaded?",
        CIPHER
    )]
    Crypt(#[source] DmError),
}

fn io_err<'a>(step: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> LazyError + 'a {
    move |err| LazyError::Io {
        step,
        path: path.to_path_buf(),
        err,
    }
}

/// One line of `/proc/swaps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwapArea {
    /// Path as the kernel shows it.
    pub path: String,
    /// Size in KiB.
    pub size_kib: u64,
    /// Used in KiB.
    pub used_kib: u64,
}

/// Parses `/proc/swaps`.
pub fn parse_swaps(text: &str) -> Vec<SwapArea> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4).then(|| SwapArea {
                path: f[0].replace("\\040", " "),
                size_kib: f[2].parse().unwrap_or(0),
                used_kib: f[3].parse().unwrap_or(0),
            })
        })
        .collect()
}

fn active_swaps() -> Vec<SwapArea> {
    parse_swaps(&std::fs::read_to_string("/proc/swaps").unwrap_or_default())
}

/// A swap area [`swapoff_all`] could not turn off.
#[derive(Debug, thiserror::Error)]
#[error("swapoff {path} (is memory short?)")]
pub struct SwapOffError {
    /// The area, as `/proc/swaps` names it.
    pub path: PathBuf,
    /// Why the kernel refused.
    #[source]
    pub err: std::io::Error,
}

/// Turns off every active swap area, reading its pages back into memory.
///
/// Any capture needs this, lazy or not: an image that refers to pages in a swap area the
/// running system keeps using (and rewriting) would restore garbage at the next power-on.
/// Returns the areas turned off.
pub fn swapoff_all() -> Result<Vec<String>, SwapOffError> {
    let mut off = Vec::new();
    for a in active_swaps() {
        let path = PathBuf::from(&a.path);
        swapoff(&path).map_err(|err| SwapOffError { path, err })?;
        off.push(a.path);
    }
    Ok(off)
}

/// Removes snapboot's swap stack left from an earlier capture or restore (after
/// [`swapoff_all`]), so a new one can be built.
pub fn teardown() -> Result<(), LazyError> {
    let Ok(ctl) = Control::open() else {
        return Ok(()); // no device-mapper: nothing of ours can exist
    };
    for name in [
        SWAP_NAME,
        CRYPT_NAME,
        CHECKED_NAME,
        VERITY_NAME,
        ORIGIN_NAME,
    ] {
        if ctl.find(name)?.is_some() {
            ctl.remove(name)?;
        }
    }
    release_cow();
    Ok(())
}

/// Where the name of the zram copy-on-write device is kept (on /run, a tmpfs that is part
/// of the image, so a restored system still knows its own).
const COW_RECORD: &str = "/run/snapboot/lazy-cow";

/// Frees the zram device an earlier lazy capture made (best effort: it is only memory).
fn release_cow() {
    let Ok(name) = std::fs::read_to_string(COW_RECORD) else {
        return;
    };
    if let Some(id) = name.trim().strip_prefix("zram") {
        let _ = std::fs::write(format!("/sys/block/zram{id}/reset"), "1\n");
        let _ = std::fs::write("/sys/class/zram-control/hot_remove", format!("{id}\n"));
    }
    let _ = std::fs::remove_file(COW_RECORD);
}

/// What [`prepare`] did.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The region to record in the image's description.
    pub region: SwapRegion,
    /// Seconds spent paging out.
    pub reclaim_secs: f64,
    /// The COW device that takes writes after a restore.
    pub cow: String,
    /// The profile's pages read back in (eager mode).
    pub kept: Option<profile::BringIn>,
    /// Pages of the map later profiles are taken against.
    pub map_pages: u64,
}

/// Where a lazy image's swap region goes on the store device: clusters the store reserved
/// for the image as its raw region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionPlace {
    /// Byte offset on the store device (a multiple of 4096).
    pub offset: u64,
    /// Bytes (a multiple of 4096).
    pub bytes: u64,
}

/// Builds the swap stack on the region at `plan`, pages user memory out into it (the
/// `profile`'s pages first, so they lie together at the front), keeps the profile in memory
/// when its mode says so, builds the verity tree, then switches the stack to its
/// write-protecting snapshot table. With `encrypt`, everything but the swap header reaches
/// the store encrypted with a fresh swap key (see the module docs). On error everything is
/// undone.
pub fn prepare(
    store: &Path,
    plan: RegionPlace,
    opts: &LazyOptions,
    profile: Option<&PageSet>,
    encrypt: bool,
) -> Result<Prepared, LazyError> {
    let store_dev = DevNum::of_path(store).map_err(|err| LazyError::NotBlock {
        path: store.to_path_buf(),
        err,
    })?;
    let ctl = Control::open()?;
    let region_pages = plan.bytes / PAGE_SIZE as u64;
    // With a tree, the swap area leaves room for it at the region's end.
    let pages = if opts.verity {
        verity::data_blocks_fitting(region_pages)
    } else {
        region_pages
    };
    if pages < snapimg::MIN_SWAP_PAGES {
        return Err(LazyError::Missing(format!(
            "a swap region of {region_pages} pages is too small"
        )));
    }
    let mut uuid = [0u8; 16];
    random_bytes(&mut uuid)?;
    let key = if encrypt {
        Some(SwapKey::generate()?)
    } else {
        None
    };
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(store)
            .map_err(io_err("write swap header", store))?;
        f.write_all_at(&swap_header(pages, &uuid), plan.offset)
            .and_then(|()| f.flush())
            .and_then(|()| f.sync_all())
            .map_err(io_err("write swap header", store))?;
    }
    let (origin, _) = ctl.create_with(
        ORIGIN_NAME,
        &[Target {
            start: 0,
            length: region_pages * SECTORS_PER_PAGE,
            kind: "linear".into(),
            params: format!("{store_dev} {}", plan.offset / SECTOR),
        }],
    )?;
    let undo_origin = |ctl: &Control| {
        let _ = ctl.remove(CRYPT_NAME);
        let _ = ctl.remove(CHECKED_NAME);
        let _ = ctl.remove(VERITY_NAME);
        let _ = ctl.remove(ORIGIN_NAME);
    };
    // What swap reads and writes: the origin, or the crypt device over it.
    let clear = match &key {
        None => origin,
        Some(k) => match ctl.create_with(CRYPT_NAME, &crypt_table(k, origin, pages).0) {
            Ok((dev, _)) => dev,
            Err(e) => {
                undo_origin(&ctl);
                return Err(LazyError::Crypt(e));
            }
        },
    };
    let swap_sectors = pages * SECTORS_PER_PAGE;
    let swap_node = match ctl.create_with(
        SWAP_NAME,
        &[Target {
            start: 0,
            length: swap_sectors,
            kind: "linear".into(),
            params: format!("{clear} 0"),
        }],
    ) {
        Ok((_, node)) => node,
        Err(e) => {
            undo_origin(&ctl);
            return Err(e.into());
        }
    };
    let undo_all = |ctl: &Control, swapped_on: bool| {
        if swapped_on {
            let _ = swapoff(&swap_node);
        }
        let _ = ctl.remove(SWAP_NAME);
        undo_origin(ctl);
        release_cow();
    };
    // zswap would keep "swapped" pages compressed in RAM, i.e. in the image.
    let _ = std::fs::write("/sys/module/zswap/parameters/enabled", "N\n");
    // Which parts of the region swap writes to, so the tree covers exactly those.
    let written = if opts.verity {
        match devsys::dm::Stats::create(&ctl, ORIGIN_NAME, STATS_AREAS) {
            Ok(s) => Some(s),
            Err(e) => {
                undo_all(&ctl, false);
                return Err(e.into());
            }
        }
    } else {
        None
    };
    if let Err(err) = swapon(&swap_node, Some(MAX_PRIORITY)) {
        drop(written);
        undo_all(&ctl, false);
        return Err(LazyError::Io {
            step: "swapon",
            path: swap_node.clone(),
            err,
        });
    }
    // While the swap device is suspended for its table switch, a page fault on a swapped-out
    // page would wait for it forever; this process is the one that resumes it, so it keeps
    // its own memory resident (the binary itself may live on a swap-backed tmpfs).
    // Capture runs as root (CAP_IPC_LOCK), so the lock is not expected to fail; if it does,
    // the capture goes on without it rather than being refused.
    let lock = MemoryLock::new().ok();
    let started = Instant::now();
    let mut kept = None;
    let mut verity_root = None;
    let result = (|| {
        if let Some(p) = profile {
            profile::page_out_first(p);
        }
        reclaim(opts.reclaim)?;
        if let Some(p) = profile {
            if opts.profile == ProfileMode::Eager {
                kept = Some(profile::bring_in(p, true));
            }
            p.save(Path::new(profile::APPLIED_PATH))
                .map_err(|e| LazyError::Missing(e.to_string()))?;
            if opts.profile == ProfileMode::Prefetch {
                let _ = std::fs::write(profile::PREFETCH_PATH, "");
            } else {
                let _ = std::fs::remove_file(profile::PREFETCH_PATH);
            }
        } else {
            let _ = std::fs::remove_file(profile::APPLIED_PATH);
            let _ = std::fs::remove_file(profile::PREFETCH_PATH);
        }
        // A recorded profile is used once.
        let _ = std::fs::remove_file(profile::PROFILE_PATH);
        let used_pages = used_pages(&swap_node, pages);
        let cow = zram_cow(plan.bytes + (16 << 20))?;
        ctl.suspend(SWAP_NAME)?;
        let switched = (|| {
            let origin_for_snapshot = match &written {
                None => clear,
                Some(stats) => {
                    let hi = written_pages(&stats.areas()?, pages).max(used_pages + 1);
                    let v = build_tree(store, plan, pages, hi)?;
                    let (verified, verified_node) = ctl.create_readonly(
                        VERITY_NAME,
                        &[Target {
                            start: 0,
                            length: v.data_blocks * SECTORS_PER_PAGE,
                            kind: "verity".into(),
                            params: v.table_params(&origin.to_string()),
                        }],
                    )?;
                    warm_tree(&verified_node, &v)?;
                    let (checked, _) =
                        ctl.create_with(CHECKED_NAME, &checked_table(&v, verified, pages))?;
                    verity_root = Some(v);
                    match &key {
                        None => checked,
                        // Decrypt only what verity checked: the crypt device now reads the
                        // checked view of the same ciphertext it wrote to the origin.
                        Some(k) => {
                            ctl.reload(CRYPT_NAME, &crypt_table(k, checked, pages).0)
                                .map_err(LazyError::Crypt)?;
                            clear
                        }
                    }
                }
            };
            ctl.load(
                SWAP_NAME,
                &[Target {
                    start: 0,
                    length: swap_sectors,
                    kind: "snapshot".into(),
                    params: format!("{origin_for_snapshot} {} N 8", cow.1),
                }],
            )?;
            Ok::<(), LazyError>(())
        })();
        // Resume either way: with the snapshot table when it loaded, else the linear one.
        let resumed = ctl.resume(SWAP_NAME);
        switched?;
        resumed?;
        Ok((cow, used_pages))
    })();
    drop(lock);
    drop(written);
    // The kernel holds the swap key now (and the image will); this process's copy goes.
    drop(key);
    let ((cow_name, _), used_pages) = match result {
        Ok(c) => c,
        Err(e) => {
            undo_all(&ctl, true);
            return Err(e);
        }
    };
    let reclaim_secs = started.elapsed().as_secs_f64();
    let map_pages = profile::record_map().unwrap_or(0);
    Ok(Prepared {
        region: SwapRegion {
            offset: plan.offset,
            bytes: plan.bytes,
            used_pages,
            uuid,
            verity: verity_root,
        },
        reclaim_secs,
        cow: cow_name,
        kept,
        map_pages,
    })
}

/// The swap region's cipher for dm-crypt, with its key size.
///
/// AES-XTS with a 512-bit key, AES itself built into Debian's 6.1 kernel (xts and ecb are
/// modules, on amd64 and arm64 alike). Not yet measured against
/// `xchacha12,aes-adiantum-plain64` (the faster choice without AES instructions, as on the
/// board's QEMU TCG CPU; its NH hash module is architecture-specific, `nhpoly1305_sse2`
/// on amd64): the swap key size would change with it (32 bytes).
pub const CIPHER: &str = "aes-xts-plain64";
const KEY_BYTES: usize = 64;

/// The swap key: fresh random bytes for one capture's swap region, wiped when dropped.
struct SwapKey(Zeroizing<[u8; KEY_BYTES]>);

impl SwapKey {
    fn generate() -> Result<Self, LazyError> {
        let mut k = Zeroizing::new([0u8; KEY_BYTES]);
        random_bytes(&mut k[..])?;
        Ok(SwapKey(k))
    }
}

/// A table that carries the swap key: its parameters are wiped when dropped.
struct SecretTable(Vec<Target>);

impl SecretTable {
    /// Overwrites every parameter string with zeros (and empties it).
    fn wipe(&mut self) {
        for t in &mut self.0 {
            t.params.zeroize();
        }
    }
}

impl Drop for SecretTable {
    fn drop(&mut self) {
        self.wipe();
    }
}

/// The crypt device's table over `lower` (the origin while paging out, the checked view
/// after): the swap header page passed through in the clear (resume and `swapon` read it on
/// the store), every other page of the swap area encrypted, 4096-byte crypto sectors (one
/// cipher call per page) whose IV is the 512-byte sector within the swap area.
fn crypt_table(key: &SwapKey, lower: DevNum, pages: u64) -> SecretTable {
    use std::fmt::Write;
    // Sized up front so the key's hex is never left behind in a reallocated buffer.
    let mut params = String::with_capacity(CIPHER.len() + 2 * KEY_BYTES + 128);
    let cap = params.capacity();
    let _ = write!(params, "{CIPHER} ");
    for b in key.0.iter() {
        let _ = write!(params, "{b:02x}");
    }
    let _ = write!(
        params,
        " {SECTORS_PER_PAGE} {lower} {SECTORS_PER_PAGE} 1 sector_size:{PAGE_SIZE}"
    );
    debug_assert_eq!(params.capacity(), cap);
    SecretTable(vec![
        Target {
            start: 0,
            length: SECTORS_PER_PAGE,
            kind: "linear".into(),
            params: format!("{lower} 0"),
        },
        Target {
            start: SECTORS_PER_PAGE,
            length: (pages - 1) * SECTORS_PER_PAGE,
            kind: "crypt".into(),
            params,
        },
    ])
}

/// Pages in use on our swap device, by `/proc/swaps` (at most `pages - 1`).
fn used_pages(node: &Path, pages: u64) -> u64 {
    let used_kib = active_swaps()
        .into_iter()
        .find(|a| Path::new(&a.path) == node)
        .map(|a| a.used_kib)
        .unwrap_or(0);
    (used_kib / 4).min(pages.saturating_sub(1))
}

/// Areas the device-mapper statistics split the origin into while paging out.
const STATS_AREAS: u32 = 512;
const SECTORS_PER_PAGE: u64 = PAGE_SIZE as u64 / SECTOR;

/// The end, in pages, of the last area of the swap area that was written (at least the
/// header page), capped at `pages`.
fn written_pages(areas: &[devsys::dm::AreaCounters], pages: u64) -> u64 {
    let end_sector = areas
        .iter()
        .filter(|a| a.write_sectors > 0)
        .map(|a| a.start + a.len)
        .max()
        .unwrap_or(0);
    end_sector.div_ceil(SECTORS_PER_PAGE).clamp(1, pages)
}

/// The checked view's table: the verity device for the written part, then an `error`
/// target for the rest of the swap area, which nothing was paged out to (swap reads a slot
/// only after writing it, and after the switch such writes land in the copy-on-write store).
fn checked_table(v: &SwapVerity, verified: DevNum, pages: u64) -> Vec<Target> {
    let mut t = vec![Target {
        start: 0,
        length: v.data_blocks * SECTORS_PER_PAGE,
        kind: "linear".into(),
        params: format!("{verified} 0"),
    }];
    if v.data_blocks < pages {
        t.push(Target {
            start: v.data_blocks * SECTORS_PER_PAGE,
            length: (pages - v.data_blocks) * SECTORS_PER_PAGE,
            kind: "error".into(),
            params: String::new(),
        });
    }
    t
}

/// A block-aligned buffer for `O_DIRECT` reads.
#[repr(C, align(4096))]
struct AlignedBlock([u8; verity::BLOCK]);

/// Reads one data block under each lowest-level block of the tree through the verity
/// device `node`, bypassing the page cache: the kernel reads and checks the whole tree
/// into the target's buffer cache, which is kernel memory and so part of the image. After
/// every restore a page-in then costs one block read and one hash, not a walk up a tree
/// that is cold. A block that fails its check here means the tree just written does not
/// match the store: the capture stops.
fn warm_tree(node: &Path, v: &SwapVerity) -> Result<(), LazyError> {
    use rustix::fs::{Mode, OFlags};
    let fd =
        rustix::fs::open(node, OFlags::RDONLY | OFlags::DIRECT, Mode::empty()).map_err(|e| {
            LazyError::Io {
                step: "open the verity device",
                path: node.to_path_buf(),
                err: e.into(),
            }
        })?;
    let mut buf = Box::new(AlignedBlock([0; verity::BLOCK]));
    for block in v.one_block_per_hash_block() {
        rustix::io::pread(&fd, &mut buf.0, block * verity::BLOCK as u64).map_err(|e| {
            LazyError::Io {
                step: "read the swap area through its verity tree",
                path: node.to_path_buf(),
                err: e.into(),
            }
        })?;
    }
    Ok(())
}

/// Reads the first `data_blocks` pages of the region from the store (not from any cache),
/// builds their verity tree and writes it at page `pages` of the region, synced.
fn build_tree(
    store: &Path,
    plan: RegionPlace,
    pages: u64,
    data_blocks: u64,
) -> Result<SwapVerity, LazyError> {
    let mut salt = [0u8; 32];
    random_bytes(&mut salt)?;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(store)
        .map_err(io_err("open the store for the verity tree", store))?;
    let page = PAGE_SIZE as u64;
    let drop_cache = |f: &std::fs::File, at: u64, len: u64| {
        let _ = rustix::fs::fadvise(f, at, len, rustix::fs::Advice::DontNeed);
    };
    // Swap wrote below the page cache; drop whatever the cache holds of the region.
    drop_cache(&f, plan.offset, data_blocks * page);
    const BATCH: u64 = 256;
    let mut buf = vec![0u8; (BATCH * page) as usize];
    let mut have = (u64::MAX, 0u64);
    let (tree, root) = verity::build(data_blocks, &salt, |i, out| {
        if !(have.0..have.0.saturating_add(have.1)).contains(&i) {
            let n = (data_blocks - i).min(BATCH);
            let at = plan.offset + i * page;
            f.read_exact_at(&mut buf[..(n * page) as usize], at)?;
            drop_cache(&f, at, n * page);
            have = (i, n);
        }
        let o = ((i - have.0) * page) as usize;
        out.copy_from_slice(&buf[o..o + PAGE_SIZE]);
        Ok::<(), std::io::Error>(())
    })
    .map_err(io_err("read the swap region for its verity tree", store))?;
    let at = plan.offset + pages * page;
    f.write_all_at(&tree, at)
        .and_then(|()| f.flush())
        .and_then(|()| f.sync_all())
        .map_err(io_err("write the verity tree", store))?;
    drop_cache(&f, at, tree.len() as u64);
    Ok(SwapVerity {
        data_blocks,
        hash_start: pages,
        root,
        salt,
    })
}

fn random_bytes(out: &mut [u8]) -> Result<(), LazyError> {
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(out))
        .map_err(io_err("random bytes", Path::new("/dev/urandom")))
}

/// The cgroup v2 root's `memory.reclaim`, mounting cgroup2 under /run if it is not mounted.
fn reclaim_file() -> Result<PathBuf, LazyError> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mounted = mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && f[2] == "cgroup2").then(|| PathBuf::from(f[1]))
        })
        .next();
    let root = match mounted {
        Some(p) => p,
        None => {
            let p = PathBuf::from("/run/snapboot/cgroup");
            std::fs::create_dir_all(&p).map_err(io_err("mkdir for cgroup2", &p))?;
            rustix::mount::mount(
                "cgroup2",
                &p,
                "cgroup2",
                rustix::mount::MountFlags::empty(),
                "",
            )
            .map_err(|e| LazyError::Io {
                step: "mount cgroup2",
                path: p.clone(),
                err: e.into(),
            })?;
            p
        }
    };
    let f = root.join("memory.reclaim");
    if !f.exists() {
        return Err(LazyError::Missing(format!(
            "{} is missing: lazy capture needs Linux 5.19+ with CONFIG_MEMCG",
            f.display()
        )));
    }
    Ok(f)
}

/// Asks the kernel to reclaim memory (LRU order), which pages anonymous memory out to the
/// only active swap area, ours.
fn reclaim(r: Reclaim) -> Result<(), LazyError> {
    let f = reclaim_file()?;
    let want = match r {
        Reclaim::Bytes(b) => b,
        // More than the machine has: the kernel reclaims until nothing more gives, then
        // reports EAGAIN, which is the expected end here.
        Reclaim::Max => 1 << 40,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .map_err(io_err("open memory.reclaim", &f))?;
    match file.write_all(format!("{want}\n").as_bytes()) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => Ok(()),
        Err(err) => Err(LazyError::Io {
            step: "memory.reclaim",
            path: f,
            err,
        }),
    }
}

/// A fresh zram device of `bytes` for the snapshot's copy-on-write store. zram allocates
/// (compressed) memory only for what is written, so sizing it like the region is free.
fn zram_cow(bytes: u64) -> Result<(String, DevNum), LazyError> {
    let ctl = Path::new("/sys/class/zram-control/hot_add");
    if !ctl.exists() {
        return Err(LazyError::Missing(
            "zram is not available (load the zram module): lazy capture keeps writes to swap \
             after a restore in a zram device"
                .into(),
        ));
    }
    let mut s = String::new();
    std::fs::File::open(ctl)
        .and_then(|mut f| f.read_to_string(&mut s))
        .map_err(io_err("zram hot_add", ctl))?;
    let name = format!("zram{}", s.trim());
    let _ = std::fs::create_dir_all("/run/snapboot");
    let _ = std::fs::write(COW_RECORD, format!("{name}\n"));
    let sys = PathBuf::from("/sys/block").join(&name);
    let algo = crate::zram::choose(
        &std::fs::read_to_string(sys.join("comp_algorithm")).unwrap_or_default(),
        &std::fs::read_to_string("/proc/crypto").unwrap_or_default(),
    )
    .map_err(LazyError::Missing)?;
    std::fs::write(sys.join("comp_algorithm"), format!("{algo}\n"))
        .map_err(io_err("zram comp_algorithm", &sys))?;
    std::fs::write(sys.join("disksize"), format!("{bytes}\n"))
        .map_err(io_err("zram disksize", &sys))?;
    let dev = std::fs::read_to_string(sys.join("dev"))
        .ok()
        .and_then(|s| DevNum::parse(&s))
        .ok_or_else(|| LazyError::Missing(format!("{}/dev is unreadable", sys.display())))?;
    Ok((name, dev))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_swaps_parses() {
        let t = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
                 /dev/mapper/snapboot-swap               partition\t524284\t\t173312\t\t32767\n\
                 /swap\\040file                           file\t\t1024\t\t0\t\t-2\n";
        let s = parse_swaps(t);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].path, "/dev/mapper/snapboot-swap");
        assert_eq!((s[0].size_kib, s[0].used_kib), (524284, 173312));
        assert_eq!(s[1].path, "/swap file");
    }

    #[test]
    fn the_crypt_table_passes_the_header_through_and_encrypts_the_rest() {
        let mut key = SwapKey(Zeroizing::new([0u8; KEY_BYTES]));
        key.0[0] = 0xab;
        key.0[KEY_BYTES - 1] = 0x01;
        let lower = DevNum::parse("254:3").unwrap();
        let t = crypt_table(&key, lower, 100);
        assert_eq!(t.0.len(), 2);
        let (head, rest) = (&t.0[0], &t.0[1]);
        assert_eq!((head.start, head.length), (0, 8));
        assert_eq!(
            (head.kind.as_str(), head.params.as_str()),
            ("linear", "254:3 0")
        );
        assert_eq!(
            (rest.start, rest.length, rest.kind.as_str()),
            (8, 99 * 8, "crypt")
        );
        let hex = format!("ab{}01", "00".repeat(KEY_BYTES - 2));
        assert_eq!(
            rest.params,
            format!("{CIPHER} {hex} 8 254:3 8 1 sector_size:4096"),
            "cipher, key, IV offset, device and offset, the 4 KiB sector option"
        );
    }

    #[test]
    fn a_secret_table_wipes_its_parameters() {
        let key = SwapKey::generate().unwrap();
        let mut t = crypt_table(&key, DevNum::parse("254:3").unwrap(), 10);
        assert!(t.0[1].params.len() > 2 * KEY_BYTES);
        t.wipe();
        assert!(t.0.iter().all(|t| t.params.is_empty()));
    }
}
