//! The sealed blob: what [`crate::Tpm::seal`] returns and [`crate::Tpm::unseal`] takes, stored
//! in the clear on the device's flash. It holds the sealed object as the TPM returned it; the
//! private part is encrypted and integrity-protected under the TPM's storage key, so only the
//! TPM that sealed it (and not after a TPM clear) can load it. The container adds a magic, a
//! version, the PCRs the object's policy covers, and a CRC so flash damage reads as damage,
//! not as "another TPM". Little-endian container fields; the TPM structures inside are the
//! TPM's big-endian bytes, untouched.
//!
//! ```text
//! offset      size  field
//! ----------  ----  ---------------------------------------------------------------
//! 0           8     magic "SNAPSEAL"
//! 8           2     version, 1
//! 10          4     PCR bitmap: bit n = SHA-256 PCR n bound by the policy (n < 24);
//!                   0 = no policy, the object unseals with the empty password
//! 14          2     P = length of the TPM2B_PUBLIC below (with its 2-byte size), <= 2048
//! 16          2     Q = length of the TPM2B_PRIVATE below (with its 2-byte size), <= 2048
//! 18          P     TPM2B_PUBLIC of the sealed KEYEDHASH object
//! 18+P        Q     TPM2B_PRIVATE of the sealed object
//! 18+P+Q      4     CRC-32 (IEEE) of bytes 0 .. 18+P+Q
//! ```
//!
//! Reading checks the magic, then the version, then the length caps (nothing larger is
//! allocated), the total length, the CRC, the PCR bitmap, and that each TPM2B's own size
//! matches its field.

use crate::marshal::PcrSet;

/// The blob's first eight bytes.
pub const BLOB_MAGIC: [u8; 8] = *b"SNAPSEAL";
/// The version this crate writes and reads.
pub const BLOB_VERSION: u16 = 1;
/// The largest TPM2B_PUBLIC or TPM2B_PRIVATE a blob may carry.
pub const BLOB_MAX_PART: usize = 2048;

const HEADER: usize = 18;
const CRC: usize = 4;

/// Why bytes are not a sealed blob.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlobError {
    #[error("sealed blob truncated: {len} bytes, needs at least {need}")]
    Truncated { len: usize, need: usize },
    #[error("not a sealed blob: magic {found:02x?}, expected \"SNAPSEAL\"")]
    Magic { found: [u8; 8] },
    #[error("sealed blob version {found}, this build reads version {supported}")]
    Version { found: u16, supported: u16 },
    #[error("sealed blob {field} is {len} bytes, at most {max}")]
    TooLarge {
        field: &'static str,
        len: usize,
        max: usize,
    },
    #[error("sealed blob is {actual} bytes, its header says {declared}")]
    Length { declared: usize, actual: usize },
    #[error("sealed blob damaged: CRC {stored:#010x} stored, {computed:#010x} computed")]
    Checksum { stored: u32, computed: u32 },
    #[error("sealed blob PCR bitmap {mask:#010x} names a PCR above 23")]
    PcrMask { mask: u32 },
    #[error("PCR {pcr} does not exist (PCRs are 0 to 23)")]
    PcrIndex { pcr: u32 },
    #[error("sealed blob {field} says {inner} bytes inside a {outer}-byte field")]
    Inner {
        field: &'static str,
        inner: usize,
        outer: usize,
    },
}

/// A sealed secret as the TPM returned it, with the PCRs its policy covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedBlob {
    pcrs: PcrSet,
    public: Vec<u8>,
    private: Vec<u8>,
}

/// Checks that `bytes` is one whole TPM2B: a 2-byte size equal to the rest, within the cap.
fn check_tpm2b(field: &'static str, bytes: &[u8]) -> Result<(), BlobError> {
    if bytes.len() > BLOB_MAX_PART {
        return Err(BlobError::TooLarge {
            field,
            len: bytes.len(),
            max: BLOB_MAX_PART,
        });
    }
    if bytes.len() < 2 {
        return Err(BlobError::Inner {
            field,
            inner: 2,
            outer: bytes.len(),
        });
    }
    let inner = usize::from(u16::from_be_bytes([bytes[0], bytes[1]]));
    if inner + 2 != bytes.len() {
        return Err(BlobError::Inner {
            field,
            inner: inner + 2,
            outer: bytes.len(),
        });
    }
    Ok(())
}

