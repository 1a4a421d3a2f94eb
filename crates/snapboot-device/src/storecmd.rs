//! `snapboot store …` (the image store: images by name, dedupe across images, gc, fsck,
//! signatures) and `snapboot key gen`.

use anyhow::{bail, Context, Result};
use bootparams::parse_size;
use bootparams::StoreAddress;
use clap::{Args, Subcommand};
use devsys::locate::Located;
use flashstore::{ChunkCheck, FormatOptions, ImageRec, Label, Store, BLOCK};
use imagekey::SecretKey;
use ondevice::command_store::{self, CommandStore};
use ondevice::store::sign_image;
use std::fs::{File, OpenOptions};
use std::path::PathBuf;
use std::process::ExitCode;

/// `snapboot store`.
#[derive(Subcommand, Debug)]
pub enum StoreCmd {
    /// Lay out an empty store on a file (created, sparse) or a block device: the only
    /// command that writes to a device without the store's magic.
    Init {
        /// File or block device (a path, PARTUUID=, PARTLABEL=; not LABEL=, which only a
        /// store has; default: the configured store).
        #[arg(value_name = "STORE")]
        dev: Option<StoreAddress>,
        /// Size of a new file, e.g. 2G (block devices use their whole size).
        #[arg(long)]
        size: Option<String>,
        /// Cluster size in KiB (a multiple of 4; the erase block of the flash is a good one).
        #[arg(long, default_value_t = 256)]
        cluster_kib: u32,
        /// Replace a store that is already there (its images are lost).
        #[arg(long)]
        force: bool,
        /// Chunk checksums: xxh3 (fast) or blake3 (needed to sign images).
        #[arg(long, value_enum, default_value = "xxh3")]
        checksum: CheckArg,
        /// The store's label, for `snapboot.store=LABEL=NAME` (up to 32 bytes, no spaces).
        #[arg(long, value_name = "NAME")]
        label: Option<String>,
    },
    /// List the images.
    Ls(DevArgs),
    /// Remove an image (not a pinned one); its chunks no other image uses are freed.
    #[command(override_usage = "snapboot store rm [STORE] NAME")]
    Rm(Named),
    /// Pin an image: captures do not replace it, rm and gc leave it alone.
    #[command(override_usage = "snapboot store pin [STORE] NAME")]
    Pin(Named),
    /// Unpin an image.
    #[command(override_usage = "snapboot store unpin [STORE] NAME")]
    Unpin(Named),
    /// Space: clusters used and idle, and per image what dedupe and compression saved.
    Stats(DevArgs),
    /// Compact partly dead clusters, then discard every idle cluster (punch holes in a file).
    Gc {
        #[arg(value_name = "STORE", help = STORE_HELP)]
        dev: Option<StoreAddress>,
        /// Compact clusters whose live chunks fill less than this percentage (0: do not
        /// compact, only discard).
        #[arg(long, default_value_t = ondevice::store::RECLAIM_BELOW_PERCENT,
              value_parser = clap::value_parser!(u8).range(0..=100))]
        compact_below: u8,
    },
    /// Check every structure and checksum; find leaked or doubly used clusters.
    Fsck {
        #[arg(value_name = "STORE", help = STORE_HELP)]
        dev: Option<StoreAddress>,
    },
    /// Sign an image (read whole and checked first) with a secret key.
    #[command(override_usage = "snapboot store sign [STORE] NAME --key SECRET_KEY")]
    Sign {
        #[command(flatten)]
        image: Named,
        /// The secret key (`snapboot key gen`).
        #[arg(long)]
        key: PathBuf,
    },
}

/// Chunk checksum choice.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum CheckArg {
    /// XXH3-128.
    Xxh3,
    /// BLAKE3 (signable).
    Blake3,
}

/// What a store argument takes, and its default.
pub(crate) const STORE_HELP: &str =
    "The store: a file or block device path, PARTUUID=, PARTLABEL= or \
                          LABEL= (default: the configured one, `store =` in \
                          /etc/snapboot/snapboot.conf or `snapboot.store=` on the kernel \
                          command line)";

/// An image, on a store given before its name or the configured one.
#[derive(Args, Debug)]
pub struct Named {
    /// The image's name; or, when a name follows, the store (a path, PARTUUID=, PARTLABEL=
    /// or LABEL=; without it, the configured store: `store =` in
    /// /etc/snapboot/snapboot.conf or `snapboot.store=` on the kernel command line).
    #[arg(value_name = "STORE|NAME")]
    first: String,
    /// The image's name, after the store.
    #[arg(value_name = "NAME")]
    second: Option<String>,
}

