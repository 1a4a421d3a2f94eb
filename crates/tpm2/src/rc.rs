//! Response codes (`TPM_RC`, TPM 2.0 Part 2 §6.6) decoded into a name, a sentence and, for
//! format-one codes, the handle, parameter or session they are about. Format one (bit 7
//! set): bits 0..=5 the error, bit 6 "parameter", bits 8..=11 its number; without bit 6, bit
//! 11 means "session" and bits 8..=10 its number, otherwise a handle number. Format zero:
//! bit 8 marks a TPM 2.0 code, bit 11 a warning, bit 10 a vendor code; bits 16 and up a
//! software layer (a resource manager or TSS), not the TPM.

use std::fmt;

/// A `TPM_RC` other than success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseCode(pub u32);

/// What a format-one code is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// Not said (format zero, or number 0).
    None,
    /// The n-th handle of the command, from 1.
    Handle(u8),
    /// The n-th parameter of the command, from 1.
    Parameter(u8),
    /// The n-th session of the command, from 1.
    Session(u8),
}

const FMT1: u32 = 0x080;
const VER1: u32 = 0x100;
const WARN: u32 = 0x900;

// Format-one error numbers (the low 6 bits), with the constants callers match on.
pub(crate) const RC_VALUE: u32 = FMT1 + 0x004;
pub(crate) const RC_AUTH_FAIL: u32 = FMT1 + 0x00E;
pub(crate) const RC_POLICY_FAIL: u32 = FMT1 + 0x01D;
pub(crate) const RC_INTEGRITY: u32 = FMT1 + 0x01F;
pub(crate) const RC_BAD_AUTH: u32 = FMT1 + 0x022;
pub(crate) const RC_BINDING: u32 = FMT1 + 0x025;
// Format-zero codes.
pub(crate) const RC_INITIALIZE: u32 = VER1;
pub(crate) const RC_LOCKOUT: u32 = WARN + 0x021;

const FMT1_NAMES: &[(u32, &str, &str)] = &[
    (
        0x001,
        "TPM_RC_ASYMMETRIC",
        "asymmetric algorithm not supported or not correct",
    ),
    (0x002, "TPM_RC_ATTRIBUTES", "inconsistent attributes"),
    (
        0x003,
        "TPM_RC_HASH",
        "hash algorithm not supported or not appropriate",
    ),
    (
        0x004,
        "TPM_RC_VALUE",
        "value is out of range or is not correct for the context",
    ),
    (
        0x005,
        "TPM_RC_HIERARCHY",
        "hierarchy is not enabled or is not correct for the use",
    ),
    (0x007, "TPM_RC_KEY_SIZE", "key size is not supported"),
    (
        0x008,
        "TPM_RC_MGF",
        "mask generation function not supported",
    ),
    (0x009, "TPM_RC_MODE", "mode of operation not supported"),
    (
        0x00A,
        "TPM_RC_TYPE",
        "the type of the value is not appropriate for the use",
    ),
    (
        0x00B,
        "TPM_RC_HANDLE",
        "the handle is not correct for the use",
    ),
    (0x00C, "TPM_RC_KDF", "unsupported key derivation function"),
    (0x00D, "TPM_RC_RANGE", "value was out of allowed range"),
    (
        0x00E,
        "TPM_RC_AUTH_FAIL",
        "the authorization HMAC check failed and the DA counter was incremented",
    ),
    (
        0x00F,
        "TPM_RC_NONCE",
        "invalid nonce size or nonce value mismatch",
    ),
    (
        0x010,
        "TPM_RC_PP",
        "authorization requires assertion of physical presence",
    ),
    (0x012, "TPM_RC_SCHEME", "unsupported or incompatible scheme"),
    (0x015, "TPM_RC_SIZE", "structure is the wrong size"),
    (
        0x016,
        "TPM_RC_SYMMETRIC",
        "unsupported symmetric algorithm or key size",
    ),
    (0x017, "TPM_RC_TAG", "incorrect structure tag"),
    (0x018, "TPM_RC_SELECTOR", "union selector is incorrect"),
    (
        0x01A,
        "TPM_RC_INSUFFICIENT",
        "the TPM was unable to unmarshal a value because there were not enough octets",
    ),
    (0x01B, "TPM_RC_SIGNATURE", "the signature is not valid"),
    (
        0x01C,
        "TPM_RC_KEY",
        "key fields are not compatible with the selected use",
    ),
    (0x01D, "TPM_RC_POLICY_FAIL", "a policy check failed"),
    (0x01F, "TPM_RC_INTEGRITY", "integrity check failed"),
    (0x020, "TPM_RC_TICKET", "invalid ticket"),
    (
        0x021,
        "TPM_RC_RESERVED_BITS",
        "reserved bits not set to zero as required",
    ),
    (
        0x022,
        "TPM_RC_BAD_AUTH",
        "authorization failure without DA implications",
    ),
    (0x023, "TPM_RC_EXPIRED", "the policy has expired"),
    (
        0x024,
        "TPM_RC_POLICY_CC",
        "the command code in the policy is not the command code of the command",
    ),
    (
        0x025,
        "TPM_RC_BINDING",
        "public and sensitive portions of an object are not cryptographically bound",
    ),
    (0x026, "TPM_RC_CURVE", "curve not supported"),
    (
        0x027,
        "TPM_RC_ECC_POINT",
        "point is not on the required curve",
    ),
];

