//! Keys for signed images. A *secret key* signs the 32-byte digest a store computes over
//! everything a restore of an image reads (`flashstore::Store::signed_digest`); the
//! *public key*, built into the initramfs, checks it at resume. Ed25519 (`ed25519-dalek`,
//! strict verification); keys are one line of text each:
//!
//! ```text
//! snapboot-image-secret-key ed25519 <64 hex digits: the 32-byte seed>
//! snapboot-image-public-key ed25519 <64 hex digits: the 32-byte public key>
//! ```

//!
//! Checking a signature ([`PublicKey`], [`SignatureError`]) needs no std: the restorer
//! builds this crate without its `std` feature, which everything else here needs.
#![cfg_attr(not(feature = "std"), no_std)]

extern crate alloc;

mod public;
pub use public::{PublicKey, SignatureError};

#[cfg(feature = "std")]
mod files;
#[cfg(feature = "std")]
pub use files::*;
