//! Encode and decode throughput of image format v2, against a plain memcpy
//! of the same bytes in the same run.
//!
//! Uses the real stream in `tests/data/real-stream-head.zst` when present
//! (a zstd-compressed raw kernel stream), else a synthetic one. Encoding
//! writes into an in-memory store; decoding streams every page out of a
//! file-backed store in the temp directory (so workers read with `pread`, as
//! on a block device), for LZ4 and zstd, inline (0), with one worker, and with one
//! worker per CPU (the benchmark id's parameter).
//! Run with `cargo bench -p snapimg`.

use std::hint::black_box;
use std::io::Cursor;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use snapimg::{
    synthetic_stream, CaptureMeta, Compression, Identity, PageProducer, ReadOptions, Store,
    WriteOptions, PAGE_SIZE,
};

fn load_stream() -> (Vec<u8>, &'static str) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/real-stream-head.zst"
    );
    match std::fs::read(path).map(|z| zstd::decode_all(&z[..])) {
        Ok(Ok(raw)) => (raw, "real-stream-head"),
        _ => (synthetic_stream(4096, 7), "synthetic"),
    }
}

fn meta() -> CaptureMeta {
    CaptureMeta {
        identity: Identity {
            release: "bench".into(),
            version: "#1".into(),
            machine: "x86_64".into(),
            ram_bytes: 1 << 30,
        },
        created_unix: 0,
        binding: None,
    }
}

fn encode<D: snapimg::Device>(store: &mut Store<D>, stream: &[u8], opts: WriteOptions) -> u64 {
    let mut w = store.writer_with(meta(), opts).expect("writer");
    for p in stream.chunks_exact(PAGE_SIZE) {
        w.push_page(p.try_into().expect("page")).expect("push");
    }
    w.commit().expect("commit").image_bytes
}

fn decode<D: snapimg::Device>(store: &mut Store<D>, threads: usize) -> u64 {
    let mut r = store.reader().expect("reader").with_options(ReadOptions {
        threads,
        ..ReadOptions::default()
    });
    let mut page = [0u8; PAGE_SIZE];
    let mut sum = 0u64;
    while r.next_page(&mut page).expect("page") {
        sum = sum.wrapping_add(u64::from(page[0]));
    }
    sum
}

fn pipeline(c: &mut Criterion) {
    let (stream, source) = load_stream();
    let all = snapimg::default_threads();
    let bytes = stream.len() as u64;
    let store_size = 2 * bytes + (4 << 20);
    let codecs = [
        ("lz4", Compression::Lz4),
        ("zstd3", Compression::Zstd { level: 3 }),
    ];
    // 0 = everything on the calling thread (no workers), 1 = one worker, all = one per CPU.
    let threads = if all > 1 { vec![0, 1, all] } else { vec![0, 1] };
    let dir = std::env::temp_dir().join(format!("snapimg-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");

    let mut g = c.benchmark_group(format!("pipeline/{source}"));
    g.throughput(Throughput::Bytes(bytes));
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));

    let mut dst = vec![0u8; stream.len()];
    g.bench_function("memcpy", |b| {
        b.iter(|| {
            dst.copy_from_slice(black_box(&stream));
            black_box(&dst);
        })
    });

    for (name, compression) in codecs {
        for &t in &threads {
            let opts = WriteOptions {
                compression,
                threads: t,
                ..WriteOptions::default()
            };
            let mut store =
                Store::format(Cursor::new(vec![0u8; store_size as usize])).expect("store");
            let image = encode(&mut store, &stream, opts.clone());
            let info = store.newest().expect("image");
            eprintln!(
                "{source} {name}: {} raw bytes -> {image} image bytes (ratio {:.2}x; zero {} dup {} unique {} of {} pages, {} chunks)",
                bytes,
                bytes as f64 / image as f64,
                info.stats.zero_pages,
                info.stats.duplicate_pages,
                info.stats.unique_pages,
                info.stats.raw_pages,
                info.stats.chunk_count,
            );
            g.bench_function(BenchmarkId::new(format!("encode-{name}"), t), |b| {
                b.iter(|| encode(&mut store, &stream, opts.clone()))
            });

            let path = dir.join(format!("{name}-{t}.img"));
            let mut file = Store::create_file(&path, store_size).expect("file store");
            encode(&mut file, &stream, opts.clone());
            g.bench_function(BenchmarkId::new(format!("decode-{name}"), t), |b| {
                b.iter(|| decode(&mut file, t))
            });
        }
    }
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, pipeline);
criterion_main!(benches);