const VER1_NAMES: &[(u32, &str, &str)] = &[
    (
        0x000,
        "TPM_RC_INITIALIZE",
        "TPM not initialized by TPM2_Startup or already initialized",
    ),
    (0x001, "TPM_RC_FAILURE", "the TPM is in failure mode"),
    (
        0x003,
        "TPM_RC_SEQUENCE",
        "improper use of a sequence handle",
    ),
    (0x00B, "TPM_RC_PRIVATE", "not currently used"),
    (0x019, "TPM_RC_HMAC", "not currently used"),
    (0x020, "TPM_RC_DISABLED", "the command is disabled"),
    (
        0x021,
        "TPM_RC_EXCLUSIVE",
        "the command failed because an audit sequence required exclusivity",
    ),
    (
        0x024,
        "TPM_RC_AUTH_TYPE",
        "authorization handle is not correct for the command",
    ),
    (
        0x025,
        "TPM_RC_AUTH_MISSING",
        "the command requires an authorization session for the handle and it is not present",
    ),
    (
        0x026,
        "TPM_RC_POLICY",
        "the policy failure in math operation or an invalid authPolicy value",
    ),
    (0x027, "TPM_RC_PCR", "PCR check fail"),
    (
        0x028,
        "TPM_RC_PCR_CHANGED",
        "the PCRs changed since the policy session checked them; retry",
    ),
    (0x02D, "TPM_RC_UPGRADE", "the TPM is in field upgrade mode"),
    (
        0x02E,
        "TPM_RC_TOO_MANY_CONTEXTS",
        "context ID counter is at maximum",
    ),
    (
        0x02F,
        "TPM_RC_AUTH_UNAVAILABLE",
        "authValue or authPolicy is not available for the selected entity",
    ),
    (
        0x030,
        "TPM_RC_REBOOT",
        "a _TPM_Init and Startup(CLEAR) is required before the TPM can resume operation",
    ),
    (
        0x031,
        "TPM_RC_UNBALANCED",
        "the protection algorithms (hash and symmetric) are not reasonably balanced",
    ),
    (
        0x042,
        "TPM_RC_COMMAND_SIZE",
        "command size value is inconsistent with contents of the command buffer",
    ),
    (0x043, "TPM_RC_COMMAND_CODE", "command code not supported"),
    (
        0x044,
        "TPM_RC_AUTHSIZE",
        "the value of authorizationSize is out of range",
    ),
    (
        0x045,
        "TPM_RC_AUTH_CONTEXT",
        "use of an authorization session with a context command",
    ),
    (0x046, "TPM_RC_NV_RANGE", "NV offset+size is out of range"),
    (
        0x047,
        "TPM_RC_NV_SIZE",
        "requested allocation size is larger than allowed",
    ),
    (0x048, "TPM_RC_NV_LOCKED", "NV access locked"),
    (
        0x049,
        "TPM_RC_NV_AUTHORIZATION",
        "NV access authorization fails in command actions",
    ),
    (
        0x04A,
        "TPM_RC_NV_UNINITIALIZED",
        "an NV Index is used before being initialized",
    ),
    (
        0x04B,
        "TPM_RC_NV_SPACE",
        "insufficient space for NV allocation",
    ),
    (
        0x04C,
        "TPM_RC_NV_DEFINED",
        "NV Index or persistent object already defined",
    ),
    (
        0x050,
        "TPM_RC_BAD_CONTEXT",
        "context in TPM2_ContextLoad is not valid",
    ),
    (
        0x051,
        "TPM_RC_CPHASH",
        "cpHash value already set or not correct for use",
    ),
    (
        0x052,
        "TPM_RC_PARENT",
        "handle for parent is not a valid parent",
    ),
    (0x053, "TPM_RC_NEEDS_TEST", "some function needs testing"),
    (
        0x054,
        "TPM_RC_NO_RESULT",
        "an internal function cannot process a request due to an unspecified problem",
    ),
    (
        0x055,
        "TPM_RC_SENSITIVE",
        "the sensitive area did not unmarshal correctly after decryption",
    ),
];

