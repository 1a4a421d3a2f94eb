//! The image description: what snapboot keeps with an image besides its pages. The store
//! holds it as the image's metadata (checksummed with the catalog, covered by a signature);
//! resume reads it before the first page and refuses an image whose kernel, machine, RAM
//! size, memory layout, CPUs or binding does not match the running system.
//!
//! Encoding: postcard of [`Description`], whose first field is [`DESCRIPTION_VERSION`]; a
//! decoder refuses any other version with both numbers. The binding keeps its own
//! versioned encoding ([`Binding::encode`]) inside.
//!
//! A new field bumps the version rather than being optional with a default: postcard is not
//! self-describing (a field missing from older bytes is a parse error, not a default), and
//! an image of another version is refused as a changed system, so the next cold boot
//! captures it again with everything this snapboot checks.

use crate::binding::{Binding, BindingError};
use crate::identity::Identity;
use crate::swap::{BadSwapRegion, SwapRegion};
use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Version of [`Description`]'s encoding.
///
/// 3: the identity carries the memory layout ([`crate::MemoryMap`]).
/// 4: the binding's boot setup is the initramfs's manifest, file by file
/// ([`crate::listing`]; binding encoding 2).
/// 5: the memory layout carries the EFI runtime map ([`crate::EfiRuntimeRegion`]).
/// 6: the arm64 resume entry and the boot path.
/// 7: the rollback counter's value at capture ([`RollbackStamp`]).
/// 8: the number of CPUs online at capture ([`Description::online_cpus`]).
pub const DESCRIPTION_VERSION: u32 = 8;
/// Room for the binding record: a manifest of a few thousand files fits (it is bounded by
/// [`crate::binding::MAX_MANIFEST_FILES`] too).
const BINDING_ROOM: usize = 1 << 20;

/// Why a description cannot be made or read.
#[derive(Debug, Error)]
pub enum DescriptionError {
    /// The bytes are not a description.
    #[error("the image's description does not parse")]
    Parse(#[source] postcard::Error),
    /// A description of another version.
    #[error("the image's description is version {found}, this snapboot reads {DESCRIPTION_VERSION}: capture the image again")]
    Version {
        /// The version found.
        found: u32,
    },
    /// The binding record does not encode or decode.
    #[error("the image's binding record")]
    Binding(#[source] BindingError),
    /// The recorded swap region breaks a rule.
    #[error("the image's swap region")]
    Swap(#[source] BadSwapRegion),
}

/// What snapboot stores with an image besides its pages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Description {
    /// [`DESCRIPTION_VERSION`].
    pub version: u32,
    /// Kernel and machine of the capture.
    pub identity: Identity,
    /// Capture time, unix seconds.
    pub created_unix: u64,
    /// [`Binding::encode`]d record (empty: none).
    binding: Vec<u8>,
    /// Pages of the kernel's stream.
    pub stream_pages: u64,
    /// A lazy image's swap region (in the image's raw region of the store).
    pub swap: Option<SwapRegion>,
    /// arm64: the physical address of the image kernel's MMU-off resume entry
    /// (`cpu_resume`), which its hibernation header does not carry; the restorer enters the
    /// image there (`None`: not recorded; the restorer refuses the image).
    pub resume_entry: Option<u64>,
    /// How the image kernel was booted, when capture could tell (arm64: `U-Boot VERSION,
    /// booti` or `U-Boot VERSION, EFI`, from the device tree's `/chosen/u-boot,version` and
    /// whether the kernel has EFI; `None` elsewhere): a restorer started another way
    /// refuses the image.
    pub boot_path: Option<String>,
    /// The TPM counter the capture raised and the value it raised it to (`None`: captured
    /// without rollback protection).
    pub rollback: Option<RollbackStamp>,
    /// How many CPUs were online at capture (`/sys/devices/system/cpu/online`; the kernel's
    /// own header leaves its `cpus` zero): a machine with fewer refuses the image. `None`:
    /// not recorded (a description made without counting them), not checked.
    pub online_cpus: Option<u32>,
}

/// Where an image stands in its name's line of captures: each capture with rollback
/// protection raises a TPM NV counter and records the new value here, so an image whose
/// value is below the counter is an older copy of the store written back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RollbackStamp {
    /// The counter's NV index.
    pub counter: u32,
    /// The counter's value right after this capture raised it.
    pub value: u64,
}

impl Description {
    /// The description of a capture.
    pub fn new(
        identity: Identity,
        created_unix: u64,
        binding: Option<&Binding>,
        stream_pages: u64,
        swap: Option<SwapRegion>,
        (resume_entry, boot_path): (Option<u64>, Option<String>),
    ) -> Result<Self, DescriptionError> {
        let binding = match binding {
            Some(b) => b.encode(BINDING_ROOM).map_err(DescriptionError::Binding)?,
            None => Vec::new(),
        };
        if let Some(s) = &swap {
            s.check().map_err(DescriptionError::Swap)?;
        }
        Ok(Description {
            version: DESCRIPTION_VERSION,
            identity,
            created_unix,
            binding,
            stream_pages,
            swap,
            resume_entry,
            boot_path,
            rollback: None,
            online_cpus: None,
        })
    }

    /// The same, stamped with the rollback counter's value.
    pub fn with_rollback(self, rollback: Option<RollbackStamp>) -> Self {
        Description { rollback, ..self }
    }

    /// The same, with the number of CPUs online at capture.
    pub fn with_online_cpus(self, online_cpus: Option<u32>) -> Self {
        Description {
            online_cpus,
            ..self
        }
    }

