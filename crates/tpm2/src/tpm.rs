//! The TPM commands this crate sends, and seal/unseal built from them. The parent is the
//! standard ECC P-256 storage primary key under the owner hierarchy, re-created for every
//! operation (it derives from the owner seed, so it is the same key each time). The secret is
//! a KEYEDHASH data object; with PCRs, its `authPolicy` is the PolicyPCR digest of the PCRs'
//! values at seal time, computed here in software, and unsealing runs a policy session
//! through TPM2_PolicyPCR. Every transient handle (primary, object, session) is flushed on
//! every path, success or error.

use crate::blob::SealedBlob;
use crate::error::TpmError;
use crate::marshal::{
    attr, parse_header, split_body, Auth, Body, CommandBuilder, CommandCode, Malformed, PcrSet,
    Reader, ALG_AES, ALG_CFB, ALG_ECC, ALG_KEYEDHASH, ALG_NULL, ALG_SHA256, CAP_HANDLES,
    ECC_NIST_P256, MAX_RESPONSE, PCR_COUNT, RH_NULL, RH_OWNER, SE_POLICY, SHA256_LEN,
};
use crate::transport::Transport;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// SHA-256 PCR values indexed by PCR number.
type PcrTable = [[u8; SHA256_LEN]; PCR_COUNT as usize];

/// The most a sealed data object holds (`MAX_SYM_DATA`).
pub const MAX_SECRET: usize = 128;

/// Which handles [`Tpm::handles`] lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandleKind {
    /// Loaded transient objects (`0x80xxxxxx`).
    Transient,
    /// Loaded sessions (`0x02xxxxxx`).
    Session,
}

impl HandleKind {
    fn first(self) -> u32 {
        match self {
            HandleKind::Transient => 0x8000_0000,
            HandleKind::Session => 0x0200_0000,
        }
    }
}

/// A TPM 2.0 reached through a [`Transport`].
#[derive(Debug)]
pub struct Tpm<T: Transport> {
    transport: T,
}

/// The storage primary key's public template: ECC NIST P-256, restricted decrypt, AES-128-CFB
/// for its children, SHA-256 names; the TCG "SRK" template with an empty unique field.
fn primary_template() -> Vec<u8> {
    let attributes = attr::FIXED_TPM
        | attr::FIXED_PARENT
        | attr::SENSITIVE_DATA_ORIGIN
        | attr::USER_WITH_AUTH
        | attr::NO_DA
        | attr::RESTRICTED
        | attr::DECRYPT;
    let mut t = Vec::with_capacity(32);
    for v in [ALG_ECC, ALG_SHA256] {
        t.extend_from_slice(&v.to_be_bytes());
    }
    t.extend_from_slice(&attributes.to_be_bytes());
    // authPolicy (empty), symmetric (AES-128-CFB), scheme (null), curve, kdf (null),
    // unique.x and unique.y (empty).
    for v in [
        0,
        ALG_AES,
        128,
        ALG_CFB,
        ALG_NULL,
        ECC_NIST_P256,
        ALG_NULL,
        0,
        0,
    ] {
        t.extend_from_slice(&v.to_be_bytes());
    }
    t
}

/// The sealed data object's public template: a KEYEDHASH object holding data, bound to this
/// TPM and parent, exempt from dictionary-attack counting; usable with the empty password
/// when there is no policy.
fn sealed_template(policy: Option<&[u8; SHA256_LEN]>) -> Vec<u8> {
    let mut attributes = attr::FIXED_TPM | attr::FIXED_PARENT | attr::NO_DA;
    if policy.is_none() {
        attributes |= attr::USER_WITH_AUTH;
    }
    let policy: &[u8] = policy.map_or(&[], |p| p);
    let mut t = Vec::with_capacity(48);
    t.extend_from_slice(&ALG_KEYEDHASH.to_be_bytes());
    t.extend_from_slice(&ALG_SHA256.to_be_bytes());
    t.extend_from_slice(&attributes.to_be_bytes());
    t.extend_from_slice(&(policy.len() as u16).to_be_bytes());
    t.extend_from_slice(policy);
    // TPMS_KEYEDHASH_PARMS.scheme = null; unique (empty digest).
    t.extend_from_slice(&ALG_NULL.to_be_bytes());
    t.extend_from_slice(&0u16.to_be_bytes());
    t
}

