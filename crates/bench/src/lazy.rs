//! `bench lazy`: how much a lazy capture should page out (`--lazy SIZE`). One lazy image
//! per size, each also re-captured with its working-set profile, and one `max` image
//! without a dm-verity tree (what verification costs); then rounds of one restore of each,
//! every round starting with the next image. TTI and the first request (the `probe` phase)
//! per image say which size to default to. The profiled re-captures are made by the
//! restored workload itself: a workload that does not answer `recapture` gets only the
//! plain images ([`lazy_notes`] says so).

use crate::measure::{make_work, profiled_image, resume_boot, BenchError, Captured, MethodRuns};
use crate::plan::no_recapture_note;
use board::capture::capture_boot;
use board::run_options::RunOptions;
use bootparams::Reclaim;
use bundle::bundle::Bundle;
use bundle::workload::Workload;
use std::path::Path;

/// How many times [`lazy_sizes`] calls `tick` on `workload`: the unverified capture and one
/// per size (two where the workload re-captures itself, for the profiled image), then
/// every boot of each image.
pub fn lazy_steps(workload: &Workload, sizes: usize, runs: usize) -> u64 {
    let per_size = if workload.recapture { 2 } else { 1 };
    ((per_size * sizes + 1) * (1 + runs)) as u64
}

/// What [`lazy_sizes`] leaves out on `workload`: the profiled image of every size where the
/// workload does not answer `recapture`.
pub fn lazy_notes(workload: &Workload, sizes: &[Reclaim]) -> Vec<String> {
    if workload.recapture {
        return Vec::new();
    }
    let methods: Vec<String> = sizes
        .iter()
        .map(|&s| format!("lazy-{}-profiled", size_word(s)))
        .collect();
    let methods: Vec<&str> = methods.iter().map(String::as_str).collect();
    vec![no_recapture_note(workload, &methods)]
}

/// The method of the lazy image captured without a dm-verity tree.
pub const NOVERITY_METHOD: &str = "lazy-max-noverity";

/// The word for a size, as `--lazy` takes it.
pub fn size_word(r: Reclaim) -> String {
    match r {
        Reclaim::Max => "max".into(),
        Reclaim::Bytes(b) if b % (1 << 20) == 0 => format!("{}M", b >> 20),
        Reclaim::Bytes(b) => b.to_string(),
    }
}

/// `bench lazy`: for every size a lazy image and its profiled re-capture (where the
/// workload re-captures itself), `runs` restores each with `opts` (the kernel the caller
/// chose), interleaved.
pub fn lazy_sizes(
    bundle: &Bundle,
    opts: &RunOptions,
    work: &Path,
    sizes: &[Reclaim],
    runs: usize,
    tick: &mut dyn FnMut(),
) -> Result<Vec<MethodRuns>, BenchError> {
    if runs == 0 || sizes.is_empty() {
        return Err(BenchError::NoRuns);
    }
    make_work(work)?;
    let capture = |name: &'static str, size: Reclaim, verity: bool| {
        let store = work.join(format!("{name}.store"));
        let _ = std::fs::remove_file(&store);
        let mut o = opts.clone();
        o.params.lazy = Some(size);
        o.params.verity = verity;
        capture_boot(bundle, &o, &store).map_err(|source| BenchError::Capture {
            method: name,
            source,
        })?;
        Captured::open(store)
    };
    let unverified = capture(NOVERITY_METHOD, Reclaim::Max, false)?;
    tick();
    let mut images: Vec<(MethodRuns, Captured)> =
        vec![(unverified.runs(NOVERITY_METHOD), unverified)];
    for &size in sizes {
        // Method names live as long as the process: a handful of short strings.
        let name: &'static str = Box::leak(format!("lazy-{}", size_word(size)).into_boxed_str());
        let plain = capture(name, size, true)?;
        tick();
        let profiled = if bundle.workload.recapture {
            let pname: &'static str = Box::leak(format!("{name}-profiled").into_boxed_str());
            let p = profiled_image(bundle, opts, work, &plain, pname)?;
            tick();
            Some((p.runs(pname), p))
        } else {
            None
        };
        images.push((plain.runs(name), plain));
        images.extend(profiled);
    }
    let n = images.len();
    for round in 0..runs {
        for j in 0..n {
            let k = (round + j) % n;
            let t = resume_boot(bundle, opts, &images[k].1.store, images[k].0.method)?;
            images[k].0.timelines.push(t);
            tick();
        }
    }
    Ok(images.into_iter().map(|(m, _)| m).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_named_as_the_flag_takes_them() {
        assert_eq!(size_word(Reclaim::Max), "max");
        assert_eq!(size_word(Reclaim::Bytes(64 << 20)), "64M");
        assert_eq!(size_word(Reclaim::Bytes(1000)), "1000");
        assert_eq!(lazy_steps(&Workload::app(), 3, 2), 21);
    }

    #[test]
    fn a_workload_that_cannot_recapture_gets_only_the_plain_lazy_images() {
        let sizes = [Reclaim::Bytes(64 << 20), Reclaim::Max];
        assert!(lazy_notes(&Workload::shell(), &sizes).is_empty());
        let kiosk = Workload {
            name: "kiosk".into(),
            recapture: false,
            ..Workload::shell()
        };
        // The unverified image and one per size, each captured once and restored twice.
        assert_eq!(lazy_steps(&kiosk, 2, 2), 9);
        let notes = lazy_notes(&kiosk, &sizes);
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].starts_with(
                "lazy-64M-profiled, lazy-max-profiled left out: workload `kiosk` does not \
                 answer `recapture`"
            ),
            "{notes:?}"
        );
    }
}
