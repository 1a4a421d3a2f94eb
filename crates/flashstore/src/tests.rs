//! Store tests: round trips, named images, dedupe policies, hundreds of generations, injected
//! power cuts at many points of commit, remove and gc, corruption.

use crate::*;
use std::collections::BTreeMap;

const MIB: usize = 1 << 20;

fn rng(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A "memory" of `n` pages: some zero, some repeated, most distinct and compressible.
fn memory(n: usize, seed: u64) -> Vec<Page> {
    let mut s = seed;
    (0..n)
        .map(|i| {
            let mut p = [0u8; PAGE];
            match rng(&mut s) % 10 {
                0 | 1 => {}
                2 => p[..16].copy_from_slice(b"a repeated page!"),
                _ => {
                    let v = rng(&mut s);
                    for (j, b) in p.iter_mut().enumerate().step_by(64) {
                        *b = (v >> (j % 8)) as u8 ^ i as u8;
                    }
                    p[8..16].copy_from_slice(&v.to_le_bytes());
                }
            }
            p
        })
        .collect()
}

/// Changes `frac_per_mille` of the pages (new content), as a re-capture after a small
/// change would see them.
fn mutate(mem: &mut [Page], per_mille: u64, seed: u64) {
    let mut s = seed;
    for p in mem.iter_mut() {
        if rng(&mut s) % 1000 < per_mille {
            let v = rng(&mut s);
            p[100..108].copy_from_slice(&v.to_le_bytes());
            p[0] |= 1;
        }
    }
}

/// Write options for the small test clusters: chunks of 8 pages.
fn wo() -> WriteOptions {
    WriteOptions {
        chunk_pages: 8,
        dedupe: Dedupe::Selective {
            min_use: 50,
            min_run: 2,
        },
        ..WriteOptions::default()
    }
}

fn new_store(len: usize, cluster_blocks: u32) -> Store<MemMedium> {
    Store::format(
        MemMedium::new(len),
        FormatOptions {
            cluster_blocks,
            ..FormatOptions::default()
        },
    )
    .unwrap()
}

fn write<M: Medium>(
    s: &mut Store<M>,
    name: &str,
    mem: &[Page],
    opts: WriteOptions,
) -> Result<Committed, StoreError> {
    let mut w = s.writer(name, opts)?;
    for p in mem {
        w.push_page(p)?;
    }
    w.commit(name.as_bytes().to_vec())
}

/// A store of 64 KiB clusters on a file or block device.
fn store_on(f: std::fs::File) -> Store<std::fs::File> {
    let opts = FormatOptions {
        cluster_blocks: 16,
        ..FormatOptions::default()
    };
    Store::format(f, opts).unwrap()
}

/// A store whose chunks carry BLAKE3, so its images can be signed.
fn signable_store() -> Store<MemMedium> {
    let opts = FormatOptions {
        cluster_blocks: 16,
        check: ChunkCheck::Blake3,
        ..FormatOptions::default()
    };
    Store::format(MemMedium::new(8 * MIB), opts).unwrap()
}

fn read<M: Medium>(s: &Store<M>, name: &str) -> Result<Vec<Page>, StoreError> {
    let mut r = s.reader(name)?;
    assert_eq!(r.user(), name.as_bytes());
    let mut out = Vec::new();
    let mut p = [0u8; PAGE];
    while r.next_page(&mut p)? {
        out.push(p);
    }
    Ok(out)
}

fn assert_clean<M: Medium>(s: &Store<M>) {
    let f = s.fsck();
    assert!(f.clean(), "fsck: {:#?}", f.problems);
}

#[test]
fn images_round_trip_and_survive_reopening() {
    let mut s = new_store(8 * MIB, 16);
    let a = memory(300, 1);
    let c = write(&mut s, "current", &a, wo()).unwrap();
    assert_eq!(c.image.stats.pages, 300);
    assert_eq!(
        c.image.stats.zero_pages
            + c.image.stats.unique_pages
            + (300 - c.image.stats.zero_pages - c.image.stats.unique_pages),
        300
    );
    assert!(
        c.image.stats.unique_pages < 300 - c.image.stats.zero_pages,
        "memory dedupe"
    );
    assert_eq!(read(&s, "current").unwrap(), a);
    let s = Store::open(s.into_medium()).unwrap();
    assert_eq!(read(&s, "current").unwrap(), a);
    assert_eq!(s.newest().unwrap().name, "current");
    assert_clean(&s);
}

#[test]
fn named_images_replace_pin_and_remove() {
    let mut s = new_store(16 * MIB, 16);
    let f = memory(200, 2);
    let mut o = wo();
    o.pin = true;
    write(&mut s, "factory", &f, o).unwrap();
    let mut cur = f.clone();
    mutate(&mut cur, 100, 3);
    write(&mut s, "current", &cur, wo()).unwrap();
    assert_eq!(s.newest().unwrap().name, "current");
    assert!(matches!(
        write(&mut s, "factory", &cur, wo()),
        Err(StoreError::Pinned(_))
    ));
    assert!(matches!(s.remove("factory"), Err(StoreError::Pinned(_))));
    mutate(&mut cur, 100, 4);
    write(&mut s, "current", &cur, wo()).unwrap();
    assert_eq!(s.images().len(), 2);
    assert_eq!(read(&s, "current").unwrap(), cur);
    assert_eq!(read(&s, "factory").unwrap(), f);
    s.remove("current").unwrap();
    assert!(matches!(s.reader("current"), Err(StoreError::NoImage(_))));
    s.pin("factory", false).unwrap();
    s.remove("factory").unwrap();
    assert!(s.catalog().chunks.is_empty(), "no image, no chunk");
    assert!(matches!(s.writer("a/b", wo()), Err(StoreError::BadName(_))));
    assert_clean(&s);
}

#[test]
fn storage_dedupe_writes_only_what_changed() {
    let base = memory(2000, 5);
    let mut next = base.clone();
    mutate(&mut next, 20, 6);
    let mut written = BTreeMap::new();
    for (label, dedupe) in [
        ("off", Dedupe::Off),
        ("full", Dedupe::Full),
        (
            "runs",
            Dedupe::Selective {
                min_use: 0,
                min_run: 8,
            },
        ),
    ] {
        let mut s = new_store(64 * MIB, 64);
        let o = WriteOptions {
            dedupe,
            chunk_pages: 32,
            ..wo()
        };
        let first = write(&mut s, "a", &base, o).unwrap();
        let second = write(&mut s, "b", &next, o).unwrap();
        assert_eq!(read(&s, "a").unwrap(), base);
        assert_eq!(read(&s, "b").unwrap(), next);
        assert_clean(&s);
        written.insert(
            label,
            (
                first.image.stats.stored_bytes,
                second.image.stats.stored_bytes,
                second.image.stats.shared_pages,
            ),
        );
    }
    let (full_a, off_b, _) = written["off"];
    let (_, full_b, full_shared) = written["full"];
    let (_, runs_b, runs_shared) = written["runs"];
    assert!(
        off_b * 10 > full_a * 9,
        "off stores everything again: {written:?}"
    );
    assert!(
        full_b * 5 < full_a,
        "full dedupe stores a fraction: {written:?}"
    );
    assert!(
        runs_b >= full_b && runs_b < off_b,
        "selective is in between: {written:?}"
    );
    assert!(full_shared >= runs_shared && runs_shared > 0, "{written:?}");
}

/// Distinct, incompressible-enough pages: no two alike, none zero.
fn distinct(n: usize, seed: u64) -> Vec<Page> {
    let mut st = seed;
    (0..n)
        .map(|_| {
            let mut p = [0u8; PAGE];
            for w in p.chunks_mut(8).take(64) {
                w.copy_from_slice(&rng(&mut st).to_le_bytes());
            }
            p
        })
        .collect()
}

#[test]
fn selective_dedupe_stores_again_what_a_sparsely_used_chunk_gives() {
    // `a`: four chunks of 8 pages. `b` keeps a run of 3 pages (37 %) of chunk 0, all of
    // chunk 1, 6 pages (75 %) of chunk 2 and nothing of chunk 3.
    let a = distinct(32, 1);
    let fresh = distinct(40, 2);
    let mut b: Vec<Page> = Vec::new();
    b.extend_from_slice(&a[2..5]);
    b.extend_from_slice(&fresh[..10]);
    b.extend_from_slice(&a[8..16]);
    b.extend_from_slice(&fresh[10..20]);
    b.extend_from_slice(&a[16..22]);
    b.extend_from_slice(&a[2..5]); // the same pages again: memory dedupe
    for (floor, kept, new) in [(0u8, 3usize, 20u64), (50, 2, 23), (80, 1, 29)] {
        let mut s = new_store(8 * MIB, 16);
        let o = WriteOptions {
            dedupe: Dedupe::Selective {
                min_use: floor,
                min_run: 2,
            },
            compression: crate::Compression::None,
            ..wo()
        };
        let ca = write(&mut s, "a", &a, o).unwrap();
        let cb = write(&mut s, "b", &b, o).unwrap();
        assert_eq!(read(&s, "a").unwrap(), a, "floor {floor}");
        assert_eq!(read(&s, "b").unwrap(), b, "floor {floor}");
        assert_clean(&s);
        let old: Vec<u64> = ca.image.chunks.clone();
        let shared_chunks = cb.image.chunks.iter().filter(|c| old.contains(c)).count();
        assert_eq!(shared_chunks, kept, "floor {floor}: {:?}", cb.image.chunks);
        // Every distinct page of `b` is either a reference into `a` or stored by `b`.
        let st = cb.image.stats;
        assert_eq!(st.unique_pages, 37, "floor {floor}: {st:?}");
        assert_eq!(
            (st.new_pages, st.shared_pages),
            (new, 37 - new),
            "floor {floor}: {st:?}"
        );
        // What its restore reads (raw chunks, so bytes are pages): with no floor, all of
        // `a`'s chunks 0 (3 of 8 pages used), 1 and 2 (6 of 8) and its own 20 pages; the
        // floors re-pack chunk 0, then chunk 2, so nothing unused is read.
        let cost = s.read_cost(s.image("b").unwrap()).unwrap();
        let read_pages = [44.0, 39.0, 37.0][usize::from(floor > 0) + usize::from(floor > 50)];
        assert_eq!(
            cost.chunk_bytes,
            read_pages as u64 * PAGE as u64,
            "{cost:?}"
        );
        assert!(
            (cost.amplification() - read_pages / 37.0).abs() < 1e-9,
            "{cost:?}"
        );
        let reopened = Store::open(s.medium().clone()).unwrap();
        assert_eq!(read(&reopened, "b").unwrap(), b);
        // Removing `a` leaves `b` whole.
        s.remove("a").unwrap();
        s.gc().unwrap();
        assert_eq!(read(&s, "b").unwrap(), b, "floor {floor}, after gc");
        assert_clean(&s);
    }
}

#[test]
fn hundreds_of_generations_read_back_exactly_and_gc_leaves_no_leak() {
    let mut s = new_store(48 * MIB, 16);
    let mut live: BTreeMap<String, Vec<Page>> = BTreeMap::new();
    let mut seed = 77u64;
    for gen in 0..200u64 {
        let r = rng(&mut seed);
        let name = format!("img{}", r % 5);
        match r % 7 {
            0 if !live.is_empty() => {
                let victim = live
                    .keys()
                    .nth((r as usize / 7) % live.len())
                    .unwrap()
                    .clone();
                s.remove(&victim).unwrap();
                live.remove(&victim);
            }
            _ => {
                let mut mem = live.get(&name).cloned().unwrap_or_else(|| memory(150, r));
                // Small and big changes, and sometimes a different size.
                mutate(&mut mem, if r.is_multiple_of(3) { 500 } else { 15 }, r);
                if r.is_multiple_of(11) {
                    mem.truncate(100);
                }
                let dedupe = [
                    Dedupe::Full,
                    Dedupe::Selective {
                        min_use: (r % 4 * 30) as u8,
                        min_run: (r % 5 + 1) as u16,
                    },
                    Dedupe::Off,
                ][(r % 3) as usize];
                let o = WriteOptions {
                    dedupe,
                    chunk_pages: 4 + (r % 3) as u16 * 6,
                    ..wo()
                };
                write(&mut s, &name, &mem, o).unwrap();
                live.insert(name, mem);
            }
        }
        if gen % 20 == 0 {
            s.gc().unwrap();
            let s2 = Store::open(s.medium().clone()).unwrap();
            for (n, m) in &live {
                assert_eq!(&read(&s2, n).unwrap(), m, "generation {gen}, image {n}");
            }
            assert_clean(&s2);
        }
    }
    for (n, m) in &live {
        assert_eq!(&read(&s, n).unwrap(), m);
    }
    s.gc().unwrap();
    assert_clean(&s);
    let u = s.usage();
    assert_eq!(u.used + u.idle, u.clusters);
}

/// A store on a copy of `bytes` that loses power after `budget` writes (see [`FailingMedium`]).
fn cut_store(bytes: &[u8], budget: u64, torn: usize) -> Store<FailingMedium<MemMedium>> {
    let m = FailingMedium::new(
        MemMedium {
            bytes: bytes.to_vec(),
        },
        budget,
        torn,
    );
    Store::open(m).unwrap()
}

/// Everything committed before the cut reads back; the interrupted operation either took
/// effect whole or not at all; fsck is clean.
fn check_after_cut(
    bytes: Vec<u8>,
    before: &BTreeMap<String, Vec<Page>>,
    after: &BTreeMap<String, Vec<Page>>,
) {
    let s = Store::open(MemMedium { bytes }).unwrap();
    assert_clean(&s);
    let names: BTreeMap<String, ()> = s.images().iter().map(|i| (i.name.clone(), ())).collect();
    let expect = if names.keys().eq(after.keys())
        && after
            .iter()
            .all(|(n, m)| read(&s, n).is_ok_and(|r| &r == m))
    {
        after
    } else {
        before
    };
    assert!(
        names.keys().eq(expect.keys()),
        "images {names:?} match neither side"
    );
    for (n, m) in expect {
        assert_eq!(&read(&s, n).unwrap(), m, "image {n}");
    }
}

#[test]
fn power_cut_at_any_write_of_commit_remove_and_gc_loses_nothing_committed() {
    let base = memory(400, 9);
    let mut s = new_store(24 * MIB, 8);
    write(&mut s, "factory", &base, WriteOptions { pin: true, ..wo() }).unwrap();
    let mut cur = base.clone();
    mutate(&mut cur, 50, 10);
    write(&mut s, "current", &cur, wo()).unwrap();
    s.remove("current").unwrap();
    write(&mut s, "current", &cur, wo()).unwrap();
    let committed = s.into_medium().bytes;
    let before: BTreeMap<String, Vec<Page>> = [
        ("factory".to_string(), base.clone()),
        ("current".to_string(), cur.clone()),
    ]
    .into();
    let mut next = cur.clone();
    mutate(&mut next, 50, 11);

    // How many writes each operation makes, uninterrupted.
    let count = |op: &dyn Fn(&mut Store<FailingMedium<MemMedium>>)| {
        let mut s = cut_store(&committed, u64::MAX, 0);
        op(&mut s);
        s.into_medium().writes
    };
    let commit_op = |s: &mut Store<FailingMedium<MemMedium>>| {
        write(s, "current", &next, wo()).map(|_| ()).unwrap_or(())
    };
    let remove_op = |s: &mut Store<FailingMedium<MemMedium>>| s.remove("current").unwrap_or(());
    let gc_op = |s: &mut Store<FailingMedium<MemMedium>>| {
        let _ = s.gc();
    };
    let after_commit: BTreeMap<String, Vec<Page>> = [
        ("factory".to_string(), base.clone()),
        ("current".to_string(), next.clone()),
    ]
    .into();
    let after_remove: BTreeMap<String, Vec<Page>> = [("factory".to_string(), base.clone())].into();
    let mut points = 0;
    let mut seed = 12345u64;
    for (op, after) in [
        (
            &commit_op as &dyn Fn(&mut Store<FailingMedium<MemMedium>>),
            &after_commit,
        ),
        (&remove_op, &after_remove),
        (&gc_op, &before),
    ] {
        let n = count(op);
        assert!(n > 0);
        for budget in 0..=n {
            // Every write point, each with a torn and an untorn variant.
            let torn = if rng(&mut seed).is_multiple_of(2) {
                0
            } else {
                (rng(&mut seed) % 4096) as usize + 1
            };
            let mut s = cut_store(&committed, budget, torn);
            op(&mut s);
            check_after_cut(s.into_medium().inner.bytes, &before, after);
            points += 1;
        }
    }
    assert!(points >= 50, "only {points} cut points");
}

#[test]
fn a_full_store_refuses_and_keeps_what_it_had() {
    let mut s = new_store(2 * MIB, 8);
    let small = memory(20, 1);
    write(&mut s, "small", &small, wo()).unwrap();
    let mut st = 2u64;
    let big: Vec<Page> = (0..600)
        .map(|_| {
            let mut p = [0u8; PAGE];
            for w in p.chunks_exact_mut(8) {
                w.copy_from_slice(&rng(&mut st).to_le_bytes());
            }
            p
        })
        .collect();
    let err = write(&mut s, "big", &big, wo()).unwrap_err();
    assert!(matches!(err, StoreError::Full { .. }), "{err}");
    let s = Store::open(s.into_medium()).unwrap();
    assert_eq!(read(&s, "small").unwrap(), small);
    assert!(s.image("big").is_none());
    assert_clean(&s);
}

#[test]
fn damage_is_named_by_read_and_fsck() {
    let mut s = new_store(8 * MIB, 16);
    let a = memory(300, 3);
    write(&mut s, "current", &a, wo()).unwrap();
    let c = s.catalog().chunks[1];
    let mut m = s.into_medium();
    m.bytes[(c.cluster * 16 * BLOCK + u64::from(c.offset) + 7) as usize] ^= 0x40;
    let s = Store::open(m).unwrap();
    let err = read(&s, "current").unwrap_err().to_string();
    assert!(
        err.contains(&format!("checksum mismatch in chunk {}", c.id)),
        "{err}"
    );
    let f = s.fsck();
    assert!(
        f.problems.iter().any(|p| p.contains("checksum mismatch")),
        "{f:?}"
    );

    // Both superblocks damaged: no store, with both reasons.
    let mut m = s.into_medium();
    m.bytes[10] ^= 1;
    m.bytes[BLOCK as usize + 20] ^= 1;
    let err = Store::open(m.clone()).unwrap_err().to_string();
    assert_eq!(
        err,
        "no valid superblock (first: store format version 65539 (this build reads 1 to 3); \
         second: superblock checksum mismatch)"
    );
}

#[test]
fn what_is_not_a_store_is_refused_by_kind() {
    let s = new_store(8 * MIB, 16);
    let good = s.into_medium();
    type Damage = Box<dyn Fn(&mut MemMedium)>;
    let kinds: [(&str, Damage, &str); 3] = [
        (
            "zeroed",
            Box::new(|m: &mut MemMedium| m.bytes[..2 * BLOCK as usize].fill(0)),
            "no snapboot store here",
        ),
        (
            "an old two-slot store",
            Box::new(|m: &mut MemMedium| {
                m.bytes[..2 * BLOCK as usize].fill(0);
                m.bytes[..8].copy_from_slice(crate::LEGACY_MAGIC);
            }),
            "a two-slot store of an older snapboot",
        ),
        (
            "truncated",
            Box::new(|m: &mut MemMedium| m.bytes.truncate(m.bytes.len() / 2)),
            "store is truncated: its superblock describes 8388608 bytes, the device has 4194304",
        ),
    ];
    for (what, damage, want) in kinds {
        let mut m = good.clone();
        damage(&mut m);
        let err = Store::open(m).map(|_| ()).unwrap_err();
        assert!(err.to_string().contains(want), "{what}: {err}");
    }
}

#[test]
fn file_medium_discards_idle_clusters_as_holes() {
    use std::os::unix::fs::MetadataExt;
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("store");
    let f = std::fs::File::create_new(&path).unwrap();
    f.set_len(16 * MIB as u64).unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mut s = store_on(f);
    let a = memory(1500, 4);
    write(
        &mut s,
        "a",
        &a,
        WriteOptions {
            compression: crate::Compression::None,
            ..wo()
        },
    )
    .unwrap();
    let full = std::fs::metadata(&path).unwrap().blocks();
    s.remove("a").unwrap();
    let g = s.gc().unwrap();
    assert!(g.discarded > 0);
    let after = std::fs::metadata(&path).unwrap().blocks();
    assert!(after < full / 2, "blocks {full} -> {after}");
    // Only what gc's own commit freed (the previous catalog's cluster) is left to discard.
    assert!(s.gc().unwrap().discarded <= 1, "discarded once");
    assert_clean(&s);
}

#[test]
fn runs_hand_out_the_same_stream_as_pages() {
    let mut s = new_store(8 * MIB, 16);
    let mut mem = memory(700, 41);
    write(&mut s, "base", &mem, wo()).unwrap();
    mutate(&mut mem, 50, 42);
    write(&mut s, "next", &mem, wo()).unwrap();
    for max in [1usize, 3, 8, 17, 256, 10_000] {
        let mut r = s.reader("next").unwrap();
        let mut got = Vec::new();
        loop {
            let run = r.next_run(max).unwrap();
            if run.is_empty() {
                break;
            }
            assert!(run.len() <= max, "run of {} with max {max}", run.len());
            got.extend(run.into_iter().copied());
        }
        assert!(got == mem, "runs of at most {max} differ from the image");
        assert!(r.next_run(max).unwrap().is_empty());
    }
}

#[test]
fn the_signed_digest_covers_what_a_restore_reads_and_survives_pinning() {
    let mut s = signable_store();
    let mem = memory(300, 43);
    write(&mut s, "a", &mem, wo()).unwrap();
    write(&mut s, "b", &memory(300, 44), wo()).unwrap();
    let rec = s.image("a").unwrap().clone();
    let d = s.signed_digest(&rec).unwrap();
    assert_ne!(d, s.signed_digest(s.image("b").unwrap()).unwrap());
    // Another page list, another chunk checksum, another name: another digest.
    let mut other = rec.clone();
    other.meta_hash[0] ^= 1;
    assert_ne!(d, s.signed_digest(&other).unwrap());
    let mut other = rec.clone();
    other.name = "c".into();
    assert_ne!(d, s.signed_digest(&other).unwrap());
    let used = rec.chunks[0];
    let i = s.catalog.chunks.iter().position(|c| c.id == used).unwrap();
    s.catalog.chunks[i].hash[5] ^= 1;
    assert_ne!(d, s.signed_digest(&rec).unwrap());
    s.catalog.chunks[i].hash[5] ^= 1;
    s.catalog.chunks[i].stored_len += 1;
    assert_ne!(d, s.signed_digest(&rec).unwrap());
    s.catalog.chunks[i].stored_len -= 1;
    assert_eq!(d, s.signed_digest(&rec).unwrap());
    // Pinning changes nothing a restore reads.
    s.pin("a", true).unwrap();
    assert_eq!(d, s.signed_digest(s.image("a").unwrap()).unwrap());

    s.set_signature("a", vec![7; 64]).unwrap();
    let s = Store::open(s.into_medium()).unwrap();
    assert_eq!(s.image("a").unwrap().signature, vec![7; 64]);
    assert!(s.image("b").unwrap().signature.is_empty());
    assert_eq!(d, s.signed_digest(s.image("a").unwrap()).unwrap());
    assert_clean(&s);
}

#[test]
fn a_damaged_chunk_fails_verification_and_is_never_signed() {
    let mut s = signable_store();
    write(&mut s, "a", &memory(300, 45), wo()).unwrap();
    let rec = s.image("a").unwrap().clone();
    let c = s.catalog().chunks[0];
    let cb = s.cluster_bytes() as usize;
    let mut m = s.into_medium();
    m.bytes[c.cluster as usize * cb + c.offset as usize + 3] ^= 0x40;
    let mut s = Store::open(m).unwrap();
    // The digest is computed from the catalog, so it is unchanged; reading is what fails,
    // and a signature is never attached to such an image.
    let e = s.verify_image("a").unwrap_err().to_string();
    assert!(
        e.contains(&format!("checksum mismatch in chunk {}", c.id)),
        "{e}"
    );
    let e = s.set_signature("a", vec![1; 64]).unwrap_err().to_string();
    assert!(e.contains("checksum mismatch"), "{e}");
    assert!(s.image("a").unwrap().signature.is_empty());
    assert_eq!(rec, *s.image("a").unwrap());
}

/// On a block device gc issues BLKDISCARD: through a loop device, the backing file gets its
/// holes back. Needs root and a free loop device; says so and checks nothing without them.
#[test]
fn block_device_medium_discards_with_blkdiscard() {
    use std::os::unix::fs::MetadataExt;
    let d = tempfile::tempdir().unwrap();
    let backing = d.path().join("backing");
    std::fs::File::create_new(&backing)
        .unwrap()
        .set_len(16 * MIB as u64)
        .unwrap();
    let out = std::process::Command::new("losetup")
        .args(["--find", "--show"])
        .arg(&backing)
        .output();
    let loopdev = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        other => {
            eprintln!("no loop device here ({other:?}): BLKDISCARD not exercised");
            return;
        }
    };
    struct Detach(String);
    impl Drop for Detach {
        fn drop(&mut self) {
            let _ = std::process::Command::new("losetup")
                .args(["-d", &self.0])
                .status();
        }
    }
    let _detach = Detach(loopdev.clone());
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&loopdev)
        .unwrap();
    let mut s = store_on(f);
    write(
        &mut s,
        "a",
        &memory(1500, 5),
        WriteOptions {
            compression: crate::Compression::None,
            ..wo()
        },
    )
    .unwrap();
    s.medium().sync_all().unwrap();
    let full = std::fs::metadata(&backing).unwrap().blocks();
    s.remove("a").unwrap();
    assert!(s.gc().unwrap().discarded > 0);
    let after = std::fs::metadata(&backing).unwrap().blocks();
    assert!(after < full / 2, "backing file blocks {full} -> {after}");
    assert_clean(&s);
}

