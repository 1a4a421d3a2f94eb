//! Rollback protection on the device: the TPM counter each image name has, raised by every
//! capture of that name before the image is committed, and read by resume for
//! [`admission::check_rollback`].
//!
//! ```text
//! capture of image N:  counter(N) += 1  ->  value v  ->  description records (counter, v)
//!                      -> image committed (a failure after the raise leaves the older
//!                         image below the counter: refused, and the next cold boot captures)
//! resume:              image's (counter, v) against the TPM's value c: v < c is refused
//! ```
//!
//! One counter per image name, so the images of an A/B device's two slots (named apart)
//! each keep their own line: capturing slot B's image does not make slot A's older. The
//! counter's NV index is `0x01810000` plus the first two bytes of the BLAKE3 hash of the
//! name: fixed for a name, in the TPM owner's range, and apart for any handful of names
//! (a collision would only make one name's capture refuse the other name's image).

use snapimg::RollbackStamp;
use tpm2::{NvCounter, TpmError};

use crate::devicekey::KeyConfig;

/// The first of the 65536 NV indices image counters take.
pub const COUNTER_BASE: u32 = 0x0181_0000;

/// Why a capture could not raise its counter.
#[derive(Debug, thiserror::Error)]
pub enum RollbackError {
    /// The TPM cannot be reached or refused the counter.
    #[error(
        "raising the rollback counter {counter} of image `{image}` (snapboot.rollback=tpm, \
         the default with snapboot.encrypt=tpm)"
    )]
    Raise {
        image: String,
        counter: NvCounter,
        #[source]
        source: TpmError,
    },
}

/// The counter of image `name`.
pub fn counter_for(name: &str) -> NvCounter {
    let h = blake3::hash(name.as_bytes());
    let low = u16::from_be_bytes([h.as_bytes()[0], h.as_bytes()[1]]);
    // COUNTER_BASE + 0xFFFF is inside the owner range.
    NvCounter::new(COUNTER_BASE | u32::from(low)).expect("an owner NV index")
}

/// Raises image `name`'s counter on the configured TPM: the stamp its description records.
pub fn advance(cfg: &KeyConfig, name: &str) -> Result<RollbackStamp, RollbackError> {
    let counter = counter_for(name);
    let raise = |source| RollbackError::Raise {
        image: name.into(),
        counter,
        source,
    };
    let value = cfg
        .tpm_device()
        .and_then(|mut tpm| tpm.counter_increment(counter))
        .map_err(raise)?;
    Ok(RollbackStamp {
        counter: counter.index(),
        value,
    })
}

/// The value of counter `index` on the configured TPM, as [`admission::ImageSource`] wants
/// it.
pub fn read(cfg: &KeyConfig, index: u32) -> Result<Option<u64>, String> {
    let counter = NvCounter::new(index).map_err(|index| TpmError::NvIndex { index }.to_string())?;
    cfg.tpm_device()
        .and_then(|mut tpm| tpm.counter_read(counter))
        .map_err(|e| bootstatus::chain(&e))
}

/// Raises the counter of each of `names` that this device's TPM keeps (after `snapboot
/// invalidate`); names without a counter, or no TPM, are left alone. Returns the names
/// whose counter was raised.
pub fn raise_kept(names: &[String]) -> Vec<String> {
    let Ok(mut tpm) = KeyConfig::new(bootparams::Encrypt::Off).tpm_device() else {
        return Vec::new();
    };
    let mut raised = Vec::new();
    for name in names {
        let c = counter_for(name);
        if matches!(tpm.counter_read(c), Ok(Some(_))) && tpm.counter_increment(c).is_ok() {
            raised.push(name.clone());
        }
    }
    raised
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_name_has_its_own_fixed_counter_in_the_owner_range() {
        let names = [
            "current", "factory", "slot-a", "slot-b", "rootfs.0", "rootfs.1", "a", "b",
        ];
        let mut seen = std::collections::BTreeSet::new();
        for n in names {
            let c = counter_for(n);
            assert_eq!(c, counter_for(n));
            assert_eq!(c.index() & 0xFFFF_0000, COUNTER_BASE, "{n}: {c}");
            assert!(seen.insert(c.index()), "{n} shares {c}");
        }
    }

    #[test]
    fn without_a_tpm_the_reason_names_the_device() {
        let cfg = KeyConfig {
            tpm: Some("/nonexistent/tpmrm0".into()),
            ..KeyConfig::new(bootparams::Encrypt::Off)
        };
        let e = read(&cfg, COUNTER_BASE).unwrap_err();
        assert!(e.contains("/nonexistent/tpmrm0"), "{e}");
        let e = bootstatus::chain(&advance(&cfg, "current").unwrap_err());
        assert!(
            e.contains("rollback counter NV counter 0x0181") && e.contains("/nonexistent"),
            "{e}"
        );
        assert!(read(&cfg, 0x0100_0000)
            .unwrap_err()
            .contains("not an owner index"));
    }
}
