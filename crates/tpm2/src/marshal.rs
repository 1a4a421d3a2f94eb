//! The TPM 2.0 wire format: the constants this crate speaks (command codes, algorithms,
//! handles, attributes), a [`CommandBuilder`] that lays out header, handles, authorization
//! area and parameters and patches the size, a bounds-checked [`Reader`] for responses, the
//! split of a response into its handle and parameter areas, and [`PcrSet`], the SHA-256 PCR
//! bitmap marshalled as a `TPML_PCR_SELECTION`. Everything is big-endian, as in TPM 2.0
//! Part 1 §18; nothing here panics on a short or garbled response.

use std::fmt;

/// `TPM_ST_NO_SESSIONS`: a command or response without an authorization area.
pub(crate) const ST_NO_SESSIONS: u16 = 0x8001;
/// `TPM_ST_SESSIONS`: a command or response with an authorization area.
pub(crate) const ST_SESSIONS: u16 = 0x8002;

/// Size of a command or response header: tag (2), size (4), command or response code (4).
pub(crate) const HEADER_LEN: usize = 10;
/// The largest response this crate accepts (`MAX_RESPONSE_SIZE` of common TPMs and swtpm).
pub(crate) const MAX_RESPONSE: usize = 4096;

pub(crate) const ALG_AES: u16 = 0x0006;
pub(crate) const ALG_KEYEDHASH: u16 = 0x0008;
pub(crate) const ALG_SHA256: u16 = 0x000B;
pub(crate) const ALG_NULL: u16 = 0x0010;
pub(crate) const ALG_ECC: u16 = 0x0023;
pub(crate) const ALG_CFB: u16 = 0x0043;
pub(crate) const ECC_NIST_P256: u16 = 0x0003;

pub(crate) const RH_OWNER: u32 = 0x4000_0001;
pub(crate) const RH_NULL: u32 = 0x4000_0007;
pub(crate) const RS_PW: u32 = 0x4000_0009;

/// `TPM_SE_POLICY`.
pub(crate) const SE_POLICY: u8 = 0x01;
/// `TPMA_SESSION.continueSession`: keep the session after the command (we flush it ourselves).
pub(crate) const SESSION_CONTINUE: u8 = 0x01;

/// `TPM_CAP_HANDLES`.
pub(crate) const CAP_HANDLES: u32 = 0x0000_0001;

/// `TPMA_OBJECT` bits (Part 2 §8.3).
pub(crate) mod attr {
    pub const FIXED_TPM: u32 = 1 << 1;
    pub const FIXED_PARENT: u32 = 1 << 4;
    pub const SENSITIVE_DATA_ORIGIN: u32 = 1 << 5;
    pub const USER_WITH_AUTH: u32 = 1 << 6;
    pub const NO_DA: u32 = 1 << 10;
    pub const RESTRICTED: u32 = 1 << 16;
    pub const DECRYPT: u32 = 1 << 17;
}

/// Size of a SHA-256 digest, the only PCR bank and name algorithm this crate uses.
pub const SHA256_LEN: usize = 32;
/// PCRs 0..=23: the platform PCRs every PC-client TPM has (`sizeofSelect` = 3).
pub const PCR_COUNT: u32 = 24;

/// The TPM commands this crate sends; names an error's failing command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandCode {
    CreatePrimary,
    Create,
    Load,
    Unseal,
    FlushContext,
    StartAuthSession,
    PolicyPcr,
    PcrRead,
    PcrExtend,
    GetCapability,
    GetRandom,
    NvDefineSpace,
    NvIncrement,
    NvRead,
}

impl CommandCode {
    /// The `TPM_CC` value on the wire.
    pub fn code(self) -> u32 {
        match self {
            CommandCode::CreatePrimary => 0x131,
            CommandCode::Create => 0x153,
            CommandCode::Load => 0x157,
            CommandCode::Unseal => 0x15E,
            CommandCode::FlushContext => 0x165,
            CommandCode::StartAuthSession => 0x176,
            CommandCode::GetCapability => 0x17A,
            CommandCode::GetRandom => 0x17B,
            CommandCode::PcrRead => 0x17E,
            CommandCode::PolicyPcr => 0x17F,
            CommandCode::PcrExtend => 0x182,
            CommandCode::NvDefineSpace => 0x12A,
            CommandCode::NvIncrement => 0x134,
            CommandCode::NvRead => 0x14E,
        }
    }