#[test]
fn a_raw_region_belongs_to_its_image_until_the_image_goes() {
    let mut s = signable_store();
    let cb = s.cluster_bytes();
    let e = s.reserve_raw(3 * cb - 100).unwrap();
    let at = s.raw_offset(e);
    let fill = vec![0xabu8; e.len as usize];
    s.medium.write_at(&fill, at).unwrap();
    let mem = memory(400, 51);
    let mut w = s.writer("lazy", wo()).unwrap();
    w.attach_raw(e).unwrap();
    assert!(w.attach_raw(e).is_err(), "attached twice");
    for p in &mem {
        w.push_page(p).unwrap();
    }
    w.commit(b"lazy".to_vec()).unwrap();
    assert_eq!(s.image("lazy").unwrap().raw, Some(e));
    // Later images never write into it; its bytes stay as the caller left them.
    for g in 0..5 {
        write(&mut s, "other", &memory(300, 60 + g), wo()).unwrap();
        s.gc().unwrap();
    }
    let mut back = vec![0u8; e.len as usize];
    s.medium.read_at(&mut back, at).unwrap();
    assert!(back == fill, "raw region changed");
    assert_eq!(read(&s, "lazy").unwrap(), mem);
    assert_clean(&s);
    // The signed digest covers where the region is.
    let rec = s.image("lazy").unwrap().clone();
    let mut moved = rec.clone();
    moved.raw = Some(Extent {
        cluster: e.cluster + 1,
        len: e.len,
    });
    assert_ne!(
        s.signed_digest(&rec).unwrap(),
        s.signed_digest(&moved).unwrap()
    );

    // A region overlapping what is in use is refused.
    let used = s.catalog().chunks[0].cluster;
    let mut w = s.writer("x", wo()).unwrap();
    let e2 = w
        .attach_raw(Extent {
            cluster: used,
            len: cb,
        })
        .unwrap_err();
    assert!(e2.to_string().contains("in use"), "{e2}");
    drop(w);

    // Gone with its image: gc discards it.
    s.remove("lazy").unwrap();
    s.gc().unwrap();
    s.medium.read_at(&mut back, at).unwrap();
    assert!(back.iter().all(|&b| b == 0), "raw region not discarded");
    assert_clean(&s);
}

