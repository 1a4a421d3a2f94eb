//! Where the store is: [`StoreAddress`], what `snapboot.store=` and every command's store
//! argument take. A device path names whatever disk enumerated under that name; the other
//! forms name the store itself, or the partition it lives in, so a renumbered disk cannot
//! be mistaken for it:
//!
//! ```text
//! /dev/mmcblk0p3                                 a device node (or, on a host, a file)
//! PARTUUID=5c3a0f6e-1d2b-4c8e-9f00-0123456789ab  a GPT partition's unique GUID (any case)
//! PARTUUID=1234abcd-03                           an MBR disk's signature and partition number
//! PARTLABEL=snapstore                            a GPT partition's name
//! LABEL=factory                                  the store's own label (`store init --label`)
//! ```
//!
//! Resolving an address to a device is the device's business (`devsys::locate`).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use thiserror::Error;

/// How a store is named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreAddress {
    /// A device node or file.
    Path(String),
    /// A partition's unique id: a GPT partition GUID (lower case, `8-4-4-4-12` hex digits)
    /// or an MBR disk signature and partition number (`SSSSSSSS-PP`).
    PartUuid(String),
    /// A GPT partition's name.
    PartLabel(String),
    /// The label in the store's superblock.
    Label(String),
}

/// Most bytes of a store label (UTF-8); the superblock has room for this many.
pub const LABEL_MAX: usize = 32;

/// The forms, for messages.
pub const STORE_FORMS: &str = "a device such as /dev/vdb, PARTUUID=, PARTLABEL= or LABEL=";

/// A store address that does not parse.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum StoreAddressError {
    /// Nothing given.
    #[error("empty store address: expected {STORE_FORMS}")]
    Empty,
    /// `KEY=` that is none of the forms.
    #[error("{given:?}: unknown store address form (expected {STORE_FORMS})")]
    UnknownForm {
        /// The whole address.
        given: String,
    },
    /// `PARTUUID=` with something that is neither a GPT GUID nor `SSSSSSSS-PP`.
    #[error(
        "PARTUUID={given:?}: expected a GPT partition GUID (8-4-4-4-12 hex digits) or an \
         MBR SSSSSSSS-PP"
    )]
    PartUuid {
        /// The value after `PARTUUID=`.
        given: String,
    },
    /// `PARTLABEL=` or `LABEL=` with nothing after it.
    #[error("{form}= needs a name")]
    NoName {
        /// `PARTLABEL` or `LABEL`.
        form: &'static str,
    },
    /// A store label longer than the superblock holds.
    #[error("LABEL={given:?}: {len} bytes, a store label holds at most {LABEL_MAX}")]
    LabelTooLong {
        /// The label.
        given: String,
        /// Its bytes.
        len: usize,
    },
}

impl StoreAddress {
    /// A device path or file.
    pub fn path(p: impl Into<String>) -> Self {
        Self::Path(p.into())
    }

    /// Parses one of the forms in the module docs. Anything without `KEY=` before its
    /// first `/` is a path.
    pub fn parse(s: &str) -> Result<Self, StoreAddressError> {
        if s.is_empty() {
            return Err(StoreAddressError::Empty);
        }
        let head = s.split('/').next().unwrap_or_default();
        let Some((form, _)) = head.split_once('=') else {
            return Ok(Self::Path(s.into()));
        };
        // `head` ends at the first `/`; the value runs to the end of the word.
        let value = &s[form.len() + 1..];
        let named = |form: &'static str| match value {
            "" => Err(StoreAddressError::NoName { form }),
            v => Ok(v.to_string()),
        };
        match form {
            "PARTUUID" => parse_partuuid(value).map(Self::PartUuid),
            "PARTLABEL" => named("PARTLABEL").map(Self::PartLabel),
            "LABEL" => {
                let label = named("LABEL")?;
                if label.len() > LABEL_MAX {
                    return Err(StoreAddressError::LabelTooLong {
                        len: label.len(),
                        given: label,
                    });
                }
                Ok(Self::Label(label))
            }
            _ => Err(StoreAddressError::UnknownForm { given: s.into() }),
        }
    }

    /// Whether a partition with these ids (`PARTUUID=` lower case, as the kernel and
    /// `parttable` give it; `PARTLABEL=`, if it has one) is the one this address names;
    /// `None` when the address names no partition. The one match the device's lookup and
    /// the restorer's share.
    pub fn names_partition(&self, uuid: &str, label: Option<&str>) -> Option<bool> {
        match self {
            Self::PartUuid(want) => Some(uuid.eq_ignore_ascii_case(want)),
            Self::PartLabel(want) => Some(label == Some(want.as_str())),
            Self::Path(_) | Self::Label(_) => None,
        }
    }

    /// The device path, when the address is one.
    pub fn as_path(&self) -> Option<&str> {
        match self {
            Self::Path(p) => Some(p),
            _ => None,
        }
    }
}

