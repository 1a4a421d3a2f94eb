//! One rule, two drivers: the same refusal cases through resume's driver
//! (`ondevice::resume::check_image`: the store read through `flashstore`, this boot observed
//! by resume's own `binding::observe` over a device directory) and the restorer's
//! (`restorer::image::check`: the store and the root read from its disks, the memory from
//! the firmware's map). Each case must give both the same refusal kind, the same reason
//! (where both see the same evidence) and, over the whole boot, the same re-capture
//! decision.

use admission::{Candidate, Expected, Memory, Refused, Rules, Sealing, Trust};
use bootstatus::{recapture_after, Held, Recapture, RecapturePolicy, Refusal};
use flashstore::{FormatOptions, MemMedium, Store as Writer, WriteOptions};
use restorer::disk::{MemDisk, MemDiskMut};
use restorer::image::{self, DiskSet, Running};
use snapimg::binding::{Binding, BootSetup, BoundDevice};
use snapimg::{Description, Identity, MemoryMap, SyntheticStream, PAGE_SIZE};
use std::time::Duration;

const SEED: u64 = 0x5eed;
const CMDLINE: &str = "console=ttyS0 root=/dev/vda snapboot.store=/dev/vdb quiet";
const RELEASE: &str = "6.1.0-56-amd64";
const VERSION: &str = "#1 SMP PREEMPT_DYNAMIC Debian 6.1.192-2";
const RAM_BYTES: u64 = 1 << 30;
/// CPUs online at every capture of [`store`].
const CPUS: u32 = 2;
/// The root disk (`vda`) the images are bound to.
const ROOT: [u8; 8192] = [0x55; 8192];
fn setup() -> BootSetup {
    BootSetup::new(Vec::new(), Vec::new())
}

fn root_digest(root: &[u8]) -> [u8; 32] {
    snapimg::fingerprint::device_digest(root.len() as u64, |at, buf: &mut [u8]| {
        buf.copy_from_slice(&root[at as usize..at as usize + buf.len()]);
        Ok::<(), ()>(())
    })
    .unwrap()
}

/// A store holding `names` (oldest first), each a synthetic x86_64 stream captured with
/// [`CPUS`] online and bound to CMDLINE, setup() and the root `vda`; its boot log changed by `log` (given the newest
/// image's generation); its chunks checksummed with BLAKE3 (so images can be signed).
fn store(names: &[&str], log: impl FnOnce(&mut flashstore::BootLog, u64)) -> Vec<u8> {
    let format = FormatOptions {
        check: flashstore::ChunkCheck::Blake3,
        ..FormatOptions::default()
    };
    let mut store = Writer::format(MemMedium::new(8 << 20), format).unwrap();
    let bytes = SyntheticStream::new(300, SEED).to_bytes();
    let identity = Identity {
        release: RELEASE.into(),
        version: VERSION.into(),
        machine: "x86_64".into(),
        ram_bytes: RAM_BYTES,
        memory: MemoryMap::default(),
    };
    let binding = Binding {
        boot_setup: setup(),
        cmdline: snapimg::bound_cmdline(CMDLINE),
        devices: vec![BoundDevice {
            mount: "/".into(),
            device: "vda".into(),
            fstype: "ext4".into(),
            bytes: ROOT.len() as u64,
            digest: root_digest(&ROOT),
        }],
    };
    let pages = (bytes.len() / PAGE_SIZE) as u64;
    for name in names {
        let d = Description::new(
            identity.clone(),
            1,
            Some(&binding),
            pages,
            None,
            (None, None),
        )
        .unwrap()
        .with_online_cpus(Some(CPUS));
        let mut w = store.writer(name, WriteOptions::default()).unwrap();
        for p in bytes.chunks_exact(PAGE_SIZE) {
            w.push_page(p.try_into().unwrap()).unwrap();
        }
        w.commit(d.encode()).unwrap();
    }
    let newest = store.images().iter().map(|i| i.generation).max();
    store
        .update_boot_log(|l| log(l, newest.unwrap_or(0)))
        .unwrap();
    store.into_medium().bytes
}

