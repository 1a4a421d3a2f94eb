//! The device key images are encrypted with (`snapboot.encrypt=`): where it comes from, how
//! resume unlocks the store with it, and how a capture makes one when the device has none it
//! can use (first capture, TPM cleared, store moved to another device).
//!
//! ```text
//! snapboot.encrypt=tpm[:PCR+PCR]   the store's key slot (kind "tpm2"): a SealedBlob only this
//!                                  TPM (with these PCR values) unseals -> 32-byte secret
//! snapboot.encrypt=key             /etc/snapboot/device.key in the initramfs -> 32-byte secret
//! secret -> flashstore::DeviceKey (AEAD key, dedupe key, public id); the secret is wiped
//! ```
//!
//! The key never enters an image: a capture unlocks the store only after the kernel made
//! its snapshot, in the process that writes it, so the memory the image holds never held
//! the key; resume unlocks in the initramfs of a boot whose memory the restore replaces.
//! Secrets are `Zeroizing` and wiped when dropped.

use bootparams::Encrypt;
use flashstore::{DeviceKey, KeyId, KeySlot, Store, StoreError};
use std::path::PathBuf;
use tpm2::{DeviceTransport, SealedBlob, Tpm, TpmError};
use zeroize::Zeroizing;

/// Where `snapboot.encrypt=key` finds the device key (in the initramfs).
pub const DEVICE_KEY_FILE: &str = "/etc/snapboot/device.key";

/// The kind of the store's key slot that holds a TPM-sealed key.
pub const TPM_SLOT: &str = "tpm2";

/// Why the device key is not at hand.
#[derive(Debug, thiserror::Error)]
pub enum DeviceKeyError {
    /// The key file cannot be read.
    #[error("the device key file")]
    File(#[source] imagekey::KeyError),
    /// The TPM cannot be reached.
    #[error("the device key is sealed to a TPM")]
    NoTpm(#[source] TpmError),
    /// The store carries no sealed key.
    #[error(
        "the store carries no device key sealed to a TPM: nothing was captured on it with \
         snapboot.encrypt=tpm yet"
    )]
    NoSlot,
    /// The store's sealed key is not a sealed blob.
    #[error("the store's sealed device key {id} is damaged")]
    Blob {
        id: KeyId,
        #[source]
        source: tpm2::BlobError,
    },
    /// The TPM refuses to unseal the store's key.
    #[error("this TPM cannot unseal the store's device key {id}")]
    Unseal {
        id: KeyId,
        #[source]
        source: TpmError,
    },
    /// What the TPM unsealed is not the key the slot names.
    #[error("the TPM unsealed {len} bytes for device key {id}, which are not that key")]
    Mismatch { id: KeyId, len: usize },
    /// A new key could not be sealed.
    #[error("sealing a new device key to the TPM")]
    Seal(#[source] TpmError),
    /// A new key could not be made or recorded.
    #[error("recording the new device key in the store")]
    Store(#[source] StoreError),
    /// No random bytes for a new key.
    #[error("making a new device key")]
    Random(#[source] imagekey::KeyError),
}

impl DeviceKeyError {
    /// The key is gone for good on this device (another TPM, TPM cleared, PCRs changed,
    /// slot damaged or missing): a capture makes a new one. Not for a TPM that is only
    /// unreachable or locked out now.
    pub fn lost(&self) -> bool {
        match self {
            DeviceKeyError::NoSlot | DeviceKeyError::Blob { .. } => true,
            DeviceKeyError::Mismatch { .. } => true,
            DeviceKeyError::Unseal { source, .. } => matches!(
                source,
                TpmError::ForeignBlob { .. } | TpmError::PcrMismatch { .. }
            ),
            _ => false,
        }
    }
}

/// How the store was unlocked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unlocked {
    /// With the key file.
    KeyFile(KeyId),
    /// With the key sealed in the store's slot.
    Tpm(KeyId),
    /// With a new key, sealed to this TPM and recorded in the store, replacing the key
    /// the store had (if any), which this device cannot use.
    NewTpmKey { id: KeyId, replaced: Option<KeyId> },
}

impl Unlocked {
    /// The key's id.
    pub fn id(&self) -> KeyId {
        match self {
            Unlocked::KeyFile(id) | Unlocked::Tpm(id) | Unlocked::NewTpmKey { id, .. } => *id,
        }
    }
}

impl std::fmt::Display for Unlocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unlocked::KeyFile(id) => write!(f, "device key {id} (key file)"),
            Unlocked::Tpm(id) => write!(f, "device key {id} (sealed to the TPM)"),
            Unlocked::NewTpmKey { id, replaced: None } => {
                write!(f, "new device key {id}, sealed to the TPM")
            }
            Unlocked::NewTpmKey {
                id,
                replaced: Some(old),
            } => write!(
                f,
                "new device key {id}, sealed to the TPM (replaces {old}, which this TPM cannot unseal)"
            ),
        }
    }
}

/// Where the device key comes from, as configured, and whether the TPM keeps the images'
/// rollback counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyConfig {
    /// `snapboot.encrypt=`.
    pub encrypt: Encrypt,
    /// `snapboot.rollback=` in effect: captures raise their image's TPM counter, and every
    /// image restored must carry its value ([`crate::rollback`]).
    pub rollback: bool,
    /// The key file `snapboot.encrypt=key` reads.
    pub key_file: PathBuf,
    /// The TPM device (`None`: `/dev/tpmrm0`, else `/dev/tpm0`).
    pub tpm: Option<PathBuf>,
}

