//! What makes an image trusted here, checked before anything of it is read. Where images
//! are encrypted (`snapboot.encrypt=`), only those sealed with the device's key restore
//! (the seal authenticates them as the device's own captures; a signature they carry is
//! checked too); otherwise, when a public key is configured, only images it verifies the
//! signature of. The digest a signature covers is the store's
//! ([`storelayout::signed_digest`]).

use crate::Refused;
use alloc::string::String;
use imagekey::PublicKey;
use storelayout::{Catalog, ImageRec, KeyId};

/// Whether images must be sealed with the device's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sealing {
    /// Images in the clear restore (the restorer's only case: it holds no device key).
    Clear,
    /// Only images sealed with `device` restore (`None`: the device key is not at hand, and
    /// no image is trusted). `word` is the `snapboot.encrypt=` value, for the messages.
    Required {
        /// The `snapboot.encrypt=` word in effect.
        word: String,
        /// The key the store is unlocked with.
        device: Option<KeyId>,
    },
}

/// The trust rule of one boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trust {
    /// The public key images must be signed for (`None`: no signature needed).
    pub key: Option<PublicKey>,
    /// Whether images must be sealed with the device's key.
    pub sealing: Sealing,
}

/// What was checked of an image that is trusted, for the console.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trusted {
    /// It is sealed with the device's key.
    pub sealed: bool,
    /// Its signature was verified.
    pub signed: bool,
}

impl Trust {
    /// Any image, in the clear, unsigned.
    pub const ANY: Trust = Trust {
        key: None,
        sealing: Sealing::Clear,
    };

    /// Checks `rec` of a store with `catalog`.
    pub fn check(&self, catalog: &Catalog, rec: &ImageRec) -> Result<Trusted, Refused> {
        let sealed = match &self.sealing {
            Sealing::Clear => false,
            Sealing::Required { word, device } => {
                let clear = || Refused::Clear {
                    encrypt: word.clone(),
                };
                let device = device.ok_or_else(clear)?;
                match rec.sealed {
                    None => return Err(clear()),
                    Some(image) if image != device => {
                        return Err(Refused::ForeignKey { image, device })
                    }
                    Some(_) => true,
                }
            }
        };
        // A sealed image is signed only if it carries a signature; one in the clear must be.
        let signed = match &self.key {
            Some(key) if !sealed || !rec.signature.is_empty() => {
                let digest = storelayout::signed_digest(catalog, rec)?;
                key.verify(&digest, &rec.signature)
                    .map_err(Refused::Signature)?;
                true
            }
            _ => false,
        };
        Ok(Trusted { sealed, signed })
    }

    /// What the console says of the rule.
    pub fn describe(&self) -> String {
        match &self.key {
            None => "no public key: images need no signature".into(),
            Some(k) => alloc::format!("images must be signed by key {}", k.id()),
        }
    }
}