/// The boot both drivers see.
#[derive(Clone)]
struct Boot {
    /// The store's bytes.
    store: Vec<u8>,
    /// The root disk's bytes.
    root: Vec<u8>,
    /// `snapboot.image=`.
    wanted: Vec<String>,
    /// The kernel this device boots.
    release: String,
    /// RAM: bytes for a running kernel (/proc/iomem), pages for the restorer (e820).
    ram_bytes: u64,
    /// The public key images must be signed for.
    key: Option<imagekey::PublicKey>,
    /// CPUs online (`None`: not counted).
    online_cpus: Option<u32>,
}

impl Boot {
    fn new(store: Vec<u8>) -> Self {
        Boot {
            store,
            root: ROOT.to_vec(),
            wanted: Vec::new(),
            release: RELEASE.into(),
            ram_bytes: RAM_BYTES,
            key: None,
            online_cpus: Some(CPUS),
        }
    }

    fn trust(&self) -> Trust {
        Trust {
            key: self.key,
            sealing: Sealing::Clear,
        }
    }

    fn expected(&self, memory: Memory) -> Expected {
        Expected {
            release: self.release.clone(),
            version: VERSION.into(),
            machine: "x86_64".into(),
            memory,
            cpus: Vec::new(),
            online_cpus: self.online_cpus,
            boot_path: None,
        }
    }
}

/// What one driver did with a boot: each image refused in order (kind, reason), the image
/// it would restore, and the re-capture decision of a cold boot after it.
#[derive(Debug)]
struct Outcome {
    refused: Vec<(String, Refusal, String)>,
    restored: Option<String>,
    recapture: Recapture,
}

fn outcome(
    refused: Vec<bootstatus::RefusalRecord>,
    restored: Option<String>,
    empty: bool,
) -> Outcome {
    Outcome {
        recapture: recapture_after(&refused, Held::empty_if(empty), RecapturePolicy::DEFAULT),
        refused: refused
            .into_iter()
            .map(|r| (r.image, r.kind, r.why))
            .collect(),
        restored,
    }
}

/// Resume's driver: the store through flashstore, the root as `vda` of a device directory.
fn resume(boot: &Boot) -> Outcome {
    let dev = tempfile::tempdir().unwrap();
    std::fs::write(dev.path().join("vda"), &boot.root).unwrap();
    let store = Writer::open(MemMedium {
        bytes: boot.store.clone(),
    })
    .unwrap();
    let log = store.boot_log().unwrap();
    let candidates = admission::candidates(store.images(), &boot.wanted);
    let memory = Memory::Observed {
        ram_bytes: boot.ram_bytes,
        map: MemoryMap::default(),
    };
    let (trust, expected) = (boot.trust(), boot.expected(memory));
    let rules = Rules {
        log: (&log, bootstatus::DEFAULT_ATTEMPTS),
        trust: &trust,
        expected: &expected,
        rollback: false,
    };
    let mut refused = Vec::new();
    for c in &candidates {
        let mut observe = |image: &Binding| {
            ondevice::binding::observe(image, setup(), CMDLINE, dev.path(), Duration::ZERO)
                .map_err(|e| Refused::Unobservable(e.to_string()))
        };
        match ondevice::resume::check_image(&store, *c, &rules, &mut observe) {
            Ok(_) => return outcome(refused, Some(c.name().into()), false),
            Err(why) => refused.push(why.record(c.name())),
        }
    }
    outcome(refused, None, candidates.is_empty())
}

/// The PC's disks: the root (`vda`) and the store (`vdb`).
struct Disks<'a>(Vec<MemDisk<'a>>);

impl<'a> DiskSet for Disks<'a> {
    type Disk = MemDisk<'a>;
    fn disk(&mut self, index: usize) -> Option<&mut MemDisk<'a>> {
        self.0.get_mut(index)
    }
}