impl KeyConfig {
    /// The configuration `encrypt` asks for, with the standard paths and the default
    /// rollback protection.
    pub fn new(encrypt: Encrypt) -> Self {
        Self::with_rollback(encrypt, bootparams::Rollback::Auto)
    }

    /// The configuration `encrypt` and `rollback` ask for, with the standard paths.
    pub fn with_rollback(encrypt: Encrypt, rollback: bootparams::Rollback) -> Self {
        KeyConfig {
            rollback: rollback.on(&encrypt),
            encrypt,
            key_file: PathBuf::from(DEVICE_KEY_FILE),
            tpm: None,
        }
    }

    fn open_tpm(&self) -> Result<Tpm<DeviceTransport>, DeviceKeyError> {
        self.tpm_device().map_err(DeviceKeyError::NoTpm)
    }

    /// The configured TPM.
    pub fn tpm_device(&self) -> Result<Tpm<DeviceTransport>, TpmError> {
        let t = match &self.tpm {
            Some(p) => DeviceTransport::open_path(p),
            None => DeviceTransport::open(),
        };
        t.map(Tpm::new)
    }
}

/// Unlocks `store` with the configured key for resume: never changes the store. `Ok(None)`
/// when images are not encrypted.
pub fn unlock<M: flashstore::Medium>(
    store: &mut Store<M>,
    cfg: &KeyConfig,
) -> Result<Option<Unlocked>, DeviceKeyError> {
    match &cfg.encrypt {
        Encrypt::Off => Ok(None),
        Encrypt::KeyFile => {
            let s = imagekey::DeviceSecret::load(&cfg.key_file).map_err(DeviceKeyError::File)?;
            let key = DeviceKey::new(s.bytes());
            let id = key.id();
            store.unlock(key);
            Ok(Some(Unlocked::KeyFile(id)))
        }
        Encrypt::Tpm { .. } => {
            let slot = store
                .key_slots()
                .iter()
                .find(|s| s.kind == TPM_SLOT)
                .cloned()
                .ok_or(DeviceKeyError::NoSlot)?;
            let mut tpm = cfg.open_tpm()?;
            let key = unseal_slot(&mut tpm, &slot)?;
            store.unlock(key);
            Ok(Some(Unlocked::Tpm(slot.id)))
        }
    }
}

/// Unlocks `store` for a capture. With a TPM, a key the device has lost (see
/// [`DeviceKeyError::lost`]) is replaced: a new key is sealed to this TPM (and its PCRs)
/// and recorded in the store (one commit) before anything is written with it.
pub fn unlock_for_capture<M: flashstore::Medium>(
    store: &mut Store<M>,
    cfg: &KeyConfig,
) -> Result<Option<Unlocked>, DeviceKeyError> {
    let Encrypt::Tpm { pcrs } = &cfg.encrypt else {
        return unlock(store, cfg);
    };
    match unlock(store, cfg) {
        Err(e) if e.lost() => {}
        other => return other,
    }
    let replaced = store
        .key_slots()
        .iter()
        .find(|s| s.kind == TPM_SLOT)
        .map(|s| s.id);
    let secret = imagekey::DeviceSecret::generate().map_err(DeviceKeyError::Random)?;
    let mut tpm = cfg.open_tpm()?;
    let blob = tpm
        .seal(&secret.bytes()[..], pcrs)
        .map_err(DeviceKeyError::Seal)?;
    let key = DeviceKey::new(secret.bytes());
    let id = key.id();
    let mut slots: Vec<KeySlot> = store
        .key_slots()
        .iter()
        .filter(|s| s.kind != TPM_SLOT)
        .cloned()
        .collect();
    slots.push(KeySlot {
        id,
        kind: TPM_SLOT.into(),
        wrapped: blob.to_bytes(),
    });
    store.set_key_slots(slots).map_err(DeviceKeyError::Store)?;
    store.unlock(key);
    Ok(Some(Unlocked::NewTpmKey { id, replaced }))
}

/// The key in `slot`, unsealed by `tpm` and checked against the slot's id.
pub fn unseal_slot<T: tpm2::Transport>(
    tpm: &mut Tpm<T>,
    slot: &KeySlot,
) -> Result<DeviceKey, DeviceKeyError> {
    let blob = SealedBlob::from_bytes(&slot.wrapped).map_err(|source| DeviceKeyError::Blob {
        id: slot.id,
        source,
    })?;
    let secret = tpm.unseal(&blob).map_err(|source| DeviceKeyError::Unseal {
        id: slot.id,
        source,
    })?;
    let bytes: [u8; 32] = secret[..]
        .try_into()
        .map_err(|_| DeviceKeyError::Mismatch {
            id: slot.id,
            len: secret.len(),
        })?;
    let key = DeviceKey::new(&Zeroizing::new(bytes));
    if key.id() != slot.id {
        return Err(DeviceKeyError::Mismatch {
            id: slot.id,
            len: 32,
        });
    }
    Ok(key)
}

/// Checks, without reading a secret, that the configured key's source is there: the key
/// file parses (its secret is wiped at once), or a TPM device opens.
pub fn check_reachable(cfg: &KeyConfig) -> Result<(), DeviceKeyError> {
    match &cfg.encrypt {
        Encrypt::Off => Ok(()),
        Encrypt::KeyFile => imagekey::DeviceSecret::load(&cfg.key_file)
            .map(drop)
            .map_err(DeviceKeyError::File),
        Encrypt::Tpm { .. } => cfg.open_tpm().map(drop),
    }
}