#[test]
fn both_checksums_catch_damage_and_only_blake3_stores_sign() {
    for check in [ChunkCheck::Xxh3, ChunkCheck::Blake3] {
        let opts = FormatOptions {
            cluster_blocks: 16,
            check,
            ..FormatOptions::default()
        };
        let mut s = Store::format(MemMedium::new(8 * MIB), opts).unwrap();
        let mem = memory(300, 70);
        write(&mut s, "a", &mem, wo()).unwrap();
        let mut s = Store::open(s.into_medium()).unwrap();
        assert_eq!(s.chunk_check(), check);
        assert_eq!(read(&s, "a").unwrap(), mem);
        let rec = s.image("a").unwrap().clone();
        match check {
            ChunkCheck::Blake3 => assert!(s.signed_digest(&rec).is_ok()),
            ChunkCheck::Xxh3 => {
                let e = s.signed_digest(&rec).unwrap_err().to_string();
                assert!(e.contains("store init --checksum blake3"), "{e}");
            }
        }
        let c = s.catalog().chunks[2];
        let cb = s.cluster_bytes() as usize;
        s.medium.bytes[c.cluster as usize * cb + c.offset as usize + 1] ^= 2;
        let e = read(&s, "a").unwrap_err().to_string();
        assert!(
            e.contains(&format!("checksum mismatch in chunk {}", c.id)),
            "{check:?}: {e}"
        );
    }
}

