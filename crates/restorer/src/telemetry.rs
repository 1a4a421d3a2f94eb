//! What one restore's load phase did, in the shared vocabulary: the bytes read, decoded and
//! placed, and the cycle counter's ticks per stage, turned into the
//! [`bootstatus::Throughput`] every restoring path prints (the console's `throughput`
//! marker). The program counts (its [`crate::window::Window`]'s requests, the chunks' raw
//! bytes, the pages placed, the counter around each stage: the TSC on x86_64, the generic
//! timer's count on arm64); this module turns ticks into seconds with the counter's
//! [`Rate`], which the program learns from the CPU or measures.
//!
//! ```text
//!  start ──▶ read ──▶ check ──▶ unpack ──▶ place ──▶ read ──▶ ... ──▶ end (wall)
//!  (first page written or     ticks per stage: Spent             (placing done, just
//!   first chunk read)         (each stage starts where the        before the platform's
//!                              one before it ended)               last step and the jump)
//! ```
//!
//! On one CPU the restorer does one thing at a time, so its stages never overlap: their
//! ticks add up to at most the wall's, and `workers` is 1. When other CPUs decode too
//! (`crate::parallel`), `workers` counts the CPUs that decoded and the checking and
//! unpacking ticks are summed over them, as every path sums its workers' seconds (their
//! MB/s is then per CPU, and the stages may add up to more than the wall). A chunk
//! unpacked straight into its pages is placed by its decoding: its pages count as placed
//! (so `placed_bytes` is every page of the image, and the loaded MB/s what the user waited
//! for), its time as decoding; `place_s` is the copying from the chunk buffer and the
//! zeroing alone, so the placing MB/s is higher than that step's own rate by the share
//! unpacked in place.
//!
//! Seconds are never invented: without a rate (no CPUID leaf says it, no PIT answers,
//! CNTFRQ_EL0 unset) every seconds field stays 0.0 and the marker's detail ([`detail`])
//! says `seconds unknown`, with each stage's share of the ticks instead.

use bootstatus::{Throughput, LARGE_REQUEST};
use core::fmt;

/// A stage of the load phase, as the restorer times it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the disk (in the PVH program's window; the EFI program reads every
    /// chunk before it leaves the firmware).
    Read,
    /// Checksums of the stored chunks.
    Check,
    /// LZ4 (or a plain chunk's copy), into the chunk buffer or straight into its pages.
    Unpack,
    /// Pages from the chunk buffer to their places, and zero pages written.
    Place,
}

impl Phase {
    /// Every stage, in the console's order.
    pub const ALL: [Phase; 4] = [Phase::Read, Phase::Check, Phase::Unpack, Phase::Place];

    /// The word the console uses.
    pub fn word(self) -> &'static str {
        match self {
            Phase::Read => "read",
            Phase::Check => "check",
            Phase::Unpack => "unpack",
            Phase::Place => "place",
        }
    }
}

/// Counter ticks spent in each [`Phase`]; shown as shares of their sum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent([u64; 4]);

impl Spent {
    /// Charges the ticks from `since` to `now` to `phase` (a counter that wrapped counts
    /// on); returns `now`, where the next stage starts.
    pub fn add(&mut self, phase: Phase, since: u64, now: u64) -> u64 {
        self.0[phase as usize] += now.wrapping_sub(since);
        now
    }

    /// The ticks charged to `phase`.
    pub fn of(&self, phase: Phase) -> u64 {
        self.0[phase as usize]
    }

    /// The ticks of every stage.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

impl fmt::Display for Spent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.total().max(1);
        for (i, p) in Phase::ALL.into_iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{} {}%", p.word(), self.of(p) * 100 / total)?;
        }
        Ok(())
    }
}

/// How the restorer knows its counter's rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateSource {
    /// CPUID leaf 0x15: the TSC's ratio to the core crystal clock, and the crystal's Hz.
    CpuidCrystal,
    /// CPUID leaf 0x16: the processor's base frequency in MHz, which the TSC counts at.
    CpuidBase,
    /// The hypervisor's CPUID leaf 0x40000010: the TSC's rate in kHz.
    Hypervisor,
    /// Measured once against the PC's PIT (channel 2, [`PIT_HZ`]).
    Pit,
    /// CNTFRQ_EL0: the generic timer's frequency, as the firmware set it.
    Cntfrq,
}

