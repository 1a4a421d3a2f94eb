//! The restorer's fallback when it refuses the image: a cold boot of the stock kernel from
//! the kernel pack (the `kernelpack` crate's format), on the virtio disk that
//! `snapboot.coldkernel=/dev/vdX` names, else the first one that starts with the pack's
//! magic. It reads and checks the pack (header, both BLAKE3s), places the bzImage's
//! protected-mode part, the initramfs, the zero page and the command line in free RAM
//! (`restorer::placement`), resets the disks, and enters the kernel through the 64-bit boot
//! protocol (`restorer::bzimage`). The stock kernel gets the restorer's command line as the
//! restore kernel would give it (`kernelpack::cmdline`): without the pack's word and
//! `rdinit=`, with `snapboot.handedover`, so its own resume does not try the image again.

use crate::hw::virtio::{self, vd_letter, Disks, VirtioDisk, VirtioError};
use core::convert::Infallible;
use core::fmt::Write;
use kernelpack::{cmdline, Header, PackError, Payload};
use restorer::bzimage::{self, fill_zero_page, BootArgs, BootError, ENTRY_64, HEAD, ZERO_PAGE};
use restorer::disk::{Disk, DiskError, SECTOR};
use restorer::e820::{Entry, Table, MAX_ENTRIES};
use restorer::placement::{place, Placement, Sizes};
use restorer::pvh::{self, StartInfo, StartInfoError};
use restorer::units::Mib;

/// The longest command line read from the start info.
const MAX_CMDLINE: usize = 4096;
const PAGE: u64 = 4096;