impl SealedBlob {
    /// A blob from its parts: the bound PCRs, and the TPM2B_PUBLIC and TPM2B_PRIVATE of a
    /// sealed data object, each with its 2-byte size (as `TPM2_Create` or `tpm2_create -u/-r`
    /// return them).
    pub fn from_parts(pcrs: &[u32], public: Vec<u8>, private: Vec<u8>) -> Result<Self, BlobError> {
        let pcrs = PcrSet::from_indices(pcrs).map_err(|pcr| BlobError::PcrIndex { pcr })?;
        check_tpm2b("TPM2B_PUBLIC", &public)?;
        check_tpm2b("TPM2B_PRIVATE", &private)?;
        Ok(SealedBlob {
            pcrs,
            public,
            private,
        })
    }

    /// The SHA-256 PCRs the object's policy covers, ascending; empty for no policy.
    pub fn pcrs(&self) -> Vec<u32> {
        self.pcrs.indices().collect()
    }

    pub(crate) fn pcr_set(&self) -> PcrSet {
        self.pcrs
    }

    /// The sealed object's TPM2B_PUBLIC, with its size.
    pub fn public(&self) -> &[u8] {
        &self.public
    }

    /// The sealed object's TPM2B_PRIVATE (encrypted by the TPM), with its size.
    pub fn private(&self) -> &[u8] {
        &self.private
    }

