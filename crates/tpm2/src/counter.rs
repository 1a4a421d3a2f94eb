//! Monotonic counters in the TPM's NV memory: an NV index of type counter only ever goes up
//! (TPM2_NV_Increment adds one; nothing sets it lower, not even the owner short of undefining
//! the index or clearing the TPM, which also destroys every key sealed to it). That is what
//! makes a counter a floor a copied-back disk cannot lower.
//!
//! ```text
//! counter_increment(c):  NV_DefineSpace(owner, c)  unless defined  (TPM_RC_NV_DEFINED is fine)
//!                        NV_Increment(c)           first one: the TPM starts the counter at
//!                                                  its highest value ever, not at 0
//!                        NV_Read(c, 8 bytes)       -> the new value
//! counter_read(c):       NV_Read(c, 8 bytes)       -> None if not defined or never incremented
//! ```
//!
//! The index is an owner index (`0x01800000..=0x01BFFFFF`) read and written with its own
//! empty authorization, outside dictionary-attack counting: anyone who can talk to the TPM
//! can read it or raise it (which only makes older things refused), nobody can lower it.

use crate::error::TpmError;
use crate::marshal::{Auth, CommandBuilder, CommandCode, NvCounter, ALG_SHA256, RH_OWNER};
use crate::tpm::Tpm;
use crate::transport::Transport;

/// `TPMA_NV` bits (Part 2 §13.4).
mod nv_attr {
    /// `TPM_NT_COUNTER` in bits 7:4.
    pub const COUNTER: u32 = 0x1 << 4;
    pub const AUTHWRITE: u32 = 1 << 2;
    pub const AUTHREAD: u32 = 1 << 18;
    pub const NO_DA: u32 = 1 << 25;
}

/// `TPM_RC_NV_UNINITIALIZED`: a counter defined but never incremented.
const RC_NV_UNINITIALIZED: u32 = 0x100 + 0x04A;
/// `TPM_RC_NV_DEFINED`.
const RC_NV_DEFINED: u32 = 0x100 + 0x04C;
/// `TPM_RC_HANDLE` (format one): the NV index is not defined.
const RC_HANDLE: u32 = 0x080 + 0x00B;

/// `TPM2B_NV_PUBLIC` of a counter at `index`: SHA-256 name, the attributes above, no policy,
/// 8 bytes.
fn counter_public(index: u32) -> Vec<u8> {
    let attributes = nv_attr::COUNTER | nv_attr::AUTHWRITE | nv_attr::AUTHREAD | nv_attr::NO_DA;
    let mut p = Vec::with_capacity(14);
    p.extend_from_slice(&index.to_be_bytes());
    p.extend_from_slice(&ALG_SHA256.to_be_bytes());
    p.extend_from_slice(&attributes.to_be_bytes());
    p.extend_from_slice(&0u16.to_be_bytes()); // authPolicy: empty
    p.extend_from_slice(&8u16.to_be_bytes()); // dataSize
    p
}

impl<T: Transport> Tpm<T> {
    /// The counter's value; `None` when it was never defined or never incremented on this
    /// TPM (a new or cleared TPM).
    pub fn counter_read(&mut self, counter: NvCounter) -> Result<Option<u64>, TpmError> {
        let i = counter.index();
        let cmd = CommandBuilder::new(CommandCode::NvRead)
            .handle(i) // authHandle: the index's own authorization
            .handle(i)
            .auth(Auth::EmptyPassword)
            .u16(8) // size
            .u16(0) // offset
            .finish();
        let read = self.call(CommandCode::NvRead, &cmd, 0, &[], |mut b| {
            let data = b.params.tpm2b("data")?;
            let bytes: [u8; 8] = data.try_into().map_err(|_| {
                b.params
                    .malformed("data", format!("{} bytes, a counter has 8", data.len()))
            })?;
            Ok(u64::from_be_bytes(bytes))
        });
        match read {
            Ok(v) => Ok(Some(v)),
            Err(e) if absent(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Adds one to the counter, defining it first if this TPM does not have it, and returns
    /// the new value.
    pub fn counter_increment(&mut self, counter: NvCounter) -> Result<u64, TpmError> {
        let i = counter.index();
        let cmd = CommandBuilder::new(CommandCode::NvDefineSpace)
            .handle(RH_OWNER)
            .auth(Auth::EmptyPassword)
            .tpm2b(&[]) // auth: empty
            .tpm2b(&counter_public(i))
            .finish();
        match self.call(CommandCode::NvDefineSpace, &cmd, 0, &[], |_| Ok(())) {
            Ok(()) => {}
            Err(e) if e.response_code().map(|rc| rc.base()) == Some(RC_NV_DEFINED) => {}
            Err(e) => return Err(e),
        }
        let cmd = CommandBuilder::new(CommandCode::NvIncrement)
            .handle(i)
            .handle(i)
            .auth(Auth::EmptyPassword)
            .finish();
        self.call(CommandCode::NvIncrement, &cmd, 0, &[], |_| Ok(()))?;
        self.counter_read(counter)?
            .ok_or(TpmError::CounterLost { counter })
    }
}

/// Whether a failed read means "no such counter yet".
fn absent(e: &TpmError) -> bool {
    matches!(
        e.response_code().map(|rc| rc.base()),
        Some(RC_HANDLE | RC_NV_UNINITIALIZED)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::marshal::{NV_OWNER_FIRST, NV_OWNER_LAST};

    #[test]
    fn only_owner_indices_are_counters() {
        assert!(NvCounter::new(NV_OWNER_FIRST).is_ok());
        assert!(NvCounter::new(NV_OWNER_LAST).is_ok());
        for bad in [0x0100_0000, NV_OWNER_LAST + 1, 0x8100_0001, 0] {
            let e = TpmError::NvIndex {
                index: NvCounter::new(bad).unwrap_err(),
            }
            .to_string();
            assert!(e.contains(&format!("{bad:#010x}")), "{e}");
        }
    }

    #[test]
    fn a_counter_is_an_eight_byte_counter_with_its_own_empty_authorization() {
        let p = counter_public(0x0181_2345);
        assert_eq!(&p[..4], &[0x01, 0x81, 0x23, 0x45]);
        assert_eq!(&p[4..6], &ALG_SHA256.to_be_bytes());
        let attrs = u32::from_be_bytes(p[6..10].try_into().unwrap());
        assert_eq!((attrs >> 4) & 0xF, 1, "TPM_NT_COUNTER");
        assert_eq!(attrs, 0x0204_0014);
        assert_eq!(&p[10..], &[0, 0, 0, 8]);
    }

    #[test]
    fn undefined_and_uninitialized_read_as_absent() {
        // TPM_RC_HANDLE on handle 1 and TPM_RC_NV_UNINITIALIZED.
        for code in [0x18B, 0x28B, 0x14A] {
            let e = TpmError::from_rc(CommandCode::NvRead, code, &[]);
            assert!(absent(&e), "{code:#x}: {e}");
        }
        let e = TpmError::from_rc(CommandCode::NvRead, 0x149, &[]);
        assert!(!absent(&e), "TPM_RC_NV_AUTHORIZATION is not absent: {e}");
    }
}