/// Why the stock kernel could not be booted.
#[derive(Debug, thiserror::Error)]
pub enum ColdBootError {
    /// The start info is not usable.
    #[error("{0}")]
    StartInfo(#[from] StartInfoError),
    /// The command line is not text.
    #[error("the command line is not UTF-8 or has no end within {MAX_CMDLINE} bytes")]
    Cmdline,
    /// The disks could not be set up.
    #[error("{0}")]
    Virtio(#[from] VirtioError),
    /// `snapboot.coldkernel=` names a disk that is not there.
    #[error("snapboot.coldkernel names /dev/vd{letter}, but there are {disks} virtio disks")]
    NoSuchDisk {
        /// The disk's letter.
        letter: char,
        /// Virtio disks found.
        disks: usize,
    },
    /// The pack's kernel has no version string naming the header's release.
    #[error(
        "the kernel in the pack on /dev/vd{letter} has no version string of release {release}"
    )]
    Version {
        /// The disk's letter.
        letter: char,
        /// The release the pack's header names.
        release: kernelpack::Release,
    },
    /// No disk starts with the pack's magic.
    #[error("no kernel pack on any of the {0} virtio disks")]
    NoPack(usize),
    /// The first pages from `free_from` are not RAM.
    #[error("free memory from {0:#x} is not RAM")]
    Scratch(u64),
    /// A read failed.
    #[error("reading the {what} from /dev/vd{letter}: {error}")]
    Disk {
        /// What was read.
        what: &'static str,
        /// The disk's letter.
        letter: char,
        /// Why it failed.
        error: DiskError,
    },
    /// The pack is damaged or not one.
    #[error("kernel pack on /dev/vd{letter}: {error}")]
    Pack {
        /// The disk's letter.
        letter: char,
        /// What is wrong.
        error: PackError,
    },
    /// The kernel's setup header read differently the second time.
    #[error("the kernel's setup header on /dev/vd{0} changed between two reads")]
    Changed(char),
    /// The kernel cannot be booted here.
    #[error("{0}")]
    Boot(#[from] BootError),
}

/// `len` bytes of RAM at physical `addr`.
///
/// # Safety
/// `[addr, addr + len)` is identity-mapped RAM that nothing else uses while the slice
/// lives: free RAM the placement handed out, or the start info's data.
unsafe fn ram<'a>(addr: u64, len: u64) -> &'a mut [u8] {
    // SAFETY: the caller's contract.
    unsafe { core::slice::from_raw_parts_mut(addr as *mut u8, len as usize) }
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

/// What the firmware handed over, copied: the start info, the command line and the memory
/// map (the placement may hand out the RAM they were in).
pub struct Handed {
    info: StartInfo,
    cmdline: [u8; MAX_CMDLINE],
    cmdline_len: usize,
    /// The firmware's memory map, `entries` of it.
    pub map: [Entry; MAX_ENTRIES],
    /// Entries of `map`.
    pub entries: usize,
}

impl Handed {
    /// The command line the firmware passed.
    pub fn cmdline(&self) -> &str {
        pvh::cmdline(&self.cmdline[..=self.cmdline_len]).unwrap_or_default()
    }
}

/// Copies what the firmware handed over at `at` (the PVH start info): first thing, before
/// any image page is placed (the image's pages may lie where the firmware put the command
/// line: they hold the capture boot's).
pub fn read_start_info(at: u64) -> Result<Handed, ColdBootError> {
    let mut bytes = [0u8; pvh::LEN];
    // SAFETY: the firmware put the start info at `at`, in RAM the restorer has not written.
    bytes.copy_from_slice(unsafe { ram(at, pvh::LEN as u64) });
    let info = StartInfo::decode(&bytes)?;
    let mut cmdline = [0u8; MAX_CMDLINE];
    let mut cmdline_len = 0;
    if info.cmdline != 0 {
        loop {
            // The last byte stays the NUL.
            if cmdline_len == MAX_CMDLINE - 1 {
                return Err(ColdBootError::Cmdline);
            }
            let at = info.cmdline + cmdline_len as u64;
            // SAFETY: the firmware's NUL-terminated command line, read up to its end.
            let b = unsafe { core::ptr::read(at as *const u8) };
            if b == 0 {
                break;
            }
            cmdline[cmdline_len] = b;
            cmdline_len += 1;
        }
    }
    if pvh::cmdline(&cmdline[..=cmdline_len]).is_none() {
        return Err(ColdBootError::Cmdline);
    }
    let entries = info.memmap_entries as usize;
    if entries > MAX_ENTRIES {
        return Err(BootError::MemoryMap(entries).into());
    }
    let mut map = [Entry::default(); MAX_ENTRIES];
    for (i, e) in map.iter_mut().take(entries).enumerate() {
        let mut b = [0u8; pvh::MEMMAP_ENTRY];
        let at = info.memmap + (i * pvh::MEMMAP_ENTRY) as u64;
        // SAFETY: the firmware's memory map, `entries` entries long.
        b.copy_from_slice(unsafe { ram(at, pvh::MEMMAP_ENTRY as u64) });
        *e = pvh::memmap_entry(&b);
    }
    Ok(Handed {
        info,
        cmdline,
        cmdline_len,
        map,
        entries,
    })
}

/// The disk holding the pack: the one `snapboot.coldkernel=/dev/vdX` names, else the first
/// whose first sector starts with the pack's magic (read into `scratch`).
fn pack_disk(disks: &mut Disks, cmd: &str, scratch: &mut [u8]) -> Result<usize, ColdBootError> {
    if let Some(i) =
        cmdline::value_of(cmd, cmdline::COLDKERNEL).and_then(restorer::virtio::vd_index)
    {
        return match disks.get_mut(i) {
            Some(_) => Ok(i),
            None => Err(ColdBootError::NoSuchDisk {
                letter: vd_letter(i),
                disks: disks.len(),
            }),
        };
    }
    let sector = &mut scratch[..SECTOR as usize];
    for i in 0..disks.len() {
        let found = disks
            .get_mut(i)
            .is_some_and(|d| d.read(0, sector).is_ok() && sector[..8] == kernelpack::MAGIC);
        if found {
            return Ok(i);
        }
    }
    Err(ColdBootError::NoPack(disks.len()))
}

/// The kernel this PC boots cold: the kernel pack's, by `uname -r` and `uname -v`, which an
/// image must have been captured on.
pub struct StockKernel {
    /// `uname -r`.
    pub release: alloc::string::String,
    /// `uname -v`.
    pub version: alloc::string::String,
}

/// Reads the kernel pack's header and its kernel's version string (checked against the
/// header's release); the payloads are checked only when the cold boot reads them.
pub fn stock_kernel(disks: &mut Disks, cmd: &str) -> Result<StockKernel, ColdBootError> {
    let mut buf = alloc::vec![0u8; kernelpack::VERSION_HEAD];
    let index = pack_disk(disks, cmd, &mut buf)?;
    let letter = vd_letter(index);
    let d = disks.get_mut(index).ok_or(ColdBootError::NoPack(index))?;
    let pack_err = |error| ColdBootError::Pack { letter, error };
    read(
        d,
        letter,
        "kernel pack header",
        0,
        &mut buf[..kernelpack::HEADER_LEN],
    )?;
    let h = Header::decode(&buf[..kernelpack::HEADER_LEN]).map_err(pack_err)?;
    let n = (kernelpack::VERSION_HEAD as u64).min(h.kernel_len.next_multiple_of(SECTOR));
    read(
        d,
        letter,
        "kernel's version",
        h.kernel_offset,
        &mut buf[..n as usize],
    )?;
    let version = kernelpack::bzimage_version(&buf[..n as usize]).ok();
    match version.and_then(kernelpack::uname_of) {
        Some((release, version)) if release == h.release.as_str() => Ok(StockKernel {
            release: release.into(),
            version: version.into(),
        }),
        _ => Err(ColdBootError::Version {
            letter,
            release: h.release,
        }),
    }
}

/// Reads the kernel pack's initramfs whole: what the restorer takes its trust rule and boot
/// setup from (`restorer::stockinit`). Not checked against the pack's BLAKE3 here (some
/// 0.12 s for the board's 8 MiB under TCG, at every restore): damage cannot make an image
/// trusted that should not be. The boot setup every image must match covers `/init`'s
/// bytes and every entry's name, kind, size and mode, the key file's among them; a key file
/// whose text is damaged is no key (every image refused) or another key (no signature
/// verifies). The cold boot checks the BLAKE3 before it runs the initramfs.
pub fn stock_initramfs(disks: &mut Disks, cmd: &str) -> Result<alloc::vec::Vec<u8>, ColdBootError> {
    let mut head = alloc::vec![0u8; kernelpack::HEADER_LEN];
    let index = pack_disk(disks, cmd, &mut head)?;
    let letter = vd_letter(index);
    let d = disks.get_mut(index).ok_or(ColdBootError::NoPack(index))?;
    let pack_err = |error| ColdBootError::Pack { letter, error };
    read(d, letter, "kernel pack header", 0, &mut head)?;
    let h = Header::decode(&head).map_err(pack_err)?;
    let mut initrd = alloc::vec![0u8; h.initrd_len.next_multiple_of(SECTOR) as usize];
    read(d, letter, "initramfs", h.initrd_offset, &mut initrd)?;
    initrd.truncate(h.initrd_len as usize);
    h.check(Payload::Initramfs, [&initrd[..]])
        .map_err(pack_err)?;
    Ok(initrd)
}

/// Reads `buf.len()` bytes (whole sectors) of `what` at `offset` of disk `letter`.
fn read(
    d: &mut VirtioDisk,
    letter: char,
    what: &'static str,
    offset: u64,
    buf: &mut [u8],
) -> Result<(), ColdBootError> {
    d.read(offset, buf).map_err(|error| ColdBootError::Disk {
        what,
        letter,
        error,
    })
}

/// Boots the stock kernel of the kernel pack cold (see the module header). `start_info` is
/// the PVH start info's address, `free_from` the lowest address it may use: below it may
/// be the restorer's own memory; `console` gets the `cold boot:` line before the jump.
/// Returns only if the boot could not be started.
pub fn cold_boot(
    handed: &Handed,
    free_from: u64,
    console: &mut dyn Write,
) -> Result<Infallible, ColdBootError> {
    cold_boot_on(virtio::disks()?, handed, free_from, console)
}

/// [`cold_boot`] on disks a caller already holds (`hw::virtio::disks` hands them out once
/// at a time).
pub fn cold_boot_on(
    mut disks: Disks,
    handed: &Handed,
    free_from: u64,
    console: &mut dyn Write,
) -> Result<Infallible, ColdBootError> {
    let table = Table::from_pvh(handed.map[..handed.entries].iter().copied());
    let free_from = round_up(free_from, PAGE);
    let scratch_pages = 2;
    if !(0..scratch_pages).all(|i| table.is_ram_page(free_from / PAGE + i)) {
        return Err(ColdBootError::Scratch(free_from));
    }
    // SAFETY: free RAM (checked above) that nothing uses before the placement, which may
    // hand it out again once the header and the setup header are copied out of it.
    let scratch = unsafe { ram(free_from, scratch_pages * PAGE) };
    let index = pack_disk(&mut disks, handed.cmdline(), scratch)?;
    let letter = vd_letter(index);
    let Some(d) = disks.get_mut(index) else {
        return Err(ColdBootError::NoPack(index));
    };
    let pack_err = |error| ColdBootError::Pack { letter, error };
    let block = &mut scratch[..kernelpack::HEADER_LEN];
    read(d, letter, "kernel pack header", 0, block)?;
    let h = Header::decode(block).map_err(pack_err)?;
    let head = &mut scratch[PAGE as usize..PAGE as usize + HEAD];
    read(d, letter, "kernel's setup header", h.kernel_offset, head)?;
    let hdr = bzimage::parse(head)?;
    let setup = hdr.setup_bytes();
    if setup >= h.kernel_len {
        return Err(BootError::Setup {
            setup,
            len: h.kernel_len,
        }
        .into());
    }
    let words = || cmdline::cold_cmdline_words(handed.cmdline());
    let cmd_len = words().map(|w| w.len() + 1).sum::<usize>() - 1;
    if cmd_len > hdr.cmdline_size as usize {
        return Err(BootError::Cmdline {
            len: cmd_len,
            max: hdr.cmdline_size,
        }
        .into());
    }
    let body = h.kernel_len - setup;
    let sizes = Sizes {
        cmdline: cmd_len as u64 + 1,
        kernel: round_up(body, SECTOR),
        initrd: round_up(h.initrd_len, SECTOR),
    };
    let p: Placement = place(table.entries(), free_from, &hdr, &sizes)?;

    // SAFETY: the three slices are where the placement put them: in free RAM, apart from
    // each other and at or above `free_from`; `scratch` is not used past this point.
    let (setup_at, kernel_at, initrd_at) = unsafe {
        (
            ram(p.setup, setup),
            ram(p.kernel, sizes.kernel),
            ram(p.initrd, sizes.initrd),
        )
    };
    read(d, letter, "kernel's setup", h.kernel_offset, setup_at)?;
    read(d, letter, "kernel", h.kernel_offset + setup, kernel_at)?;
    read(d, letter, "initramfs", h.initrd_offset, initrd_at)?;
    h.check(
        Payload::Kernel,
        [&setup_at[..], &kernel_at[..body as usize]],
    )
    .map_err(pack_err)?;
    h.check(Payload::Initramfs, [&initrd_at[..h.initrd_len as usize]])
        .map_err(pack_err)?;
    // The placement followed the header of the first read; the checked copy must say the
    // same.
    if bzimage::parse(setup_at)? != hdr {
        return Err(ColdBootError::Changed(letter));
    }

    // SAFETY: as above: the command line's and the zero page's places.
    let (cmd_at, zp) = unsafe {
        (
            ram(p.cmdline, sizes.cmdline),
            ram(p.zero_page, ZERO_PAGE as u64),
        )
    };
    let mut at = 0;
    for (i, w) in words().enumerate() {
        if i > 0 {
            cmd_at[at] = b' ';
            at += 1;
        }
        cmd_at[at..at + w.len()].copy_from_slice(w.as_bytes());
        at += w.len();
    }
    cmd_at[at] = 0;
    let zp: &mut [u8; ZERO_PAGE] = zp
        .try_into()
        .map_err(|_| ColdBootError::Scratch(p.zero_page))?;
    let args = BootArgs {
        cmdline: p.cmdline,
        initrd: p.initrd,
        initrd_len: h.initrd_len,
        rsdp: handed.info.rsdp,
        // The map as a PVH-booted kernel builds it (the ISA hole added, sanitized), not
        // the start info's: the stock kernel then keeps the same firmware table, so an
        // image it captures carries the e820 checksum the restorer computes at the next
        // power-on. (The raw map gave it another checksum: every later restore refused.)
        e820: table.entries(),
    };
    fill_zero_page(zp, setup_at, &hdr, &args)?;
    let _ = writeln!(
        console,
        "snapboot-restorer: cold boot: {} from /dev/vd{letter} (kernel {} MiB, initramfs {} MiB)",
        h.release,
        Mib(h.kernel_len),
        Mib(h.initrd_len)
    );
    disks.reset_all();
    enter(p.kernel + ENTRY_64, p.zero_page)
}

/// Jumps to the kernel's 64-bit entry with `%rsi` = the zero page, never to return.
fn enter(entry: u64, zero_page: u64) -> ! {
    // SAFETY: the kernel and its zero page are in place and checked; the CPU is as the
    // 64-bit boot protocol asks: long mode, identity-mapped paging over the first 4 GiB
    // (kernel with init_size, zero page, command line), the GDT with __BOOT_CS 0x10 and
    // __BOOT_DS 0x18 loaded (the PVH entry's), interrupts off.
    unsafe {
        core::arch::asm!(
            "cli",
            "jmp {entry}",
            entry = in(reg) entry,
            in("rsi") zero_page,
            options(noreturn)
        )
    }
}
