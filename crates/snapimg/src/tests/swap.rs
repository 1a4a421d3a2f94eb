//! Tests of lazy images: the swap region in the header, `Store::plan_swap`,
//! writers with a region, and readers checking that the store holds it.

use super::{mem_store, meta, pages_of, poke, stream_of, write_with, Mem};
use crate::header::{off, Header};
use crate::kstream::{collect_stream, synthetic_stream, PAGE_SIZE};
use crate::*;

const MIB: u64 = 1 << 20;
const PAGE: u64 = PAGE_SIZE as u64;
const UUID: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
const UUID_STR: &str = "00010203-0405-0607-0809-0a0b0c0d0e0f";

fn region(plan: &SwapPlan, used_pages: u64) -> SwapRegion {
    SwapRegion {
        offset: plan.offset,
        bytes: plan.bytes,
        used_pages,
        uuid: UUID,
        verity: None,
    }
}

fn lazy(swap: SwapRegion) -> WriteOptions {
    WriteOptions {
        threads: 1,
        swap: Some(swap),
        ..WriteOptions::default()
    }
}

fn read<D: Device>(store: &mut Store<D>) -> Vec<u8> {
    let mut r = store.reader().unwrap();
    assert!(r.verify_all().unwrap().verified);
    collect_stream(&mut r).unwrap()
}

/// 100 incompressible data pages (about 400 KiB stored).
fn random_stream() -> Vec<u8> {
    let kinds: Vec<(u8, u64)> = (0..100u64).map(|i| (1, i)).collect();
    stream_of(&pages_of(&kinds))
}

/// A store with a lazy image in slot A; returns the region and the slot bytes.
fn lazy_store() -> (Store<Mem>, SwapRegion, Vec<u8>, ImageInfo) {
    let mut store = mem_store(8 * MIB);
    let plan = store.plan_swap(MIB).unwrap();
    let swap = region(&plan, 123);
    let stream = synthetic_stream(300, 3);
    let info = write_with(&mut store, &stream, lazy(swap)).unwrap();
    let mut slot = vec![0u8; SLOT_SIZE as usize];
    store.read_at(0, &mut slot, "reading slot A").unwrap();
    (store, swap, slot, info)
}

fn put_u64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

fn reseal(b: &mut [u8]) {
    let sum = *blake3::hash(&b[..off::CHECKSUM]).as_bytes();
    b[off::CHECKSUM..SLOT_SIZE as usize].copy_from_slice(&sum);
}

/// Decode `slot` after `f` and a reseal; the `Inconsistent` reason.
fn reason_after(slot: &[u8], f: impl FnOnce(&mut Vec<u8>)) -> String {
    let mut b = slot.to_vec();
    f(&mut b);
    reseal(&mut b);
    match Header::decode(&b) {
        Err(ImageError::Inconsistent { reason }) => reason,
        other => panic!("expected Inconsistent, got {other:?}"),
    }
}

#[test]
fn header_round_trip_with_swap_region() {
    let (_, swap, slot, info) = lazy_store();
    let h = Header::decode(&slot).unwrap().unwrap();
    assert_eq!(h.swap, Some(swap));
    assert_eq!(h.encode().unwrap(), slot);
    let le = |o: usize| crate::kstream::le_u64(&slot, o);
    assert_eq!(
        (le(0x1D0), le(0x1D8), le(0x1E0)),
        (swap.offset, swap.bytes, 123)
    );
    assert_eq!(&slot[0x1E8..0x1F8], &UUID);
    // The binding record follows at 0x200 (its length at 0x1F8); nothing after it.
    let len = u32::from_le_bytes(slot[0x1F8..0x1FC].try_into().unwrap()) as usize;
    assert!(len > 0 && slot[0x1FC..0x200].iter().all(|&b| b == 0));
    assert!(slot[0x200 + len..off::CHECKSUM].iter().all(|&b| b == 0));
    assert_eq!(h.store_end(), swap.offset + swap.bytes);
    assert!(info.area_offset + info.image_bytes <= swap.offset);
}

