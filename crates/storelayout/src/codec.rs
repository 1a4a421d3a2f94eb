//! How the catalog, page lists, dedupe table and boot log are encoded: postcard, with the
//! structure's name in every error.

use crate::damage::Damage;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

/// The bytes of `v`, the `what` (`catalog`, `page list`, ...) named if it does not encode.
pub fn encode<T: Serialize>(v: &T, what: &str) -> Result<Vec<u8>, Damage> {
    postcard::to_allocvec(v).map_err(|reason| Damage::Encode {
        what: what.into(),
        reason,
    })
}

/// The `what` in `b`, named if it does not parse.
pub fn decode<T: for<'de> Deserialize<'de>>(b: &[u8], what: &str) -> Result<T, Damage> {
    postcard::from_bytes(b).map_err(|reason| Damage::Parse {
        what: what.into(),
        reason,
    })
}
