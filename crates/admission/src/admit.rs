//! The one sequence an image passes before any of its pages is read: the boot log's guard,
//! trust, the description, its rollback counter, what it is bound to, and a lazy image's swap region. The
//! path reads through an [`ImageSource`] (the device's store through `flashstore`, the
//! restorer's virtio disks); the stream header is checked with [`crate::check_header`]
//! when the path has page 0 in hand.

use crate::{check_binding, check_description, Candidate, Expected, Refused, Trust, Trusted};
use snapimg::{Binding, Description, SwapRegion};
use storelayout::{BootLog, Catalog, ImageRec};

/// How a path reads one image and observes this boot.
pub trait ImageSource {
    /// Reads `rec`'s page list (checked against the catalog): the description's bytes it
    /// carries, and how many pages it lists.
    fn page_list(&mut self, rec: &ImageRec) -> Result<(&[u8], u64), Refused>;
    /// What this boot has of everything `image` is bound to (the boot setup, the command
    /// line, each bound device's size and fingerprint).
    fn running_binding(&mut self, image: &Binding) -> Result<Binding, Refused>;
    /// Checks that a lazy image's swap region is `rec`'s own raw region of the store and
    /// still holds what the capture wrote.
    fn check_swap_region(&mut self, rec: &ImageRec, swap: &SwapRegion) -> Result<(), Refused>;
    /// The value of TPM NV counter `counter` (`None`: this TPM never counted it), for
    /// rollback protection ([`crate::check_rollback`]); `Err` says why it cannot be read.
    /// A path without a TPM keeps the default, and refuses every image stamped with one.
    fn rollback_counter(&mut self, counter: u32) -> Result<Option<u64>, alloc::string::String> {
        Err(alloc::format!(
            "this restoring path has no TPM to read counter {counter:#010x} from"
        ))
    }
}

/// An image that passed every check before its pages.
#[derive(Debug)]
pub struct Admitted {
    /// What made it trusted.
    pub trusted: Trusted,
    /// Its description.
    pub description: Description,
    /// Pages its page list holds (the stream's, page 0 and the PFN index included).
    pub pages: u64,
    /// How many devices it is bound to (checked).
    pub bound_devices: usize,
}

/// The rules of one boot every image is admitted under.
pub struct Rules<'a> {
    /// The store's boot log, and the crash-loop guard's limit (`snapboot.attempts`).
    pub log: (&'a BootLog, u32),
    /// What makes an image trusted.
    pub trust: &'a Trust,
    /// What it must match.
    pub expected: &'a Expected,
    /// Every image must carry a rollback counter value (`snapboot.rollback=` in effect).
    pub rollback: bool,
}

/// Admits `candidate` of the store whose catalog is `catalog`, or says why not.
pub fn admit<S: ImageSource>(
    src: &mut S,
    candidate: Candidate<'_>,
    catalog: &Catalog,
    rules: &Rules<'_>,
) -> Result<Admitted, Refused> {
    let rec = candidate.image()?;
    let (log, limit) = rules.log;
    log.guard(&rec.name, rec.generation, limit)
        .map_err(Refused::Guard)?;
    let trusted = rules.trust.check(catalog, rec)?;
    let (user, pages) = src.page_list(rec)?;
    let description = Description::decode(user).map_err(Refused::Description)?;
    // An older copy written back is named as one, before what else it no longer matches.
    crate::check_rollback(description.rollback, rules.rollback, |c| {
        src.rollback_counter(c)
    })?;
    let bound = check_description(&description, pages, rules.expected)?;
    let running = src.running_binding(&bound)?;
    check_binding(&bound, &running)?;
    if let Some(sw) = &description.swap {
        src.check_swap_region(rec, sw)?;
    }
    Ok(Admitted {
        trusted,
        description,
        pages,
        bound_devices: bound.devices.len(),
    })
}
