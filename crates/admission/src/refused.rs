//! Why an image does not restore: one typed refusal for every restoring path. Its
//! [`Refused::kind`] is what the boot log keeps and what decides whether the next cold boot
//! captures the system again; its text is what the console and the status say. A kind is
//! never recovered from a text.

use alloc::string::{String, ToString};
use bootstatus::Refusal;
use snapimg::{BindingMismatch, DescriptionError, Incompat, StreamError};
use storelayout::{Guarded, KeyId};

pub use bootstatus::chain;

/// Why one image of the store is not restored. Each text is whole (no `source()`), so a
/// path prints it as it is.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// `snapboot.image=` asks for an image the store does not have.
    #[error("no image named `{0}`")]
    Missing(String),
    /// `snapboot.image=` names something no image can be called.
    #[error("bad image name `{0}`: 1 to 64 characters of [A-Za-z0-9._-]")]
    BadName(String),
    /// The store's boot log says not to try it: stale (an update), or restored
    /// `snapboot.attempts` times without a confirmation (the crash-loop guard).
    #[error(transparent)]
    Guard(Guarded),
    /// A public key is configured and the image's signature does not make it trusted.
    #[error(transparent)]
    Signature(imagekey::SignatureError),
    /// A signature is required and the store cannot carry one (its chunk checksums are not
    /// cryptographic).
    #[error("{}", storelayout::DigestError::NotSignable(.0))]
    NotSignable(&'static str),
    /// The image is in the clear, and this device restores encrypted images only.
    #[error(
        "the image is not encrypted, and this device restores only images encrypted with its \
         device key (snapboot.encrypt={encrypt}): it was written by something else than this \
         device's captures"
    )]
    Clear {
        /// The `snapboot.encrypt=` word in effect.
        encrypt: String,
    },
    /// The image is encrypted with another key than the device's.
    #[error(
        "the image is encrypted with device key {image}, this device's key is {device}: it \
         was captured under another key (the key changed, or the store comes from another \
         device)"
    )]
    ForeignKey {
        /// The key the image is sealed with.
        image: KeyId,
        /// The device's.
        device: KeyId,
    },
    /// The image's rollback counter value is below the TPM's: a newer image of its name was
    /// captured (or the counter raised) since, so this one is an older copy written back.
    #[error(
        "rollback: the image was captured at {counter:#010x} value {image}, and this device's \
         TPM counter is at {device}: a newer image of this name replaced it, so this is an older \
         copy written back to the store"
    )]
    RolledBack {
        /// The counter's NV index.
        counter: u32,
        /// The value the image records.
        image: u64,
        /// The TPM's value.
        device: u64,
    },
    /// The image records a counter this TPM has never counted (another TPM, or cleared).
    #[error(
        "rollback: the image records TPM counter {counter:#010x} at value {image}, and this \
         TPM has no such counter: the image was captured with another TPM, or this one was \
         cleared since"
    )]
    NoCounter {
        /// The counter's NV index.
        counter: u32,
        /// The value the image records.
        image: u64,
    },
    /// This device requires a rollback counter value and the image has none.
    #[error(
        "rollback: this device restores only images that carry a TPM counter value \
         (snapboot.rollback=tpm, the default with snapboot.encrypt=tpm), and this one was \
         captured without"
    )]
    Unstamped,
    /// The image's counter could not be read: whether it is older cannot be told.
    #[error("rollback: cannot read TPM counter {counter:#010x} the image records: {why}")]
    CounterUnread {
        /// The counter's NV index.
        counter: u32,
        /// Why not.
        why: String,
    },
    /// The device key cannot be had: no encrypted image can be opened.
    #[error("no device key to open the images with: {0}")]
    DeviceKey(String),
    /// Reading the image needs a key the store is not unlocked with.
    #[error("{0}")]
    Sealed(String),
    /// A part of the image on the store does not check out.
    #[error("store is damaged: {0}")]
    Damaged(String),
    /// The image's description cannot be read: another format version (snapboot was
    /// updated) or garbage.
    #[error("{}", chain(.0))]
    Description(DescriptionError),
    /// The page list and the description (or the stream header) disagree on the length.
    #[error("store is damaged: the image's page list holds {listed} pages, its {by} says {said}")]
    PageCount {
        /// Pages the page list holds.
        listed: u64,
        /// `description` or `stream header`.
        by: &'static str,
        /// Pages that one says.
        said: u64,
    },
    /// The image belongs to another kernel, RAM size, memory layout or more CPUs.
    #[error("image does not fit this system: {0}")]
    Incompatible(Incompat),
    /// The image records nothing of what it is bound to.
    #[error(
        "the image records no root filesystem or boot setup to check (captured by an older \
         snapboot): capture it again"
    )]
    Unbound,
    /// The image was captured on another system (root, command line, boot setup, disks).
    #[error("image was captured on a different system: {0}")]
    Mismatch(BindingMismatch),
    /// What the image is bound to could not be observed on this boot.
    #[error("cannot check what the image is bound to: {0}")]
    Unobservable(String),
    /// A lazy image's swap region is not its own, or not as the capture left it.
    #[error("lazy image: {0}")]
    SwapRegion(String),
    /// Page 0 is not a hibernation header this path can check.
    #[error("the image's stream header: {}", chain(.0))]
    Header(StreamError),
    /// Page 0 is another architecture's.
    #[error("the image's stream header is not an {expected} kernel's")]
    OtherArch {
        /// The architecture this path restores.
        expected: &'static str,
    },
    /// The medium failed while the image was read.
    #[error("{0}")]
    Unreadable(String),
    /// The kernel (or the restorer's placing) refused to take the pages.
    #[error("{0}")]
    NotPlaced(String),
    /// The restore attempt could not be counted in the boot log, so the crash-loop guard
    /// could not count it: the image is not entered.
    #[error("cannot record the restore attempt on the store: {0}")]
    Unrecorded(String),
}

