//! What a boot did, in one record: restored (which image, which unconfirmed restore of it),
//! cold, or a fallback (why, and each image refused with its kind), and the re-capture it
//! plans. Every boot writes it as `/run/snapboot/status` (crate `ondevice`); a boot that
//! another kernel continues (a restore, a restore kernel's or the restorer's hand-over to
//! the stock kernel) leaves it in the store's boot log for that kernel to read back
//! ([`to_boot_log`], [`from_boot_log`]). `no_std` with `alloc`, so the freestanding
//! restorer writes the same record the device reads.
#![no_std]

extern crate alloc;
#[cfg(test)]
extern crate std;

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

mod throughput;
pub use throughput::{Bound, Throughput, LARGE_REQUEST};

/// Unconfirmed restores of one image before the crash-loop guard skips it, when
/// `snapboot.attempts` does not say.
pub const DEFAULT_ATTEMPTS: u32 = 2;

/// What the boot came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Restored from an image.
    Restored,
    /// Booted cold because nothing asked for a restore (no store named, a capture boot).
    Cold,
    /// A restore was asked for and nothing was restored: `reason` says why.
    Fallback,
}

impl Outcome {
    /// The word the status and its systemd target use.
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Restored => "restored",
            Outcome::Cold => "cold",
            Outcome::Fallback => "fallback",
        }
    }
}

/// An error and every source under it, joined with ": ": the whole cause in one line, as a
/// status, a marker's detail and the console carry a reason.
pub fn chain(e: &dyn core::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// What a status written by the freestanding restorer names as its kernel.
pub const RESTORER: &str = "snapboot-restorer";

/// Why an image was refused, by kind: what the device does next depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Refusal {
    /// The system changed since the capture (kernel, initramfs, root, command line,
    /// snapboot, RAM, memory layout): an update. A new capture fixes it.
    Changed,
    /// Marked stale by `snapboot invalidate` (an update hook).
    Stale,
    /// Restored too often without a confirmation: the crash-loop guard skips it.
    CrashLoop,
    /// Its data does not check out (checksums, structure).
    Damaged,
    /// Not signed for the configured key, or in the clear where images are encrypted.
    Untrusted,
    /// Encrypted with a key this device does not have (TPM cleared or replaced, store moved,
    /// key changed): only a new capture under the device's key helps.
    Key,
    /// Older than the newest image of its name this device accepted (its rollback counter
    /// value is below the TPM's), or without the counter value this device requires: an
    /// older copy of the store written back. A new capture fixes it.
    Rollback,
    /// Anything else (the store or the kernel cannot do it now).
    Other,
}

impl Refusal {
    /// The word the status uses for it.
    pub fn word(self) -> &'static str {
        match self {
            Refusal::Changed => "changed",
            Refusal::Stale => "stale",
            Refusal::CrashLoop => "crash-loop",
            Refusal::Damaged => "damaged",
            Refusal::Untrusted => "untrusted",
            Refusal::Key => "key",
            Refusal::Rollback => "rollback",
            Refusal::Other => "other",
        }
    }
}

/// One refused image, as the status and the boot log record it: its name, kind and reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusalRecord {
    /// The image's name.
    pub image: String,
    /// Its kind.
    pub kind: Refusal,
    /// The whole reason.
    pub why: String,
}

/// An image of the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRef {
    /// Its name.
    pub name: String,
    /// The store generation that committed it.
    pub generation: u64,
}

/// Whether this boot takes a new image at the ready point because the old ones no longer
/// fit, and how that went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Recapture {
    /// Nothing to re-capture.
    #[default]
    No,
    /// The images were refused because the system changed, and `snapboot.norecapture` is set.
    Off,
    /// The ready point will capture and go on.
    Planned,
    /// Captured at the ready point: the next power-on restores this image.
    Captured(ImageRef),
    /// The capture failed: the reason.
    Failed(String),
}