#[test]
fn decode_rejects_bad_swap_fields() {
    let (_, swap, slot, info) = lazy_store();
    let image_end = info.area_offset + info.image_bytes;

    let overlap = (image_end - 1) / PAGE * PAGE;
    let r = reason_after(&slot, |b| put_u64(b, off::SWAP_OFFSET, overlap));
    assert_eq!(
        r,
        format!(
            "swap_offset {overlap} overlaps the image (area_offset {} + image_bytes {})",
            info.area_offset, info.image_bytes
        )
    );

    let r = reason_after(&slot, |b| put_u64(b, off::SWAP_OFFSET, swap.offset + 512));
    assert_eq!(
        r,
        format!(
            "swap region: offset {} and size {} must be multiples of 4096",
            swap.offset + 512,
            swap.bytes
        )
    );
    let r = reason_after(&slot, |b| put_u64(b, off::SWAP_BYTES, swap.bytes - 8));
    assert!(r.contains("must be multiples of 4096"), "{r}");

    let pages = swap.bytes / PAGE;
    let r = reason_after(&slot, |b| put_u64(b, off::SWAP_USED_PAGES, pages));
    assert_eq!(
        r,
        format!(
            "swap region: {pages} used pages do not fit a region of {pages} pages \
             (one is the swap header)"
        )
    );

    let r = reason_after(&slot, |b| put_u64(b, off::SWAP_BYTES, 9 * PAGE));
    assert_eq!(
        r,
        format!(
            "swap region: {} bytes (9 pages) is smaller than 10 pages",
            9 * PAGE
        )
    );

    let r = reason_after(&slot, |b| {
        put_u64(b, off::SWAP_OFFSET, u64::MAX / PAGE * PAGE)
    });
    assert!(r.ends_with("overflows"), "{r}");

    // Zero size: everything else must be zero too.
    let clear = |b: &mut Vec<u8>| {
        for o in [off::SWAP_OFFSET, off::SWAP_BYTES, off::SWAP_USED_PAGES] {
            put_u64(b, o, 0);
        }
    };
    let r = reason_after(&slot, clear);
    assert_eq!(
        r,
        format!(
            "swap_bytes is 0 (full image) but swap_offset 0, swap_used_pages 0 \
             or swap_uuid {} is not zero",
            crate::hex(&UUID)
        )
    );
    let r = reason_after(&slot, |b| {
        clear(b);
        b[off::SWAP_UUID..off::SWAP_UUID + 16].fill(0);
        put_u64(b, off::SWAP_OFFSET, swap.offset);
    });
    assert!(r.starts_with("swap_bytes is 0 (full image)"), "{r}");

    // All four zero: a full image.
    let mut b = slot.clone();
    clear(&mut b);
    b[off::SWAP_UUID..off::SWAP_UUID + 16].fill(0);
    reseal(&mut b);
    let h = Header::decode(&b).unwrap().unwrap();
    assert_eq!((h.swap, h.info(Slot::A).swap), (None, None));
}

#[test]
fn plan_swap_keeps_the_newest_image_and_clears_the_target_slot() {
    let (s1, s2) = (synthetic_stream(200, 1), synthetic_stream(250, 2));
    let mut store = mem_store(8 * MIB);
    write_with(&mut store, &s1, WriteOptions::default()).unwrap();
    write_with(&mut store, &s2, WriteOptions::default()).unwrap();
    let cap = store.area_capacity();

    let plan = store.plan_swap(MIB + 100).unwrap();
    let area = store.area_offset(Slot::A);
    assert_eq!(
        plan,
        SwapPlan {
            slot: Slot::A,
            area_offset: area,
            offset: area + cap - MIB,
            bytes: MIB,
        }
    );
    let [a, b] = store.slots().unwrap();
    assert!(matches!(a, SlotState::Empty), "{a}");
    assert_eq!(b.to_string(), "generation 2");
    let newest = store.newest().unwrap();
    assert_eq!(
        (newest.slot, newest.generation, newest.swap),
        (Slot::B, 2, None)
    );
    assert_eq!(read(&mut store), s2);

    // The kernel pages out into the region (and anything may land in area A):
    // generation 2 in area B is untouched.
    let mut store = poke(store, |b| {
        b[area as usize..(area + cap) as usize].fill(0x5A);
    });
    assert_eq!(read(&mut store), s2);

    // The writer picks the planned slot; planning again picks it again.
    assert_eq!(store.plan_swap(MIB).unwrap(), plan);
    let w = store.writer_with(meta(), lazy(region(&plan, 0))).unwrap();
    assert_eq!((w.slot(), w.generation()), (plan.slot, 3));
    assert_eq!(w.room(), plan.offset - plan.area_offset);
    drop(w);
    assert_eq!(read(&mut store), s2);
}

