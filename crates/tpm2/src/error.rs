//! The one error type of TPM operations, and the mapping of a failed command's response code
//! to what a user can do about it: a blob from another (or a cleared) TPM, PCRs that moved,
//! dictionary-attack lockout, a TPM nobody started, an owner hierarchy with a password.
//! Every variant that comes from the TPM keeps the failing command and the raw code.

use crate::marshal::{CommandCode, Malformed, MAX_RESPONSE};
use crate::rc::{self, ResponseCode};
use std::path::PathBuf;

/// What can go wrong talking to a TPM.
#[derive(Debug, thiserror::Error)]
pub enum TpmError {
    /// Neither TPM character device exists: no TPM, or its driver is not loaded.
    #[error("no TPM: neither {resource_manager} nor {direct} exists (is the TPM driver loaded?)")]
    NoDevice {
        resource_manager: PathBuf,
        direct: PathBuf,
    },
    /// A TPM device exists but could not be opened.
    #[error("cannot open {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Sending a command or receiving its response failed.
    #[error("{command}: TPM I/O failed")]
    Io {
        command: CommandCode,
        #[source]
        source: std::io::Error,
    },
    /// The response does not parse.
    #[error("{command}: malformed response")]
    Malformed {
        command: CommandCode,
        #[source]
        source: Malformed,
    },
    /// The blob's object does not load under this TPM's storage key.
    #[error(
        "{command} refused the sealed blob: it was sealed by another TPM, this TPM was cleared \
         since, or the blob was altered; seal the secret again ({rc})"
    )]
    ForeignBlob {
        command: CommandCode,
        rc: ResponseCode,
    },
    /// The policy session's PCR digest does not match the blob's policy.
    #[error(
        "{command}: the PCR values differ from when the secret was sealed (PCRs {pcrs:?}): a \
         different or changed boot chain, or a PCR was extended since ({rc})"
    )]
    PcrMismatch {
        command: CommandCode,
        pcrs: Vec<u32>,
        rc: ResponseCode,
    },
    /// The TPM is in dictionary-attack lockout.
    #[error(
        "{command}: the TPM is in dictionary-attack lockout; wait for the lockout to expire or \
         reset it with the lockout authorization ({rc})"
    )]
    Lockout {
        command: CommandCode,
        rc: ResponseCode,
    },
    /// Nobody sent TPM2_Startup.
    #[error(
        "{command}: the TPM has not been started (TPM2_Startup was not sent; firmware or \
         the kernel driver normally does it) ({rc})"
    )]
    NotStarted {
        command: CommandCode,
        rc: ResponseCode,
    },
    /// The owner hierarchy has an authorization value; this crate uses the empty one.
    #[error("{command}: the owner hierarchy has a password; this tool needs it empty ({rc})")]
    OwnerAuth {
        command: CommandCode,
        rc: ResponseCode,
    },
    /// Any other failure, in the specification's words.
    #[error("{command} failed: {rc}")]
    Command {
        command: CommandCode,
        rc: ResponseCode,
    },
    /// The secret is empty or larger than a sealed data object holds.
    #[error("a sealed secret is 1 to {max} bytes, not {len}")]
    SecretSize { len: usize, max: usize },
    /// A PCR index outside the SHA-256 bank's 0..=23.
    #[error("PCR {pcr} does not exist (PCRs are 0 to 23)")]
    PcrIndex { pcr: u32 },
    /// An NV index outside the owner's range.
    #[error(
        "NV index {index:#010x} is not an owner index ({:#010x} to {:#010x})",
        crate::marshal::NV_OWNER_FIRST,
        crate::marshal::NV_OWNER_LAST
    )]
    NvIndex { index: u32 },
    /// A counter just incremented reads as undefined.
    #[error("{counter} reads as undefined right after it was incremented")]
    CounterLost { counter: crate::marshal::NvCounter },
    /// A response larger than this crate accepts.
    #[error("{command}: response of {len} bytes, more than {MAX_RESPONSE}")]
    ResponseTooLarge { command: CommandCode, len: usize },
}

