//! Seal a small secret (a device key) to a TPM 2.0 and unseal it, optionally bound to SHA-256
//! PCR values, and keep monotonic NV counters, by speaking raw TPM2 commands over `/dev/tpmrm0` or a swtpm TCP port: no TSS,
//! no C library, no `unsafe`, so it links statically into an initramfs binary.

#![forbid(unsafe_code)]

mod blob;
mod counter;
mod error;
mod marshal;
mod rc;
mod tpm;
mod transport;

pub use blob::{BlobError, SealedBlob, BLOB_MAGIC, BLOB_MAX_PART, BLOB_VERSION};
pub use error::TpmError;
pub use marshal::{
    CommandCode, Malformed, NvCounter, PcrSet, NV_OWNER_FIRST, NV_OWNER_LAST, PCR_COUNT, SHA256_LEN,
};
pub use rc::{ResponseCode, Subject};
pub use tpm::{pcr_policy_digest, HandleKind, Tpm, MAX_SECRET};
pub use transport::{DeviceTransport, TcpTransport, Transport, TCP_TIMEOUT, TPMRM_PATH, TPM_PATH};