/// The restorer's driver: its disks, the firmware's map.
fn restorer(boot: &Boot) -> Outcome {
    let mut disks = Disks(vec![MemDisk(&boot.root), MemDisk(&boot.store)]);
    let store = image::Store::open(&mut disks.0[1]).unwrap();
    let mut log_bytes = boot.store.clone();
    let record = restorer::bootrecord::BootRecord::read(
        &mut MemDiskMut::new(&mut log_bytes),
        &store,
        bootstatus::DEFAULT_ATTEMPTS,
    )
    .unwrap();
    let memory = Memory::E820 {
        checksum: (SEED & 0xffff_ffff) as u32,
        also: None,
        ram_pages: boot.ram_bytes / PAGE_SIZE as u64,
    };
    let run = Running {
        expected: boot.expected(memory),
        cmdline: CMDLINE,
        trust: boot.trust(),
        boot_setup: setup(),
    };
    let rules = Rules {
        log: record.guard(),
        trust: &run.trust,
        expected: &run.expected,
        rollback: false,
    };
    let candidates: Vec<Candidate> = store.candidates(&boot.wanted);
    let mut refused = Vec::new();
    for c in &candidates {
        match image::check(&mut disks, 1, &store, *c, &run, &rules) {
            Ok(chosen) => return outcome(refused, Some(chosen.name), false),
            Err(why) => refused.push(why.record(c.name())),
        }
    }
    outcome(refused, None, candidates.is_empty())
}

/// Runs `boot` through both drivers and requires the same outcome; returns it.
fn both(boot: &Boot) -> Outcome {
    let (r, s) = (resume(boot), restorer(boot));
    assert_eq!(r.restored, s.restored, "resume {r:?}\nrestorer {s:?}");
    assert_eq!(r.recapture, s.recapture, "resume {r:?}\nrestorer {s:?}");
    assert_eq!(r.refused, s.refused, "resume {r:?}\nrestorer {s:?}");
    r
}

/// The one refusal of `o`: its kind and reason.
fn only(o: &Outcome) -> (Refusal, &str) {
    assert_eq!(o.refused.len(), 1, "{o:?}");
    (o.refused[0].1, &o.refused[0].2)
}

#[test]
fn an_image_that_fits_restores_through_both() {
    let o = both(&Boot::new(store(&["current"], |_, _| {})));
    assert_eq!(o.restored.as_deref(), Some("current"));
    assert!(o.refused.is_empty());
}

#[test]
fn a_corrupt_chunk_is_damaged_for_both() {
    let mut bytes = store(&["current"], |_, _| {});
    let s = image::Store::open(&mut MemDisk(&bytes)).unwrap();
    let at = s.chunk_at(&s.catalog.chunks[0]).unwrap() as usize;
    bytes[at + 40] ^= 0x10;
    let o = both(&Boot::new(bytes));
    let (kind, why) = only(&o);
    assert_eq!(kind, Refusal::Damaged);
    assert!(why.starts_with("store is damaged: "), "{why}");
    assert_eq!(o.recapture, Recapture::No);
}

#[test]
fn another_kernel_is_a_changed_system_captured_again() {
    let mut boot = Boot::new(store(&["current"], |_, _| {}));
    boot.release = "6.1.0-57-amd64".into();
    let o = both(&boot);
    assert_eq!(
        only(&o),
        (
            Refusal::Changed,
            "image does not fit this system: kernel release differs: image was captured on \
             \"6.1.0-56-amd64\", running \"6.1.0-57-amd64\""
        )
    );
    assert_eq!(o.recapture, Recapture::Planned);
}

/// RAM is the one case whose evidence differs: resume compares the RAM a running kernel
/// sees (bytes of /proc/iomem) with the description's, the restorer the firmware's pages
/// with the stream header's. Kind and decision agree; each reason names its own numbers.
#[test]
fn another_ram_size_is_a_changed_system_for_both() {
    let mut boot = Boot::new(store(&["current"], |_, _| {}));
    boot.ram_bytes = 1 << 20;
    let (r, s) = (resume(&boot), restorer(&boot));
    for o in [&r, &s] {
        let (kind, why) = only(o);
        assert_eq!(kind, Refusal::Changed);
        assert!(
            why.starts_with("image does not fit this system: RAM size differs: "),
            "{why}"
        );
        assert_eq!(o.recapture, Recapture::Planned);
    }
}