/// The policy digest of one TPM2_PolicyPCR from a fresh session:
/// `SHA256(0^32 || TPM_CC_PolicyPCR || TPML_PCR_SELECTION || SHA256(values in PCR order))`.
pub fn pcr_policy_digest(pcrs: PcrSet, values: &[[u8; SHA256_LEN]]) -> [u8; SHA256_LEN] {
    let mut pcr_digest = Sha256::new();
    for v in values {
        pcr_digest.update(v);
    }
    let mut selection = Vec::with_capacity(10);
    pcrs.marshal(&mut selection);
    let mut h = Sha256::new();
    h.update([0u8; SHA256_LEN]);
    h.update(CommandCode::PolicyPcr.code().to_be_bytes());
    h.update(&selection);
    h.update(pcr_digest.finalize());
    h.finalize().into()
}

impl<T: Transport> Tpm<T> {
    /// A TPM behind `transport`. Nothing is sent until the first operation.
    pub fn new(transport: T) -> Self {
        Tpm { transport }
    }

    /// The transport back.
    pub fn into_inner(self) -> T {
        self.transport
    }

    /// Seals `secret` (1 to [`MAX_SECRET`] bytes) to this TPM. With `pcrs` (SHA-256 PCR
    /// indices), unsealing needs those PCRs to hold the values they hold now; without,
    /// unsealing needs only this TPM.
    pub fn seal(&mut self, secret: &[u8], pcrs: &[u32]) -> Result<SealedBlob, TpmError> {
        if secret.is_empty() || secret.len() > MAX_SECRET {
            return Err(TpmError::SecretSize {
                len: secret.len(),
                max: MAX_SECRET,
            });
        }
        let set = PcrSet::from_indices(pcrs).map_err(|pcr| TpmError::PcrIndex { pcr })?;
        let policy = if set.is_empty() {
            None
        } else {
            let table = self.pcr_table(set)?;
            let values: Vec<_> = set.indices().map(|p| table[p as usize]).collect();
            Some(pcr_policy_digest(set, &values))
        };
        let primary = self.create_primary()?;
        let (public, private) =
            self.with_flushed(primary, |tpm| tpm.create(primary, secret, policy.as_ref()))?;
        let indices: Vec<u32> = set.indices().collect();
        SealedBlob::from_parts(&indices, public, private).map_err(|e| TpmError::Malformed {
            command: CommandCode::Create,
            source: Malformed {
                field: "outPublic/outPrivate",
                offset: 0,
                why: e.to_string(),
            },
        })
    }

    /// Unseals the secret in `blob`: loads it under the storage key and, for a PCR-bound
    /// blob, satisfies its policy with the PCRs' current values.
    pub fn unseal(&mut self, blob: &SealedBlob) -> Result<Zeroizing<Vec<u8>>, TpmError> {
        let primary = self.create_primary()?;
        let object = self.with_flushed(primary, |tpm| tpm.load(primary, blob))?;
        let set = blob.pcr_set();
        self.with_flushed(object, |tpm| {
            if set.is_empty() {
                return tpm.unseal_object(object, Auth::EmptyPassword, &[]);
            }
            let pcrs: Vec<u32> = set.indices().collect();
            let session = tpm.start_policy_session()?;
            tpm.with_flushed(session, |tpm| {
                tpm.policy_pcr(session, set, &pcrs)?;
                tpm.unseal_object(object, Auth::Policy(session), &pcrs)
            })
        })
    }

