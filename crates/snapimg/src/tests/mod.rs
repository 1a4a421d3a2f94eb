//! Tests of images: round trips (property-based), dedupe, random access,
//! corruption naming, atomicity. The store's own rules are in `store`, lazy
//! images in `swap`, fuzzing in `fuzz`.

mod fuzz;
mod store;
mod swap;

use std::io::Cursor;

use proptest::prelude::*;

use crate::index::{Layout, TABLE_ENTRY_LEN};
use crate::kstream::{
    collect_stream, synthetic_stream, Page, PageProducer, StreamHeader, PAGE_SIZE, PFN_END_OF_MAP,
};
use crate::*;

pub(crate) type Mem = Cursor<Vec<u8>>;

const MIB: u64 = 1 << 20;

pub(crate) fn meta() -> CaptureMeta {
    CaptureMeta {
        identity: Identity {
            release: "6.1.0-18-amd64".into(),
            version: "#1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)".into(),
            machine: "x86_64".into(),
            ram_bytes: 512 * MIB,
        },
        created_unix: 1_700_000_000,
        binding: Some(crate::Binding {
            boot_setup: crate::BootSetup {
                init: [7; 32],
                files: [8; 32],
                snapboot_build_id: vec![9; 20],
            },
            cmdline: vec!["console=ttyS0".into(), "ro".into()],
            devices: vec![crate::BoundDevice {
                mount: "/".into(),
                device: "vda".into(),
                fstype: "squashfs".into(),
                bytes: 42 << 20,
                digest: [10; 32],
            }],
        }),
    }
}

pub(crate) fn mem_store(size: u64) -> Store<Mem> {
    Store::format(Cursor::new(vec![0u8; size as usize])).unwrap()
}

