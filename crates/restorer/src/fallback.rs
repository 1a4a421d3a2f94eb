//! The restorer's fallback when it refuses the image: a cold boot of the stock kernel from
//! the kernel pack (the `kernelpack` crate's format), on the virtio disk that
//! `snapboot.coldkernel=/dev/vdX` names, else the first one that starts with the pack's
//! magic. It reads and checks the pack (header, both BLAKE3s), places the bzImage's
//! protected-mode part, the initramfs, the zero page and the command line in free RAM
//! (`restorer::placement`), resets the disks, and enters the kernel through the 64-bit boot
//! protocol (`restorer::bzimage`). The stock kernel gets the restorer's command line as the
//! restore kernel would give it (`kernelpack::cmdline`): without the pack's word and
//! `rdinit=`, with `snapboot.handedover`, so its own resume does not try the image again.

use crate::hw::virtio::{self, Disks, VirtioError};
use core::convert::Infallible;
use core::fmt::Write;
use kernelpack::{cmdline, Header, Payload};
use restorer::bzimage::{self, fill_zero_page, BootArgs, BootError, ENTRY_64, HEAD, ZERO_PAGE};
use restorer::disk::SECTOR;
use restorer::e820::{Entry, Table, MAX_ENTRIES};
use restorer::placement::{place, Placement, Sizes};
use restorer::pvh::{self, StartInfo, StartInfoError};
use restorer::stockpack::{self, PackReadError};
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
    /// The kernel pack could not be found or read.
    #[error("{0}")]
    Read(#[from] PackReadError),
    /// The first pages from `free_from` are not RAM.
    #[error("free memory from {0:#x} is not RAM")]
    Scratch(u64),
    /// The kernel's setup header read differently the second time.
    #[error("the kernel's setup header on {0} changed between two reads")]
    Changed(alloc::string::String),
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
    let count = disks.len();
    let at = stockpack::locate(&mut disks, count, handed.cmdline(), scratch)?;
    let d = &mut stockpack::part(&mut disks, &at)?;
    // The pack's name, on the stack: the placement below hands out the heap it is on.
    let mut name_buf = [0u8; 32];
    let n = at.name.len().min(name_buf.len());
    name_buf[..n].copy_from_slice(&at.name.as_bytes()[..n]);
    let name = core::str::from_utf8(&name_buf[..n]).unwrap_or("the kernel pack");
    let pack_err = |error| {
        ColdBootError::from(PackReadError::Pack {
            name: name.into(),
            error,
        })
    };
    let block = &mut scratch[..kernelpack::HEADER_LEN];
    stockpack::read(d, name, "kernel pack header", 0, block)?;
    let h = Header::decode(block).map_err(pack_err)?;
    let head = &mut scratch[PAGE as usize..PAGE as usize + HEAD];
    stockpack::read(d, name, "kernel's setup header", h.kernel_offset, head)?;
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
    stockpack::read(d, name, "kernel's setup", h.kernel_offset, setup_at)?;
    stockpack::read(d, name, "kernel", h.kernel_offset + setup, kernel_at)?;
    stockpack::read(d, name, "initramfs", h.initrd_offset, initrd_at)?;
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
        return Err(ColdBootError::Changed(name.into()));
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
        "snapboot-restorer: cold boot: {} from {name} (kernel {} MiB, initramfs {} MiB)",
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
