//! What an image must match here: the kernel it was made by, this machine's RAM, memory
//! layout and CPUs, what it is bound to, and a stream header the restoring side can take.
//! Each path tells what it observed of this boot in one [`Expected`]; how much it can observe
//! differs (a running kernel reads `/proc/iomem`, a restorer before any kernel reads the
//! firmware's map), so the memory is checked against whichever it has.

use crate::Refused;
use alloc::string::String;
use alloc::vec::Vec;
use snapimg::{ArchRecord, Binding, Description, Identity, Incompat, MemoryMap, StreamHeader};

/// This boot's RAM and memory layout, as the path can observe them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Memory {
    /// Seen by a running kernel: the sum of `/proc/iomem`'s System RAM ranges and the
    /// layout (RAM and reserved ranges), checked against what the description recorded.
    Observed {
        /// RAM size in bytes.
        ram_bytes: u64,
        /// The layout.
        map: MemoryMap,
    },
    /// Seen in the x86 firmware's e820 map, before any kernel: its checksum as the kernel
    /// computes it and its pages of RAM, checked against the stream header (what the image
    /// kernel itself would check on resume).
    E820 {
        /// The kernel's checksum of the e820 map.
        checksum: u32,
        /// The checksum of the same firmware map as another boot loader turns it into e820
        /// (the EFI restorer: the image kernel's table came from its EFI stub or from
        /// GRUB's own Linux loader, which types runtime code apart): either may match.
        also: Option<u32>,
        /// Pages of RAM in it.
        ram_pages: u64,
    },
    /// Seen in the boot loader's device tree, before any kernel (the arm64 restorer): RAM
    /// and the reservations the firmware made; the loader's reservations for the kernel it
    /// boots (its device tree blob) are not there yet ([`snapimg::MemoryMap::check_before_kernel`]).
    DeviceTree {
        /// RAM size in bytes.
        ram_bytes: u64,
        /// The layout.
        map: MemoryMap,
    },
}

/// What an image must match on this boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// `uname -r` of the kernel the image must have been made by.
    pub release: String,
    /// `uname -v` of that kernel.
    pub version: String,
    /// `uname -m` of that kernel.
    pub machine: String,
    /// This machine's RAM and memory layout.
    pub memory: Memory,
    /// MPIDRs of this machine's CPUs (arm64; empty: not known).
    pub cpus: Vec<u64>,
    /// How many CPUs this machine has online (`None`: not known, not checked). An image
    /// captured with more is refused ([`Incompat::FewerCpus`]); one captured with fewer is
    /// admitted: the restored kernel brings back the CPUs it had, and the extra ones stay
    /// offline until the restored system onlines them.
    pub online_cpus: Option<u32>,
    /// How this boot was started, when an image must have been captured the same way
    /// (the arm64 restorer: `U-Boot VERSION, booti`, the kernel U-Boot's script would
    /// boot; `None`: not checked).
    pub boot_path: Option<String>,
}

impl Expected {
    /// What a running kernel observed: the image kernel's identity, with RAM and layout,
    /// its CPUs' MPIDRs and how many CPUs are online.
    pub fn observed(identity: Identity, cpus: Vec<u64>, online_cpus: Option<u32>) -> Self {
        Expected {
            release: identity.release,
            version: identity.version,
            machine: identity.machine,
            memory: Memory::Observed {
                ram_bytes: identity.ram_bytes,
                map: identity.memory,
            },
            cpus,
            online_cpus,
            boot_path: None,
        }
    }
}

/// Checks an image's description against this boot: the stream length it records against
/// the `listed` pages of its page list, the kernel, RAM and memory layout, the CPUs online
/// (when both the image and this boot know them); returns what it is bound to, which the
/// path observes and hands to [`check_binding`].
pub fn check_description(d: &Description, listed: u64, e: &Expected) -> Result<Binding, Refused> {
    if listed != d.stream_pages {
        return Err(Refused::PageCount {
            listed,
            by: "description",
            said: d.stream_pages,
        });
    }
    let id = &d.identity;
    id.check_kernel(&e.release, &e.version, &e.machine)
        .map_err(Refused::Incompatible)?;
    let layout = match &e.memory {
        Memory::Observed { ram_bytes, map } => Some((ram_bytes, id.memory.check_against(map))),
        Memory::DeviceTree { ram_bytes, map } => {
            Some((ram_bytes, id.memory.check_before_kernel(map)))
        }
        Memory::E820 { .. } => None,
    };
    if let Some(running) = &e.boot_path {
        if d.boot_path.as_ref() != Some(running) {
            return Err(Refused::Incompatible(Incompat::BootPath {
                image: d
                    .boot_path
                    .clone()
                    .unwrap_or_else(|| "none recorded".into()),
                running: running.clone(),
            }));
        }
    }
    if let Some((ram_bytes, checked)) = layout {
        if id.ram_bytes != *ram_bytes {
            return Err(Refused::Incompatible(Incompat::RamMismatch {
                image: id.ram_bytes,
                running: *ram_bytes,
            }));
        }
        checked.map_err(|m| Refused::Incompatible(Incompat::MemoryLayout(m)))?;
    }
    check_online_cpus(d.online_cpus, e.online_cpus, &e.machine)?;
    d.binding()
        .map_err(Refused::Description)?
        .ok_or(Refused::Unbound)
}