impl TpmError {
    /// The error for `command` failing with response code `code`; `pcrs` are the PCRs the
    /// object is bound to (for the PCR mismatch message).
    pub(crate) fn from_rc(command: CommandCode, code: u32, pcrs: &[u32]) -> Self {
        let rc = ResponseCode(code);
        let base = rc.base();
        match (command, base) {
            (CommandCode::Load, rc::RC_INTEGRITY | rc::RC_BINDING) => {
                TpmError::ForeignBlob { command, rc }
            }
            (CommandCode::PolicyPcr | CommandCode::Unseal, rc::RC_POLICY_FAIL | rc::RC_VALUE)
                if !pcrs.is_empty() =>
            {
                TpmError::PcrMismatch {
                    command,
                    pcrs: pcrs.to_vec(),
                    rc,
                }
            }
            (_, rc::RC_LOCKOUT) => TpmError::Lockout { command, rc },
            (_, rc::RC_INITIALIZE) => TpmError::NotStarted { command, rc },
            (
                CommandCode::CreatePrimary | CommandCode::NvDefineSpace,
                rc::RC_AUTH_FAIL | rc::RC_BAD_AUTH,
            ) => TpmError::OwnerAuth { command, rc },
            _ => TpmError::Command { command, rc },
        }
    }

    /// The response code, for errors the TPM returned.
    pub fn response_code(&self) -> Option<ResponseCode> {
        match self {
            TpmError::ForeignBlob { rc, .. }
            | TpmError::PcrMismatch { rc, .. }
            | TpmError::Lockout { rc, .. }
            | TpmError::NotStarted { rc, .. }
            | TpmError::OwnerAuth { rc, .. }
            | TpmError::Command { rc, .. } => Some(*rc),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integrity_and_binding_on_load_mean_another_tpm() {
        for code in [0x1DF, 0x1E5, 0x2DF] {
            let e = TpmError::from_rc(CommandCode::Load, code, &[]);
            assert!(matches!(e, TpmError::ForeignBlob { .. }), "{code:#x}: {e}");
            let text = e.to_string();
            assert!(text.contains("sealed by another TPM"), "{text}");
            assert!(text.contains("this TPM was cleared"), "{text}");
            assert!(text.contains(&format!("{code:#010x}")), "{text}");
            assert!(text.starts_with("TPM2_Load"), "{text}");
        }
        // The same code on another command is not about the blob.
        assert!(matches!(
            TpmError::from_rc(CommandCode::Create, 0x1DF, &[]),
            TpmError::Command { .. }
        ));
    }

    #[test]
    fn policy_fail_and_value_mean_pcrs_moved() {
        let e = TpmError::from_rc(CommandCode::Unseal, 0x99D, &[7, 16]);
        let text = e.to_string();
        assert!(matches!(e, TpmError::PcrMismatch { .. }));
        assert!(text.contains("PCR values differ"), "{text}");
        assert!(text.contains("[7, 16]"), "{text}");
        assert!(text.contains("TPM_RC_POLICY_FAIL"), "{text}");
        assert!(text.contains("(session 1)"), "{text}");
        assert!(matches!(
            TpmError::from_rc(CommandCode::PolicyPcr, 0x0000_01C4, &[16]),
            TpmError::PcrMismatch { .. }
        ));
        // Without a PCR policy, TPM_RC_VALUE is not about PCRs.
        assert!(matches!(
            TpmError::from_rc(CommandCode::Unseal, 0x084, &[]),
            TpmError::Command { .. }
        ));
    }

    #[test]
    fn lockout_not_started_and_owner_password() {
        assert!(matches!(
            TpmError::from_rc(CommandCode::Unseal, 0x921, &[]),
            TpmError::Lockout { .. }
        ));
        let e = TpmError::from_rc(CommandCode::CreatePrimary, 0x100, &[]);
        assert!(matches!(e, TpmError::NotStarted { .. }));
        assert!(e.to_string().contains("TPM2_Startup"), "{e}");
        let e = TpmError::from_rc(CommandCode::CreatePrimary, 0x98E, &[]);
        assert!(matches!(e, TpmError::OwnerAuth { .. }));
        assert!(
            e.to_string().contains("owner hierarchy has a password"),
            "{e}"
        );
    }

    #[test]
    fn other_codes_name_the_command_and_the_code() {
        let e = TpmError::from_rc(CommandCode::Create, 0x2D5, &[]);
        assert_eq!(
            e.to_string(),
            "TPM2_Create failed: TPM_RC_SIZE: structure is the wrong size (parameter 2) \
             [0x000002d5]"
        );
        assert_eq!(e.response_code(), Some(ResponseCode(0x2D5)));
    }

    #[test]
    fn missing_device_names_both_paths() {
        let e = TpmError::NoDevice {
            resource_manager: "/dev/tpmrm0".into(),
            direct: "/dev/tpm0".into(),
        };
        let text = e.to_string();
        assert!(
            text.contains("/dev/tpmrm0") && text.contains("/dev/tpm0"),
            "{text}"
        );
        assert_eq!(e.response_code(), None);
    }
}