/// How long the steps took, in seconds (each `None` when the step did not run).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Timings {
    /// `snapboot resume`, from its start to the restore or the fallback.
    pub resume: Option<f64>,
    /// Reading, checking and handing the image's pages to the kernel.
    pub load: Option<f64>,
    /// The restored side's steps (clock, RNG, hooks) before the application continued.
    pub after_restore: Option<f64>,
}

/// `/run/snapboot/status`: what this boot did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BootStatus {
    /// What the boot came to.
    pub outcome: Outcome,
    /// Why it was not restored (fallback), or why nothing was asked (cold).
    pub reason: Option<String>,
    /// Each image refused on the way, with its kind.
    pub refused: Vec<RefusalRecord>,
    /// The image restored.
    pub image: Option<ImageRef>,
    /// Which unconfirmed restore of that image this is (1: the first since the last
    /// confirmation); the crash-loop guard skips the image after `attempts` of them.
    pub attempt: Option<u32>,
    /// The crash-loop guard's limit this boot applied.
    pub attempts: u32,
    /// Whether the restore was confirmed (by snapboot at once, or by `snapboot confirm`).
    pub confirmed: bool,
    /// When the restore counts as confirmed (`snapboot.confirm=`, fixed at capture, as the
    /// restored system resolved `auto`): `boot-complete`, `up`, `app` or `restored`.
    pub confirm_by: String,
    /// With `confirm_by` `up`: the seconds the restored system must stay up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace: Option<u32>,
    /// The hardware watchdog's timeout the restoring boot armed across the restore: the
    /// restored system feeds it until the restore is confirmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watchdog: Option<u32>,
    /// A cold boot handed over by a restore kernel.
    pub handed_over: bool,
    /// The re-capture after an update.
    pub recapture: Recapture,
    /// The running kernel's release.
    pub kernel: String,
    /// Seconds since the epoch when this was written.
    pub written_unix: u64,
    /// How long the steps took.
    pub timings: Timings,
    /// The load phase's throughput, stage by stage (a restore).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<Throughput>,
}

impl BootStatus {
    /// A boot that came to `outcome` with nothing else known yet: the crash-loop guard's
    /// limit `attempts`, who confirms a restore (`confirm_by`), the running `kernel`.
    pub fn new(outcome: Outcome, attempts: u32, confirm_by: &str, kernel: String) -> Self {
        BootStatus {
            outcome,
            reason: None,
            refused: Vec::new(),
            image: None,
            attempt: None,
            attempts,
            confirmed: false,
            confirm_by: confirm_by.into(),
            grace: None,
            watchdog: None,
            handed_over: false,
            recapture: Recapture::No,
            kernel,
            written_unix: 0,
            timings: Timings::default(),
            throughput: None,
        }
    }

    /// The JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The `status` marker's text: the outcome, and for a restore the image and its count.
    pub fn marker_text(&self) -> String {
        let mut line = self.outcome.word().to_string();
        if let Some(i) = &self.image {
            line += &format!(
                " {} generation {} restore {} of {} {}",
                i.name,
                i.generation,
                self.attempt.unwrap_or(0),
                self.attempts,
                if self.confirmed {
                    "confirmed".to_string()
                } else {
                    format!("unconfirmed{}", self.pending())
                }
            );
        }
        if let Some(r) = self
            .reason
            .as_ref()
            .filter(|_| self.outcome != Outcome::Restored)
        {
            line += &format!(": {r}");
        }
        if self.recapture == Recapture::Planned {
            line += " (re-capture at the ready point)";
        }
        line
    }

    /// What an unconfirmed restore waits for, when snapboot confirms it by itself
    /// (` until boot-complete.target`, ` until up 15 s`); empty when the application
    /// confirms, or the restore is confirmed at once. The board's harness waits for the
    /// confirmation when a status marker says this.
    pub fn pending(&self) -> String {
        match (self.confirm_by.as_str(), self.grace) {
            ("boot-complete", _) => " until boot-complete.target".into(),
            ("up", Some(s)) => format!(" until up {s} s"),
            _ => String::new(),
        }
    }