    /// The stored form (see the module's table).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.public.len() + self.private.len() + CRC);
        out.extend_from_slice(&BLOB_MAGIC);
        out.extend_from_slice(&BLOB_VERSION.to_le_bytes());
        out.extend_from_slice(&self.pcrs.mask().to_le_bytes());
        // Both parts are checked to be at most BLOB_MAX_PART (< 64 KiB) when built.
        out.extend_from_slice(&(self.public.len() as u16).to_le_bytes());
        out.extend_from_slice(&(self.private.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.public);
        out.extend_from_slice(&self.private);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses the stored form, checking everything the module header lists.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, BlobError> {
        let need = |need: usize| -> Result<(), BlobError> {
            if bytes.len() < need {
                Err(BlobError::Truncated {
                    len: bytes.len(),
                    need,
                })
            } else {
                Ok(())
            }
        };
        need(8)?;
        let mut found = [0u8; 8];
        found.copy_from_slice(&bytes[..8]);
        if found != BLOB_MAGIC {
            return Err(BlobError::Magic { found });
        }
        need(10)?;
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        if version != BLOB_VERSION {
            return Err(BlobError::Version {
                found: version,
                supported: BLOB_VERSION,
            });
        }
        need(HEADER)?;
        let mask = u32::from_le_bytes([bytes[10], bytes[11], bytes[12], bytes[13]]);
        let p = usize::from(u16::from_le_bytes([bytes[14], bytes[15]]));
        let q = usize::from(u16::from_le_bytes([bytes[16], bytes[17]]));
        for (field, len) in [("TPM2B_PUBLIC", p), ("TPM2B_PRIVATE", q)] {
            if len > BLOB_MAX_PART {
                return Err(BlobError::TooLarge {
                    field,
                    len,
                    max: BLOB_MAX_PART,
                });
            }
        }
        let declared = HEADER + p + q + CRC;
        if bytes.len() != declared {
            return Err(BlobError::Length {
                declared,
                actual: bytes.len(),
            });
        }
        let body = &bytes[..declared - CRC];
        let tail = &bytes[declared - CRC..];
        let stored = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
        let computed = crc32fast::hash(body);
        if stored != computed {
            return Err(BlobError::Checksum { stored, computed });
        }
        let pcrs = PcrSet::from_mask(mask).ok_or(BlobError::PcrMask { mask })?;
        let public = bytes[HEADER..HEADER + p].to_vec();
        let private = bytes[HEADER + p..HEADER + p + q].to_vec();
        check_tpm2b("TPM2B_PUBLIC", &public)?;
        check_tpm2b("TPM2B_PRIVATE", &private)?;
        Ok(SealedBlob {
            pcrs,
            public,
            private,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SealedBlob {
        SealedBlob::from_parts(&[16, 7], vec![0, 3, 1, 2, 3], vec![0, 4, 9, 8, 7, 6]).unwrap()
    }

    /// Re-seals the CRC after a test edits the body.
    fn fix_crc(bytes: &mut [u8]) {
        let n = bytes.len() - CRC;
        let crc = crc32fast::hash(&bytes[..n]);
        bytes[n..].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn round_trip() {
        let blob = sample();
        let bytes = blob.to_bytes();
        assert_eq!(bytes.len(), HEADER + 5 + 6 + CRC);
        assert_eq!(&bytes[..8], b"SNAPSEAL");
        assert_eq!(SealedBlob::from_bytes(&bytes).unwrap(), blob);
        assert_eq!(blob.pcrs(), [7, 16]);
        assert_eq!(blob.public(), [0, 3, 1, 2, 3]);
        assert_eq!(blob.private(), [0, 4, 9, 8, 7, 6]);
    }

    #[test]
    fn layout_matches_the_table() {
        let bytes = sample().to_bytes();
        assert_eq!(&bytes[8..10], &[1, 0]);
        assert_eq!(&bytes[10..14], &((1u32 << 7) | (1 << 16)).to_le_bytes());
        assert_eq!(&bytes[14..18], &[5, 0, 6, 0]);
        assert_eq!(&bytes[18..23], &[0, 3, 1, 2, 3]);
        assert_eq!(&bytes[23..29], &[0, 4, 9, 8, 7, 6]);
    }

    #[test]
    fn every_truncation_is_refused() {
        let bytes = sample().to_bytes();
        for n in 0..bytes.len() {
            let e = SealedBlob::from_bytes(&bytes[..n]).unwrap_err();
            assert!(
                matches!(e, BlobError::Truncated { .. } | BlobError::Length { .. }),
                "{n}: {e}"
            );
        }
    }

    #[test]
    fn every_single_bit_flip_is_refused() {
        let bytes = sample().to_bytes();
        for i in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[i / 8] ^= 1 << (i % 8);
            assert!(SealedBlob::from_bytes(&b).is_err(), "bit {i}");
        }
    }

    #[test]
    fn damage_in_the_payload_is_a_checksum_error() {
        let mut bytes = sample().to_bytes();
        bytes[20] ^= 0xFF;
        assert!(matches!(
            SealedBlob::from_bytes(&bytes),
            Err(BlobError::Checksum { .. })
        ));
    }

    #[test]
    fn magic_then_version_then_caps() {
        let mut bytes = sample().to_bytes();
        bytes[0] = b'X';
        assert!(matches!(
            SealedBlob::from_bytes(&bytes),
            Err(BlobError::Magic { .. })
        ));
        let mut bytes = sample().to_bytes();
        bytes[8] = 2;
        assert_eq!(
            SealedBlob::from_bytes(&bytes),
            Err(BlobError::Version {
                found: 2,
                supported: 1
            })
        );
        // A length over the cap is refused before the total length is compared.
        let mut bytes = sample().to_bytes();
        bytes[14..16].copy_from_slice(&0xFFFFu16.to_le_bytes());
        assert_eq!(
            SealedBlob::from_bytes(&bytes),
            Err(BlobError::TooLarge {
                field: "TPM2B_PUBLIC",
                len: 0xFFFF,
                max: BLOB_MAX_PART
            })
        );
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut bytes = sample().to_bytes();
        bytes.push(0);
        assert!(matches!(
            SealedBlob::from_bytes(&bytes),
            Err(BlobError::Length { .. })
        ));
    }

    #[test]
    fn checked_fields_behind_a_valid_crc() {
        // A PCR bitmap naming PCR 24.
        let mut bytes = sample().to_bytes();
        bytes[13] = 0x01;
        fix_crc(&mut bytes);
        assert!(matches!(
            SealedBlob::from_bytes(&bytes),
            Err(BlobError::PcrMask { .. })
        ));
        // A TPM2B_PRIVATE whose own size disagrees with its field.
        let mut bytes = sample().to_bytes();
        bytes[24] = 9;
        fix_crc(&mut bytes);
        assert_eq!(
            SealedBlob::from_bytes(&bytes),
            Err(BlobError::Inner {
                field: "TPM2B_PRIVATE",
                inner: 11,
                outer: 6
            })
        );
    }

    #[test]
    fn from_parts_checks_pcrs_and_sizes() {
        assert_eq!(
            SealedBlob::from_parts(&[24], vec![0, 0], vec![0, 0]),
            Err(BlobError::PcrIndex { pcr: 24 })
        );
        assert!(matches!(
            SealedBlob::from_parts(&[], vec![0, 5, 1], vec![0, 0]),
            Err(BlobError::Inner { .. })
        ));
        assert!(matches!(
            SealedBlob::from_parts(&[], vec![0], vec![0, 0]),
            Err(BlobError::Inner { .. })
        ));
        let mut big = vec![0u8; BLOB_MAX_PART + 1];
        big[..2].copy_from_slice(&((BLOB_MAX_PART - 1) as u16).to_be_bytes());
        assert!(matches!(
            SealedBlob::from_parts(&[], vec![0, 0], big),
            Err(BlobError::TooLarge { .. })
        ));
    }
}
