//! Rollback protection: an image stamped with a TPM counter's value at capture restores only
//! while the counter has not moved past that value. A capture raises the counter of its
//! image's name before it commits, so every older image of that name (an older copy of the
//! store written back, from any time) is below the counter from then on; the counter never
//! goes down. A stamped image is checked on every path that admits it, whatever the device's
//! setting: a path that cannot read the TPM refuses it.
//!
//! ```text
//! image's stamp      TPM counter       decision
//! none               (not required)    restores
//! none               (required)        Unstamped        -> the next cold boot captures
//! counter, value v   c, v >= c         restores
//! counter, value v   c, v <  c         RolledBack       -> the next cold boot captures
//! counter, value v   not on this TPM   NoCounter        -> the next cold boot captures
//! counter, value v   cannot be read    CounterUnread    (try again next boot)
//! ```

use crate::Refused;
use alloc::string::String;
use snapimg::RollbackStamp;

/// Checks an image's stamp; `read` reads a counter's value (`None`: not defined or never
/// raised on this TPM; `Err`: the TPM cannot be asked, with why).
pub fn check_rollback(
    stamp: Option<RollbackStamp>,
    required: bool,
    read: impl FnOnce(u32) -> Result<Option<u64>, String>,
) -> Result<(), Refused> {
    let Some(RollbackStamp { counter, value }) = stamp else {
        return if required {
            Err(Refused::Unstamped)
        } else {
            Ok(())
        };
    };
    match read(counter) {
        Err(why) => Err(Refused::CounterUnread { counter, why }),
        Ok(None) => Err(Refused::NoCounter {
            counter,
            image: value,
        }),
        Ok(Some(device)) if value < device => Err(Refused::RolledBack {
            counter,
            image: value,
            device,
        }),
        Ok(Some(_)) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use bootstatus::Refusal;

    const C: u32 = 0x0181_0001;

    fn stamp(value: u64) -> Option<RollbackStamp> {
        Some(RollbackStamp { counter: C, value })
    }

    #[test]
    fn the_newest_image_restores_and_an_older_one_is_refused_with_both_values() {
        assert!(check_rollback(stamp(9), true, |_| Ok(Some(9))).is_ok());
        assert!(check_rollback(stamp(9), false, |_| Ok(Some(9))).is_ok());
        let e = check_rollback(stamp(7), false, |c| {
            assert_eq!(c, C);
            Ok(Some(9))
        })
        .unwrap_err();
        assert_eq!(e.kind(), Refusal::Rollback);
        let text = e.to_string();
        for part in ["0x01810001", "value 7", "counter is at 9", "older copy"] {
            assert!(text.contains(part), "{part}: {text}");
        }
    }

    #[test]
    fn an_image_ahead_of_the_counter_restores() {
        // The counter was raised and the commit made, but the power failed before anything
        // else: the same TPM, the image a step ahead is the newest there is.
        assert!(check_rollback(stamp(10), true, |_| Ok(Some(9))).is_ok());
    }

    #[test]
    fn unstamped_images_restore_only_where_nothing_is_required() {
        assert!(check_rollback(None, false, |_| panic!("no counter to read")).is_ok());
        let e = check_rollback(None, true, |_| panic!("no counter to read")).unwrap_err();
        assert_eq!(e.kind(), Refusal::Rollback);
        assert!(e.to_string().contains("captured without"), "{e}");
    }

    #[test]
    fn a_stamp_is_checked_even_where_nothing_is_required_and_cannot_be_skipped() {
        let e = check_rollback(stamp(3), false, |_| Ok(None)).unwrap_err();
        assert_eq!(e.kind(), Refusal::Rollback);
        assert!(e.to_string().contains("no such counter"), "{e}");
        let e = check_rollback(stamp(3), false, |_| Err("no TPM".to_string())).unwrap_err();
        assert_eq!(e.kind(), Refusal::Other);
        assert!(
            e.to_string()
                .ends_with("0x01810001 the image records: no TPM"),
            "{e}"
        );
    }
}