    /// The status in a few lines, for `snapboot status`.
    pub fn human(&self) -> String {
        let mut out = format!("outcome: {}", self.outcome.word());
        if let Some(i) = &self.image {
            out += &format!(
                "\nimage: {} (generation {}), restore {} of at most {} unconfirmed, {}",
                i.name,
                i.generation,
                self.attempt.unwrap_or(0),
                self.attempts,
                if self.confirmed {
                    "confirmed".to_string()
                } else if self.pending().is_empty() {
                    format!("not confirmed yet (by {})", self.confirm_by)
                } else {
                    format!("not confirmed yet ({})", self.pending().trim_start())
                }
            );
        }
        if self.handed_over {
            out += "\nhanded over: a restore kernel or the restorer handed this cold boot to this kernel";
        }
        if let Some(r) = &self.reason {
            out += &format!("\nreason: {r}");
        }
        for r in &self.refused {
            out += &format!("\nrefused {} ({}): {}", r.image, r.kind.word(), r.why);
        }
        out += &match &self.recapture {
            Recapture::No => String::new(),
            Recapture::Off => "\nre-capture: off (snapboot.norecapture)".into(),
            Recapture::Planned => "\nre-capture: at the ready point".into(),
            Recapture::Captured(i) => format!(
                "\nre-capture: captured {} (generation {}); the next power-on restores it",
                i.name, i.generation
            ),
            Recapture::Failed(why) => format!("\nre-capture: failed: {why}"),
        };
        let t = &self.timings;
        let secs = [
            ("resume", t.resume),
            ("load", t.load),
            ("after restore", t.after_restore),
        ]
        .iter()
        .filter_map(|(n, v)| v.map(|v| format!("{n} {v:.3} s")))
        .collect::<Vec<_>>();
        if !secs.is_empty() {
            out += &format!("\ntimings: {}", secs.join(", "));
        }
        out += &format!("\nkernel: {}", self.kernel);
        out
    }
}

/// Most bytes of a status kept in the store's boot log (which holds one 4 KiB block).
const BOOT_LOG_STATUS_BYTES: usize = 2048;

/// A status as the store's boot log keeps it for the kernel that continues this boot (the
/// restored system, or the stock kernel a restore kernel hands over to): JSON, reasons
/// shortened until it fits in [`BOOT_LOG_STATUS_BYTES`].
pub fn to_boot_log(s: &BootStatus) -> Vec<u8> {
    let mut s = s.clone();
    let mut limit = 400;
    loop {
        let json = serde_json::to_vec(&s).unwrap_or_default();
        if json.len() <= BOOT_LOG_STATUS_BYTES || limit < 16 {
            return json;
        }
        s.refused.truncate(8);
        for why in s
            .refused
            .iter_mut()
            .map(|r| &mut r.why)
            .chain(s.reason.as_mut())
        {
            shorten(why, limit);
        }
        limit /= 2;
    }
}

/// Cuts `text` to at most `max` bytes on a character boundary, marking the cut.
fn shorten(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
}

/// The status a boot log holds ([`to_boot_log`]); `None` when it holds none.
pub fn from_boot_log(bytes: &[u8]) -> Option<BootStatus> {
    serde_json::from_slice(bytes).ok()
}

/// Most bytes of a reason one boot of the history keeps.
const HISTORY_REASON_BYTES: usize = 160;

/// One boot as the store's history keeps it across reboots (`snapboot status --history`):
/// when, what it came to, the image restored, why not. Encoded with postcard (a few dozen
/// bytes) so that the one block of the boot log holds dozens of boots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PastBoot {
    /// Seconds since the epoch when it was recorded (the boot's clock; 0: none).
    pub unix: u64,
    /// What it came to.
    pub outcome: Outcome,
    /// The image restored.
    pub image: Option<ImageRef>,
    /// A cold boot a restore kernel or the restorer handed over.
    pub handed_over: bool,
    /// Why it was not restored, shortened to [`HISTORY_REASON_BYTES`].
    pub reason: Option<String>,
}