    /// The name the TPM 2.0 specification gives the command.
    pub fn name(self) -> &'static str {
        match self {
            CommandCode::CreatePrimary => "TPM2_CreatePrimary",
            CommandCode::Create => "TPM2_Create",
            CommandCode::Load => "TPM2_Load",
            CommandCode::Unseal => "TPM2_Unseal",
            CommandCode::FlushContext => "TPM2_FlushContext",
            CommandCode::StartAuthSession => "TPM2_StartAuthSession",
            CommandCode::PolicyPcr => "TPM2_PolicyPCR",
            CommandCode::PcrRead => "TPM2_PCR_Read",
            CommandCode::PcrExtend => "TPM2_PCR_Extend",
            CommandCode::GetCapability => "TPM2_GetCapability",
            CommandCode::GetRandom => "TPM2_GetRandom",
            CommandCode::NvDefineSpace => "TPM2_NV_DefineSpace",
            CommandCode::NvIncrement => "TPM2_NV_Increment",
            CommandCode::NvRead => "TPM2_NV_Read",
        }
    }
}

impl fmt::Display for CommandCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The first NV index of the owner's range.
pub const NV_OWNER_FIRST: u32 = 0x0180_0000;
/// The last NV index of the owner's range.
pub const NV_OWNER_LAST: u32 = 0x01BF_FFFF;

/// An NV counter's index, in the owner's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NvCounter(u32);

impl NvCounter {
    /// The counter at `index`, which must be an owner NV index (else `Err(index)`; the
    /// error is `TpmError::NvIndex`).
    pub fn new(index: u32) -> Result<Self, u32> {
        if (NV_OWNER_FIRST..=NV_OWNER_LAST).contains(&index) {
            Ok(NvCounter(index))
        } else {
            Err(index)
        }
    }

    /// Its NV index.
    pub fn index(self) -> u32 {
        self.0
    }
}

impl std::fmt::Display for NvCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NV counter {:#010x}", self.0)
    }
}

/// A set of SHA-256-bank PCRs, `bit n` = PCR `n`, `n < 24`. Iterates in ascending order,
/// which is the order the TPM concatenates PCR values in for a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PcrSet(u32);

impl PcrSet {
    /// The bits PCRs 0..=23 may occupy.
    pub const VALID: u32 = (1 << PCR_COUNT) - 1;

    /// The set of `pcrs` (duplicates collapse); `Err(index)` names the first index ≥ 24.
    pub fn from_indices(pcrs: &[u32]) -> Result<Self, u32> {
        let mut mask = 0;
        for &p in pcrs {
            if p >= PCR_COUNT {
                return Err(p);
            }
            mask |= 1 << p;
        }
        Ok(PcrSet(mask))
    }

    /// The set with bitmap `mask`, or `None` if it names a PCR ≥ 24.
    pub fn from_mask(mask: u32) -> Option<Self> {
        (mask & !Self::VALID == 0).then_some(PcrSet(mask))
    }

    /// The bitmap.
    pub fn mask(self) -> u32 {
        self.0
    }

    /// No PCR.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// How many PCRs.
    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// The PCR indices, ascending.
    pub fn indices(self) -> impl Iterator<Item = u32> {
        (0..PCR_COUNT).filter(move |p| self.0 & (1 << p) != 0)
    }

    /// Whether `pcr` is in the set.
    pub fn contains(self, pcr: u32) -> bool {
        pcr < PCR_COUNT && self.0 & (1 << pcr) != 0
    }

    /// The PCRs of `self` not in `other`.
    pub fn without(self, other: PcrSet) -> PcrSet {
        PcrSet(self.0 & !other.0)
    }