    /// The SHA-256 bank's values of `pcrs`, in the order asked.
    pub fn pcr_read(&mut self, pcrs: &[u32]) -> Result<Vec<[u8; SHA256_LEN]>, TpmError> {
        let set = PcrSet::from_indices(pcrs).map_err(|pcr| TpmError::PcrIndex { pcr })?;
        let table = self.pcr_table(set)?;
        Ok(pcrs.iter().map(|&p| table[p as usize]).collect())
    }

    /// Extends SHA-256 PCR `pcr` with `digest`: `new = SHA256(old || digest)`.
    pub fn pcr_extend(&mut self, pcr: u32, digest: &[u8; SHA256_LEN]) -> Result<(), TpmError> {
        PcrSet::from_indices(&[pcr]).map_err(|pcr| TpmError::PcrIndex { pcr })?;
        let cmd = CommandBuilder::new(CommandCode::PcrExtend)
            .handle(pcr)
            .auth(Auth::EmptyPassword)
            .u32(1)
            .u16(ALG_SHA256)
            .raw(digest)
            .finish();
        self.call(CommandCode::PcrExtend, &cmd, 0, &[], |_| Ok(()))
    }

    /// The loaded handles of one kind (to check that nothing leaked).
    pub fn handles(&mut self, kind: HandleKind) -> Result<Vec<u32>, TpmError> {
        let mut out = Vec::new();
        let mut first = kind.first();
        // A TPM holds a handful of loaded objects; stop a TPM that never says "no more".
        for _ in 0..64 {
            let cmd = CommandBuilder::new(CommandCode::GetCapability)
                .u32(CAP_HANDLES)
                .u32(first)
                .u32(64)
                .finish();
            let (more, handles) =
                self.call(CommandCode::GetCapability, &cmd, 0, &[], |mut b| {
                    let more = b.params.u8("moreData")?;
                    let cap = b.params.u32("capability")?;
                    if cap != CAP_HANDLES {
                        return Err(b
                            .params
                            .malformed("capability", format!("{cap:#x}, asked for handles")));
                    }
                    let n = b.params.u32("TPML_HANDLE.count")?;
                    if n as usize > b.params.remaining() / 4 {
                        return Err(b
                            .params
                            .malformed("TPML_HANDLE.count", format!("{n} handles")));
                    }
                    let handles = (0..n)
                        .map(|_| b.params.u32("TPML_HANDLE.handle"))
                        .collect::<Result<Vec<_>, _>>()?;
                    Ok((more != 0, handles))
                })?;
            let last = handles.last().copied();
            // Nothing is filtered by type byte: asked for loaded sessions (0x02...), swtpm
            // lists a policy session as 0x03000000. For the same reason the next page starts
            // from the asked type byte, not from the last handle's.
            out.extend_from_slice(&handles);
            match last {
                Some(h) if more && h & 0x00FF_FFFF < 0x00FF_FFFF => {
                    first = kind.first() | ((h & 0x00FF_FFFF) + 1)
                }
                _ => return Ok(out),
            }
        }
        Ok(out)
    }