pub(super) fn page(p: &[u8]) -> &Page {
    p.try_into().unwrap()
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A valid 6.1-shaped stream around these data pages.
pub(super) fn stream_of(data: &[Page]) -> Vec<u8> {
    let n = data.len() as u64;
    let h = StreamHeader::x86_64(n, 4 * n + 4096, 0x1234);
    let meta = h.meta_pages().0 as usize;
    let mut out = h.encode().to_vec();
    let mut entries: Vec<u64> = (0..n).map(|p| 0x100 + 3 * p).collect();
    if entries.len() < meta * 512 {
        entries.push(PFN_END_OF_MAP);
    }
    entries.resize(meta * 512, 0);
    out.extend(entries.iter().flat_map(|e| e.to_le_bytes()));
    for p in data {
        out.extend_from_slice(p);
    }
    out
}

/// Data page of a kind: 0 zero, 1 random, 2 duplicate of an earlier page,
/// 3 sparse (compressible), 4 repeating text.
pub(super) fn make_page(kind: u8, seed: u64, earlier: &[Page]) -> Page {
    let mut p = [0u8; PAGE_SIZE];
    let mut st = seed;
    match kind % 5 {
        0 => {}
        1 => {
            for w in p.chunks_exact_mut(8) {
                w.copy_from_slice(&splitmix(&mut st).to_le_bytes());
            }
        }
        2 if !earlier.is_empty() => p = earlier[(seed % earlier.len() as u64) as usize],
        2 | 3 => {
            for _ in 0..1 + seed % 8 {
                let at = (splitmix(&mut st) % 512) as usize * 8;
                p[at..at + 8].copy_from_slice(&splitmix(&mut st).to_le_bytes());
            }
        }
        _ => {
            let text = format!("snapboot page {seed} says hello; ");
            for (b, t) in p.iter_mut().zip(text.bytes().cycle()) {
                *b = t;
            }
        }
    }
    p
}

pub(super) fn pages_of(kinds: &[(u8, u64)]) -> Vec<Page> {
    let mut out: Vec<Page> = Vec::new();
    for &(k, s) in kinds {
        let p = make_page(k, s, &out);
        out.push(p);
    }
    out
}

pub(super) fn write_with<D: Device>(
    store: &mut Store<D>,
    stream: &[u8],
    opts: WriteOptions,
) -> Result<ImageInfo, ImageError> {
    let mut w = store.writer_with(meta(), opts)?;
    for p in stream.chunks_exact(PAGE_SIZE) {
        w.push_page(page(p))?;
    }
    w.commit()
}

fn read_with<D: Device>(store: &mut Store<D>, threads: usize) -> Result<Vec<u8>, ImageError> {
    let mut r = store.reader()?.with_options(ReadOptions {
        threads,
        ..ReadOptions::default()
    });
    assert!(r.verify_all()?.verified);
    collect_stream(&mut r)
}

fn opts(compression: Compression, chunk_pages: u32, threads: usize) -> WriteOptions {
    WriteOptions {
        compression,
        chunk_pages,
        threads,
        ..WriteOptions::default()
    }
}

/// Store bytes, reopened as a fresh store.
pub(super) fn poke(store: Store<Mem>, f: impl FnOnce(&mut Vec<u8>)) -> Store<Mem> {
    let mut bytes = store.into_inner().into_inner();
    f(&mut bytes);
    Store::new(Cursor::new(bytes)).unwrap()
}

#[test]
fn default_writer_writes_v2_and_round_trips() {
    let stream = synthetic_stream(1000, 1);
    let mut store = mem_store(16 * MIB);
    let mut w = store.writer(meta()).unwrap();
    for p in stream.chunks_exact(PAGE_SIZE) {
        w.push_page(page(p)).unwrap();
    }
    let info = w.commit().unwrap();
    assert_eq!(
        (info.format_version, info.slot, info.generation),
        (2, Slot::A, 1)
    );
    let s = &info.stats;
    assert_eq!(s.raw_pages, 1003);
    assert_eq!(s.zero_pages + s.duplicate_pages + s.unique_pages, 1003);
    assert_eq!(s.compressor, "lz4");
    assert_eq!(s.chunk_count, s.unique_pages.div_ceil(32));
    // The synthetic stream's mostly-zero pages (1 in 7) compress.
    assert!(s.stored_bytes < s.raw_bytes, "{s:?}");
    assert!(info.image_bytes < 1003 * 4096);
    for threads in [0, 1, 3] {
        assert_eq!(read_with(&mut store, threads).unwrap(), stream);
    }
    let mut r = store.reader().unwrap();
    assert_eq!(r.info().format_version, 2);
    assert_eq!(
        r.info().binding,
        meta().binding,
        "the binding is kept with the image"
    );
    let mut buf = [0u8; PAGE_SIZE];
    for i in [1002, 0, 517, 3, 517, 1] {
        r.page_at(i, &mut buf).unwrap();
        assert_eq!(
            &buf[..],
            &stream[i as usize * PAGE_SIZE..][..PAGE_SIZE],
            "page {i}"
        );
    }
    let err = r.page_at(1003, &mut buf).unwrap_err();
    assert_eq!(
        err.to_string(),
        "stream page 1003 requested, the image has 1003 pages"
    );
}

#[test]
fn zero_and_duplicate_pages_are_not_stored() {
    // 300 data pages: 100 zero, 100 copies of 10 distinct pages, 100 random.
    let mut kinds = Vec::new();
    for i in 0..100u64 {
        kinds.push((0, i));
        kinds.push((1, 1000 + i % 10));
        kinds.push((1, i));
    }
    let stream = stream_of(&pages_of(&kinds));
    let mut store = mem_store(16 * MIB);
    let info = write_with(&mut store, &stream, opts(Compression::Lz4, 32, 2)).unwrap();
    let s = info.stats.clone();
    // Header + 1 index page + 10 distinct + 100 random pages are unique.
    assert_eq!(
        (s.zero_pages, s.duplicate_pages, s.unique_pages),
        (100, 90, 112)
    );
    assert_eq!(s.a_dedupe_bytes, 112 * 4096);
    assert_eq!(read_with(&mut store, 2).unwrap(), stream);
    let json = serde_json::to_value(&info).unwrap();
    assert_eq!(json["stats"]["zero_pages"], 100);
    assert_eq!(json["stats"]["compressor"], "lz4");
    assert_eq!(json["format_version"], 2);
}

#[test]
fn tiny_caches_lose_dedupe_but_never_correctness() {
    // Duplicates far behind their first copy: with a one-chunk dedupe cache
    // they are stored again; with no reader dup cache they are refetched.
    let kinds: Vec<(u8, u64)> = (0..400u64).map(|i| (1, i % 150)).collect();
    let stream = stream_of(&pages_of(&kinds));
    let mut store = mem_store(16 * MIB);
    let mut o = opts(Compression::Lz4, 8, 1);
    o.dedupe_cache_bytes = 8 * 4096;
    let small = write_with(&mut store, &stream, o).unwrap();
    let full = write_with(&mut store, &stream, opts(Compression::Lz4, 8, 1)).unwrap();
    assert_eq!(full.stats.duplicate_pages, 250);
    assert!(small.stats.duplicate_pages < 250, "{:?}", small.stats);
    let mut r = store.reader().unwrap().with_options(ReadOptions {
        threads: 2,
        dup_cache_bytes: 0,
    });
    assert_eq!(collect_stream(&mut r).unwrap(), stream);
    drop(r);
    let mut r = store.reader_for(Slot::A).unwrap();
    assert_eq!(r.info().stats, small.stats);
    assert_eq!(collect_stream(&mut r).unwrap(), stream);
}

#[test]
fn zstd_round_trip_and_stats() {
    let stream = synthetic_stream(300, 4);
    let mut store = mem_store(16 * MIB);
    let info = write_with(
        &mut store,
        &stream,
        opts(Compression::Zstd { level: 3 }, 16, 2),
    )
    .unwrap();
    assert_eq!(info.stats.compressor, "zstd");
    assert_eq!(info.stats.level, Some(3));
    assert_eq!(read_with(&mut store, 1).unwrap(), stream);
    assert_eq!(read_with(&mut store, 0).unwrap(), stream);
}

#[test]
fn bad_options_are_refused() {
    let mut store = mem_store(4 * MIB);
    let err = store
        .writer_with(meta(), opts(Compression::Lz4, 0, 1))
        .unwrap_err();
    assert!(matches!(err, ImageError::BadOptions { .. }), "{err}");
    let err = store
        .writer_with(meta(), opts(Compression::Zstd { level: 99 }, 32, 1))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid options: zstd level 99 is not supported"
    );
}

