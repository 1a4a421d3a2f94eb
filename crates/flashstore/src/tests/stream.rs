//! The parallel stream: the same pages in the same order on any number of workers, the
//! counts of what was read adding up, the large requests of an image laid out in order,
//! and errors (a damaged batch, a sink that refuses) stopping the workers.

use super::*;

/// Every page `stream` hands out with `workers` workers, in runs of at most `max`.
fn streamed<M: Medium + Sync>(
    s: &Store<M>,
    name: &str,
    workers: usize,
    max: usize,
) -> Result<(Vec<Page>, ReadStats), StoreError> {
    let mut r = s.reader(name)?;
    let mut out = Vec::new();
    r.stream(workers, max, |run: &[&Page]| -> Result<(), StoreError> {
        assert!(!run.is_empty() && run.len() <= max);
        out.extend(run.iter().map(|p| **p));
        Ok(())
    })?;
    Ok((out, r.stats()))
}

/// A store of 256 KiB clusters holding `base` and a mutated `next` that shares chunks with
/// it, with chunks of 16 pages.
fn two_generations() -> (Store<MemMedium>, Vec<Page>) {
    let mut s = new_store(64 * MIB, 64);
    let opts = WriteOptions {
        chunk_pages: 16,
        ..wo()
    };
    let mut mem = memory(3000, 51);
    write(&mut s, "base", &mem, opts).unwrap();
    mutate(&mut mem, 30, 52);
    write(&mut s, "next", &mem, opts).unwrap();
    (s, mem)
}

#[test]
fn any_number_of_workers_hands_out_the_image_in_order() {
    let (s, mem) = two_generations();
    let (one, _) = streamed(&s, "next", 1, 256).unwrap();
    assert!(one == mem, "one worker");
    for workers in [2, 3, 8] {
        for max in [1, 7, 256] {
            let (got, _) = streamed(&s, "next", workers, max).unwrap();
            assert!(got == mem, "{workers} workers, runs of {max}");
        }
    }
}

#[test]
fn the_counts_add_up_to_the_image_s_chunks() {
    let (s, mem) = two_generations();
    let rec = s.image("next").unwrap().clone();
    let cost = s.read_cost(&rec).unwrap();
    let chunks: Vec<_> = s
        .catalog()
        .chunks
        .iter()
        .filter(|c| rec.chunks.contains(&c.id))
        .copied()
        .collect();
    let raw: u64 = chunks.iter().map(|c| c.raw_len() as u64).sum();
    for workers in [1, 2, 4] {
        let (_, st) = streamed(&s, "next", workers, 256).unwrap();
        assert_eq!(st.chunks, cost.chunks, "{workers}: every chunk read once");
        // Each request reads its chunks and at most a short gap between two of them.
        assert!(st.bytes >= cost.chunk_bytes, "{workers}: {st:?}");
        assert!(
            st.bytes <= cost.chunk_bytes + GAP_BYTES * (st.chunks - st.requests),
            "{workers}: {st:?}"
        );
        assert_eq!(
            st.decoded, raw,
            "{workers}: every chunk decoded to its pages"
        );
        assert!(st.large_bytes <= st.bytes);
        assert!(st.requests >= 1 && st.requests <= st.chunks);
        let r = s.reader("next").unwrap();
        assert_eq!(st.requests, r.requests() as u64);
        assert!(st.times.read > std::time::Duration::ZERO || st.bytes == 0);
        assert!(mem.len() as u64 * PAGE as u64 >= st.decoded / 2);
    }
}

#[test]
fn an_image_written_in_order_is_read_in_large_requests() {
    let mut s = new_store(32 * MIB, storelayout::DEFAULT_CLUSTER_BLOCKS);
    // Pages that compress to about half: the image is some 6 MB stored.
    let mut seed = 53;
    let mem: Vec<Page> = (0..3000)
        .map(|_| {
            let mut p = [0u8; PAGE];
            for w in p[..PAGE / 2].chunks_mut(8) {
                w.copy_from_slice(&rng(&mut seed).to_le_bytes());
            }
            p
        })
        .collect();
    write(&mut s, "big", &mem, WriteOptions::default()).unwrap();
    let (got, st) = streamed(&s, "big", 2, 256).unwrap();
    assert!(got == mem);
    let share = st.large_bytes as f64 / st.bytes as f64;
    assert!(
        share >= 0.9,
        "{:.0}% of {} bytes in requests of >= 1 MiB ({} requests)",
        share * 100.0,
        st.bytes,
        st.requests
    );
    assert!(st.bytes / st.requests >= (1 << 20), "{st:?}");
    // Requests read through the clusters' unused tails, at most GAP_BYTES each.
    let stored = s.read_cost(s.image("big").unwrap()).unwrap().chunk_bytes;
    assert!(st.bytes <= stored + GAP_BYTES * (st.chunks - st.requests));
    // The writer closes a chunk early to fill its cluster: little slack is read.
    assert!(
        st.bytes * 100 <= stored * 103,
        "{} bytes read for {stored} stored",
        st.bytes
    );
}

#[test]
fn a_damaged_batch_stops_the_stream_with_its_reason() {
    let (s, _) = two_generations();
    let rec = s.image("next").unwrap().clone();
    let victim = s
        .catalog()
        .chunks
        .iter()
        .filter(|c| rec.chunks.contains(&c.id))
        .nth(rec.chunks.len() / 2)
        .copied()
        .unwrap();
    let at = (victim.cluster * s.cluster_bytes() + u64::from(victim.offset)) as usize;
    let mut m = s.into_medium();
    m.bytes[at + 3] ^= 0x40;
    let s = Store::open(m).unwrap();
    for workers in [1, 2, 4] {
        match streamed(&s, "next", workers, 64) {
            Err(StoreError::Corrupt(d)) => assert!(
                matches!(d, Damage::ChunkChecksum { chunk, .. } if chunk == victim.id)
                    || matches!(d, Damage::Decompress { chunk, .. } if chunk == victim.id),
                "{workers}: {d:?}"
            ),
            other => panic!("{workers} workers: {:?}", other.map(|(p, _)| p.len())),
        }
    }
}

#[test]
fn a_sink_that_refuses_stops_the_workers() {
    let (s, _) = two_generations();
    for workers in [1, 2, 4] {
        let mut r = s.reader("next").unwrap();
        let mut runs = 0;
        let e = r
            .stream(workers, 16, |_: &[&Page]| {
                runs += 1;
                if runs == 3 {
                    Err(StoreError::NoImage("refused by the sink".into()))
                } else {
                    Ok(())
                }
            })
            .unwrap_err();
        assert!(matches!(e, StoreError::NoImage(ref w) if w == "refused by the sink"));
        assert_eq!(runs, 3);
    }
}

#[test]
fn the_extent_spans_every_chunk_of_the_image() {
    let (s, _) = two_generations();
    let rec = s.image("next").unwrap().clone();
    let (at, len) = s.extent(&rec).unwrap().unwrap();
    let cb = s.cluster_bytes();
    for c in s
        .catalog()
        .chunks
        .iter()
        .filter(|c| rec.chunks.contains(&c.id))
    {
        let place = c.cluster * cb + u64::from(c.offset);
        assert!(
            place >= at && place + u64::from(c.stored_len) <= at + len,
            "{c:?}"
        );
    }
    // The chunks `next` shares with `base` lie before its own: the extent covers both.
    assert!(len >= s.read_cost(&rec).unwrap().chunk_bytes);
}