    /// Its bytes.
    pub fn encode(&self) -> Vec<u8> {
        // Every field is a plain value postcard encodes into a growing vector.
        postcard::to_allocvec(self).unwrap_or_default()
    }

    /// Back from [`Description::encode`]: the version checked first, then the swap region.
    pub fn decode(b: &[u8]) -> Result<Self, DescriptionError> {
        // The version is the first field: read it alone, so an older layout is named by its
        // version and not as garbage.
        let (found, _): (u32, _) = postcard::take_from_bytes(b).map_err(DescriptionError::Parse)?;
        if found != DESCRIPTION_VERSION {
            return Err(DescriptionError::Version { found });
        }
        let d: Description = postcard::from_bytes(b).map_err(DescriptionError::Parse)?;
        if let Some(s) = &d.swap {
            s.check().map_err(DescriptionError::Swap)?;
        }
        Ok(d)
    }

    /// The binding record, if the image has one.
    pub fn binding(&self) -> Result<Option<Binding>, DescriptionError> {
        if self.binding.is_empty() {
            return Ok(None);
        }
        Binding::decode(&self.binding)
            .map(Some)
            .map_err(DescriptionError::Binding)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PAGE_SIZE;

    fn identity() -> Identity {
        Identity {
            release: "6.1.0-56-amd64".into(),
            version: "#1 SMP".into(),
            machine: "x86_64".into(),
            ram_bytes: 1 << 30,
            memory: crate::MemoryMap::new(
                vec![crate::PhysRange::inclusive(0x4000_0000, 0x7fff_ffff)],
                vec![crate::PhysRange::inclusive(0x4800_0000, 0x4800_0fff)],
            )
            .with_efi_runtime(vec![crate::EfiRuntimeRegion {
                phys: 0x7f5e_c000,
                virt: 0xffff_fffe_ff5e_c000,
                pages: 0x4c,
                kind: 6,
                attribute: 0x8000_0000_0000_000f,
            }]),
        }
    }

    fn swap() -> SwapRegion {
        let page = PAGE_SIZE as u64;
        SwapRegion {
            offset: 64 * page,
            bytes: 32 * page,
            used_pages: 20,
            uuid: [7; 16],
            verity: None,
        }
    }

    #[test]
    fn descriptions_round_trip() {
        for s in [None, Some(swap())] {
            let d = Description::new(
                identity(),
                1_700_000_000,
                None,
                1234,
                s,
                (Some(0x410f_d038), Some("U-Boot 2023.01, booti".into())),
            )
            .unwrap()
            .with_rollback(Some(RollbackStamp {
                counter: 0x0181_2345,
                value: 1 << 40,
            }))
            .with_online_cpus(Some(3));
            let back = Description::decode(&d.encode()).unwrap();
            assert_eq!(back, d);
            assert_eq!(back.binding().unwrap(), None);
        }
    }

    #[test]
    fn an_image_of_version_7_without_a_cpu_count_is_refused_by_its_version() {
        // Version 7's bytes are version 8's without the trailing `online_cpus` (`None`
        // encodes as its one 0 byte).
        let d = Description::new(identity(), 0, None, 1, None, (None, None)).unwrap();
        assert_eq!(d.online_cpus, None);
        assert_eq!(Description::decode(&d.encode()).unwrap(), d);
        let mut v7 = d.encode();
        assert_eq!((v7[0], v7.pop()), (8, Some(0)));
        v7[0] = 7;
        let e = Description::decode(&v7).unwrap_err();
        assert!(matches!(e, DescriptionError::Version { found: 7 }), "{e}");
        assert_eq!(
            e.to_string(),
            "the image's description is version 7, this snapboot reads 8: capture the image again"
        );
        let counted = d.with_online_cpus(Some(2));
        assert_eq!(
            Description::decode(&counted.encode()).unwrap().online_cpus,
            Some(2)
        );
    }

    #[test]
    fn garbage_another_version_and_a_bad_swap_region_are_named() {
        let e = Description::decode(b"").unwrap_err();
        assert!(matches!(e, DescriptionError::Parse(_)), "{e}");
        let mut d = Description::new(identity(), 0, None, 1, None, (None, None)).unwrap();
        d.version = 1;
        let e = Description::decode(&d.encode()).unwrap_err().to_string();
        assert!(e.contains("version 1, this snapboot reads 8"), "{e}");
        // Version 2 had no memory layout, version 4 no EFI runtime map, version 5 no resume
        // entry, version 6 no rollback stamp, version 7 no CPU count: named by their
        // version, not as garbage.
        for old in [2, 4, 5, 6, 7] {
            d.version = old;
            let e = Description::decode(&d.encode()).unwrap_err();
            assert!(
                matches!(e, DescriptionError::Version { found } if found == old),
                "{e}"
            );
        }
        let bad = SwapRegion {
            used_pages: 40,
            ..swap()
        };
        let e = Description::new(identity(), 0, None, 1, Some(bad), (None, None)).unwrap_err();
        assert!(matches!(e, DescriptionError::Swap(_)), "{e}");
        d.version = DESCRIPTION_VERSION;
        d.swap = Some(bad);
        let e = Description::decode(&d.encode()).unwrap_err();
        assert!(matches!(e, DescriptionError::Swap(_)), "{e}");
        let mut bytes = Description::new(identity(), 0, None, 1, None, (None, None))
            .unwrap()
            .encode();
        bytes.truncate(bytes.len() - 2);
        assert!(matches!(
            Description::decode(&bytes),
            Err(DescriptionError::Parse(_))
        ));
    }
}