#[test]
fn fewer_cpus_than_the_capture_had_is_a_changed_system_more_or_uncounted_restore() {
    let mut boot = Boot::new(store(&["current"], |_, _| {}));
    for more_or_uncounted in [Some(CPUS), Some(CPUS + 2), None] {
        boot.online_cpus = more_or_uncounted;
        let o = both(&boot);
        assert_eq!(o.restored.as_deref(), Some("current"), "{o:?}");
    }
    boot.online_cpus = Some(1);
    let o = both(&boot);
    assert_eq!(
        only(&o),
        (
            Refusal::Changed,
            "image does not fit this system: the image was captured with 2 CPUs online and \
             this machine has 1: the restored kernel would wait for CPUs that are not there"
        )
    );
    assert_eq!(o.recapture, Recapture::Planned);
}

#[test]
fn a_changed_root_is_a_changed_system() {
    let mut boot = Boot::new(store(&["current"], |_, _| {}));
    boot.root[4096] ^= 1;
    let o = both(&boot);
    let (kind, why) = only(&o);
    assert_eq!(kind, Refusal::Changed);
    assert!(
        why.starts_with(
            "image was captured on a different system: root filesystem / (vda) differs"
        ),
        "{why}"
    );
}

#[test]
fn a_stale_image_is_captured_again_and_a_crash_loop_stops_everything() {
    let o = both(&Boot::new(store(&["current"], |l, _| {
        l.stale_through = 100
    })));
    let (kind, why) = only(&o);
    assert_eq!(kind, Refusal::Stale);
    assert!(why.starts_with("the image is stale"), "{why}");
    assert_eq!(o.recapture, Recapture::Planned);

    let o = both(&Boot::new(store(&["current"], |l, generation| {
        for _ in 0..bootstatus::DEFAULT_ATTEMPTS {
            l.attempt("current", generation, 0);
        }
    })));
    let (kind, why) = only(&o);
    assert_eq!(kind, Refusal::CrashLoop, "{why}");
    assert!(why.starts_with("crash-loop guard: "), "{why}");
    assert_eq!(o.recapture, Recapture::No);
}

#[test]
fn a_missing_or_badly_named_request_is_named_and_the_rest_still_tried() {
    let mut boot = Boot::new(store(&["factory", "current"], |_, _| {}));
    boot.wanted = vec!["new".into(), "a/b".into(), "factory".into()];
    let o = both(&boot);
    assert_eq!(o.restored.as_deref(), Some("factory"));
    assert_eq!(
        o.refused,
        [
            ("new".into(), Refusal::Other, "no image named `new`".into()),
            (
                "a/b".into(),
                Refusal::Other,
                "bad image name `a/b`: 1 to 64 characters of [A-Za-z0-9._-]".into()
            ),
        ]
    );
    // An empty store is a store to fill, whatever is asked for.
    let mut empty = Boot::new(store(&[], |_, _| {}));
    empty.wanted = vec!["new".into()];
    let o = both(&empty);
    assert!(o.refused.is_empty() && o.restored.is_none());
    assert_eq!(o.recapture, Recapture::Planned);
}

#[test]
fn an_unsigned_image_is_untrusted_when_a_key_is_configured() {
    let mut boot = Boot::new(store(&["current"], |_, _| {}));
    boot.key = Some(imagekey::SecretKey::generate().unwrap().public());
    let o = both(&boot);
    assert_eq!(
        only(&o),
        (
            Refusal::Untrusted,
            "the image is not signed (a public key is configured: only signed images restore)"
        )
    );
    assert_eq!(o.recapture, Recapture::No);
}