impl Refused {
    /// The kind of this refusal: what the next boot does about it
    /// ([`bootstatus::recapture_after`]).
    pub fn kind(&self) -> Refusal {
        match self {
            Refused::Incompatible(_)
            | Refused::Mismatch(_)
            | Refused::Unbound
            | Refused::OtherArch { .. }
            | Refused::Header(StreamError::UnknownArch { .. })
            // An image description of another format version: snapboot was updated.
            | Refused::Description(_) => Refusal::Changed,
            Refused::Guard(Guarded::Stale { .. }) => Refusal::Stale,
            Refused::Guard(Guarded::CrashLoop { .. }) => Refusal::CrashLoop,
            Refused::Signature(_) | Refused::NotSignable(_) | Refused::Clear { .. } => {
                Refusal::Untrusted
            }
            Refused::DeviceKey(_) | Refused::ForeignKey { .. } | Refused::Sealed(_) => {
                Refusal::Key
            }
            Refused::RolledBack { .. } | Refused::NoCounter { .. } | Refused::Unstamped => {
                Refusal::Rollback
            }
            Refused::Damaged(_)
            | Refused::PageCount { .. }
            | Refused::Header(_)
            | Refused::SwapRegion(_)
            // The medium failed under the image: not a change a new capture fixes.
            | Refused::Unreadable(_) => Refusal::Damaged,
            Refused::Missing(_)
            | Refused::BadName(_)
            | Refused::Unobservable(_)
            | Refused::NotPlaced(_)
            | Refused::Unrecorded(_)
            // The TPM cannot be asked now: the next boot may.
            | Refused::CounterUnread { .. } => Refusal::Other,
        }
    }

    /// The record the boot log and the status keep of this refusal of image `name`.
    pub fn record(&self, name: &str) -> bootstatus::RefusalRecord {
        bootstatus::RefusalRecord {
            image: name.into(),
            kind: self.kind(),
            why: self.to_string(),
        }
    }
}