/// Absolute store offset of chunk `k`'s stored bytes, from the offset table.
pub(super) fn chunk_at(bytes: &[u8], info: &ImageInfo, k: usize) -> usize {
    let layout = Layout::new(info.stream.pages, info.chunk_pages).unwrap();
    let area = info.area_offset as usize;
    let entry = area + layout.index_bytes as usize + k * TABLE_ENTRY_LEN as usize;
    let offset = crate::kstream::le_u64(bytes, entry) as usize;
    area + layout.data_offset() as usize + offset
}

/// Stream page range `a..b` of chunk `k` in an image with chunk size `cp`, no zero or dup pages.
fn chunk_name(k: u64, cp: u64, pages: u64) -> String {
    format!(
        "chunk {k} (stream pages {}..{})",
        k * cp,
        ((k + 1) * cp).min(pages)
    )
}

#[test]
fn corrupt_chunk_is_named_and_never_yielded() {
    let kinds: Vec<(u8, u64)> = (0..200u64).map(|i| (1, i)).collect();
    let stream = stream_of(&pages_of(&kinds));
    let pages = (stream.len() / PAGE_SIZE) as u64;
    for threads in [0, 1, 3] {
        let mut store = mem_store(8 * MIB);
        let info = write_with(&mut store, &stream, opts(Compression::Lz4, 32, threads)).unwrap();
        let mut store = poke(store, |b| {
            let at = chunk_at(b, &info, 3) + 100;
            b[at] ^= 0x20;
        });
        let mut r = store.reader().unwrap().with_options(ReadOptions {
            threads,
            ..ReadOptions::default()
        });
        let err = r.verify_all().unwrap_err();
        let name = chunk_name(3, 32, pages);
        assert_eq!(err.to_string(), format!("checksum mismatch in {name}"));
        assert!(!r.info().verified);
        let mut buf = [0u8; PAGE_SIZE];
        let mut yielded = 0;
        let err = loop {
            match r.next_page(&mut buf) {
                Ok(true) => yielded += 1,
                Ok(false) => panic!("corruption not detected"),
                Err(e) => break e,
            }
        };
        assert_eq!(yielded, 3 * 32);
        assert!(matches!(err, ImageError::ChecksumMismatch { .. }));
        // Random access elsewhere still works; into the bad chunk it fails.
        r.page_at(5, &mut buf).unwrap();
        assert_eq!(&buf[..], &stream[5 * PAGE_SIZE..6 * PAGE_SIZE]);
        assert!(r.page_at(3 * 32 + 1, &mut buf).is_err());
        // In runs: everything before the bad chunk, nothing of it.
        r.rewind();
        let mut yielded = 0;
        let err = loop {
            match r.next_run(50) {
                Ok(run) if run.is_empty() => panic!("corruption not detected"),
                Ok(run) => yielded += run.len(),
                Err(e) => break e,
            }
        };
        assert_eq!(yielded, 3 * 32);
        assert!(matches!(err, ImageError::ChecksumMismatch { .. }));
    }
}