    /// `TPML_PCR_SELECTION`: one `TPMS_PCR_SELECTION` for SHA-256 with a 3-byte bitmap, or a
    /// count of 0 for the empty set.
    pub(crate) fn marshal(self, out: &mut Vec<u8>) {
        if self.is_empty() {
            out.extend_from_slice(&0u32.to_be_bytes());
            return;
        }
        out.extend_from_slice(&1u32.to_be_bytes());
        out.extend_from_slice(&ALG_SHA256.to_be_bytes());
        out.push(3);
        out.extend_from_slice(&self.0.to_le_bytes()[..3]);
    }

    /// Reads a `TPML_PCR_SELECTION`, keeping the SHA-256 selection (other banks are refused:
    /// we never ask for them).
    pub(crate) fn unmarshal(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        let count = r.u32("TPML_PCR_SELECTION.count")?;
        if count > 16 {
            return Err(r.malformed("TPML_PCR_SELECTION.count", format!("{count} banks")));
        }
        let mut mask = 0u32;
        for _ in 0..count {
            let hash = r.u16("TPMS_PCR_SELECTION.hash")?;
            let size = r.u8("TPMS_PCR_SELECTION.sizeofSelect")?;
            let bits = r.bytes(usize::from(size), "TPMS_PCR_SELECTION.pcrSelect")?;
            if hash != ALG_SHA256 {
                if bits.iter().any(|&b| b != 0) {
                    return Err(r.malformed(
                        "TPMS_PCR_SELECTION.hash",
                        format!("a selection in bank {hash:#06x}, not SHA-256"),
                    ));
                }
                continue;
            }
            for (i, &b) in bits.iter().enumerate() {
                for bit in 0..8 {
                    if b & (1 << bit) != 0 {
                        let pcr = i * 8 + bit;
                        if pcr >= PCR_COUNT as usize {
                            return Err(
                                r.malformed("TPMS_PCR_SELECTION.pcrSelect", format!("PCR {pcr}"))
                            );
                        }
                        mask |= 1 << pcr;
                    }
                }
            }
        }
        Ok(PcrSet(mask))
    }
}

/// One entry of a command's authorization area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Auth {
    /// `TPM_RS_PW` with an empty password.
    EmptyPassword,
    /// A policy session whose policy needs no HMAC (PolicyPCR only).
    Policy(u32),
}

/// Lays out one command: header, handles, optional authorization area, parameters. Call in
/// that order; [`CommandBuilder::finish`] writes the tag and the size.
#[derive(Debug)]
pub(crate) struct CommandBuilder {
    buf: Vec<u8>,
    sessions: bool,
}

impl CommandBuilder {
    pub fn new(cc: CommandCode) -> Self {
        // Room for every command this crate sends (the largest, TPM2_Create with a 128-byte
        // secret and a policy, is under 300 bytes), so the buffer never reallocates and
        // leaves a copy of a secret behind in freed memory.
        let mut buf = Vec::with_capacity(512);
        buf.extend_from_slice(&ST_NO_SESSIONS.to_be_bytes());
        buf.extend_from_slice(&0u32.to_be_bytes());
        buf.extend_from_slice(&cc.code().to_be_bytes());
        CommandBuilder {
            buf,
            sessions: false,
        }
    }

    pub fn u8(mut self, v: u8) -> Self {
        self.buf.push(v);
        self
    }

    pub fn u16(mut self, v: u16) -> Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn u32(mut self, v: u32) -> Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// A handle in the handle area.
    pub fn handle(self, h: u32) -> Self {
        self.u32(h)
    }

    /// Bytes already marshalled (a TPM2B with its size, a structure).
    pub fn raw(mut self, bytes: &[u8]) -> Self {
        self.buf.extend_from_slice(bytes);
        self
    }

    /// A `TPM2B_*`: 2-byte size, then the bytes. Callers keep `bytes` under 64 KiB (every
    /// TPM2B this crate sends is capped far below that).
    pub fn tpm2b(self, bytes: &[u8]) -> Self {
        let len = u16::try_from(bytes.len()).unwrap_or(u16::MAX);
        self.u16(len).raw(&bytes[..usize::from(len)])
    }