/// `n` distinct pages, each with 1 KiB of noise (so a chunk of 8 compresses to about 8 KiB
/// and a 64 KiB cluster holds several chunks).
fn noisy(n: usize, seed: u64) -> Vec<Page> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            let mut p = [0u8; PAGE];
            for w in p[..1024].chunks_exact_mut(8) {
                w.copy_from_slice(&rng(&mut s).to_le_bytes());
            }
            p
        })
        .collect()
}

/// A signable store where image `b` keeps every other chunk of the removed image `a`: the
/// clusters `a` wrote are left partly live. Returns the store and `b`'s pages.
fn store_with_holes() -> (Store<MemMedium>, Vec<Page>) {
    let mut s = signable_store();
    let a = noisy(320, 31);
    let opts = WriteOptions {
        dedupe: Dedupe::Full,
        ..wo()
    };
    write(&mut s, "a", &a, opts).unwrap();
    let fresh = noisy(320, 32);
    let b: Vec<Page> = a
        .chunks(8)
        .zip(fresh.chunks(8))
        .enumerate()
        .flat_map(|(i, (old, new))| if i % 2 == 0 { old } else { new }.to_vec())
        .collect();
    let c = write(&mut s, "b", &b, opts).unwrap();
    assert_eq!(c.image.stats.shared_pages, 160);
    s.remove("a").unwrap();
    (s, b)
}

