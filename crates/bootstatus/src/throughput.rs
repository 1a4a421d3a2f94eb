//! Where a restore's load phase spent its time, stage by stage: the one telemetry line every
//! restoring path prints (`throughput` marker), the status file's and the boot log's
//! `throughput`, and the benchmark's JSON. It tells a device bound by its flash from one
//! bound by its CPUs or its memory.
//!
//! ```text
//!  medium ──read──▶ stored bytes ──check/open──▶ ──decompress──▶ pages ──place──▶ kernel
//!  (read_s: wall     (check_s, summed            (decode_s,        (place_s: one CPU,
//!   time with a       over the workers)           summed)           in stream order)
//!   read in flight)
//! ```
//!
//! Reads of several workers overlap, so `read_s` is the wall time during which at least one
//! read was in flight (what the medium delivered while it was busy), not their sum. Checking
//! and decompressing run on every worker: their seconds are summed, and their MB/s is per
//! CPU. Placing runs on one CPU, in the order the kernel needs the pages.

use alloc::format;
use alloc::string::String;
use serde::{Deserialize, Serialize};

/// A read request of at least this many bytes counts as large: what eMMC and UFS read at
/// their sequential speed.
pub const LARGE_REQUEST: u64 = 1 << 20;

/// The load phase's throughput, per stage.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Throughput {
    /// Stored bytes read from the medium (a chunk read twice counts twice).
    pub read_bytes: u64,
    /// Read requests made of the medium.
    pub requests: u64,
    /// Stored bytes read in requests of at least [`LARGE_REQUEST`] bytes.
    pub large_bytes: u64,
    /// Bytes the chunks decompressed to.
    pub decoded_bytes: u64,
    /// Page bytes placed: handed to the kernel, or copied to their frames (zero pages too).
    pub placed_bytes: u64,
    /// Seconds with at least one read of the medium in flight.
    pub read_s: f64,
    /// Seconds checking checksums or opening sealed chunks, summed over the workers.
    pub check_s: f64,
    /// Seconds decompressing, summed over the workers.
    pub decode_s: f64,
    /// Seconds placing pages.
    pub place_s: f64,
    /// Seconds of the whole load phase, wall clock.
    pub wall_s: f64,
    /// CPUs that read, checked and decompressed (the placing CPU among them).
    pub workers: u32,
}

/// Which stage bounds the load phase ([`Throughput::bound`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// The medium: reads were in flight for most of the phase.
    Medium,
    /// The CPUs: checking, decrypting and decompressing.
    Cpu,
    /// Placing: the kernel's copy of each page, or memory bandwidth.
    Memory,
}

impl Bound {
    /// The word the telemetry line uses.
    pub fn word(self) -> &'static str {
        match self {
            Bound::Medium => "medium",
            Bound::Cpu => "cpu",
            Bound::Memory => "memory",
        }
    }
}

fn mbps(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / secs / 1e6
    } else {
        0.0
    }
}

impl Throughput {
    /// MB/s the medium delivered while it was reading.
    pub fn medium_mbps(&self) -> f64 {
        mbps(self.read_bytes, self.read_s)
    }

    /// MB/s of stored bytes one CPU checks or opens.
    pub fn check_mbps(&self) -> f64 {
        mbps(self.read_bytes, self.check_s)
    }

    /// MB/s of decompressed bytes one CPU produces.
    pub fn decode_mbps(&self) -> f64 {
        mbps(self.decoded_bytes, self.decode_s)
    }

    /// MB/s of pages placed.
    pub fn place_mbps(&self) -> f64 {
        mbps(self.placed_bytes, self.place_s)
    }

    /// MB/s of pages loaded over the whole phase (what the user waits for).
    pub fn load_mbps(&self) -> f64 {
        mbps(self.placed_bytes, self.wall_s)
    }

    /// The share of the stored bytes read in requests of at least [`LARGE_REQUEST`] bytes,
    /// 0 to 1 (1 when nothing was read).
    pub fn large_share(&self) -> f64 {
        if self.read_bytes == 0 {
            1.0
        } else {
            self.large_bytes as f64 / self.read_bytes as f64
        }
    }

    /// The stage that took the most of the phase: the medium's busy time, the CPU stages'
    /// seconds spread over the workers, or placing.
    pub fn bound(&self) -> Bound {
        let cpu = (self.check_s + self.decode_s) / f64::from(self.workers.max(1));
        if self.read_s >= cpu && self.read_s >= self.place_s {
            Bound::Medium
        } else if cpu >= self.place_s {
            Bound::Cpu
        } else {
            Bound::Memory
        }
    }

    /// Adds `other`'s bytes and seconds to these (two images, or two phases of one).
    pub fn add(&mut self, other: &Throughput) {
        self.read_bytes += other.read_bytes;
        self.requests += other.requests;
        self.large_bytes += other.large_bytes;
        self.decoded_bytes += other.decoded_bytes;
        self.placed_bytes += other.placed_bytes;
        self.read_s += other.read_s;
        self.check_s += other.check_s;
        self.decode_s += other.decode_s;
        self.place_s += other.place_s;
        self.wall_s += other.wall_s;
        self.workers = self.workers.max(other.workers);
    }