impl RateSource {
    /// Where the rate came from, for the console.
    pub fn describe(self) -> &'static str {
        match self {
            RateSource::CpuidCrystal => "TSC, CPUID leaf 0x15",
            RateSource::CpuidBase => "TSC, CPUID leaf 0x16",
            RateSource::Hypervisor => "TSC, hypervisor leaf 0x40000010",
            RateSource::Pit => "TSC, measured against the PIT",
            RateSource::Cntfrq => "generic timer, CNTFRQ_EL0",
        }
    }
}

/// The rate of the PC's PIT input clock, Hz.
pub const PIT_HZ: u64 = 1_193_182;

/// How fast the cycle counter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Ticks per second.
    pub hz: u64,
    /// How the restorer knows.
    pub source: RateSource,
}

impl Rate {
    /// The rates taken for a counter's (1 MHz to 50 GHz): anything else is a register
    /// the firmware left unset or a measurement that went wrong, and no rate at all.
    pub const PLAUSIBLE_HZ: core::ops::RangeInclusive<u64> = 1_000_000..=50_000_000_000;

    fn checked(hz: u64, source: RateSource) -> Option<Rate> {
        Self::PLAUSIBLE_HZ
            .contains(&hz)
            .then_some(Rate { hz, source })
    }

    /// From CPUID leaf 0x15: `eax` the ratio's denominator, `ebx` its numerator, `ecx`
    /// the crystal's Hz (0 on CPUs that do not say it: no rate from this leaf).
    pub fn from_cpuid_15(eax: u32, ebx: u32, ecx: u32) -> Option<Rate> {
        if eax == 0 || ebx == 0 || ecx == 0 {
            return None;
        }
        let hz = u64::from(ecx) * u64::from(ebx) / u64::from(eax);
        Self::checked(hz, RateSource::CpuidCrystal)
    }

    /// From CPUID leaf 0x16: `eax` bits 15:0 are the base frequency in MHz.
    pub fn from_cpuid_16(eax: u32) -> Option<Rate> {
        Self::checked(u64::from(eax & 0xffff) * 1_000_000, RateSource::CpuidBase)
    }

    /// From the hypervisor's leaf 0x40000010: `eax` is the TSC's kHz.
    pub fn from_hypervisor(eax: u32) -> Option<Rate> {
        Self::checked(u64::from(eax) * 1_000, RateSource::Hypervisor)
    }

    /// From a measurement: the counter advanced `ticks` while the PIT counted `pit_ticks`.
    pub fn from_pit(ticks: u64, pit_ticks: u64) -> Option<Rate> {
        if pit_ticks == 0 {
            return None;
        }
        let hz = u128::from(ticks) * u128::from(PIT_HZ) / u128::from(pit_ticks);
        Self::checked(u64::try_from(hz).ok()?, RateSource::Pit)
    }

    /// From CNTFRQ_EL0 (its bits 31:0 are the frequency; 0 when the firmware did not set
    /// it).
    pub fn from_cntfrq(v: u64) -> Option<Rate> {
        Self::checked(v & 0xffff_ffff, RateSource::Cntfrq)
    }

    /// `ticks` of the counter in seconds.
    pub fn seconds(&self, ticks: u64) -> f64 {
        ticks as f64 / self.hz as f64
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // In kHz, integers only: the console line this goes into has no floating point.
        let khz = self.hz / 1_000;
        write!(
            f,
            "{}.{:03} MHz ({})",
            khz / 1_000,
            khz % 1_000,
            self.source.describe()
        )
    }
}

/// The requests made of a disk: how many, and their bytes (all, and those of requests of
/// at least [`LARGE_REQUEST`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requests {
    /// Requests made.
    pub count: u64,
    /// Bytes they read.
    pub bytes: u64,
    /// Bytes read in requests of at least [`LARGE_REQUEST`] bytes.
    pub large_bytes: u64,
}

impl Requests {
    /// Counts one read of `len` bytes from a disk that carries at most `limit` bytes in
    /// one request (`None`: the read is one request): the disk's driver splits it into
    /// requests of `limit` bytes, the last one shorter, as the PC's virtio disks do.
    pub fn add(&mut self, len: u64, limit: Option<u64>) {
        let limit = limit.unwrap_or(len).max(1);
        let (whole, rest) = (len / limit, len % limit);
        self.count += whole + u64::from(rest > 0);
        self.bytes += len;
        if limit >= LARGE_REQUEST {
            self.large_bytes += whole * limit;
        }
        if rest >= LARGE_REQUEST {
            self.large_bytes += rest;
        }
    }
}