#[test]
fn plan_swap_refuses_bad_sizes_and_read_only_stores() {
    let mut store = mem_store(4 * MIB);
    let cap = store.area_capacity();
    let max = cap - 64 * PAGE;
    for bytes in [0, 9 * PAGE + 4095, max + PAGE, u64::MAX] {
        let err = store.plan_swap(bytes).unwrap_err();
        let rounded = bytes / PAGE * PAGE;
        assert_eq!(
            err.to_string(),
            format!(
                "invalid swap region: {rounded} bytes requested; an area of {cap} bytes fits \
                 a region of 40960..={max} bytes (10.. pages, leaving 64 pages to the image)"
            )
        );
    }
    assert_eq!(
        store.plan_swap(max).unwrap().offset,
        store.area_offset(Slot::A) + 64 * PAGE
    );
    assert_eq!(store.plan_swap(10 * PAGE).unwrap().bytes, 10 * PAGE);

    // Areas of 16 pages hold no region.
    let mut small = mem_store(MIN_STORE_SIZE);
    let err = small.plan_swap(10 * PAGE).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("invalid swap region: store areas of 65536 bytes are too small"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.img");
    drop(Store::create_file(&path, 4 * MIB).unwrap());
    let mut ro = Store::open(&path, false).unwrap();
    assert!(matches!(ro.plan_swap(MIB), Err(ImageError::ReadOnly)));
}

#[test]
fn lazy_image_commits_and_reports_its_region() {
    let (s1, s2, s3) = (
        synthetic_stream(200, 1),
        synthetic_stream(300, 2),
        synthetic_stream(150, 3),
    );
    let mut store = mem_store(8 * MIB);
    let full = write_with(&mut store, &s1, WriteOptions::default()).unwrap();
    assert_eq!(full.swap, None);

    let plan = store.plan_swap(2 * MIB).unwrap();
    assert_eq!(plan.slot, Slot::B);
    let swap = SwapRegion {
        verity: Some(crate::SwapVerity {
            data_blocks: 400,
            hash_start: 500,
            root: [3; 32],
            salt: [4; 32],
        }),
        ..region(&plan, 300)
    };
    let info = write_with(&mut store, &s2, lazy(swap)).unwrap();
    let want = SwapInfo {
        offset: plan.offset,
        bytes: 2 * MIB,
        used_pages: 300,
        uuid: UUID_STR.into(),
        verity: Some(crate::VerityInfo {
            data_blocks: 400,
            hash_start: 500,
            root: "03".repeat(32),
            salt: "04".repeat(32),
        }),
    };
    assert_eq!((info.slot, info.generation), (Slot::B, 2));
    assert_eq!(info.swap.as_ref(), Some(&want));
    assert!(info.area_offset + info.image_bytes <= plan.offset);
    assert_eq!(want.uuid_bytes(), UUID);
    assert_eq!(want.region(), swap);

    assert_eq!(store.newest().unwrap().swap.as_ref(), Some(&want));
    {
        let r = store.reader().unwrap();
        assert_eq!(r.info().swap.as_ref(), Some(&want));
        let json = serde_json::to_value(r.info()).unwrap();
        assert_eq!(json["swap"]["uuid"], UUID_STR);
        assert_eq!(json["swap"]["bytes"], 2 * MIB);
        assert_eq!(json["swap"]["used_pages"], 300);
    }
    assert_eq!(read(&mut store), s2);
    let r = store.reader_for(Slot::A).unwrap();
    assert_eq!(r.info().swap, None);
    assert!(serde_json::to_value(r.info()).unwrap()["swap"].is_null());
    drop(r);

    // The swap region belongs to area B: a power cut while the next capture
    // (into area A) is under way leaves the lazy image and its region whole.
    let mut store = poke(store, |b| {
        let a = 2 * SLOT_SIZE as usize;
        b[..SLOT_SIZE as usize].fill(0);
        b[a..a + (4 * MIB) as usize - 2 * SLOT_SIZE as usize].fill(0xC3);
    });
    let mut w = store.writer(meta()).unwrap();
    assert_eq!(w.slot(), Slot::A);
    for p in s3.chunks_exact(PAGE_SIZE).take(50) {
        w.push_page(p.try_into().unwrap()).unwrap();
    }
    drop(w);
    assert_eq!(store.newest().unwrap().swap.as_ref(), Some(&want));
    assert_eq!(read(&mut store), s2);
    let done = write_with(&mut store, &s3, WriteOptions::default()).unwrap();
    assert_eq!((done.slot, done.generation, done.swap), (Slot::A, 3, None));
    assert_eq!(read(&mut store), s3);
}

#[test]
fn image_outgrowing_the_room_before_the_region_fails_and_keeps_the_previous() {
    let small = synthetic_stream(8, 1);
    let big = random_stream();
    let mut store = mem_store(4 * MIB);
    write_with(&mut store, &small, WriteOptions::default()).unwrap();
    let cap = store.area_capacity();

    // 64 pages in front of the region: the page index and table fit, the
    // chunks (about 400 KiB) do not.
    let plan = store.plan_swap(cap - 64 * PAGE).unwrap();
    assert_eq!(plan.slot, Slot::B);
    let mut o = lazy(region(&plan, 1));
    o.chunk_pages = 4;
    let err = write_with(&mut store, &big, o).unwrap_err();
    match &err {
        ImageError::OutOfSpace { available, .. } => assert_eq!(*available, 64 * PAGE),
        other => panic!("expected OutOfSpace, got {other}"),
    }
    assert!(err.to_string().ends_with("store area has 262144"), "{err}");
    let newest = store.newest().unwrap();
    assert_eq!((newest.slot, newest.generation), (Slot::A, 1));
    assert_eq!(read(&mut store), small);

    // One page in front of the region: not even the index and table fit.
    let area_b = store.area_offset(Slot::B);
    let o = lazy(SwapRegion {
        offset: area_b + PAGE,
        bytes: cap - PAGE,
        used_pages: 0,
        uuid: UUID,
        verity: None,
    });
    let err = write_with(&mut store, &big, o).unwrap_err();
    assert!(
        matches!(
            err,
            ImageError::TooLarge {
                needed: 8193,
                available: 4096
            }
        ),
        "{err}"
    );
    assert_eq!(store.newest().unwrap().generation, 1);
    assert_eq!(read(&mut store), small);

    // Without a region the whole area is room enough.
    let info = write_with(&mut store, &big, WriteOptions::default()).unwrap();
    assert_eq!((info.slot, info.generation), (Slot::B, 2));
    assert_eq!(read(&mut store), big);
}

#[test]
fn swap_region_outside_the_target_area_is_refused() {
    let mut store = mem_store(4 * MIB);
    write_with(&mut store, &synthetic_stream(8, 1), WriteOptions::default()).unwrap();
    let before = store.slots().unwrap().map(|s| s.to_string());
    let cap = store.area_capacity();
    let (a, b) = (store.area_offset(Slot::A), store.area_offset(Slot::B));
    let r = |offset, bytes, used_pages| SwapRegion {
        offset,
        bytes,
        used_pages,
        uuid: UUID,
        verity: None,
    };
    let cases = [
        // In area A, but the next image goes to B.
        (r(a + cap - MIB, MIB, 0), "are not inside area B"),
        // Runs past the end of area B.
        (r(b + cap - MIB + PAGE, MIB, 0), "are not inside area B"),
        // Starts before area B.
        (r(b - PAGE, MIB, 0), "are not inside area B"),
        (r(b + MIB + 100, MIB, 0), "must be multiples of 4096"),
        (r(b + MIB, MIB - 1, 0), "must be multiples of 4096"),
        (r(b + MIB, 9 * PAGE, 0), "is smaller than 10 pages"),
        (
            r(b + MIB, MIB, 256),
            "256 used pages do not fit a region of 256 pages",
        ),
        (r(u64::MAX / PAGE * PAGE, MIB, 0), "overflows"),
    ];
    for (swap, want) in cases {
        let err = store.writer_with(meta(), lazy(swap)).unwrap_err();
        assert!(matches!(err, ImageError::BadSwapRegion { .. }), "{err}");
        assert!(err.to_string().contains(want), "{swap:?}: {err}");
        assert!(
            err.to_string().starts_with("invalid swap region: "),
            "{err}"
        );
    }
    assert_eq!(
        lazy(r(b + MIB, MIB, 0)).check().map_err(|e| e.to_string()),
        Ok(())
    );
    assert_eq!(store.slots().unwrap().map(|s| s.to_string()), before);
}

#[test]
fn store_truncated_inside_the_swap_region_is_truncated() {
    let (store, swap, _, _) = lazy_store();
    let end = swap.offset + swap.bytes;
    let cut = swap.offset + 5 * PAGE;
    let mut store = poke(store, |b| b.truncate(cut as usize));
    // The header is fine; using the image is not.
    assert_eq!(store.newest().unwrap().swap.unwrap().region(), swap);
    match store.reader() {
        Err(ImageError::Truncated { expected, actual }) => {
            assert_eq!((expected, actual), (end, cut));
        }
        other => panic!("expected Truncated, got {other:?}"),
    }
    assert!(matches!(
        store.reader_for(Slot::A),
        Err(ImageError::Truncated { .. })
    ));
}

#[test]
fn next_capture_never_overwrites_the_newest_swap_region() {
    // Lazy image in area A with its region in the last MiB of the area; the
    // store then shrinks so that area B would start inside that region.
    let (store, swap, _, _) = lazy_store();
    let end = swap.offset + swap.bytes;
    let mut store = poke(store, |b| b.truncate(7 * MIB as usize));
    assert!(store.size() >= end);
    let b = store.area_offset(Slot::B);
    assert!(b > swap.offset && b < end, "area B at {b}");
    assert_eq!(read(&mut store), synthetic_stream(300, 3));
    let err = store.writer(meta()).unwrap_err();
    assert!(
        matches!(err, ImageError::Overlap { slot: Slot::B }),
        "{err}"
    );
    let err = store.plan_swap(MIB).unwrap_err();
    assert!(
        matches!(err, ImageError::Overlap { slot: Slot::B }),
        "{err}"
    );
}