const WARN_NAMES: &[(u32, &str, &str)] = &[
    (0x001, "TPM_RC_CONTEXT_GAP", "gap for context ID is too large"),
    (0x002, "TPM_RC_OBJECT_MEMORY", "out of memory for object contexts"),
    (0x003, "TPM_RC_SESSION_MEMORY", "out of memory for session contexts"),
    (0x004, "TPM_RC_MEMORY", "out of shared object/session memory or need space for internal operations"),
    (0x005, "TPM_RC_SESSION_HANDLES", "out of session handles; a session must be flushed before a new session may be created"),
    (0x006, "TPM_RC_OBJECT_HANDLES", "out of object handles; a transient object must be flushed"),
    (0x007, "TPM_RC_LOCALITY", "bad locality"),
    (0x008, "TPM_RC_YIELDED", "the TPM has suspended operation on the command; retry"),
    (0x009, "TPM_RC_CANCELED", "the command was canceled"),
    (0x00A, "TPM_RC_TESTING", "the TPM is performing self-tests"),
    (0x020, "TPM_RC_NV_RATE", "the TPM is rate-limiting accesses to prevent wearout of NV"),
    (0x021, "TPM_RC_LOCKOUT", "authorizations for objects subject to DA protection are not allowed at this time because the TPM is in DA lockout mode"),
    (0x022, "TPM_RC_RETRY", "the TPM was not able to start the command; retry"),
    (0x023, "TPM_RC_NV_UNAVAILABLE", "the command may require writing of NV and NV is not currently accessible"),
];

impl ResponseCode {
    /// Whether this is a format-one code (bit 7).
    pub fn is_format_one(self) -> bool {
        self.0 & 0xFFFF_0000 == 0 && self.0 & FMT1 != 0
    }

    /// The code without its handle/parameter/session number: what to compare against the
    /// `TPM_RC_*` constants. Codes from a software layer (bits 16 and up) are kept whole.
    pub fn base(self) -> u32 {
        if self.is_format_one() {
            FMT1 | (self.0 & 0x3F)
        } else {
            self.0
        }
    }

    /// The handle, parameter or session a format-one code is about.
    pub fn subject(self) -> Subject {
        if !self.is_format_one() {
            return Subject::None;
        }
        let n = ((self.0 >> 8) & 0xF) as u8;
        if self.0 & 0x40 != 0 {
            Subject::Parameter(n)
        } else if n & 0x8 != 0 {
            Subject::Session(n & 0x7)
        } else if n == 0 {
            Subject::None
        } else {
            Subject::Handle(n)
        }
    }

    /// The specification's name (`TPM_RC_INTEGRITY`) and its description, or `None` for a
    /// code this table does not know (vendor codes, software layers, TPM 1.2 codes).
    pub fn describe(self) -> Option<(&'static str, &'static str)> {
        let code = self.0;
        if code & 0xFFFF_0000 != 0 {
            return None;
        }
        let (table, number) = if self.is_format_one() {
            (FMT1_NAMES, code & 0x3F)
        } else if code & VER1 == 0 || code & 0x400 != 0 {
            return None;
        } else if code & 0x800 != 0 {
            (WARN_NAMES, code & 0x7F)
        } else {
            (VER1_NAMES, code & 0x7F)
        };
        table
            .iter()
            .find(|(n, _, _)| *n == number)
            .map(|&(_, name, text)| (name, text))
    }
}