#[test]
fn compaction_frees_partly_live_clusters_and_keeps_images_and_signatures() {
    let (mut s, b) = store_with_holes();
    let cb = s.cluster_bytes();
    let sparse = s.cluster_fill().values().filter(|&&f| f < cb / 2).count();
    assert!(sparse >= 3, "only {sparse} half-empty clusters");
    let used = s.usage().used;
    let digest = s.signed_digest(s.image("b").unwrap()).unwrap();
    let r = s.compact(60).unwrap();
    assert!(r.gained() >= 2 && r.commits >= 1, "{r:?}");
    assert_eq!(s.usage().used, used - r.gained());
    assert!(s.cluster_fill().values().filter(|&&f| f < cb / 2).count() <= 1);
    // Reopened: the same image, byte for byte, under the same signed digest.
    let mut s = Store::open(s.into_medium()).unwrap();
    assert_clean(&s);
    assert_eq!(read(&s, "b").unwrap(), b);
    assert_eq!(s.signed_digest(s.image("b").unwrap()).unwrap(), digest);
    // Nothing left to gain; the emptied clusters are gc's to discard.
    assert_eq!(s.compact(60).unwrap(), CompactReport::default());
    assert!(s.gc().unwrap().discarded >= r.gained());
    assert_clean(&s);
}