    /// The `throughput` marker's text, one line: each stage's bytes, seconds and MB/s, the
    /// share read in large requests, the workers, and the bound.
    pub fn line(&self) -> String {
        let mb = |b: u64| b as f64 / 1e6;
        format!(
            "read {:.1} MB in {} requests ({:.0}% in >= 1 MiB) in {:.3} s at {:.1} MB/s; \
             checked in {:.3} s at {:.1} MB/s per CPU; decoded {:.1} MB in {:.3} s at {:.1} MB/s \
             per CPU; placed {:.1} MB in {:.3} s at {:.1} MB/s; {} CPU(s), {:.3} s wall, \
             {:.1} MB/s loaded; bound by {}",
            mb(self.read_bytes),
            self.requests,
            self.large_share() * 100.0,
            self.read_s,
            self.medium_mbps(),
            self.check_s,
            self.check_mbps(),
            mb(self.decoded_bytes),
            self.decode_s,
            self.decode_mbps(),
            mb(self.placed_bytes),
            self.place_s,
            self.place_mbps(),
            self.workers,
            self.wall_s,
            self.load_mbps(),
            self.bound().word()
        )
    }

    /// Reads back what [`Throughput::line`] printed (the host's benchmark and `analyze` read
    /// the console): bytes to 0.1 MB and seconds to the millisecond, as printed; `None` for
    /// any other text.
    pub fn parse_line(line: &str) -> Option<Throughput> {
        let line = line.trim();
        if !line.starts_with("read ") || !line.contains(" MB/s loaded; bound by ") {
            return None;
        }
        // The numbers in the order the line prints them (the "1" of ">= 1 MiB" among them).
        let n: alloc::vec::Vec<f64> = line
            .split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|w| !w.is_empty() && w.as_bytes()[0].is_ascii_digit())
            .map(|w| w.trim_end_matches('.').parse::<f64>())
            .collect::<Result<_, _>>()
            .ok()?;
        if n.len() != 17 {
            return None;
        }
        let bytes = |mb: f64| (mb * 1e6) as u64;
        let read_bytes = bytes(n[0]);
        Some(Throughput {
            read_bytes,
            requests: n[1] as u64,
            large_bytes: (read_bytes as f64 * n[2] / 100.0) as u64,
            decoded_bytes: bytes(n[8]),
            placed_bytes: bytes(n[11]),
            read_s: n[4],
            check_s: n[6],
            decode_s: n[9],
            place_s: n[12],
            wall_s: n[15],
            workers: n[14] as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Throughput {
        Throughput {
            read_bytes: 40_000_000,
            requests: 20,
            large_bytes: 38_000_000,
            decoded_bytes: 100_000_000,
            placed_bytes: 120_000_000,
            read_s: 0.5,
            check_s: 0.4,
            decode_s: 1.0,
            place_s: 0.2,
            wall_s: 1.0,
            workers: 2,
        }
    }

    #[test]
    fn rates_are_bytes_over_seconds() {
        let t = sample();
        assert_eq!(t.medium_mbps(), 80.0);
        assert_eq!(t.check_mbps(), 100.0);
        assert_eq!(t.decode_mbps(), 100.0);
        assert_eq!(t.place_mbps(), 600.0);
        assert_eq!(t.load_mbps(), 120.0);
        assert_eq!(t.large_share(), 0.95);
        // (0.4 + 1.0) / 2 CPUs = 0.7 s of CPU stages against 0.5 s of reads.
        assert_eq!(t.bound(), Bound::Cpu);
        let line = t.line();
        assert!(
            line.starts_with(
                "read 40.0 MB in 20 requests (95% in >= 1 MiB) in 0.500 s at 80.0 MB/s;"
            ),
            "{line}"
        );
        assert!(
            line.ends_with("2 CPU(s), 1.000 s wall, 120.0 MB/s loaded; bound by cpu"),
            "{line}"
        );
    }

    #[test]
    fn the_line_reads_back() {
        let t = sample();
        assert_eq!(Throughput::parse_line(&t.line()), Some(t));
        let odd = Throughput {
            read_bytes: 1_234_567,
            requests: 3,
            large_bytes: 0,
            decoded_bytes: 4_000_000,
            placed_bytes: 4_100_000,
            read_s: 0.0123,
            check_s: 0.002,
            decode_s: 0.01,
            place_s: 0.0004,
            wall_s: 0.03,
            workers: 1,
        };
        let back = Throughput::parse_line(&odd.line()).unwrap();
        assert_eq!(back.read_bytes, 1_200_000);
        assert_eq!((back.requests, back.large_bytes, back.workers), (3, 0, 1));
        assert_eq!((back.read_s, back.place_s, back.wall_s), (0.012, 0.0, 0.03));
        assert_eq!(Throughput::parse_line("read the manual"), None);
        assert_eq!(Throughput::parse_line(""), None);
    }

    #[test]
    fn nothing_read_is_not_a_division_by_zero() {
        let t = Throughput::default();
        assert_eq!(t.medium_mbps(), 0.0);
        assert_eq!(t.large_share(), 1.0);
        assert!(!t.line().contains("NaN") && !t.line().contains("inf"));
    }

    #[test]
    fn each_stage_can_be_the_bound() {
        let mut t = sample();
        t.read_s = 2.0;
        assert_eq!(t.bound(), Bound::Medium);
        t.read_s = 0.1;
        t.place_s = 3.0;
        assert_eq!(t.bound(), Bound::Memory);
    }

    #[test]
    fn adding_sums_bytes_and_seconds() {
        let mut a = sample();
        a.add(&sample());
        assert_eq!(a.read_bytes, 80_000_000);
        assert_eq!(a.wall_s, 2.0);
        assert_eq!(a.workers, 2);
        assert_eq!(a.medium_mbps(), 80.0);
    }
}
