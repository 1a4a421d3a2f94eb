//! The public name of a device key, which the catalog, the errors and the sealing code all
//! speak of (its own module: it depends on nothing).

use serde::{Deserialize, Serialize};

/// The public name of a device key: 16 bytes derived from it, shown as 32 hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KeyId(pub [u8; 16]);

impl core::fmt::Display for KeyId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}