#[test]
fn corrupt_index_and_table_are_named() {
    let stream = synthetic_stream(500, 6);
    let mut store = mem_store(8 * MIB);
    let info = write_with(&mut store, &stream, WriteOptions::default()).unwrap();
    let area = info.area_offset as usize;
    for at in [area + 3, area + 4096 + 2, area + 4096 + 4095] {
        let s = poke(store, |b| b[at] ^= 1);
        let mut s2 = s;
        let err = s2.reader().unwrap_err();
        assert_eq!(
            err.to_string(),
            "checksum mismatch in page index and offset table"
        );
        store = poke(s2, |b| b[at] ^= 1);
    }
    assert_eq!(read_with(&mut store, 1).unwrap(), stream);
}

#[test]
fn interrupted_write_keeps_previous_image() {
    let (s1, s2, s3) = (
        synthetic_stream(400, 1),
        synthetic_stream(500, 2),
        synthetic_stream(600, 3),
    );
    let mut store = mem_store(16 * MIB);
    // Two images: both readable in turn, the older one by explicit fallback.
    write_with(&mut store, &s1, WriteOptions::default()).unwrap();
    assert_eq!(read_with(&mut store, 2).unwrap(), s1);
    write_with(&mut store, &s2, WriteOptions::default()).unwrap();
    assert_eq!(read_with(&mut store, 2).unwrap(), s2);
    let mut r = store.reader_for(Slot::A).unwrap();
    let mut buf = [0u8; PAGE_SIZE];
    r.page_at(300, &mut buf).unwrap();
    assert_eq!(&buf[..], &s1[300 * PAGE_SIZE..301 * PAGE_SIZE]);
    assert_eq!(collect_stream(&mut r).unwrap(), s1);

    // Power cut half way through a write (writer dropped): goes to slot A.
    {
        let mut w = store.writer(meta()).unwrap();
        assert_eq!((w.slot(), w.generation()), (Slot::A, 3));
        for p in s3.chunks_exact(PAGE_SIZE).take(300) {
            w.push_page(page(p)).unwrap();
        }
    }
    assert_eq!(store.newest().unwrap().generation, 2);
    assert_eq!(read_with(&mut store, 1).unwrap(), s2);

    // Garbage over the unfinished area A: still generation 2.
    let area_a = store.area_offset(Slot::A) as usize;
    let cap = store.area_capacity() as usize;
    let mut store = poke(store, |b| b[area_a..area_a + cap].fill(0xA5));
    assert_eq!(read_with(&mut store, 1).unwrap(), s2);

    // Everything but the header written, then the cut: a torn header.
    let mut w = store.writer(meta()).unwrap();
    for p in s3.chunks_exact(PAGE_SIZE) {
        w.push_page(page(p)).unwrap();
    }
    w.commit().unwrap();
    let mut store = poke(store, |b| b[2048..4096].fill(0));
    assert_eq!(store.newest().unwrap().generation, 2);
    assert_eq!(read_with(&mut store, 1).unwrap(), s2);

    // Committing an incomplete stream fails and publishes nothing.
    let mut w = store.writer(meta()).unwrap();
    for p in s1.chunks_exact(PAGE_SIZE).take(10) {
        w.push_page(page(p)).unwrap();
    }
    let err = w.commit().unwrap_err();
    assert!(
        std::error::Error::source(&err)
            .is_some_and(|s| s.to_string().contains("stream ended after 10 of 402 pages")),
        "{err}"
    );
    assert_eq!(read_with(&mut store, 1).unwrap(), s2);
    assert_eq!(
        write_with(&mut store, &s3, WriteOptions::default())
            .unwrap()
            .generation,
        3
    );
    assert_eq!(read_with(&mut store, 1).unwrap(), s3);
}