    /// A `TPML_PCR_SELECTION`.
    pub fn pcrs(mut self, set: PcrSet) -> Self {
        set.marshal(&mut self.buf);
        self
    }

    /// The authorization area with one session: `authorizationSize`, then `TPMS_AUTH_COMMAND`
    /// (handle, empty nonceCaller, attributes, empty hmac/password).
    pub fn auth(mut self, auth: Auth) -> Self {
        let (handle, attributes) = match auth {
            Auth::EmptyPassword => (RS_PW, 0),
            Auth::Policy(h) => (h, SESSION_CONTINUE),
        };
        self.sessions = true;
        // handle (4) + nonce size (2) + attributes (1) + hmac size (2)
        self.u32(9).u32(handle).u16(0).u8(attributes).u16(0)
    }

    /// The finished command.
    pub fn finish(mut self) -> Vec<u8> {
        let tag = if self.sessions {
            ST_SESSIONS
        } else {
            ST_NO_SESSIONS
        };
        self.buf[0..2].copy_from_slice(&tag.to_be_bytes());
        let len = u32::try_from(self.buf.len()).unwrap_or(u32::MAX);
        self.buf[2..6].copy_from_slice(&len.to_be_bytes());
        self.buf
    }
}

/// A response that does not parse: what was being read, at which offset, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} at byte {offset}: {why}")]
pub struct Malformed {
    pub field: &'static str,
    pub offset: usize,
    pub why: String,
}