/// A damaged part of the store read through `storelayout` (the catalog's places, a page
/// list, a chunk).
impl From<storelayout::Damage> for Refused {
    fn from(d: storelayout::Damage) -> Self {
        Refused::Damaged(d.to_string())
    }
}

/// What reading a page list or a chunk through `storelayout` says.
impl From<storelayout::ReadError> for Refused {
    fn from(e: storelayout::ReadError) -> Self {
        match e {
            storelayout::ReadError::Damaged(d) => d.into(),
            sealed => Refused::Sealed(sealed.to_string()),
        }
    }
}

impl From<storelayout::DigestError> for Refused {
    fn from(e: storelayout::DigestError) -> Self {
        match e {
            storelayout::DigestError::NotSignable(check) => Refused::NotSignable(check),
            storelayout::DigestError::Damaged(d) => d.into(),
        }
    }
}

impl From<snapimg::RegionMismatch> for Refused {
    fn from(m: snapimg::RegionMismatch) -> Self {
        Refused::SwapRegion(m.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_has_the_kind_that_decides_the_next_boot() {
        let k = |b: u8| KeyId([b; 16]);
        let cases = [
            (Refused::Missing("new".into()), Refusal::Other),
            (Refused::BadName("a/b".into()), Refusal::Other),
            (
                Refused::Guard(Guarded::Stale {
                    generation: 2,
                    through: 3,
                }),
                Refusal::Stale,
            ),
            (
                Refused::Guard(Guarded::CrashLoop {
                    attempts: 3,
                    limit: 3,
                }),
                Refusal::CrashLoop,
            ),
            (
                Refused::Signature(imagekey::SignatureError::Unsigned),
                Refusal::Untrusted,
            ),
            (
                Refused::Clear {
                    encrypt: "tpm".into(),
                },
                Refusal::Untrusted,
            ),
            (
                Refused::ForeignKey {
                    image: k(1),
                    device: k(2),
                },
                Refusal::Key,
            ),
            (Refused::Damaged("chunk 3".into()), Refusal::Damaged),
            (
                Refused::Incompatible(Incompat::RamMismatch {
                    image: 1,
                    running: 2,
                }),
                Refusal::Changed,
            ),
            (
                Refused::Incompatible(Incompat::FewerCpus {
                    image: 2,
                    running: 1,
                }),
                Refusal::Changed,
            ),
            (Refused::Unbound, Refusal::Changed),
            (
                Refused::Header(StreamError::UnknownArch { magic: 7 }),
                Refusal::Changed,
            ),
            (Refused::Unreadable("disk".into()), Refusal::Damaged),
            (Refused::NotPlaced("PFN".into()), Refusal::Other),
            (
                Refused::RolledBack {
                    counter: 0x0181_0001,
                    image: 7,
                    device: 9,
                },
                Refusal::Rollback,
            ),
            (
                Refused::NoCounter {
                    counter: 0x0181_0001,
                    image: 7,
                },
                Refusal::Rollback,
            ),
            (Refused::Unstamped, Refusal::Rollback),
            (
                Refused::CounterUnread {
                    counter: 0x0181_0001,
                    why: "no TPM".into(),
                },
                Refusal::Other,
            ),
        ];
        for (r, kind) in cases {
            assert_eq!(r.kind(), kind, "{r}");
            let rec = r.record("current");
            assert_eq!((rec.kind, rec.why), (kind, r.to_string()));
        }
    }

    #[test]
    fn texts_read_as_one_sentence_with_their_numbers() {
        let r = Refused::PageCount {
            listed: 10,
            by: "description",
            said: 11,
        };
        assert_eq!(
            r.to_string(),
            "store is damaged: the image's page list holds 10 pages, its description says 11"
        );
        let k = |b: u8| KeyId([b; 16]);
        let t = Refused::ForeignKey {
            image: k(1),
            device: k(2),
        }
        .to_string();
        assert!(!t.contains("  "), "{t}");
        assert!(t.contains(&alloc::format!(
            "device key {}, this device's key is {}",
            k(1),
            k(2)
        )));
    }
}