/// Refuses an image captured with more CPUs online (`image`) than this machine has
/// (`running`); either unknown is not checked. Fewer is fine on the PC (`machine`
/// `x86_64`): the CPUs the image kernel did not have stay offline until the restored
/// system onlines them. An arm64 image needs as many as it had ([`Incompat::MoreCpus`]).
fn check_online_cpus(
    image: Option<u32>,
    running: Option<u32>,
    machine: &str,
) -> Result<(), Refused> {
    match (image, running) {
        (Some(image), Some(running)) if image > running => {
            Err(Refused::Incompatible(Incompat::FewerCpus {
                image,
                running,
            }))
        }
        (Some(image), Some(running)) if image < running && machine == "aarch64" => {
            Err(Refused::Incompatible(Incompat::MoreCpus { image, running }))
        }
        _ => Ok(()),
    }
}

/// Checks what the image is bound to against what this boot observed of the same things.
pub fn check_binding(image: &Binding, running: &Binding) -> Result<(), Refused> {
    image.check(running).map_err(Refused::Mismatch)
}

/// Checks the stream header (page 0) of an image whose page list holds `listed` pages: a
/// kernel the restoring side takes (arm64: the same build, a CPU of this machine), and on
/// x86 where the firmware's map is all there is, the e820 checksum and RAM the image
/// kernel will check itself.
pub fn check_header(h: &StreamHeader, listed: u64, e: &Expected) -> Result<(), Refused> {
    h.arch
        .check_restorable(&e.version, &e.cpus)
        .map_err(Refused::Incompatible)?;
    if let Memory::E820 {
        checksum,
        also,
        ram_pages,
    } = e.memory
    {
        let ArchRecord::X86_64 { e820_checksum, .. } = h.arch else {
            return Err(Refused::OtherArch { expected: "x86_64" });
        };
        let matches = |c: u32| e820_checksum == u64::from(c);
        if !matches(checksum) && !also.is_some_and(matches) {
            return Err(Refused::Incompatible(Incompat::E820Mismatch {
                image: e820_checksum,
                running: checksum.into(),
            }));
        }
        if h.num_physpages.get() > ram_pages {
            return Err(Refused::Incompatible(Incompat::RamPages {
                image: h.num_physpages.get(),
                running: ram_pages,
            }));
        }
    }
    if h.pages.get() != listed {
        return Err(Refused::PageCount {
            listed,
            by: "stream header",
            said: h.pages.get(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use snapimg::{Page, StreamError, PAGE_SIZE};

    const VERSION: &str = "#1 SMP Debian 6.1.192-2 (2026-11-16)";

    fn arm64(cpus: Vec<u64>) -> Expected {
        Expected {
            release: "6.1.0-56-arm64".into(),
            version: VERSION.into(),
            machine: "aarch64".into(),
            memory: Memory::Observed {
                ram_bytes: 512 << 20,
                map: MemoryMap::default(),
            },
            cpus,
            online_cpus: None,
            boot_path: None,
        }
    }

    /// A description of the image kernel `arm64` expects, captured with `online_cpus`.
    fn description(online_cpus: Option<u32>) -> Description {
        let identity = Identity {
            release: "6.1.0-56-arm64".into(),
            version: VERSION.into(),
            machine: "aarch64".into(),
            ram_bytes: 512 << 20,
            memory: MemoryMap::default(),
        };
        let binding = Binding {
            boot_setup: snapimg::BootSetup::new(Vec::new(), Vec::new()),
            cmdline: Vec::new(),
            devices: Vec::new(),
        };
        Description::new(identity, 1, Some(&binding), 100, None, (None, None))
            .unwrap()
            .with_online_cpus(online_cpus)
    }

    #[test]
    fn an_arm64_image_on_more_cpus_than_it_had_is_refused_and_a_pc_image_is_not() {
        let mut e = arm64(Vec::new());
        e.online_cpus = Some(2);
        let r = check_description(&description(Some(1)), 100, &e).unwrap_err();
        assert_eq!(r.kind(), bootstatus::Refusal::Changed);
        let Refused::Incompatible(Incompat::MoreCpus { image, running }) = &r else {
            panic!("not MoreCpus: {r:?}");
        };
        assert_eq!((*image, *running), (1, 2));
        let why = r.to_string();
        assert!(
            why.contains("captured with 1 CPU(s) online and this arm64 machine has 2"),
            "{why}"
        );
        // The PC: the extra CPUs stay offline until the restored system onlines them.
        assert!(check_online_cpus(Some(2), Some(4), "x86_64").is_ok());
        assert!(check_online_cpus(Some(1), Some(2), "x86_64").is_ok());
        assert!(check_online_cpus(Some(2), Some(1), "x86_64").is_err());
    }

    #[test]
    fn an_image_captured_with_more_cpus_online_than_this_machine_has_is_refused() {
        let mut e = arm64(Vec::new());
        // As many, or either side unknown: admitted.
        for (image, running) in [
            (Some(2), Some(2)),
            (Some(1), Some(1)),
            (Some(2), None),
            (None, Some(1)),
            (None, None),
        ] {
            e.online_cpus = running;
            let r = check_description(&description(image), 100, &e);
            assert!(r.is_ok(), "{image:?} on {running:?}: {r:?}");
        }
        e.online_cpus = Some(1);
        let r = check_description(&description(Some(2)), 100, &e).unwrap_err();
        assert!(
            matches!(
                r,
                Refused::Incompatible(Incompat::FewerCpus {
                    image: 2,
                    running: 1
                })
            ),
            "{r:?}"
        );
        assert_eq!(r.kind(), bootstatus::Refusal::Changed);
        assert_eq!(
            r.to_string(),
            "image does not fit this system: the image was captured with 2 CPUs online and \
             this machine has 1: the restored kernel would wait for CPUs that are not there"
        );
    }

    fn header(page: &Page) -> Result<StreamHeader, Refused> {
        StreamHeader::parse(page).map_err(Refused::Header)
    }

    #[test]
    fn an_arm64_header_of_another_kernel_or_cpu_is_refused_as_a_changed_system() {
        let e = arm64(vec![0, 1]);
        let h = |version: &str, mpidr: u64| {
            let page = StreamHeader::arm64(100, 131072, version, mpidr).encode();
            header(&page).unwrap()
        };
        let pages = h(VERSION, 1).pages.get();
        assert!(check_header(&h(VERSION, 1), pages, &e).is_ok());
        let other = check_header(&h("#2 SMP Debian", 1), pages, &e).unwrap_err();
        assert!(
            matches!(other, Refused::Incompatible(Incompat::HeaderKernel { .. })),
            "{other:?}"
        );
        let cpu = check_header(&h(VERSION, 0x100), pages, &e).unwrap_err();
        assert_eq!(cpu.kind(), bootstatus::Refusal::Changed);
        let text = cpu.to_string();
        assert!(
            text.contains("MPIDR 0x100") && text.contains("0x0, 0x1"),
            "{text}"
        );
        // A stream header that disagrees with the page list: damaged.
        let short = check_header(&h(VERSION, 1), pages - 1, &e).unwrap_err();
        assert_eq!(short.kind(), bootstatus::Refusal::Damaged, "{short}");
    }

    #[test]
    fn a_page_0_that_is_no_header_is_refused_and_x86_passes_a_running_kernel() {
        let garbage = header(&[0xa5; PAGE_SIZE]).unwrap_err();
        assert!(
            matches!(garbage, Refused::Header(StreamError::UnknownArch { .. })),
            "{garbage:?}"
        );
        let x86 = StreamHeader::x86_64(100, 131072, 7);
        assert!(matches!(x86.arch, ArchRecord::X86_64 { .. }));
        let pages = x86.pages.get();
        assert!(check_header(&x86, pages, &arm64(vec![0])).is_ok());
    }

    #[test]
    fn the_firmware_s_map_is_checked_against_the_header_s_e820_and_ram() {
        let x86 = StreamHeader::x86_64(100, 131072, 7);
        let pages = x86.pages.get();
        let mut e = arm64(Vec::new());
        let ArchRecord::X86_64 { e820_checksum, .. } = x86.arch else {
            unreachable!()
        };
        let fw = |checksum: u64, ram_pages| Memory::E820 {
            checksum: checksum as u32,
            also: None,
            ram_pages,
        };
        e.memory = fw(e820_checksum, 1 << 20);
        assert!(check_header(&x86, pages, &e).is_ok());
        // Another loader's table of the same map matches too.
        e.memory = Memory::E820 {
            checksum: e820_checksum as u32 ^ 1,
            also: Some(e820_checksum as u32),
            ram_pages: 1 << 20,
        };
        assert!(check_header(&x86, pages, &e).is_ok());
        e.memory = fw(e820_checksum ^ 1, 1 << 20);
        let r = check_header(&x86, pages, &e).unwrap_err().to_string();
        assert!(
            r.starts_with("image does not fit this system: the memory map differs"),
            "{r}"
        );
        e.memory = fw(e820_checksum, 100);
        let r = check_header(&x86, pages, &e).unwrap_err().to_string();
        assert!(r.contains("RAM size differs"), "{r}");
        let arm = StreamHeader::arm64(100, 131072, VERSION, 0).encode();
        let arm = header(&arm).unwrap();
        e.version = VERSION.into();
        e.memory = fw(e820_checksum, 1 << 20);
        let r = check_header(&arm, arm.pages.get(), &e).unwrap_err();
        assert!(matches!(r, Refused::OtherArch { .. }), "{r:?}");
    }
}