/// A cursor over response bytes; every read checks the length first.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Offset of `buf[0]` in the whole response, for error messages.
    base: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            pos: 0,
            base: 0,
        }
    }

    pub fn malformed(&self, field: &'static str, why: String) -> Malformed {
        Malformed {
            field,
            offset: self.base + self.pos,
            why,
        }
    }

    pub fn bytes(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], Malformed> {
        let left = self.buf.len() - self.pos;
        if n > left {
            return Err(self.malformed(field, format!("needs {n} bytes, {left} left")));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    pub fn u8(&mut self, field: &'static str) -> Result<u8, Malformed> {
        Ok(self.bytes(1, field)?[0])
    }

    pub fn u16(&mut self, field: &'static str) -> Result<u16, Malformed> {
        let b = self.bytes(2, field)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub fn u32(&mut self, field: &'static str) -> Result<u32, Malformed> {
        let b = self.bytes(4, field)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A `TPM2B_*`'s contents (without the size).
    pub fn tpm2b(&mut self, field: &'static str) -> Result<&'a [u8], Malformed> {
        let n = self.u16(field)?;
        self.bytes(usize::from(n), field)
    }

    /// A `TPM2B_*` with its 2-byte size prefix, as stored and sent back later.
    pub fn tpm2b_whole(&mut self, field: &'static str) -> Result<&'a [u8], Malformed> {
        let start = self.pos;
        self.tpm2b(field)?;
        Ok(&self.buf[start..self.pos])
    }

    /// A sub-reader over the next `n` bytes.
    pub fn sub(&mut self, n: usize, field: &'static str) -> Result<Reader<'a>, Malformed> {
        let base = self.base + self.pos;
        let buf = self.bytes(n, field)?;
        Ok(Reader { buf, pos: 0, base })
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
}

/// The header of a response: the tag and the response code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub tag: u16,
    pub rc: u32,
}

/// Checks a response's header against its length: at least 10 bytes, a known tag, a size
/// field equal to the bytes received and under [`MAX_RESPONSE`].
pub(crate) fn parse_header(resp: &[u8]) -> Result<Header, Malformed> {
    let mut r = Reader::new(resp);
    let tag = r.u16("response tag")?;
    let size = r.u32("response size")?;
    let rc = r.u32("response code")?;
    if tag != ST_NO_SESSIONS && tag != ST_SESSIONS {
        return Err(Malformed {
            field: "response tag",
            offset: 0,
            why: format!("{tag:#06x} is neither TPM_ST_NO_SESSIONS nor TPM_ST_SESSIONS"),
        });
    }
    if size as usize != resp.len() || resp.len() > MAX_RESPONSE {
        return Err(Malformed {
            field: "response size",
            offset: 2,
            why: format!(
                "says {size} bytes, {} received (at most {MAX_RESPONSE})",
                resp.len()
            ),
        });
    }
    Ok(Header { tag, rc })
}

/// The areas of a successful response, after the header.
#[derive(Debug)]
pub(crate) struct Body<'a> {
    pub handles: Reader<'a>,
    pub params: Reader<'a>,
}

/// Splits a successful response (header already checked, code 0) into `handles` handles and
/// the parameter area. With sessions the parameter area is sized by `parameterSize` and the
/// response authorization area after it is skipped (we use no HMAC sessions).
pub(crate) fn split_body(resp: &[u8], tag: u16, handles: usize) -> Result<Body<'_>, Malformed> {
    let mut r = Reader::new(resp);
    r.bytes(HEADER_LEN, "response header")?;
    let handle_area = r.sub(handles * 4, "response handles")?;
    let params = if tag == ST_SESSIONS {
        let n = r.u32("parameterSize")? as usize;
        if n > r.remaining() {
            return Err(r.malformed(
                "parameterSize",
                format!("{n} bytes, {} left", r.remaining()),
            ));
        }
        r.sub(n, "response parameters")?
    } else {
        let n = r.remaining();
        r.sub(n, "response parameters")?
    };
    Ok(Body {
        handles: handle_area,
        params,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_lays_out_header_handles_auth_and_params() {
        let cmd = CommandBuilder::new(CommandCode::Unseal)
            .handle(0x8000_0001)
            .auth(Auth::EmptyPassword)
            .tpm2b(&[0xAA, 0xBB])
            .finish();
        let expect = [
            0x80, 0x02, // TPM_ST_SESSIONS
            0, 0, 0, 0x1F, // size 31
            0, 0, 0x01, 0x5E, // TPM_CC_Unseal
            0x80, 0, 0, 0x01, // handle
            0, 0, 0, 9, // authorizationSize
            0x40, 0, 0, 0x09, // TPM_RS_PW
            0, 0,    // nonce
            0x00, // attributes
            0, 0, // hmac
            0, 2, 0xAA, 0xBB, // TPM2B
        ];
        assert_eq!(cmd, expect);
    }

    #[test]
    fn builder_without_auth_uses_no_sessions_tag() {
        let cmd = CommandBuilder::new(CommandCode::FlushContext)
            .u32(0x0300_0000)
            .finish();
        assert_eq!(
            cmd,
            [0x80, 0x01, 0, 0, 0, 14, 0, 0, 0x01, 0x65, 0x03, 0, 0, 0]
        );
    }

    #[test]
    fn policy_auth_keeps_the_session() {
        let cmd = CommandBuilder::new(CommandCode::Unseal)
            .handle(1)
            .auth(Auth::Policy(0x0300_0000))
            .finish();
        assert_eq!(&cmd[18..27], &[0x03, 0, 0, 0, 0, 0, 0x01, 0, 0]);
    }

    #[test]
    fn pcr_selection_marshals_the_sha256_bitmap() {
        let set = PcrSet::from_indices(&[0, 7, 16, 23, 7]).unwrap();
        let mut out = Vec::new();
        set.marshal(&mut out);
        assert_eq!(out, [0, 0, 0, 1, 0, 0x0B, 3, 0x81, 0x00, 0x81]);
        let back = PcrSet::unmarshal(&mut Reader::new(&out)).unwrap();
        assert_eq!(back, set);
        assert_eq!(set.indices().collect::<Vec<_>>(), [0, 7, 16, 23]);
        assert_eq!(set.len(), 4);
    }

    #[test]
    fn empty_pcr_selection_is_a_zero_count() {
        let mut out = Vec::new();
        PcrSet::default().marshal(&mut out);
        assert_eq!(out, [0, 0, 0, 0]);
    }

    #[test]
    fn pcr_index_24_and_up_is_refused() {
        assert_eq!(PcrSet::from_indices(&[3, 24]), Err(24));
        assert_eq!(PcrSet::from_mask(1 << 24), None);
        assert!(!PcrSet::from_mask(1).unwrap().contains(24));
    }

    #[test]
    fn pcr_selection_ignores_empty_other_banks_and_refuses_selected_ones() {
        // SHA-1 bank, nothing selected; SHA-256 bank, PCR 1.
        let ok = [0, 0, 0, 2, 0, 0x04, 3, 0, 0, 0, 0, 0x0B, 3, 0x02, 0, 0];
        assert_eq!(
            PcrSet::unmarshal(&mut Reader::new(&ok)).unwrap().mask(),
            0b10
        );
        let other = [0, 0, 0, 1, 0, 0x04, 3, 1, 0, 0];
        assert!(PcrSet::unmarshal(&mut Reader::new(&other)).is_err());
        // A bitmap naming PCR 24.
        let wide = [0, 0, 0, 1, 0, 0x0B, 4, 0, 0, 0, 1];
        assert!(PcrSet::unmarshal(&mut Reader::new(&wide)).is_err());
    }

    #[test]
    fn reader_refuses_reads_past_the_end() {
        let mut r = Reader::new(&[0, 5, 1, 2]);
        let e = r.tpm2b("outData").unwrap_err();
        assert_eq!(e.field, "outData");
        assert_eq!(e.offset, 2);
        assert!(e.why.contains("needs 5 bytes, 2 left"), "{e}");
    }

    #[test]
    fn header_size_must_match_the_bytes_received() {
        let good = [0x80, 0x01, 0, 0, 0, 10, 0, 0, 0x01, 0x01];
        assert_eq!(
            parse_header(&good).unwrap(),
            Header {
                tag: ST_NO_SESSIONS,
                rc: 0x101
            }
        );
        let mut long = good.to_vec();
        long.push(0);
        assert_eq!(parse_header(&long).unwrap_err().field, "response size");
        assert_eq!(parse_header(&good[..9]).unwrap_err().field, "response code");
        let bad_tag = [0x00, 0xC4, 0, 0, 0, 10, 0, 0, 0, 0];
        assert_eq!(parse_header(&bad_tag).unwrap_err().field, "response tag");
    }

    #[test]
    fn body_split_honours_parameter_size() {
        // Header, one handle, parameterSize 4, params, then a 5-byte response auth area.
        let mut resp = vec![0x80, 0x02, 0, 0, 0, 0, 0, 0, 0, 0];
        resp.extend_from_slice(&[0x80, 0, 0, 2]);
        resp.extend_from_slice(&[0, 0, 0, 4, 0, 2, 0xCA, 0xFE]);
        resp.extend_from_slice(&[0, 0, 1, 0, 0]);
        let mut b = split_body(&resp, ST_SESSIONS, 1).unwrap();
        assert_eq!(b.handles.u32("h").unwrap(), 0x8000_0002);
        assert_eq!(b.params.tpm2b("p").unwrap(), [0xCA, 0xFE]);
        assert_eq!(b.params.remaining(), 0);
        // parameterSize larger than what follows.
        resp[17] = 40;
        assert_eq!(
            split_body(&resp, ST_SESSIONS, 1).unwrap_err().field,
            "parameterSize"
        );
    }

    #[test]
    fn every_truncation_of_a_body_is_an_error_not_a_panic() {
        let mut resp = vec![0x80, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0, 0, 1];
        resp.extend_from_slice(&[0, 0, 0, 2, 0, 0]);
        for n in 0..resp.len() {
            assert!(split_body(&resp[..n], ST_SESSIONS, 1).is_err(), "{n} bytes");
        }
        assert!(split_body(&resp, ST_SESSIONS, 1).is_ok());
    }
}