impl Named {
    /// The store (default: the configured one) and the image's name.
    fn split(self) -> Result<(CommandStore, String)> {
        let (store, name) = match self.second {
            Some(name) => {
                let store = StoreAddress::parse(&self.first)
                    .with_context(|| format!("store {}", self.first))?;
                (Some(store), name)
            }
            None => (None, self.first),
        };
        Ok((command_store::from_system(store)?, name))
    }
}

/// A store, and whether to print JSON.
#[derive(Args, Debug)]
pub struct DevArgs {
    #[arg(value_name = "STORE", help = STORE_HELP)]
    dev: Option<StoreAddress>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `snapboot key`.
#[derive(Subcommand, Debug)]
pub enum KeyCmd {
    /// Make a new Ed25519 key pair: PREFIX.secret (mode 0600, for signing; keep it off the
    /// device) and PREFIX.pub (goes into the initramfs as /etc/snapboot/image.pub).
    Gen {
        /// Path prefix of the two files.
        prefix: PathBuf,
    },
    /// Make a new device key file (mode 0600) for devices without a TPM
    /// (`snapboot.encrypt=key`): it goes into the initramfs as /etc/snapboot/device.key
    /// (`board build --device-key`). Whoever reads the initramfs can decrypt the images:
    /// weaker than a key sealed to a TPM (`snapboot.encrypt=tpm`), which needs no file.
    Device {
        /// The file to write (never over an existing one).
        path: PathBuf,
    },
}

const MIB: f64 = 1048576.0;

/// `snapboot store stats --json`: the store's space and every image's.
#[derive(serde::Serialize)]
struct StoreSpace {
    label: String,
    generation: u64,
    cluster_bytes: u64,
    clusters: u64,
    used_clusters: u64,
    idle_clusters: u64,
    chunks: u64,
    chunk_bytes: u64,
    chunk_checksum: &'static str,
    chunk_clusters: usize,
    chunk_clusters_live_bytes: u64,
    sparse_chunk_clusters: usize,
    images: Vec<ImageSpace>,
}

/// An image in `snapboot store stats --json`: its summary and what a restore of it reads.
#[derive(serde::Serialize)]
struct ImageSpace {
    #[serde(flatten)]
    image: ondevice::store::ImageSummary,
    /// Bytes of the chunks a restore reads, whole.
    restore_read_bytes: u64,
    /// Those bytes over the part of them the image uses.
    restore_read_amplification: f64,
}

/// Runs a `snapboot store` command.
pub fn store(cmd: StoreCmd) -> Result<ExitCode> {
    match cmd {
        StoreCmd::Init {
            dev,
            size,
            cluster_kib,
            force,
            checksum,
            label,
        } => init(dev, size, cluster_kib, force, checksum, label.as_deref()),
        StoreCmd::Ls(a) => ls(a),
        StoreCmd::Rm(image) => {
            let (store, name) = image.split()?;
            store.open(true)?.0.remove(&name)?;
            println!("removed {name} (its space is idle; `snapboot store gc` discards it)");
            Ok(ExitCode::SUCCESS)
        }
        StoreCmd::Pin(image) => {
            let (store, name) = image.split()?;
            store.open(true)?.0.pin(&name, true)?;
            println!("pinned {name}");
            Ok(ExitCode::SUCCESS)
        }
        StoreCmd::Unpin(image) => {
            let (store, name) = image.split()?;
            store.open(true)?.0.pin(&name, false)?;
            println!("unpinned {name}");
            Ok(ExitCode::SUCCESS)
        }
        StoreCmd::Stats(a) => stats(a),
        StoreCmd::Gc { dev, compact_below } => gc(dev, compact_below),
        StoreCmd::Fsck { dev } => fsck(dev),
        StoreCmd::Sign { image, key } => {
            let k = SecretKey::load(&key)?;
            let (store, name) = image.split()?;
            let at = store.locate()?;
            let rec = sign_image(&at.path, &name, &k)?;
            println!(
                "signed {name} (generation {}) with key {}",
                rec.generation,
                k.public().id()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Opens a command's store (`dev`, or else the configured one): found as the disks are
/// now (a command does not wait for devices), then opened by its magic.
pub(crate) fn open(dev: Option<StoreAddress>, rw: bool) -> Result<(Store<File>, Located)> {
    Ok(command_store::from_system(dev)?.open(rw)?)
}

/// `snapboot store init`.
fn init(
    dev: Option<StoreAddress>,
    size: Option<String>,
    cluster_kib: u32,
    force: bool,
    checksum: CheckArg,
    label: Option<&str>,
) -> Result<ExitCode> {
    let store = command_store::from_system(dev)?;
    if let StoreAddress::Label(_) = store.address {
        bail!(
            "store init: {store}: LABEL= names a store that exists; name the device to make \
             one on"
        );
    }
    let label = Label::new(label.unwrap_or_default())?;
    let dev = match store.address.as_path() {
        Some(p) => PathBuf::from(p),
        None => store.locate()?.path,
    };
    if !force && ondevice::store::open_store(&dev, false).is_ok() {
        bail!(
            "{} already holds a store (--force replaces it, and its images are lost)",
            dev.display()
        );
    }
    if cluster_kib == 0 || !cluster_kib.is_multiple_of(4) {
        bail!("--cluster-kib {cluster_kib}: a positive multiple of 4");
    }
    let is_dev = dev.metadata().is_ok_and(|m| !m.is_file());
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(!is_dev)
        .truncate(false)
        .open(&dev)
        .with_context(|| format!("opening {}", dev.display()))?;
    if !is_dev {
        let size = size
            .as_deref()
            .context("--size is needed for a file, e.g. --size 2G")?;
        let bytes =
            parse_size(size).with_context(|| format!("--size {size}: a size such as 2G"))?;
        file.set_len(0)?;
        file.set_len(bytes)?;
    }
    let s = Store::format(
        file,
        FormatOptions {
            cluster_blocks: cluster_kib * 1024 / BLOCK as u32,
            check: match checksum {
                CheckArg::Xxh3 => ChunkCheck::Xxh3,
                CheckArg::Blake3 => ChunkCheck::Blake3,
            },
            label,
        },
    )
    .with_context(|| format!("formatting {}", dev.display()))?;
    let u = s.usage();
    println!(
        "store on {}{}: {} clusters of {} KiB ({:.1} MiB), {} chunk checksums",
        dev.display(),
        label_words(s.label()),
        u.clusters,
        cluster_kib,
        (u.clusters * s.cluster_bytes()) as f64 / MIB,
        s.chunk_check().name()
    );
    Ok(ExitCode::SUCCESS)
}

/// `, label NAME` for a labelled store.
fn label_words(label: &str) -> String {
    match label {
        "" => String::new(),
        l => format!(", label {l}"),
    }
}

/// `snapboot store ls`.
fn ls(a: DevArgs) -> Result<ExitCode> {
    let (s, at) = open(a.dev, false)?;
    let mut images: Vec<&ImageRec> = s.images().iter().collect();
    images.sort_by_key(|i| std::cmp::Reverse(i.generation));
    let images: Vec<_> = images
        .into_iter()
        .map(|r| ondevice::store::summary(&s, r))
        .collect();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&images)?);
    } else {
        println!(
            "store {at}{}, generation {}",
            label_words(s.label()),
            s.generation()
        );
        println!(
            "{:<16} {:>5} {:<6} {:<6} {:<9} {:>8} {:>8} {:>10}  kernel",
            "NAME", "GEN", "PINNED", "SIGNED", "ENCRYPTED", "PAGES", "SHARED", "STORED MiB"
        );
        for r in images {
            let kernel = r.identity.map_or_else(
                || {
                    format!(
                        "(description unusable: {})",
                        r.description_error.unwrap_or_default()
                    )
                },
                |id| id.release,
            );
            // The key's first 8 hex digits name it well enough in a table.
            let encrypted = r
                .encrypted
                .as_deref()
                .map_or("no", |k| &k[..8.min(k.len())]);
            println!(
                "{:<16} {:>5} {:<6} {:<6} {:<9} {:>8} {:>8} {:>10.1}  {kernel}",
                r.name,
                r.generation,
                if r.pinned { "yes" } else { "no" },
                if r.signed { "yes" } else { "no" },
                encrypted,
                r.stats.pages,
                r.stats.shared_pages,
                r.stats.stored_bytes as f64 / MIB
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `snapboot store stats`.
fn stats(a: DevArgs) -> Result<ExitCode> {
    let (s, at) = open(a.dev, false)?;
    let u = s.usage();
    let cb = s.cluster_bytes();
    let fill = s.cluster_fill();
    let live: u64 = fill.values().sum();
    let sparse = fill
        .values()
        .filter(|&&f| f * 100 < cb * u64::from(ondevice::store::RECLAIM_BELOW_PERCENT))
        .count();
    let costs = s
        .images()
        .iter()
        .map(|r| s.read_cost(r))
        .collect::<Result<Vec<_>, _>>()?;
    if a.json {
        let images: Vec<_> = s
            .images()
            .iter()
            .zip(&costs)
            .map(|(r, c)| ImageSpace {
                image: ondevice::store::summary(&s, r),
                restore_read_bytes: c.chunk_bytes,
                restore_read_amplification: c.amplification(),
            })
            .collect();
        let v = StoreSpace {
            label: s.label().to_string(),
            generation: s.generation(),
            cluster_bytes: cb,
            clusters: u.clusters,
            used_clusters: u.used,
            idle_clusters: u.idle,
            chunks: u.chunks,
            chunk_bytes: u.chunk_bytes,
            chunk_checksum: s.chunk_check().name(),
            chunk_clusters: fill.len(),
            chunk_clusters_live_bytes: live,
            sparse_chunk_clusters: sparse,
            images,
        };
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "store {at}{}, generation {}: {} of {} clusters used ({:.1} of {:.1} MiB), \
             {} idle; {} chunks, {:.1} MiB, {} checksums",
            label_words(s.label()),
            s.generation(),
            u.used,
            u.clusters,
            (u.used * cb) as f64 / MIB,
            (u.clusters * cb) as f64 / MIB,
            u.idle,
            u.chunks,
            u.chunk_bytes as f64 / MIB,
            s.chunk_check().name()
        );
        println!(
            "chunks fill {} cluster(s), {:.0}% of their bytes live; {sparse} under {}% (`store gc` compacts those)",
            fill.len(),
            100.0 * live as f64 / (fill.len() as u64 * cb).max(1) as f64,
            ondevice::store::RECLAIM_BELOW_PERCENT
        );
        println!(
            "{:<16} {:>10} {:>10} {:>10} {:>10} {:>10} {:>6}",
            "IMAGE", "RAW MiB", "UNIQUE MiB", "NEW MiB", "STORED MiB", "READ MiB", "×USED"
        );
        for (r, c) in s.images().iter().zip(&costs) {
            let st = r.stats;
            let mib = |pages: u64| (pages * flashstore::PAGE as u64) as f64 / MIB;
            println!(
                "{:<16} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>6.3}",
                r.name,
                mib(st.pages),
                mib(st.unique_pages),
                mib(st.new_pages),
                st.stored_bytes as f64 / MIB,
                c.chunk_bytes as f64 / MIB,
                c.amplification()
            );
        }
        println!(
            "UNIQUE: after zero pages and dedupe within the image; NEW: after dedupe \
             against the other images (pages this image stored itself); STORED: NEW \
             compressed, as written; READ: the chunks a restore reads, whole; ×USED: \
             READ over the part of it the image uses"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `snapboot store gc`.
fn gc(dev: Option<StoreAddress>, compact_below: u8) -> Result<ExitCode> {
    let (mut s, _) = open(dev, true)?;
    if compact_below > 0 {
        let c = s.compact(compact_below)?;
        println!(
            "compacted: {} partly live cluster(s) emptied into {} ({} chunk(s), {:.1} MiB moved, {} commit(s))",
            c.emptied,
            c.filled,
            c.chunks,
            c.bytes as f64 / 1048576.0,
            c.commits
        );
    }
    let r = s.gc()?;
    println!("discarded {} cluster(s); {} idle", r.discarded, r.idle);
    Ok(ExitCode::SUCCESS)
}

/// `snapboot store fsck`: exit status 5 ([`crate::Exit::Damaged`]) when it finds a problem.
fn fsck(dev: Option<StoreAddress>) -> Result<ExitCode> {
    let (s, at) = open(dev, false)?;
    let r = s.fsck();
    for p in &r.problems {
        println!("problem: {p}");
    }
    println!(
        "{at}: {} image(s), {} chunk(s), {} cluster(s) in use: {}",
        r.images,
        r.chunks,
        r.used_clusters,
        if r.clean() {
            "clean".to_string()
        } else {
            format!("{} problem(s)", r.problems.len())
        }
    );
    if r.unopened_images > 0 {
        println!(
            "{} encrypted image(s) and {} chunk(s) checked by their checksums only: no device \
             key here to open them",
            r.unopened_images, r.unopened_chunks
        );
    }
    Ok(if r.clean() {
        ExitCode::SUCCESS
    } else {
        crate::Exit::Damaged.into()
    })
}

/// Runs a `snapboot key` command.
pub fn key(cmd: KeyCmd) -> Result<ExitCode> {
    match cmd {
        KeyCmd::Gen { prefix } => {
            let with = |ext: &str| {
                let mut p = prefix.clone().into_os_string();
                p.push(ext);
                PathBuf::from(p)
            };
            let (sp, pp) = (with(".secret"), with(".pub"));
            let k = SecretKey::generate()?;
            k.save(&sp)?;
            k.public().save(&pp)?;
            println!(
                "key {}: secret {} (keep it off the device), public {}",
                k.public().id(),
                sp.display(),
                pp.display()
            );
        }
        KeyCmd::Device { path } => {
            let secret = imagekey::DeviceSecret::generate()?;
            secret.save(&path)?;
            let id = flashstore::DeviceKey::new(secret.bytes()).id();
            println!("device key {id}: {}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