#[test]
fn image_larger_than_the_area_fails_and_keeps_the_previous() {
    let small = synthetic_stream(8, 1);
    let mut store = mem_store(MIN_STORE_SIZE + 16 * 4096);
    write_with(&mut store, &small, WriteOptions::default()).unwrap();
    let kinds: Vec<(u8, u64)> = (0..100u64).map(|i| (1, i)).collect();
    let big = stream_of(&pages_of(&kinds));
    let err = write_with(&mut store, &big, opts(Compression::Lz4, 4, 1)).unwrap_err();
    assert!(matches!(err, ImageError::OutOfSpace { .. }), "{err}");
    assert!(err.to_string().starts_with("image does not fit: "), "{err}");
    assert_eq!(read_with(&mut store, 1).unwrap(), small);
}

#[test]
fn file_store_reads_with_pread_workers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.img");
    let stream = synthetic_stream(2000, 9);
    let info = {
        let mut store = Store::create_file(&path, 32 * MIB).unwrap();
        write_with(&mut store, &stream, opts(Compression::Lz4, 32, 2)).unwrap()
    };
    let mut store = Store::open(&path, false).unwrap();
    for threads in [0, 1, 4] {
        assert_eq!(read_with(&mut store, threads).unwrap(), stream);
    }
    drop(store);
    // Flip a byte of chunk data on disk: named by the worker that read it.
    let mut bytes = std::fs::read(&path).unwrap();
    let at = chunk_at(&bytes, &info, 0) + 10;
    bytes[at] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let mut store = Store::open(&path, false).unwrap();
    let err = read_with(&mut store, 2).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("checksum mismatch in chunk 0 (stream pages 0.."),
        "{err}"
    );
}

#[test]
fn real_stream_head_round_trips() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/real-stream-head.zst"
    );
    let z = std::fs::read(path).unwrap_or_else(|e| panic!("fixture {path}: {e}"));
    let stream = zstd::decode_all(&z[..]).unwrap();
    let mut store = mem_store(16 * MIB);
    for c in [
        Compression::None,
        Compression::Lz4,
        Compression::Zstd { level: 3 },
    ] {
        let info = write_with(&mut store, &stream, opts(c, 32, 2)).unwrap();
        assert!(info.stats.stored_bytes < info.stats.raw_bytes);
        assert_eq!(read_with(&mut store, 2).unwrap(), stream);
    }
}