/// One load phase's counts as the program makes them, from its start on: the ticks per
/// stage and what was decoded and placed (the requests are the window's, [`Requests`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    /// The counter when the phase began: the first chunk read (the EFI program reads them
    /// all before it leaves the firmware), or the first page written (the PVH program
    /// zeroes the image's zero pages, then reads).
    pub start: u64,
    /// The counter's ticks per stage.
    pub spent: Spent,
    /// Bytes the chunks unpacked to.
    pub decoded_bytes: u64,
    /// Pages put at their places: copied from the chunk buffer (to a safe page, for the
    /// last copy, when the restorer's own memory holds their frame), unpacked straight
    /// into their frames, or zeroed.
    pub placed_pages: u64,
    /// CPUs that checked and decoded chunks (the boot CPU among them).
    pub workers: u32,
}

/// Bytes of a page.
const PAGE: u64 = 4096;

impl Load {
    /// A phase starting at counter `start`, nothing counted yet.
    pub fn new(start: u64) -> Self {
        Load {
            start,
            spent: Spent::default(),
            decoded_bytes: 0,
            placed_pages: 0,
            workers: 1,
        }
    }

    /// Counts another CPU's (or the boot CPU's own) share of the chunks decoded in
    /// parallel: its ticks checking and unpacking, summed into [`Phase::Check`] and
    /// [`Phase::Unpack`], the bytes it unpacked and the pages it wrote.
    pub fn add_decoded(&mut self, t: &crate::parallel::Tally) {
        self.spent.add(Phase::Check, 0, t.check_ticks);
        self.spent.add(Phase::Unpack, 0, t.unpack_ticks);
        self.decoded_bytes += t.decoded_bytes;
        self.placed_pages += t.pages;
    }

    /// The phase's throughput when it ends at counter `end`, `reads` the requests that
    /// read its chunks: seconds by `rate`, each 0.0 without one (see the module's
    /// header); [`Load::workers`] CPUs.
    pub fn throughput(&self, reads: &Requests, end: u64, rate: Option<Rate>) -> Throughput {
        let s = |ticks: u64| rate.map_or(0.0, |r| r.seconds(ticks));
        Throughput {
            read_bytes: reads.bytes,
            requests: reads.count,
            large_bytes: reads.large_bytes,
            decoded_bytes: self.decoded_bytes,
            placed_bytes: self.placed_pages * PAGE,
            read_s: s(self.spent.of(Phase::Read)),
            check_s: s(self.spent.of(Phase::Check)),
            decode_s: s(self.spent.of(Phase::Unpack)),
            place_s: s(self.spent.of(Phase::Place)),
            wall_s: s(end.wrapping_sub(self.start)),
            workers: self.workers,
        }
    }
}