    /// Sends one command and hands the parsed areas of its successful response to `parse`.
    /// `pcrs` names the PCRs at stake, for the error message of a policy failure.
    pub(crate) fn call<R>(
        &mut self,
        command: CommandCode,
        cmd: &[u8],
        handles: usize,
        pcrs: &[u32],
        parse: impl FnOnce(Body<'_>) -> Result<R, Malformed>,
    ) -> Result<R, TpmError> {
        let resp = Zeroizing::new(
            self.transport
                .transact(cmd)
                .map_err(|source| TpmError::Io { command, source })?,
        );
        if resp.len() > MAX_RESPONSE {
            return Err(TpmError::ResponseTooLarge {
                command,
                len: resp.len(),
            });
        }
        let malformed = |source| TpmError::Malformed { command, source };
        let header = parse_header(&resp).map_err(malformed)?;
        if header.rc != 0 {
            return Err(TpmError::from_rc(command, header.rc, pcrs));
        }
        let body = split_body(&resp, header.tag, handles).map_err(malformed)?;
        parse(body).map_err(malformed)
    }

    /// Runs `f`, then flushes `handle` whatever `f` returned. `f`'s error wins over the
    /// flush's.
    fn with_flushed<R>(
        &mut self,
        handle: u32,
        f: impl FnOnce(&mut Self) -> Result<R, TpmError>,
    ) -> Result<R, TpmError> {
        let result = f(self);
        let flushed = self.flush(handle);
        let value = result?;
        flushed?;
        Ok(value)
    }

    fn flush(&mut self, handle: u32) -> Result<(), TpmError> {
        let cmd = CommandBuilder::new(CommandCode::FlushContext)
            .u32(handle)
            .finish();
        self.call(CommandCode::FlushContext, &cmd, 0, &[], |_| Ok(()))
    }

    fn create_primary(&mut self) -> Result<u32, TpmError> {
        let cmd = CommandBuilder::new(CommandCode::CreatePrimary)
            .handle(RH_OWNER)
            .auth(Auth::EmptyPassword)
            // TPM2B_SENSITIVE_CREATE: empty userAuth, empty data.
            .u16(4)
            .u16(0)
            .u16(0)
            .tpm2b(&primary_template())
            .tpm2b(&[]) // outsideInfo
            .pcrs(PcrSet::default()) // creationPCR
            .finish();
        self.call(CommandCode::CreatePrimary, &cmd, 1, &[], |mut b| {
            b.handles.u32("objectHandle")
        })
    }

    fn create(
        &mut self,
        parent: u32,
        secret: &[u8],
        policy: Option<&[u8; SHA256_LEN]>,
    ) -> Result<(Vec<u8>, Vec<u8>), TpmError> {
        // The secret goes straight into the command buffer, which is wiped after use.
        let cmd = Zeroizing::new(
            CommandBuilder::new(CommandCode::Create)
                .handle(parent)
                .auth(Auth::EmptyPassword)
                // TPM2B_SENSITIVE_CREATE: empty userAuth, data = the secret (≤ 128 bytes).
                .u16(4 + secret.len() as u16)
                .u16(0)
                .tpm2b(secret)
                .tpm2b(&sealed_template(policy))
                .tpm2b(&[]) // outsideInfo
                .pcrs(PcrSet::default()) // creationPCR
                .finish(),
        );
        self.call(CommandCode::Create, &cmd, 0, &[], |mut b| {
            let private = b.params.tpm2b_whole("outPrivate")?.to_vec();
            let public = b.params.tpm2b_whole("outPublic")?.to_vec();
            Ok((public, private))
        })
    }

    fn load(&mut self, parent: u32, blob: &SealedBlob) -> Result<u32, TpmError> {
        let cmd = CommandBuilder::new(CommandCode::Load)
            .handle(parent)
            .auth(Auth::EmptyPassword)
            .raw(blob.private())
            .raw(blob.public())
            .finish();
        self.call(CommandCode::Load, &cmd, 1, &[], |mut b| {
            b.handles.u32("objectHandle")
        })
    }

    fn unseal_object(
        &mut self,
        object: u32,
        auth: Auth,
        pcrs: &[u32],
    ) -> Result<Zeroizing<Vec<u8>>, TpmError> {
        let cmd = CommandBuilder::new(CommandCode::Unseal)
            .handle(object)
            .auth(auth)
            .finish();
        self.call(CommandCode::Unseal, &cmd, 0, pcrs, |mut b| {
            Ok(Zeroizing::new(b.params.tpm2b("outData")?.to_vec()))
        })
    }

    fn get_random(&mut self, n: u16) -> Result<Vec<u8>, TpmError> {
        let cmd = CommandBuilder::new(CommandCode::GetRandom).u16(n).finish();
        self.call(CommandCode::GetRandom, &cmd, 0, &[], |mut b| {
            Ok(b.params.tpm2b("randomBytes")?.to_vec())
        })
    }

    /// An unsalted, unbound SHA-256 policy session with a fresh nonce from the TPM's RNG
    /// (the kernel's may still be starting in an initramfs).
    fn start_policy_session(&mut self) -> Result<u32, TpmError> {
        let nonce = self.get_random(SHA256_LEN as u16)?;
        if nonce.len() < 16 {
            return Err(TpmError::Malformed {
                command: CommandCode::GetRandom,
                source: Malformed {
                    field: "randomBytes",
                    offset: 10,
                    why: format!("{} bytes, a nonce needs at least 16", nonce.len()),
                },
            });
        }
        let cmd = CommandBuilder::new(CommandCode::StartAuthSession)
            .handle(RH_NULL) // tpmKey: unsalted
            .handle(RH_NULL) // bind: unbound
            .tpm2b(&nonce) // nonceCaller
            .tpm2b(&[]) // encryptedSalt
            .u8(SE_POLICY)
            .u16(ALG_NULL) // symmetric
            .u16(ALG_SHA256) // authHash
            .finish();
        self.call(CommandCode::StartAuthSession, &cmd, 1, &[], |mut b| {
            b.handles.u32("sessionHandle")
        })
    }

    fn policy_pcr(&mut self, session: u32, set: PcrSet, pcrs: &[u32]) -> Result<(), TpmError> {
        let cmd = CommandBuilder::new(CommandCode::PolicyPcr)
            .handle(session)
            .tpm2b(&[]) // pcrDigest: the TPM uses the current values
            .pcrs(set)
            .finish();
        self.call(CommandCode::PolicyPcr, &cmd, 0, pcrs, |_| Ok(()))
    }

    /// The values of `set`, indexed by PCR (PCRs outside `set` read as zeros). A TPM returns
    /// at most 8 per TPM2_PCR_Read; this asks again for what is left until all came back.
    fn pcr_table(&mut self, set: PcrSet) -> Result<PcrTable, TpmError> {
        let mut values = [[0u8; SHA256_LEN]; PCR_COUNT as usize];
        let mut left = set;
        while !left.is_empty() {
            let cmd = CommandBuilder::new(CommandCode::PcrRead)
                .pcrs(left)
                .finish();
            let got = self.call(CommandCode::PcrRead, &cmd, 0, &[], |mut b| {
                read_pcr_values(&mut b.params, left, &mut values)
            })?;
            left = left.without(got);
        }
        Ok(values)
    }
}

/// Parses a TPM2_PCR_Read response's parameters into `values`; returns the PCRs it held,
/// which must be a non-empty part of `asked` with one SHA-256 digest each.
fn read_pcr_values(
    r: &mut Reader<'_>,
    asked: PcrSet,
    values: &mut [[u8; SHA256_LEN]],
) -> Result<PcrSet, Malformed> {
    r.u32("pcrUpdateCounter")?;
    let got = PcrSet::unmarshal(r)?;
    if got.is_empty() || !got.without(asked).is_empty() {
        return Err(r.malformed(
            "pcrSelectionOut",
            format!(
                "PCRs {:#08x} returned for {:#08x} asked",
                got.mask(),
                asked.mask()
            ),
        ));
    }
    let count = r.u32("TPML_DIGEST.count")?;
    if count as usize != got.len() {
        return Err(r.malformed(
            "TPML_DIGEST.count",
            format!("{count} digests for {} PCRs", got.len()),
        ));
    }
    for pcr in got.indices() {
        let d = r.tpm2b("TPML_DIGEST.digests")?;
        values[pcr as usize] = d.try_into().map_err(|_| {
            r.malformed(
                "TPML_DIGEST.digests",
                format!("{}-byte digest for SHA-256 PCR {pcr}", d.len()),
            )
        })?;
    }
    Ok(got)
}

#[cfg(test)]
mod tests;
