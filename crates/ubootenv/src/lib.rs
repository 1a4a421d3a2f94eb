//! U-Boot's environment as it lies in storage (flash, an eMMC or disk area): what U-Boot
//! reads at power-on and `env import -c` takes, what `fw_setenv` and snapboot write. The host
//! board writes its flash bank with it; the device writes its next-boot request with it.
//!
//! One area (no redundant copy, so no flags byte), little-endian:
//!
//! ```text
//! +-----------+------------------------------------------------+
//! | crc32 LE  | name=value\0 name=value\0 ... \0 (sorted)  0.. |
//! | 4 bytes   | size - 4 bytes (the CRC covers all of them)    |
//! +-----------+------------------------------------------------+
//! ```

use std::collections::BTreeMap;

/// Why an environment could not be made or read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvError {
    /// The variables do not fit the area.
    #[error("U-Boot environment of {bytes} bytes does not fit its {size}-byte area")]
    TooLarge {
        /// Bytes needed.
        bytes: usize,
        /// The area's size.
        size: usize,
    },
    /// The area is shorter than asked for.
    #[error("not a U-Boot environment: {len} bytes, the area is {size}")]
    Short {
        /// Bytes given.
        len: usize,
        /// The area's size.
        size: usize,
    },
    /// The CRC does not match: an erased, damaged or never-written area.
    #[error("not a U-Boot environment: CRC {stored:#010x} stored, {computed:#010x} computed")]
    Crc {
        /// The first four bytes.
        stored: u32,
        /// The CRC of the rest.
        computed: u32,
    },
    /// A variable without `=`.
    #[error("not a U-Boot environment: entry {0:?} has no '='")]
    NoEquals(String),
    /// A variable name or value U-Boot cannot hold.
    #[error("U-Boot variable {name:?}: {reason}")]
    BadVariable {
        /// The name.
        name: String,
        /// Why.
        reason: &'static str,
    },
}

/// A U-Boot environment: variables by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Env(BTreeMap<String, String>);

impl Env {
    /// A variable's value.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// Sets a variable.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), EnvError> {
        if !valid_name(name) {
            return Err(EnvError::BadVariable {
                name: name.into(),
                reason: "names are letters, digits, '_', '.', '#' and '-'",
            });
        }
        if value.contains('\0') {
            return Err(EnvError::BadVariable {
                name: name.into(),
                reason: "a value cannot hold a NUL byte",
            });
        }
        self.0.insert(name.into(), value.into());
        Ok(())
    }

    /// Removes a variable (`setenv name` with no value); whether it was there.
    pub fn remove(&mut self, name: &str) -> bool {
        self.0.remove(name).is_some()
    }

    /// Number of variables.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The area of `size` bytes: CRC, then the variables, zero-filled.
    pub fn to_area(&self, size: usize) -> Result<Vec<u8>, EnvError> {
        let mut body = Vec::with_capacity(size);
        for (k, v) in &self.0 {
            body.extend_from_slice(k.as_bytes());
            body.push(b'=');
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        if body.len() + 4 > size {
            return Err(EnvError::TooLarge {
                bytes: body.len() + 4,
                size,
            });
        }
        body.resize(size - 4, 0);
        let mut area = crc32fast::hash(&body).to_le_bytes().to_vec();
        area.extend_from_slice(&body);
        Ok(area)
    }

    /// Reads the first `size` bytes of `area` back (what `fw_printenv` shows), checking the CRC.
    pub fn from_area(area: &[u8], size: usize) -> Result<Self, EnvError> {
        if area.len() < size || size < 5 {
            return Err(EnvError::Short {
                len: area.len(),
                size,
            });
        }
        let body = &area[4..size];
        let stored = u32::from_le_bytes([area[0], area[1], area[2], area[3]]);
        let computed = crc32fast::hash(body);
        if stored != computed {
            return Err(EnvError::Crc { stored, computed });
        }
        let end = body.windows(2).position(|w| w == [0, 0]).unwrap_or(0);
        let mut env = Env::default();
        for var in body[..end + 1].split(|&b| b == 0).filter(|v| !v.is_empty()) {
            let text = String::from_utf8_lossy(var);
            let (k, v) = text
                .split_once('=')
                .ok_or_else(|| EnvError::NoEquals(text.to_string()))?;
            env.0.insert(k.into(), v.into());
        }
        Ok(env)
    }
}

impl FromIterator<(String, String)> for Env {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Self {
        Env(iter.into_iter().collect())
    }
}

/// Whether U-Boot takes `name` as a variable name.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '#' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZE: usize = 0x40000;

    #[test]
    fn area_round_trips_and_a_flipped_byte_is_refused() {
        let mut env = Env::default();
        env.set("snapboot_once", "capture").unwrap();
        env.set("bootdelay", "0").unwrap();
        let mut area = env.to_area(SIZE).unwrap();
        assert_eq!(area.len(), SIZE);
        assert_eq!(Env::from_area(&area, SIZE).unwrap(), env);
        area[10] ^= 1;
        assert!(matches!(
            Env::from_area(&area, SIZE),
            Err(EnvError::Crc { .. })
        ));
    }

    #[test]
    fn variables_sorted_and_nul_terminated_with_a_crc_over_the_whole_area() {
        let mut env = Env::default();
        env.set("b", "2").unwrap();
        env.set("a", "1").unwrap();
        let area = env.to_area(SIZE).unwrap();
        assert_eq!(&area[4..13], b"a=1\0b=2\0\0");
        assert_eq!(
            u32::from_le_bytes(area[..4].try_into().unwrap()),
            crc32fast::hash(&area[4..])
        );
        assert!(env.remove("a") && !env.remove("a"));
        assert_eq!(env.len(), 1);
    }

    #[test]
    fn an_erased_or_short_area_is_not_an_environment() {
        assert!(matches!(
            Env::from_area(&vec![0xff; SIZE], SIZE),
            Err(EnvError::Crc { .. })
        ));
        assert_eq!(
            Env::from_area(&[0; 8], SIZE),
            Err(EnvError::Short { len: 8, size: SIZE })
        );
    }

    #[test]
    fn too_large_and_bad_names_are_refused() {
        let mut env = Env::default();
        env.set("big", &"x".repeat(SIZE)).unwrap();
        assert!(matches!(env.to_area(SIZE), Err(EnvError::TooLarge { .. })));
        assert!(env.set("a b", "1").is_err());
        assert!(env.set("", "1").is_err());
        assert!(env.set("ok", "a\0b").is_err());
    }
}
