//! Fuzzing a valid v2 image with proptest (small fixed budget, part of the
//! normal test run): mutated header, page index, offset table and chunk
//! bytes must never make the reader panic (or allocate beyond the store),
//! and must end in an error unless the mutation hit a byte the image does
//! not use, in which case the stream must be identical.

use std::io::Cursor;
use std::sync::OnceLock;

use proptest::prelude::*;

use super::{mem_store, pages_of, stream_of, write_with};
use crate::header::off;
use crate::index::{chunk_hash, ChunkEntry, Layout, TABLE_ENTRY_LEN};
use crate::kstream::{collect_stream, Page, PAGE_SIZE};
use crate::*;

struct Fixture {
    bytes: Vec<u8>,
    stream: Vec<u8>,
    info: ImageInfo,
}

fn build(c: Compression) -> Fixture {
    // 150 data pages of every kind: zero, random, duplicate, sparse, text.
    let kinds: Vec<(u8, u64)> = (0..150u64).map(|i| ((i * 7 % 5) as u8, i / 3)).collect();
    let stream = stream_of(&pages_of(&kinds));
    let mut store = mem_store(2 << 20);
    let o = WriteOptions {
        compression: c,
        chunk_pages: 8,
        threads: 0,
        ..WriteOptions::default()
    };
    let info = write_with(&mut store, &stream, o).expect("fixture image");
    Fixture {
        bytes: store.into_inner().into_inner(),
        stream,
        info,
    }
}

fn fixture(zstd: bool) -> &'static Fixture {
    static LZ4: OnceLock<Fixture> = OnceLock::new();
    static ZSTD: OnceLock<Fixture> = OnceLock::new();
    if zstd {
        ZSTD.get_or_init(|| build(Compression::Zstd { level: 3 }))
    } else {
        LZ4.get_or_init(|| build(Compression::Lz4))
    }
}

/// Everything a reader can be asked: open, verify, stream, random access.
fn read_everything(bytes: Vec<u8>, threads: usize) -> Result<Vec<u8>, ImageError> {
    let mut store = Store::new(Cursor::new(bytes))?;
    let mut r = store.reader()?.with_options(ReadOptions {
        threads,
        dup_cache_bytes: 3 * PAGE_SIZE,
    });
    r.verify_all()?;
    let out = collect_stream(&mut r)?;
    let mut buf: Page = [0u8; PAGE_SIZE];
    let pages = (out.len() / PAGE_SIZE) as u64;
    for i in (0..pages).rev().step_by(5) {
        r.page_at(i, &mut buf)?;
        if buf[..] != out[i as usize * PAGE_SIZE..][..PAGE_SIZE] {
            return Err(ImageError::Inconsistent {
                reason: format!("page_at({i}) differs from the stream"),
            });
        }
    }
    Ok(out)
}

/// Byte ranges of the fixture: slot A, slot B, page index, offset table,
/// chunk data, and the unused rest of area A.
fn region(f: &Fixture, which: usize) -> (usize, usize) {
    let layout = Layout::new(f.info.stream.pages, f.info.chunk_pages).expect("layout");
    let area = f.info.area_offset as usize;
    let (idx, tab) = (layout.index_bytes as usize, layout.table_bytes as usize);
    let end = area + f.info.image_bytes as usize;
    match which % 6 {
        0 => (0, SLOT_SIZE as usize),
        1 => (SLOT_SIZE as usize, 2 * SLOT_SIZE as usize),
        2 => (area, area + idx),
        3 => (area + idx, area + idx + tab),
        4 => (area + idx + tab, end),
        _ => (end, end + 8192),
    }
}

/// Make the image's own checksums match again after a mutation, so the
/// structural checks and the decompressors see the damage.
fn reseal(f: &Fixture, b: &mut [u8]) {
    let layout = Layout::new(f.info.stream.pages, f.info.chunk_pages).expect("layout");
    let area = f.info.area_offset as usize;
    let table = area + layout.index_bytes as usize;
    let data = area + layout.data_offset() as usize;
    for k in 0..f.info.chunk_count as usize {
        let at = table + k * TABLE_ENTRY_LEN as usize;
        let e = ChunkEntry::decode(&b[at..at + TABLE_ENTRY_LEN as usize]);
        let start = data.saturating_add(e.offset as usize);
        let end = start.saturating_add(e.stored_len as usize);
        if let Some(stored) = b.get(start..end) {
            let h = chunk_hash(stored);
            b[at + 16..at + 32].copy_from_slice(&h.to_le_bytes());
        }
    }
    let meta = *blake3::hash(&b[area..data]).as_bytes();
    b[off::INDEX_HASH..off::INDEX_HASH + HASH_LEN].copy_from_slice(&meta);
    let sum = *blake3::hash(&b[..off::CHECKSUM]).as_bytes();
    b[off::CHECKSUM..SLOT_SIZE as usize].copy_from_slice(&sum);
}

#[test]
fn fixtures_are_valid_and_resealing_is_harmless() {
    for zstd in [false, true] {
        let f = fixture(zstd);
        assert!(f.info.stats.zero_pages > 0 && f.info.stats.duplicate_pages > 0);
        assert!(f.info.chunk_count > 4);
        assert_eq!(read_everything(f.bytes.clone(), 1).unwrap(), f.stream);
        let mut b = f.bytes.clone();
        reseal(f, &mut b);
        assert_eq!(b, f.bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    /// Plain corruption: an error, or the identical stream.
    #[test]
    fn mutations_are_detected(
        zstd in any::<bool>(),
        which in 0usize..6,
        pos in any::<prop::sample::Index>(),
        flips in prop::collection::vec(1u8..=255, 1..8),
        threads in 0usize..3,
    ) {
        let f = fixture(zstd);
        let (start, end) = region(f, which);
        let mut b = f.bytes.clone();
        let at = start + pos.index(end - start);
        for (i, x) in flips.iter().enumerate() {
            if let Some(byte) = b.get_mut(at + i) {
                *byte ^= x;
            }
        }
        match read_everything(b, threads) {
            Err(_) => {}
            Ok(out) => prop_assert!(out == f.stream, "mutation at {at} changed the stream silently"),
        }
    }

    /// Corruption with every checksum recomputed: structural checks and the
    /// decompressors must cope (no panic, no huge allocation).
    #[test]
    fn resealed_mutations_never_panic(
        zstd in any::<bool>(),
        which in prop_oneof![Just(0usize), 2usize..5],
        pos in any::<prop::sample::Index>(),
        flips in prop::collection::vec(any::<u8>(), 1..8),
        threads in 0usize..3,
    ) {
        let f = fixture(zstd);
        let (start, end) = region(f, which);
        let end = if which == 0 { off::CHECKSUM } else { end };
        let mut b = f.bytes.clone();
        let at = start + pos.index(end - start);
        for (i, x) in flips.iter().enumerate() {
            if let Some(byte) = b.get_mut(at + i) {
                *byte ^= x;
            }
        }
        reseal(f, &mut b);
        if let Ok(out) = read_everything(b, threads) {
            prop_assert_eq!(out.len() % PAGE_SIZE, 0);
        }
    }
}