/// The `throughput` marker's detail: [`Throughput::line`], and when the counter's rate is
/// unknown (`rate` is `None`), that its seconds are, with each stage's share of `spent`
/// (the host's `Throughput::parse_line` then reads no seconds of zero back from it).
pub fn detail(t: &Throughput, spent: &Spent, rate: Option<Rate>) -> alloc::string::String {
    let mut line = t.line();
    if rate.is_none() {
        use core::fmt::Write;
        let _ = write!(
            line,
            "; seconds unknown (no rate for the cycle counter; its ticks: {spent}; the bound is not measured)"
        );
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests of a 4 MiB window over a disk carrying at most `limit` bytes a request, the
    /// last fill cut short by the disk's end; and what the requests were, one by one.
    fn window_reads(fills: &[u64], limit: Option<u64>) -> (Requests, Vec<u64>) {
        let mut r = Requests::default();
        let mut each = Vec::new();
        for &len in fills {
            r.add(len, limit);
            let l = limit.unwrap_or(len);
            let mut left = len;
            while left > 0 {
                each.push(left.min(l));
                left -= left.min(l);
            }
        }
        (r, each)
    }

    #[test]
    fn requests_add_up_to_the_bytes_read() {
        let fills = [4 << 20, 4 << 20, 4 << 20, (1 << 20) + 512, 3 * 512];
        for limit in [
            None,
            Some(4 << 20),
            Some(1 << 20),
            Some(256 << 10),
            Some(1000 * 512),
        ] {
            let (r, each) = window_reads(&fills, limit);
            assert_eq!(r.count, each.len() as u64, "{limit:?}");
            assert_eq!(r.bytes, each.iter().sum::<u64>(), "{limit:?}");
            let large: u64 = each.iter().filter(|&&b| b >= LARGE_REQUEST).sum();
            assert_eq!(r.large_bytes, large, "{limit:?}");
            assert!(r.large_bytes <= r.bytes);
        }
        // One request a fill: the short fills are small, the whole windows large.
        let (r, _) = window_reads(&fills, None);
        assert_eq!((r.count, r.large_bytes), (5, (12 << 20) + (1 << 20) + 512));
        // Pieces of 256 KiB are never large, however much is read.
        let (r, _) = window_reads(&fills, Some(256 << 10));
        assert_eq!((r.count, r.large_bytes), (48 + 5 + 1, 0));
        // Nothing read, nothing asked.
        let mut none = Requests::default();
        none.add(0, Some(4096));
        assert_eq!(none, Requests::default());
    }

    /// A load phase as `place` counts it: a 2 GHz counter, stages charged back to back
    /// from the start, with a gap (the console's lines) before the end.
    fn sample() -> (Load, Requests, u64) {
        let mut load = Load::new(1_000);
        let mut t = load.start;
        for (phase, ticks) in [
            (Phase::Place, 2_000_000),
            (Phase::Read, 30_000_000),
            (Phase::Check, 5_000_000),
            (Phase::Unpack, 70_000_000),
            (Phase::Place, 9_000_000),
            (Phase::Read, 40_000_000),
            (Phase::Check, 5_000_001),
            (Phase::Unpack, 60_000_000),
        ] {
            t = load.spent.add(phase, t, t + ticks);
        }
        load.decoded_bytes = 200 << 20;
        load.placed_pages = 60_000;
        let (reads, _) = window_reads(&[4 << 20; 30], Some(4 << 20));
        (load, reads, t + 3_333)
    }

    #[test]
    fn the_throughput_adds_up() {
        let (load, reads, end) = sample();
        let rate = Rate::from_pit(20_000_000, 11_932);
        let hz = rate.unwrap().hz;
        assert!((1_999_000_000..=2_001_000_000).contains(&hz), "{hz}");
        let t = load.throughput(&reads, end, rate);
        assert_eq!(t.read_bytes, 120 << 20);
        assert_eq!(t.requests, 30);
        assert!(t.large_bytes <= t.read_bytes);
        assert_eq!(t.large_share(), 1.0);
        assert_eq!(t.decoded_bytes, 200 << 20);
        assert_eq!(t.placed_bytes, 60_000 * 4096);
        assert_eq!(t.workers, 1);
        let stages = t.read_s + t.check_s + t.decode_s + t.place_s;
        assert!(stages <= t.wall_s + 1e-9, "{stages} > {}", t.wall_s);
        assert!(t.wall_s - stages < 1e-5, "the gap is 3,333 ticks");
        assert!((t.read_s - 70e6 / hz as f64).abs() < 1e-12);
        assert!((t.wall_s - 0.1105).abs() < 1e-3, "{}", t.wall_s);
        // Unpacking is what bounds it; the line reads back as printed.
        assert_eq!(t.bound(), bootstatus::Bound::Cpu);
        let line = detail(&t, &load.spent, rate);
        assert_eq!(line, t.line());
        let back = Throughput::parse_line(&line).unwrap();
        assert_eq!((back.requests, back.workers), (30, 1));
        assert_eq!(back.read_s, (t.read_s * 1e3).round() / 1e3);
    }

    #[test]
    fn other_cpus_decoding_are_summed_and_counted() {
        let (mut load, reads, end) = sample();
        let before = load.throughput(&reads, end, None);
        // A second CPU unpacked 100 MiB in 150,000,000 ticks.
        load.add_decoded(&crate::parallel::Tally {
            jobs: 10,
            check_ticks: 1_000,
            unpack_ticks: 150_000_000,
            decoded_bytes: 100 << 20,
            pages: 25_600,
        });
        load.workers = 2;
        let rate = Rate::from_cntfrq(62_500_000);
        let t = load.throughput(&reads, end, rate);
        assert_eq!(t.workers, 2);
        assert_eq!(t.decoded_bytes, before.decoded_bytes + (100 << 20));
        assert_eq!(t.placed_bytes, before.placed_bytes + 25_600 * 4096);
        assert!((t.decode_s - 280e6 / 62.5e6).abs() < 1e-9, "{}", t.decode_s);
        // The wall is the boot CPU's: the seconds summed over two CPUs may pass it.
        assert!(t.decode_s > t.wall_s);
        let back = Throughput::parse_line(&t.line()).unwrap();
        assert_eq!(back.workers, 2);
    }

    #[test]
    fn without_a_rate_no_seconds_are_invented() {
        let (load, reads, end) = sample();
        let t = load.throughput(&reads, end, None);
        assert_eq!(
            (t.read_s, t.check_s, t.decode_s, t.place_s, t.wall_s),
            (0.0, 0.0, 0.0, 0.0, 0.0)
        );
        assert_eq!((t.read_bytes, t.placed_bytes), (120 << 20, 60_000 * 4096));
        let line = detail(&t, &load.spent, None);
        assert!(line.starts_with(&t.line()), "{line}");
        assert!(
            line.ends_with(
                "; seconds unknown (no rate for the cycle counter; its ticks: read 31%, check 4%, unpack 58%, place 4%; the bound is not measured)"
            ),
            "{line}"
        );
        // The host does not take the zeros for measured seconds.
        assert_eq!(Throughput::parse_line(&line), None);
    }

    #[test]
    fn rates_come_from_each_source_or_not_at_all() {
        // CPUID 0x15: a 24 MHz crystal times 188/2 is 2.256 GHz.
        let r = Rate::from_cpuid_15(2, 188, 24_000_000).unwrap();
        assert_eq!((r.hz, r.source), (2_256_000_000, RateSource::CpuidCrystal));
        // No crystal rate, no ratio: nothing from this leaf.
        assert_eq!(Rate::from_cpuid_15(2, 188, 0), None);
        assert_eq!(Rate::from_cpuid_15(0, 0, 24_000_000), None);
        // CPUID 0x16: base MHz in the low 16 bits.
        assert_eq!(
            Rate::from_cpuid_16(0xdead_0bb8).map(|r| r.hz),
            Some(3_000_000_000)
        );
        assert_eq!(Rate::from_cpuid_16(0), None);
        // The hypervisor's kHz.
        assert_eq!(
            Rate::from_hypervisor(2_794_750).map(|r| (r.hz, r.source)),
            Some((2_794_750_000, RateSource::Hypervisor))
        );
        // The PIT: 10 ms of a 3 GHz TSC is 30 million ticks for 11,932 of the PIT's.
        let pit = Rate::from_pit(30_000_000, 11_932).unwrap();
        assert!(
            (pit.hz as i64 - 3_000_000_000).abs() < 1_000_000,
            "{}",
            pit.hz
        );
        assert_eq!(Rate::from_pit(30_000_000, 0), None);
        // A channel that never counted, or a counter that did not move.
        assert_eq!(Rate::from_pit(0, 11_932), None);
        assert_eq!(Rate::from_pit(u64::MAX, 1), None);
        // CNTFRQ_EL0: QEMU's virt board sets 62.5 MHz (1 GHz since QEMU 9), the upper
        // half is RES0; unset, it is no rate.
        let f = Rate::from_cntfrq(0xffff_ffff_0000_0000 | 62_500_000).unwrap();
        assert_eq!((f.hz, f.source), (62_500_000, RateSource::Cntfrq));
        assert_eq!(Rate::from_cntfrq(0), None);
        assert_eq!(f.to_string(), "62.500 MHz (generic timer, CNTFRQ_EL0)");
    }

    #[test]
    fn ticks_become_seconds_at_the_rate() {
        let f = Rate::from_cntfrq(62_500_000).unwrap();
        assert_eq!(f.seconds(62_500_000), 1.0);
        assert_eq!(f.seconds(125_000), 0.002);
        let tsc = Rate::from_cpuid_16(2_500).unwrap();
        assert_eq!(tsc.seconds(5_000_000_000), 2.0);
        assert_eq!(tsc.seconds(0), 0.0);
        assert_eq!(tsc.to_string(), "2500.000 MHz (TSC, CPUID leaf 0x16)");
    }

    #[test]
    fn spent_shows_shares_of_its_ticks() {
        let mut s = Spent::default();
        assert_eq!(s.to_string(), "read 0%, check 0%, unpack 0%, place 0%");
        let t = s.add(Phase::Read, 10, 60);
        s.add(Phase::Unpack, t, t + 150);
        // A counter that wrapped between two stamps still counts forward.
        s.add(Phase::Check, u64::MAX - 49, 50);
        assert_eq!(
            (s.of(Phase::Read), s.of(Phase::Check), s.total()),
            (50, 100, 300)
        );
        assert_eq!(s.to_string(), "read 16%, check 33%, unpack 50%, place 0%");
    }
}
