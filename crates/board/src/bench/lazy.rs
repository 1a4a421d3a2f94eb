//! `bench lazy`: how much a lazy capture should page out (`--lazy SIZE`). One lazy image
//! per size, each also re-captured with its working-set profile, and one `max` image
//! without a dm-verity tree (what verification costs); then rounds of one restore of each,
//! every round starting with the next image. TTI and the first request (the `probe` phase)
//! per image say which size to default to.

use super::{make_work, profiled_image, resume_boot, BenchError, Captured, MethodRuns};
use crate::bundle::Bundle;
use crate::capture::capture_boot;
use crate::qemu::RunOptions;
use bootparams::Reclaim;
use std::path::Path;

/// How many times [`lazy_sizes`] calls `tick`: two captures per size and the unverified
/// one, then every boot.
pub fn lazy_steps(sizes: usize, runs: usize) -> u64 {
    ((2 * sizes + 1) * (1 + runs)) as u64
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

/// `bench lazy`: for every size a lazy image and its profiled re-capture, `runs` restores
/// each with `opts` (the kernel the caller chose), interleaved.
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
        let pname: &'static str = Box::leak(format!("{name}-profiled").into_boxed_str());
        let profiled = profiled_image(bundle, opts, work, &plain, pname)?;
        tick();
        images.push((plain.runs(name), plain));
        images.push((profiled.runs(pname), profiled));
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
        assert_eq!(lazy_steps(3, 2), 21);
    }
}
