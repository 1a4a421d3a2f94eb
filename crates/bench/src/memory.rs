//! `bench memory`: deferred memory by board size. For every size a board that
//! boots with all of its RAM and, above the boot size, one that boots with the boot size
//! and adds the rest after ready or restored (virtio-mem, `snapboot.defermem`). Each board
//! gets one captured image; then rounds of a cold boot and a snapshot boot of every board.
//! Every boot of a deferring board also waits for the `memory` marker, so the report has
//! the time from ready (or restored) until all of the RAM is online.

use crate::measure::{check_boot, make_work, BenchError, BootError, Captured, MethodRuns};
use board::capture::{attach_store, capture_boot};
use board::qemu::run_probe_then;
use board::run_options::RunOptions;
use boottrace::Timeline;
use bundle::bundle::Bundle;
use std::path::Path;

/// One board of the benchmark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemBoard {
    /// `16G` or `16G-deferred`.
    pub name: String,
    /// RAM it boots with, MiB.
    pub mem_mib: u32,
    /// Its total RAM when it defers part of it, MiB.
    pub max_mem_mib: Option<u32>,
}

/// A size in MiB as the flags take it (`512M`, `16G`).
pub fn mib_word(mib: u32) -> String {
    if mib.is_multiple_of(1024) {
        format!("{}G", mib / 1024)
    } else {
        format!("{mib}M")
    }
}

/// The boards for `sizes` (MiB): each size with all of its RAM at boot, and each size
/// above `boot_mib` also booting with `boot_mib` and deferring the rest.
pub fn boards(sizes: &[u32], boot_mib: u32) -> Vec<MemBoard> {
    let mut out = Vec::new();
    for &s in sizes {
        out.push(MemBoard {
            name: mib_word(s),
            mem_mib: s,
            max_mem_mib: None,
        });
        if s > boot_mib {
            out.push(MemBoard {
                name: format!("{}-deferred", mib_word(s)),
                mem_mib: boot_mib,
                max_mem_mib: Some(s),
            });
        }
    }
    out
}

/// How many times [`memory_boards`] calls `tick`: a capture per board, then a cold and a
/// snapshot boot per board and round.
pub fn memory_steps(boards: usize, runs: usize) -> u64 {
    (boards * (1 + 2 * runs)) as u64
}

/// One measured boot; on a deferring board it also waits for the deferred memory.
fn boot(
    bundle: &Bundle,
    o: &RunOptions,
    deferred: bool,
    want_restore: bool,
    what: &str,
) -> Result<Timeline, BenchError> {
    let err = |source: BootError| BenchError::Boot {
        what: what.to_string(),
        source,
    };
    let then = deferred.then_some((
        boottrace::Marker::Memory,
        "all deferred memory online (the memory marker)",
    ));
    let res = run_probe_then(bundle, o, &bundle.workload.probe, then).map_err(|e| err(e.into()))?;
    if let Some(e) = res.error {
        return Err(err(e.into()));
    }
    check_boot(&res.timeline, want_restore).map_err(err)?;
    Ok(res.timeline)
}

/// `bench memory`: for every board an image, then `runs` rounds of a cold and a snapshot
/// boot of each board. Returns `cold-NAME` and `snapboot-NAME` per board, in board order.
pub fn memory_boards(
    bundle: &Bundle,
    opts: &RunOptions,
    work: &Path,
    boards: &[MemBoard],
    runs: usize,
    tick: &mut dyn FnMut(),
) -> Result<Vec<MethodRuns>, BenchError> {
    if runs == 0 || boards.is_empty() {
        return Err(BenchError::NoRuns);
    }
    make_work(work)?;
    let name = |prefix: &str, b: &MemBoard| -> &'static str {
        // Method names live as long as the process: a handful of short strings.
        Box::leak(format!("{prefix}-{}", b.name).into_boxed_str())
    };
    let mut set = Vec::new();
    for b in boards {
        let mut o = opts.clone();
        o.mem_mib = b.mem_mib;
        o.max_mem_mib = b.max_mem_mib;
        let store = work.join(format!("memory-{}.store", b.name));
        let _ = std::fs::remove_file(&store);
        let method = name("snapboot", b);
        capture_boot(bundle, &o, &store)
            .map_err(|source| BenchError::Capture { method, source })?;
        let img = Captured::open(store)?;
        tick();
        set.push((
            o,
            img.runs(method),
            img,
            MethodRuns {
                method: name("cold", b),
                timelines: Vec::new(),
                image_bytes: None,
                stored_bytes: None,
            },
        ));
    }
    let n = set.len();
    for round in 0..runs {
        for j in 0..n {
            let (o, snap, img, cold) = &mut set[(round + j) % n];
            let deferred = o.max_mem_mib.is_some();
            cold.timelines
                .push(boot(bundle, o, deferred, false, cold.method)?);
            tick();
            let mut r = o.clone();
            attach_store(&mut r, &img.store, false)?;
            snap.timelines
                .push(boot(bundle, &r, deferred, true, snap.method)?);
            tick();
        }
    }
    Ok(set
        .into_iter()
        .flat_map(|(_, snap, _, cold)| [cold, snap])
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_size_and_its_deferred_twin() {
        let b = boards(&[512, 4096, 16384], 512);
        let names: Vec<&str> = b.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["512M", "4G", "4G-deferred", "16G", "16G-deferred"]);
        assert_eq!(b[2].mem_mib, 512);
        assert_eq!(b[2].max_mem_mib, Some(4096));
        assert_eq!(b[3].max_mem_mib, None);
        assert_eq!(memory_steps(b.len(), 2), 25);
        assert_eq!(mib_word(1536), "1536M");
    }
}