impl PastBoot {
    /// The bytes the boot log keeps.
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).unwrap_or_default()
    }

    /// The boot in `bytes`; `None` when they hold none.
    pub fn decode(bytes: &[u8]) -> Option<PastBoot> {
        postcard::from_bytes(bytes).ok()
    }

    /// One line for `snapboot status --history`: the time (UTC), the outcome, the image or
    /// the reason.
    pub fn line(&self) -> String {
        let when = match self.unix {
            0 => format!("{:<23}", "(no clock)"),
            t => utc(t),
        };
        let mut line = format!("{when}  {:<8}", self.outcome.word());
        if let Some(i) = &self.image {
            line += &format!("  {} generation {}", i.name, i.generation);
        }
        if self.handed_over {
            line += "  (handed over)";
        }
        if let Some(r) = self.reason.as_ref().filter(|_| self.image.is_none()) {
            line += &format!("  {r}");
        }
        line
    }
}

/// `YYYY-MM-DD HH:MM:SS UTC` of `unix` seconds (the proleptic Gregorian calendar).
pub fn utc(unix: u64) -> String {
    let (days, secs) = (unix / 86_400, unix % 86_400);
    // Howard Hinnant's days-to-civil, for days since 1970-01-01 (never negative here).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        secs / 3_600,
        secs / 60 % 60,
        secs % 60
    )
}

impl BootStatus {
    /// This boot as the history keeps it.
    pub fn past(&self) -> PastBoot {
        let mut reason = self.reason.clone();
        if let Some(r) = reason.as_mut() {
            shorten(r, HISTORY_REASON_BYTES);
        }
        PastBoot {
            unix: self.written_unix,
            outcome: self.outcome,
            image: self.image.clone(),
            handed_over: self.handed_over,
            reason,
        }
    }
}

/// What the store held when nothing was restored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// No image at all: a store to fill.
    Nothing,
    /// Images, each refused.
    Images,
}

impl Held {
    /// [`Held::Nothing`] when `empty`.
    pub fn empty_if(empty: bool) -> Self {
        if empty {
            Held::Nothing
        } else {
            Held::Images
        }
    }
}

/// The device's settings for taking a new image after a fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecapturePolicy {
    /// Captures after a fallback are allowed (`snapboot.norecapture` is not set).
    pub allowed: bool,
    /// Only signed images restore here (a public key, no device key): the device cannot make
    /// one, so it never captures an unsigned image into the store.
    pub signed_only: bool,
}

impl RecapturePolicy {
    /// Allowed, unsigned images: what a path that does not know the device's settings
    /// (the restorer) plans with; the stock kernel applies its own when it reads the plan.
    pub const DEFAULT: RecapturePolicy = RecapturePolicy {
        allowed: true,
        signed_only: false,
    };
}

