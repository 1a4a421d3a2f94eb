//! Image names: the one rule for what may name an image in the store's catalog, checked by
//! the store before it writes one, by the boot words (`snapboot.image=`) and the command
//! line's `--image`, and readable by the freestanding restorer.

use alloc::string::String;

/// Most bytes of an image name.
pub const IMAGE_NAME_MAX: usize = 64;

/// What an image name is made of, for messages.
pub const IMAGE_NAME_CHARS: &str = "A-Z a-z 0-9 . _ -";

/// A text that cannot name an image, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadImageName {
    /// Nothing.
    #[error("an image name cannot be empty")]
    Empty,
    /// More than [`IMAGE_NAME_MAX`] bytes.
    #[error("image name {name:?} is {len} bytes, more than {IMAGE_NAME_MAX}")]
    TooLong {
        /// The name.
        name: String,
        /// Its bytes.
        len: usize,
    },
    /// A character outside [`IMAGE_NAME_CHARS`].
    #[error("image name {name:?}: {found:?} is not one of {IMAGE_NAME_CHARS}")]
    BadChar {
        /// The name.
        name: String,
        /// The first character that is not allowed.
        found: char,
    },
}

impl BadImageName {
    /// The name refused (empty for [`BadImageName::Empty`]).
    pub fn name(&self) -> &str {
        match self {
            Self::Empty => "",
            Self::TooLong { name, .. } | Self::BadChar { name, .. } => name,
        }
    }
}

/// Checks that `name` can name an image: 1 to [`IMAGE_NAME_MAX`] characters of
/// `[A-Za-z0-9._-]`.
pub fn check_image_name(name: &str) -> Result<(), BadImageName> {
    if name.is_empty() {
        return Err(BadImageName::Empty);
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
    if let Some(found) = name.chars().find(|&c| !allowed(c)) {
        return Err(BadImageName::BadChar {
            name: name.into(),
            found,
        });
    }
    if name.len() > IMAGE_NAME_MAX {
        return Err(BadImageName::TooLong {
            name: name.into(),
            len: name.len(),
        });
    }
    Ok(())
}

/// Whether `name` can name an image ([`check_image_name`]).
pub fn valid_name(name: &str) -> bool {
    check_image_name(name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn names_of_1_to_64_allowed_characters_are_valid() {
        for ok in ["current", "factory-2.0_a", "A", &"x".repeat(64)] {
            assert_eq!(check_image_name(ok), Ok(()), "{ok}");
            assert!(valid_name(ok));
        }
    }

    #[test]
    fn a_refusal_names_the_name_and_why() {
        assert_eq!(check_image_name(""), Err(BadImageName::Empty));
        let long = "x".repeat(65);
        assert_eq!(
            check_image_name(&long),
            Err(BadImageName::TooLong {
                name: long.clone(),
                len: 65
            })
        );
        let e = check_image_name("a/b").unwrap_err();
        assert_eq!(e.name(), "a/b");
        assert_eq!(
            e.to_string(),
            "image name \"a/b\": '/' is not one of A-Z a-z 0-9 . _ -"
        );
        assert!(!valid_name("é"));
        assert!(!valid_name("a b"));
    }
}