impl fmt::Display for ResponseCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.describe() {
            Some((name, text)) => write!(f, "{name}: {text}")?,
            None if self.0 >> 16 != 0 => write!(
                f,
                "error from software layer {} (not the TPM)",
                self.0 >> 16
            )?,
            None if self.0 & 0x400 != 0 && self.0 & FMT1 == 0 => {
                write!(f, "vendor-specific error")?
            }
            None => write!(f, "unknown response code")?,
        }
        match self.subject() {
            Subject::None => {}
            Subject::Handle(n) => write!(f, " (handle {n})")?,
            Subject::Parameter(n) => write!(f, " (parameter {n})")?,
            Subject::Session(n) => write!(f, " (session {n})")?,
        }
        write!(f, " [{:#010x}]", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_fail_on_session_one() {
        let rc = ResponseCode(0x99D);
        assert!(rc.is_format_one());
        assert_eq!(rc.base(), RC_POLICY_FAIL);
        assert_eq!(rc.subject(), Subject::Session(1));
        assert_eq!(
            rc.to_string(),
            "TPM_RC_POLICY_FAIL: a policy check failed (session 1) [0x0000099d]"
        );
    }

    #[test]
    fn integrity_on_parameter_one() {
        let rc = ResponseCode(0x1DF);
        assert_eq!(rc.base(), RC_INTEGRITY);
        assert_eq!(rc.subject(), Subject::Parameter(1));
        assert!(rc.to_string().starts_with("TPM_RC_INTEGRITY"), "{rc}");
        assert!(
            rc.to_string().contains("(parameter 1) [0x000001df]"),
            "{rc}"
        );
    }

    #[test]
    fn handle_numbers_and_unspecified_subjects() {
        // TPM_RC_HANDLE on handle 1.
        assert_eq!(ResponseCode(0x18B).subject(), Subject::Handle(1));
        assert_eq!(ResponseCode(0x18B).base(), 0x08B);
        // TPM_RC_VALUE without a number.
        assert_eq!(ResponseCode(0x084).subject(), Subject::None);
        // Parameter 15 (the largest the 4 bits hold).
        assert_eq!(ResponseCode(0xFC4).subject(), Subject::Parameter(15));
        // Session 7.
        assert_eq!(ResponseCode(0xF8E).subject(), Subject::Session(7));
        assert_eq!(ResponseCode(0xF8E).base(), RC_AUTH_FAIL);
    }

    #[test]
    fn format_zero_errors_and_warnings() {
        assert_eq!(
            ResponseCode(RC_INITIALIZE).describe().unwrap().0,
            "TPM_RC_INITIALIZE"
        );
        assert_eq!(
            ResponseCode(RC_LOCKOUT).describe().unwrap().0,
            "TPM_RC_LOCKOUT"
        );
        assert_eq!(
            ResponseCode(0x128).describe().unwrap().0,
            "TPM_RC_PCR_CHANGED"
        );
        assert_eq!(
            ResponseCode(0x902).describe().unwrap().0,
            "TPM_RC_OBJECT_MEMORY"
        );
        assert_eq!(ResponseCode(RC_LOCKOUT).subject(), Subject::None);
        assert_eq!(ResponseCode(RC_LOCKOUT).base(), RC_LOCKOUT);
    }

    #[test]
    fn unknown_vendor_and_layer_codes_still_show_the_number() {
        assert_eq!(
            ResponseCode(0x000B_0005).to_string(),
            "error from software layer 11 (not the TPM) [0x000b0005]"
        );
        assert_eq!(
            ResponseCode(0x0000_0501).to_string(),
            "vendor-specific error [0x00000501]"
        );
        // A TPM 1.2 code (bit 8 clear).
        assert_eq!(
            ResponseCode(0x0000_0003).to_string(),
            "unknown response code [0x00000003]"
        );
        // An unassigned format-one number.
        assert_eq!(ResponseCode(0x0BE).describe(), None);
    }

    #[test]
    fn every_table_name_is_unique_and_reachable() {
        for (table, base) in [(FMT1_NAMES, FMT1), (VER1_NAMES, VER1), (WARN_NAMES, WARN)] {
            for &(n, name, _) in table {
                let rc = ResponseCode(base + n);
                assert_eq!(rc.describe().map(|d| d.0), Some(name), "{:#x}", base + n);
            }
        }
        assert_eq!(
            ResponseCode(RC_BAD_AUTH).describe().unwrap().0,
            "TPM_RC_BAD_AUTH"
        );
        assert_eq!(
            ResponseCode(RC_BINDING).describe().unwrap().0,
            "TPM_RC_BINDING"
        );
        assert_eq!(ResponseCode(RC_VALUE).describe().unwrap().0, "TPM_RC_VALUE");
    }
}
