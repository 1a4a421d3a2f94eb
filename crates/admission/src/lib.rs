//! Which image restores here, and why not: the one rule every restoring path calls (the
//! device's resume on the stock kernel and on the restore kernel, the freestanding
//! restorer, and the restorers to come). A path is a driver: it knows how to read its store
//! and where pages go; what is tried, in which order, what is checked and what a refusal
//! means for the next boot are decided here, once.
//!
//! ```text
//!  catalog + snapboot.image= ──► [order]   candidates: asked-for names first (each checked,
//!                                          missing ones named), then the rest, newest first
//!  each candidate ─────────────► [admit]   boot log guard ─► trust (encryption, signature)
//!                                          ─► description ─► [rollback] TPM counter ─►
//!                                          (version, page count, kernel, RAM and memory
//!                                          map, CPUs online) ─► binding ─► swap region
//!  page 0, when the driver has it ► [checks::check_header]   arch record, e820, RAM pages,
//!                                                            stream length
//!  any refusal ────────────────► [Refused]  its kind ([`Refused::kind`]) decides whether
//!                                           the next cold boot captures again
//! ```
//!
//! `no_std` with `alloc`; no I/O: the driver reads through [`admit::ImageSource`].
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod admit;
pub mod checks;
pub mod order;
pub mod refused;
pub mod rollback;
pub mod trust;

pub use admit::{admit, Admitted, ImageSource, Rules};
pub use checks::{check_binding, check_description, check_header, Expected, Memory};
pub use order::{candidates, Candidate};
pub use refused::{chain, Refused};
pub use rollback::check_rollback;
pub use trust::{Sealing, Trust, Trusted};