/// Whether a boot whose images were refused like this takes a new image at the ready point:
/// when the store holds none or when one was refused because the system changed, an update
/// marked it stale or the device lost the key it was encrypted with, and none of them
/// because it crash-looped (a new image of the same system would loop too). Damaged and
/// untrusted images are left for someone to look at; `policy` may forbid it.
pub fn recapture_after(
    refused: &[RefusalRecord],
    held: Held,
    policy: RecapturePolicy,
) -> Recapture {
    let changed = held == Held::Nothing
        || refused.iter().any(|r| {
            matches!(
                r.kind,
                Refusal::Changed | Refusal::Stale | Refusal::Key | Refusal::Rollback
            )
        });
    let looped = refused.iter().any(|r| r.kind == Refusal::CrashLoop);
    match (changed && !looped && !policy.signed_only, policy.allowed) {
        (false, _) => Recapture::No,
        (true, false) => Recapture::Off,
        (true, true) => Recapture::Planned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn refused(kind: Refusal) -> RefusalRecord {
        RefusalRecord {
            image: "current".into(),
            kind,
            why: "x".into(),
        }
    }

    fn blank(outcome: Outcome) -> BootStatus {
        BootStatus::new(outcome, 2, "restored", "6.1.0-56-amd64".into())
    }

    #[test]
    fn the_json_names_its_fields_and_kinds_and_the_text_reads_them_back() {
        let mut s = blank(Outcome::Fallback);
        s.reason = Some("no image on the store can be restored".into());
        s.refused = vec![refused(Refusal::Changed)];
        s.recapture = Recapture::Captured(ImageRef {
            name: "current".into(),
            generation: 4,
        });
        s.timings.resume = Some(0.25);
        let json = s.to_json();
        for field in [
            "\"outcome\": \"fallback\"",
            "\"kind\": \"changed\"",
            "\"captured\"",
        ] {
            assert!(json.contains(field), "{field} not in {json}");
        }
        let back: BootStatus = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
        let text = back.human();
        assert!(text.starts_with("outcome: fallback"), "{text}");
        assert!(text.contains("refused current (changed): x"), "{text}");
        assert!(
            text.contains("re-capture: captured current (generation 4)"),
            "{text}"
        );
        use Refusal::*;
        for kind in [
            Changed, Stale, CrashLoop, Damaged, Untrusted, Key, Rollback, Other,
        ] {
            assert_eq!(
                serde_json::to_string(&kind).unwrap(),
                format!("\"{}\"", kind.word())
            );
        }
    }

    #[test]
    fn the_marker_names_the_restored_image_and_its_count_or_the_reason() {
        let mut s = blank(Outcome::Restored);
        s.image = Some(ImageRef {
            name: "current".into(),
            generation: 2,
        });
        s.attempt = Some(1);
        s.reason = Some("ignored for a restore".into());
        assert_eq!(
            s.marker_text(),
            "restored current generation 2 restore 1 of 2 unconfirmed"
        );
        // A restore snapboot confirms by itself says what it waits for; the application's
        // confirmation and a confirmed restore say nothing more.
        s.confirm_by = "boot-complete".into();
        assert_eq!(
            s.marker_text(),
            "restored current generation 2 restore 1 of 2 unconfirmed until boot-complete.target"
        );
        s.confirm_by = "up".into();
        s.grace = Some(15);
        assert!(s.marker_text().ends_with(" unconfirmed until up 15 s"));
        assert!(s
            .human()
            .contains("restore 1 of at most 2 unconfirmed, not confirmed yet (until up 15 s)"));
        s.confirmed = true;
        assert!(s.marker_text().ends_with(" restore 1 of 2 confirmed"));
        s.confirmed = false;
        s.confirm_by = "app".into();
        assert!(s.marker_text().ends_with(" restore 1 of 2 unconfirmed"));
        // A boot log written before the grace was recorded still reads.
        let old = to_boot_log(&blank(Outcome::Cold));
        let text = core::str::from_utf8(&old).unwrap();
        assert!(!text.contains("grace"), "{text}");
        assert_eq!(from_boot_log(&old).unwrap().grace, None);
        let mut f = blank(Outcome::Fallback);
        f.reason = Some("checksum mismatch".into());
        f.recapture = Recapture::Planned;
        assert_eq!(
            f.marker_text(),
            "fallback: checksum mismatch (re-capture at the ready point)"
        );
    }

    #[test]
    fn a_status_fits_the_boot_log_however_long_its_reasons() {
        let mut s = blank(Outcome::Fallback);
        s.reason = Some("é".repeat(3000));
        s.refused = (0..20)
            .map(|i| RefusalRecord {
                image: format!("image{i}"),
                kind: Refusal::Changed,
                why: "x".repeat(1000),
            })
            .collect();
        let bytes = to_boot_log(&s);
        assert!(bytes.len() <= BOOT_LOG_STATUS_BYTES, "{}", bytes.len());
        let back = from_boot_log(&bytes).unwrap();
        assert_eq!(back.refused.len(), 8);
        assert_eq!(back.refused[0].kind, Refusal::Changed);
        assert!(from_boot_log(b"").is_none());
    }

    #[test]
    fn only_a_changed_system_or_an_empty_store_is_captured_again() {
        use Refusal::*;
        assert_eq!(
            recapture_after(
                &[],
                Held::Nothing,
                RecapturePolicy {
                    allowed: true,
                    signed_only: false
                }
            ),
            Recapture::Planned
        );
        assert_eq!(
            recapture_after(
                &[refused(Changed)],
                Held::Images,
                RecapturePolicy {
                    allowed: true,
                    signed_only: false
                }
            ),
            Recapture::Planned
        );
        assert_eq!(
            recapture_after(
                &[refused(Stale)],
                Held::Images,
                RecapturePolicy {
                    allowed: true,
                    signed_only: false
                }
            ),
            Recapture::Planned
        );
        assert_eq!(
            recapture_after(
                &[refused(Key)],
                Held::Images,
                RecapturePolicy {
                    allowed: true,
                    signed_only: false
                }
            ),
            Recapture::Planned
        );
        assert_eq!(
            recapture_after(
                &[refused(Changed)],
                Held::Images,
                RecapturePolicy {
                    allowed: false,
                    signed_only: false
                }
            ),
            Recapture::Off
        );
        for kind in [Damaged, Untrusted, Other, CrashLoop] {
            assert_eq!(
                recapture_after(
                    &[refused(kind)],
                    Held::Images,
                    RecapturePolicy {
                        allowed: true,
                        signed_only: false
                    }
                ),
                Recapture::No
            );
        }
        // A crash loop anywhere stops it; so does a store of signed images.
        assert_eq!(
            recapture_after(
                &[refused(Changed), refused(CrashLoop)],
                Held::Images,
                RecapturePolicy {
                    allowed: true,
                    signed_only: false
                }
            ),
            Recapture::No
        );
        assert_eq!(
            recapture_after(
                &[refused(Changed)],
                Held::Images,
                RecapturePolicy {
                    allowed: true,
                    signed_only: true
                }
            ),
            Recapture::No
        );
    }

    #[test]
    fn a_past_boot_is_small_round_trips_and_reads_as_one_line() {
        let mut s = blank(Outcome::Restored);
        s.image = Some(ImageRef {
            name: "current".into(),
            generation: 4,
        });
        s.written_unix = 1_795_857_243;
        let past = s.past();
        let bytes = past.encode();
        assert!(bytes.len() < 24, "{} bytes", bytes.len());
        assert_eq!(PastBoot::decode(&bytes), Some(past.clone()));
        assert_eq!(
            past.line(),
            "2026-11-28 09:14:03 UTC  restored  current generation 4"
        );
        let mut f = blank(Outcome::Fallback);
        f.reason = Some("no image on the store can be restored: ".to_string() + &"x".repeat(400));
        f.handed_over = true;
        let past = f.past();
        assert!(past.encode().len() < HISTORY_REASON_BYTES + 16);
        let line = past.line();
        assert!(
            line.starts_with(
                "(no clock)               fallback  (handed over)  no image on the store"
            ),
            "{line}"
        );
        assert!(line.ends_with("x…"), "{line}");
        assert_eq!(PastBoot::decode(b""), None);
    }

    #[test]
    fn utc_dates_fall_on_the_calendar() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(4_107_542_399), "2100-02-28 23:59:59 UTC");
        assert_eq!(utc(1_709_251_199), "2024-02-29 23:59:59 UTC");
    }
}
