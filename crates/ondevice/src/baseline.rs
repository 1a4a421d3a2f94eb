//! The medium's baseline (`snapboot.baseline=medium`): instead of restoring, read the bytes
//! the image resume would try first occupies on the store, from its first chunk to its
//! last, with plain sequential reads of [`REQUEST`] bytes, as `dd` would; print what the
//! medium delivered (`medium-baseline` marker) and power off. The benchmark boots this once
//! per run on the same boot path as the restores it compares, and reports each restore's
//! load phase as a share of it.

use crate::guest::print_marker;
use crate::store::StoreUseError;
use bootparams::StoreAddress;
use bootstatus::Throughput;
use boottrace::Marker;
use flashstore::Medium;
use std::time::{Duration, Instant};

/// Bytes each read asks for: what `dd bs=1M` asks.
pub const REQUEST: usize = 1 << 20;

/// Why no baseline was measured.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    /// The store is unusable.
    #[error(transparent)]
    Store(#[from] StoreUseError),
    /// The store has no image, or the one named has no stored bytes.
    #[error("store {0}: no image with stored bytes to read")]
    NoImage(String),
    /// The image's chunks are not where the catalog says.
    #[error("image {image}: its extent")]
    Extent {
        /// The image.
        image: String,
        /// Why.
        #[source]
        source: flashstore::StoreError,
    },
    /// A read failed.
    #[error("reading {len} bytes at byte {at} of {device}")]
    Read {
        /// The store's device.
        device: String,
        /// Where.
        at: u64,
        /// How many.
        len: usize,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Reads the extent of the first image of `images` (or the newest) on the store at `store`
/// and returns what the medium delivered.
pub fn measure(
    store: &StoreAddress,
    images: &[String],
    wait: Duration,
) -> Result<(String, Throughput), BaselineError> {
    let (store, at) = crate::store::open_address(store, wait, false)?;
    let name = admission::candidates(store.images(), images)
        .first()
        .map(|c| c.name().to_string())
        .ok_or_else(|| BaselineError::NoImage(at.to_string()))?;
    let rec = store
        .image(&name)
        .ok_or_else(|| BaselineError::NoImage(at.to_string()))?;
    let (start, len) = store
        .extent(rec)
        .map_err(|source| BaselineError::Extent {
            image: name.clone(),
            source,
        })?
        .ok_or_else(|| BaselineError::NoImage(at.to_string()))?;
    let t = read_sequentially(store.medium(), start, len).map_err(|(at_byte, n, source)| {
        BaselineError::Read {
            device: at.to_string(),
            at: at_byte,
            len: n,
            source,
        }
    })?;
    Ok((name, t))
}

/// Reads `len` bytes from `start` of `medium` in requests of [`REQUEST`] bytes, one after
/// the other; the throughput has the read fields only.
fn read_sequentially<M: Medium>(
    medium: &M,
    start: u64,
    len: u64,
) -> Result<Throughput, (u64, usize, std::io::Error)> {
    let mut buf = vec![0u8; REQUEST];
    let t = Instant::now();
    let (mut at, end) = (start, start + len);
    let mut t_out = Throughput {
        workers: 1,
        ..Throughput::default()
    };
    while at < end {
        let n = REQUEST.min((end - at) as usize);
        medium.read_at(&mut buf[..n], at).map_err(|e| (at, n, e))?;
        t_out.requests += 1;
        t_out.read_bytes += n as u64;
        if n as u64 >= bootstatus::LARGE_REQUEST {
            t_out.large_bytes += n as u64;
        }
        at += n as u64;
    }
    t_out.read_s = t.elapsed().as_secs_f64();
    t_out.wall_s = t_out.read_s;
    Ok(t_out)
}

/// Measures, prints the `medium-baseline` marker (or why not), and powers off.
pub fn measure_and_power_off(store: &StoreAddress, images: &[String], wait: Duration) -> ! {
    match measure(store, images, wait) {
        Ok((name, t)) => print_marker(
            Marker::MediumBaseline,
            Some(&format!("{} (image {name})", t.line())),
        ),
        Err(e) => print_marker(
            Marker::MediumBaseline,
            Some(&format!("failed: {}", boottrace::error_chain(&e))),
        ),
    }
    print_marker(Marker::Poweroff, Some("after the medium's baseline"));
    rustix::fs::sync();
    let _ = rustix::system::reboot(rustix::system::RebootCommand::PowerOff);
    // Not PID 1 (a test): nothing to power off.
    std::process::exit(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extent_is_read_in_requests_of_a_mebibyte() {
        let m = flashstore::MemMedium::new(8 << 20);
        let t = read_sequentially(&m, 4096, (3 << 20) + 100).unwrap();
        assert_eq!(t.read_bytes, (3 << 20) + 100);
        assert_eq!(t.requests, 4);
        assert_eq!(t.large_bytes, 3 << 20);
        assert!(t.read_s >= 0.0 && t.wall_s == t.read_s);
        let err = read_sequentially(&m, 7 << 20, 2 << 20).unwrap_err();
        assert_eq!((err.0, err.1), (8 << 20, 1 << 20));
    }
}