/// One data page kind and seed per page; kinds weighted towards duplicates.
fn page_kinds(max: usize) -> impl Strategy<Value = Vec<(u8, u64)>> {
    prop::collection::vec((0u8..5, 0u64..1_000_000), 1..max)
}

fn compression() -> impl Strategy<Value = Compression> {
    prop_oneof![
        Just(Compression::None),
        Just(Compression::Lz4),
        (1i32..=4).prop_map(|level| Compression::Zstd { level }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn any_stream_round_trips(
        kinds in page_kinds(260),
        c in compression(),
        chunk_pages in 1u32..40,
        wthreads in 0usize..3,
        rthreads in 0usize..3,
        cache_pages in prop_oneof![Just(0usize), 1usize..64, Just(1 << 20)],
    ) {
        let stream = stream_of(&pages_of(&kinds));
        let mut store = mem_store(8 * MIB);
        let mut o = opts(c, chunk_pages, wthreads);
        o.dedupe_cache_bytes = cache_pages * PAGE_SIZE;
        let info = write_with(&mut store, &stream, o).unwrap();
        let s = &info.stats;
        prop_assert_eq!(s.zero_pages + s.duplicate_pages + s.unique_pages, s.raw_pages);
        prop_assert!(s.stored_bytes <= s.a_dedupe_bytes);
        let mut r = store.reader().unwrap().with_options(ReadOptions {
            threads: rthreads,
            dup_cache_bytes: cache_pages * PAGE_SIZE,
        });
        prop_assert_eq!(collect_stream(&mut r).unwrap(), stream.clone());
        let pages = stream.len() / PAGE_SIZE;
        let mut buf = [0u8; PAGE_SIZE];
        for i in (0..pages).rev().step_by(7) {
            r.page_at(i as u64, &mut buf).unwrap();
            prop_assert_eq!(&buf[..], &stream[i * PAGE_SIZE..(i + 1) * PAGE_SIZE]);
        }
    }

    #[test]
    fn runs_hand_out_the_same_stream_as_pages(
        kinds in page_kinds(260),
        chunk_pages in 1u32..40,
        rthreads in 0usize..3,
        cache_pages in prop_oneof![Just(0usize), 1usize..8, Just(1 << 20)],
        max in 1usize..80,
    ) {
        let stream = stream_of(&pages_of(&kinds));
        let mut store = mem_store(8 * MIB);
        write_with(&mut store, &stream, opts(Compression::Lz4, chunk_pages, 0)).unwrap();
        let mut r = store.reader().unwrap().with_options(ReadOptions {
            threads: rthreads,
            dup_cache_bytes: cache_pages * PAGE_SIZE,
        });
        let mut out = Vec::with_capacity(stream.len());
        let mut runs = 0;
        loop {
            let run = r.next_run(max).unwrap();
            if run.is_empty() {
                break;
            }
            prop_assert!(run.len() <= max);
            runs += 1;
            for p in run {
                out.extend_from_slice(&p[..]);
            }
        }
        prop_assert_eq!(out.len(), stream.len());
        prop_assert!(out == stream, "runs differ from the stream");
        prop_assert!(runs >= stream.len() / PAGE_SIZE / max);
        // The end stays the end.
        prop_assert!(r.next_run(max).unwrap().is_empty());
    }

    #[test]
    fn uniform_streams_round_trip(kind in 0u8..5, n in 1usize..300, seed in any::<u64>()) {
        // All zero, all one page, all incompressible, all sparse, all text.
        let kinds: Vec<(u8, u64)> = (0..n as u64)
            .map(|i| (kind, if kind == 2 { 0 } else { seed ^ i }))
            .collect();
        let stream = stream_of(&pages_of(&kinds));
        let mut store = mem_store(8 * MIB);
        let info = write_with(&mut store, &stream, opts(Compression::Lz4, 32, 1)).unwrap();
        if kind == 0 {
            prop_assert_eq!(info.stats.zero_pages, n as u64);
        }
        prop_assert_eq!(read_with(&mut store, 1).unwrap(), stream);
    }
}