/// What a searched partition has, as every "searched: ..." list names it.
pub fn partition_ids_text(uuid: &str, label: Option<&str>) -> String {
    match label {
        Some(l) => format!("PARTUUID={uuid} PARTLABEL={l}"),
        None => format!("PARTUUID={uuid}"),
    }
}

/// Checks and lower-cases a `PARTUUID=` value.
fn parse_partuuid(v: &str) -> Result<String, StoreAddressError> {
    let groups: Vec<&str> = v.split('-').collect();
    let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    let hex = groups
        .iter()
        .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()));
    if hex && (lens == [8, 4, 4, 4, 12] || lens == [8, 2]) {
        Ok(v.to_ascii_lowercase())
    } else {
        Err(StoreAddressError::PartUuid { given: v.into() })
    }
}

impl fmt::Display for StoreAddress {
    /// The form [`StoreAddress::parse`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Path(p) => write!(f, "{p}"),
            Self::PartUuid(u) => write!(f, "PARTUUID={u}"),
            Self::PartLabel(l) => write!(f, "PARTLABEL={l}"),
            Self::Label(l) => write!(f, "LABEL={l}"),
        }
    }
}

impl core::str::FromStr for StoreAddress {
    type Err = StoreAddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses_and_renders_back() {
        for (word, addr) in [
            ("/dev/mmcblk0p3", StoreAddress::path("/dev/mmcblk0p3")),
            ("s.store", StoreAddress::path("s.store")),
            ("dir/a=b", StoreAddress::path("dir/a=b")),
            (
                "PARTUUID=5c3a0f6e-1d2b-4c8e-9f00-0123456789ab",
                StoreAddress::PartUuid("5c3a0f6e-1d2b-4c8e-9f00-0123456789ab".into()),
            ),
            (
                "PARTUUID=1234abcd-03",
                StoreAddress::PartUuid("1234abcd-03".into()),
            ),
            (
                "PARTLABEL=snap/store",
                StoreAddress::PartLabel("snap/store".into()),
            ),
            ("LABEL=factory", StoreAddress::Label("factory".into())),
        ] {
            assert_eq!(StoreAddress::parse(word).unwrap(), addr, "{word}");
            assert_eq!(addr.to_string(), word);
        }
    }

    #[test]
    fn a_partuuid_is_read_in_any_case_and_kept_in_lower_case() {
        let a = StoreAddress::parse("PARTUUID=5C3A0F6E-1D2B-4C8E-9F00-0123456789AB").unwrap();
        assert_eq!(
            a.to_string(),
            "PARTUUID=5c3a0f6e-1d2b-4c8e-9f00-0123456789ab"
        );
        let a = StoreAddress::parse("PARTUUID=1234ABCD-0A").unwrap();
        assert_eq!(a, StoreAddress::PartUuid("1234abcd-0a".into()));
    }

    #[test]
    fn bad_forms_are_named() {
        for (word, err) in [
            ("", StoreAddressError::Empty),
            (
                "UUID=1234",
                StoreAddressError::UnknownForm {
                    given: "UUID=1234".into(),
                },
            ),
            (
                "PARTUUID=5c3a0f6e-1d2b-4c8e-9f00-0123456789a",
                StoreAddressError::PartUuid {
                    given: "5c3a0f6e-1d2b-4c8e-9f00-0123456789a".into(),
                },
            ),
            (
                "PARTUUID=1234abcg-03",
                StoreAddressError::PartUuid {
                    given: "1234abcg-03".into(),
                },
            ),
            (
                "PARTLABEL=",
                StoreAddressError::NoName { form: "PARTLABEL" },
            ),
            ("LABEL=", StoreAddressError::NoName { form: "LABEL" }),
            (
                "LABEL=abcdefghijklmnopqrstuvwxyz0123456",
                StoreAddressError::LabelTooLong {
                    given: "abcdefghijklmnopqrstuvwxyz0123456".into(),
                    len: 33,
                },
            ),
        ] {
            assert_eq!(StoreAddress::parse(word), Err(err), "{word}");
        }
    }
}