#[test]
fn compaction_reclaims_room_for_an_image_a_full_store_refused() {
    let (s, b) = store_with_holes();
    let bytes = s.into_medium().bytes;
    let mut s = Store::open(MemMedium { bytes }).unwrap();
    // Small images of noise until the store refuses one: it is then full.
    let mut fillers = Vec::new();
    loop {
        let f = noisy(16, 100 + fillers.len() as u64);
        match write(&mut s, &format!("f{}", fillers.len()), &f, wo()) {
            Ok(_) => fillers.push(f),
            Err(StoreError::Full { .. }) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(!fillers.is_empty());
    let c = noisy(40, 34);
    let err = write(&mut s, "c", &c, wo()).unwrap_err();
    assert!(matches!(err, StoreError::Full { .. }), "{err}");
    let r = s.compact(60).unwrap();
    assert!(r.gained() >= 2, "{r:?}");
    write(&mut s, "c", &c, wo()).unwrap();
    let s = Store::open(s.into_medium()).unwrap();
    assert_clean(&s);
    assert_eq!(read(&s, "b").unwrap(), b);
    for (k, f) in fillers.iter().enumerate() {
        assert_eq!(&read(&s, &format!("f{k}")).unwrap(), f);
    }
    assert_eq!(read(&s, "c").unwrap(), c);
}

#[test]
fn power_cut_at_any_write_of_compaction_loses_nothing() {
    let (s, b) = store_with_holes();
    let committed = s.into_medium().bytes;
    let before: BTreeMap<String, Vec<Page>> = [("b".to_string(), b)].into();
    let writes = {
        let mut s = cut_store(&committed, u64::MAX, 0);
        assert!(s.compact(60).unwrap().gained() > 0);
        s.into_medium().writes
    };
    let mut seed = 777u64;
    for budget in 0..=writes {
        let torn = (rng(&mut seed) % 4096) as usize;
        let mut s = cut_store(&committed, budget, torn);
        let _ = s.compact(60);
        check_after_cut(s.into_medium().inner.bytes, &before, &before);
    }
    assert!(writes >= 10, "only {writes} write points");
}

/// A medium that records the read-ahead advice it gets.
struct Advised {
    inner: MemMedium,
    advice: std::cell::RefCell<Vec<(u64, u64)>>,
}

impl Medium for Advised {
    fn read_at(&self, buf: &mut [u8], at: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, at)
    }
    fn write_at(&mut self, buf: &[u8], at: u64) -> std::io::Result<()> {
        self.inner.write_at(buf, at)
    }
    fn sync(&mut self) -> std::io::Result<()> {
        self.inner.sync()
    }
    fn size(&self) -> std::io::Result<u64> {
        self.inner.size()
    }
    fn discard(&mut self, at: u64, len: u64) -> std::io::Result<()> {
        self.inner.discard(at, len)
    }
    fn will_need(&self, at: u64, len: u64) {
        self.advice.borrow_mut().push((at, len));
    }
}

#[test]
fn the_reader_advises_every_chunk_after_the_first_once_in_merged_ranges() {
    let (s, b) = store_with_holes();
    let mut s = Store::open(Advised {
        inner: s.into_medium(),
        advice: Default::default(),
    })
    .unwrap();
    // A second image, so `b`'s chunks are not the only ones on the store.
    write(&mut s, "other", &noisy(64, 41), wo()).unwrap();
    s.medium().advice.borrow_mut().clear();
    assert_eq!(read(&s, "b").unwrap(), b);
    let advice = s.medium().advice.borrow().clone();
    let cb = s.cluster_bytes();
    let used = &s.image("b").unwrap().chunks;
    let chunks: Vec<ChunkRec> = s
        .catalog()
        .chunks
        .iter()
        .filter(|c| used.binary_search(&c.id).is_ok())
        .copied()
        .collect();
    let covered = |c: &ChunkRec| {
        let (at, end) = (
            c.cluster * cb + u64::from(c.offset),
            c.cluster * cb + u64::from(c.offset) + u64::from(c.stored_len),
        );
        advice
            .iter()
            .filter(|&&(a, l)| a <= at && end <= a + l)
            .count()
    };
    // The stream's first chunk is read at once; every other one is advised exactly once.
    let first = chunks.iter().filter(|c| covered(c) == 0).count();
    assert_eq!(first, 1, "advice {advice:?}");
    assert!(chunks.iter().all(|c| covered(c) <= 1), "advice {advice:?}");
    // Nothing outside the image's chunks.
    for &(a, l) in &advice {
        assert!(
            chunks
                .iter()
                .any(|c| c.cluster * cb + u64::from(c.offset) == a),
            "range at {a}+{l} starts at no chunk of the image"
        );
    }
    // An image written in one go lies in a few runs: chunks next to each other on the
    // medium share a range.
    let fresh = noisy(400, 42);
    write(&mut s, "fresh", &fresh, wo()).unwrap();
    s.medium().advice.borrow_mut().clear();
    assert_eq!(read(&s, "fresh").unwrap(), fresh);
    let n = s.image("fresh").unwrap().chunks.len();
    let ranges = s.medium().advice.borrow().len();
    assert!(ranges * 4 <= n, "{ranges} ranges for {n} chunks");
}

mod sealed;
mod stream;
