//! The PC's other CPUs (its application processors), started through the local APIC: the
//! MADT (`restorer::pvh::madt`, from the RSDP the firmware gives) lists their APIC ids,
//! INIT then two start-up IPIs (the MP specification's sequence) start each in real mode
//! at a page below 640 KiB holding asm/secondary_x86_64.s and its boot block (the boot
//! CPU's CR3, CR4, EFER, CR0, GDT and IDT), which takes it to long mode and into
//! [`entry`]; it runs its work, marks itself done and halts. INIT again parks it in
//! wait-for-SIPI, the state the image kernel starts its CPUs from (it sends them INIT and
//! start-up IPIs itself after the restore). The start-up page stays the restorer's (a busy
//! range: the image's page there is written by the last copy) until every CPU is parked.
//!
//! ```text
//!  boot CPU: INIT all ─▶ 10 ms ─▶ per CPU: block ─▶ SIPI, SIPI ─▶ ack (100 ms at most)
//!  other CPU:     wait-for-SIPI ─▶ real ─▶ protected ─▶ long mode ─▶ entry: ack ─▶ work
//!                 ─▶ done ─▶ cli; hlt ◀─ INIT from the boot CPU (`is_off`): wait-for-SIPI
//! ```
//!
//! The local APIC is reached as xAPIC (MMIO at the APIC base MSR's address) or, when the
//! firmware left it in x2APIC mode (OVMF may), through its MSRs.

use super::others::Cpus;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::arch::{asm, global_asm};
use core::cell::Cell;
use core::mem::offset_of;
use core::sync::atomic::{AtomicU32, Ordering};

global_asm!(
    include_str!("../asm/secondary_x86_64.s"),
    options(att_syntax)
);

extern "C" {
    // The start-up code (asm/secondary_x86_64.s): its bounds and the places in it the
    // boot block's addresses point at.
    static secondary_x86: u8;
    static secondary_x86_block: u8;
    static secondary_x86_gdt: u8;
    static secondary_x86_pm: u8;
    static secondary_x86_lm: u8;
    static secondary_x86_end: u8;
}

/// Bytes of a page.
const PAGE: u64 = 4096;
/// Where the boot block lies in the start-up page (asm/secondary_x86_64.s).
const BLOCK_AT: u64 = 64;
/// Bytes the start-up code keeps for the block.
const BLOCK_ROOM: usize = 192;
/// Bytes of the start-up code's GDT (four descriptors), less one: its limit.
const GDT_LIMIT: u16 = 4 * 8 - 1;
/// The start-up GDT's 32-bit and 64-bit code selectors.
const CODE32: u32 = 0x08;
const CODE64: u32 = 0x10;

/// `IA32_APIC_BASE`: the local APIC's address, enable (bit 11) and x2APIC mode (bit 10).
const APIC_BASE_MSR: u32 = 0x1b;
const APIC_ENABLED: u64 = 1 << 11;
const X2APIC_MODE: u64 = 1 << 10;
/// The address bits of `IA32_APIC_BASE`.
const APIC_BASE_ADDRESS: u64 = 0x000f_ffff_ffff_f000;
/// `IA32_EFER`, and its long-mode-active bit (set by the CPU, not written).
const EFER_MSR: u32 = 0xc000_0080;
const EFER_LMA: u64 = 1 << 10;
/// CR4's PCID enable: only allowed in long mode, so the start-up code leaves it off.
const CR4_PCIDE: u64 = 1 << 17;
/// The x2APIC's ID register and interrupt command register (MSRs).
const X2APIC_ID: u32 = 0x802;
const X2APIC_ICR: u32 = 0x830;
/// The xAPIC's ID register and interrupt command register, low and high (MMIO offsets).
const XAPIC_ID: u64 = 0x20;
const XAPIC_ICR_LOW: u64 = 0x300;
const XAPIC_ICR_HIGH: u64 = 0x310;
/// The xAPIC's ICR delivery status: the IPI is not sent yet.
const SEND_PENDING: u32 = 1 << 12;

/// The interrupt command register's low word (Intel SDM vol. 3, 11.6.1): delivery mode
/// (bits 8-10), level (bit 14), trigger mode (bit 15), vector (bits 0-7).
pub(crate) mod icr {
    /// Delivery mode INIT.
    const INIT: u32 = 0b101 << 8;
    /// Delivery mode start-up.
    const STARTUP: u32 = 0b110 << 8;
    /// Level assert.
    const ASSERT: u32 = 1 << 14;
    /// Level triggered.
    const LEVEL: u32 = 1 << 15;

    /// INIT, asserted (level triggered, as Linux and the MP specification send it).
    pub(crate) const INIT_ASSERT: u32 = INIT | ASSERT | LEVEL;
    /// INIT de-asserted (what CPUs before the Pentium 4 needed to leave INIT).
    pub(crate) const INIT_DEASSERT: u32 = INIT | LEVEL;

    /// A start-up IPI that starts the CPU at `page` (page aligned, below 1 MiB): its
    /// vector is the page's number.
    pub(crate) const fn startup(page: u64) -> u32 {
        STARTUP | ASSERT | ((page >> 12) as u32 & 0xff)
    }

    /// The x2APIC's ICR (one 64-bit MSR): the destination's 32-bit APIC id above `low`.
    pub(crate) const fn x2apic(dest: u32, low: u32) -> u64 {
        ((dest as u64) << 32) | low as u64
    }

    /// The xAPIC's ICR high word: the destination's 8-bit APIC id in bits 24-31; `None`
    /// for an id xAPIC cannot name.
    pub(crate) const fn xapic_high(dest: u32) -> Option<u32> {
        if dest > 0xfe {
            None
        } else {
            Some(dest << 24)
        }
    }

    // The encodings Linux's `wakeup_secondary_cpu_via_init` and the SDM's examples use.
    const _: () = assert!(INIT_ASSERT == 0xc500 && INIT_DEASSERT == 0x8500);
    const _: () = assert!(startup(0x8000) == 0x4608 && startup(0x9_e000) == 0x469e);
    const _: () = assert!(x2apic(3, startup(0x8000)) == 0x0000_0003_0000_4608);
    const _: () = assert!(matches!(xapic_high(1), Some(0x0100_0000)));
    const _: () = assert!(xapic_high(0xff).is_none());
}

/// What the start-up code reads (asm/secondary_x86_64.s, at [`BLOCK_AT`] in the page).
#[repr(C)]
struct Block {
    /// Real mode's GDT descriptor: limit, 32-bit base (low, high), unused.
    gdtd: [u16; 4],
    /// The far jumps to 32-bit and to 64-bit code: 32-bit offset, selector.
    pm_jump: [u32; 2],
    lm_jump: [u32; 2],
    cr0: u64,
    cr3: u64,
    cr4: u64,
    efer: u64,
    /// The boot CPU's GDTR and IDTR (limit, 64-bit base).
    gdtr: [u16; 8],
    idtr: [u16; 8],
    /// The boot CPU's code and data selectors.
    cs: u64,
    ds: u64,
    stack_top: u64,
    entry: extern "C" fn(*const Block) -> !,
    work: fn(usize),
    arg: usize,
    /// The CPU's [`State`] slot.
    state: *const AtomicU32,
    /// Set by the CPU once it has read the block: the boot CPU may write the next.
    ack: AtomicU32,
}

// The offsets asm/secondary_x86_64.s uses (bytes of the block; of the page, 64 more).
const _: () = {
    assert!(offset_of!(Block, gdtd) == 0);
    assert!(offset_of!(Block, pm_jump) == 8);
    assert!(offset_of!(Block, lm_jump) == 16);
    assert!(offset_of!(Block, cr0) == 24);
    assert!(offset_of!(Block, cr3) == 32);
    assert!(offset_of!(Block, cr4) == 40);
    assert!(offset_of!(Block, efer) == 48);
    assert!(offset_of!(Block, gdtr) == 56);
    assert!(offset_of!(Block, idtr) == 72);
    assert!(offset_of!(Block, cs) == 88);
    assert!(offset_of!(Block, ds) == 96);
    assert!(offset_of!(Block, stack_top) == 104);
    assert!(offset_of!(Block, entry) == 112);
    assert!(core::mem::size_of::<Block>() <= BLOCK_ROOM);
    assert!(core::mem::align_of::<Block>() <= BLOCK_AT as usize);
};

/// What a CPU is doing, in its slot: the boot CPU sets [`State::Running`] before it starts
/// it and [`State::Parked`] once it sent it INIT; the CPU sets [`State::Done`].
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
enum State {
    Parked = 0,
    Running = 1,
    Done = 2,
}

/// INIT to every other CPU, before the first start-up IPI.
#[derive(Clone, Copy)]
enum Init {
    /// Not sent.
    No,
    /// Asserted at this count of the counter.
    Asserted(u64),
    /// Asserted, 10 ms waited, de-asserted.
    Done,
}

/// How the local APIC is reached.
#[derive(Clone, Copy)]
enum Lapic {
    /// Through its MSRs.
    X2,
    /// MMIO at this address.
    X(u64),
}

/// The PC's other CPUs and how to start them.
pub(crate) struct Apic {
    /// Their APIC ids.
    others: Vec<u64>,
    /// The start-up page.
    page: u64,
    /// Each one's [`State`].
    state: Vec<AtomicU32>,
    /// This CPU's APIC id (the MADT's and CPUID's).
    me: u32,
    /// How far INIT to every other CPU got (once, before the first start).
    init: Cell<Init>,
    /// The counter's rate, once learnt (0: not yet).
    hz: Cell<u64>,
}

/// Counter ticks per second assumed when no rate is known: high, so that waits last at
/// least as long as asked.
const UNKNOWN_HZ: u64 = 5_000_000_000;
/// How long after INIT before the start-up IPIs (the MP specification: 10 ms).
const INIT_WAIT_US: u64 = 10_000;
/// How long after each start-up IPI (200 µs).
const SIPI_WAIT_US: u64 = 200;
/// How long a started CPU has to reach its entry.
const START_WAIT_US: u64 = 100_000;
/// How long the xAPIC may take to send an IPI.
const SEND_WAIT_US: u64 = 10_000;

/// `len` bytes of physical memory at `at` (identity mapped: the first 4 GiB are, under
/// either program); `None` beyond.
fn phys<'a>(at: u64, len: usize) -> Option<&'a [u8]> {
    let end = at.checked_add(len as u64)?;
    if at == 0 || end > 1 << 32 {
        return None;
    }
    // SAFETY: below 4 GiB, identity mapped; the firmware's tables there (the ACPI tables,
    // the BIOS area, the start info), which nothing writes while the restorer reads them.
    Some(unsafe { core::slice::from_raw_parts(at as *const u8, len) })
}

/// The PVH start info's RSDP (`rsdp_paddr`), read from the start info at `at`; 0 when it
/// has none or cannot be read.
#[cfg(not(feature = "efi"))]
pub(crate) fn pvh_rsdp(at: u64) -> u64 {
    let Some(b) = phys(at, restorer::pvh::LEN) else {
        return 0;
    };
    let mut bytes = [0u8; restorer::pvh::LEN];
    bytes.copy_from_slice(b);
    restorer::pvh::StartInfo::decode(&bytes).map_or(0, |i| i.rsdp)
}

/// The ACPI RSDP the firmware installed in its configuration table (ACPI 2.0's, else
/// 1.0's); 0 without one.
#[cfg(feature = "efi")]
pub(crate) fn efi_rsdp(st: *const r_efi::efi::SystemTable) -> u64 {
    use r_efi::efi;
    // SAFETY: the system table the firmware passed to the entry, while boot services run:
    // its configuration table holds `number_of_table_entries` entries.
    let tables = unsafe {
        let st = &*st;
        core::slice::from_raw_parts(st.configuration_table, st.number_of_table_entries)
    };
    let find = |guid: efi::Guid| tables.iter().find(|t| t.vendor_guid == guid);
    find(efi::ACPI_20_TABLE_GUID)
        .or_else(|| find(efi::ACPI_10_TABLE_GUID))
        .map_or(0, |t| t.vendor_table as u64)
}

/// Reads MSR `msr`.
fn rdmsr(msr: u32) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: reading an architectural MSR every x86_64 CPU has (APIC base, EFER, and the
    // x2APIC's ID only in x2APIC mode); no memory is touched.
    unsafe { asm!("rdmsr", in("ecx") msr, out("eax") lo, out("edx") hi, options(nomem, nostack)) };
    (u64::from(hi) << 32) | u64::from(lo)
}

/// The boot CPU's control registers: CR0, CR3, CR4.
fn control() -> (u64, u64, u64) {
    let (cr0, cr3, cr4): (u64, u64, u64);
    // SAFETY: reading control registers at CPL 0 has no side effect.
    unsafe {
        asm!(
            "mov {}, cr0", "mov {}, cr3", "mov {}, cr4",
            out(reg) cr0, out(reg) cr3, out(reg) cr4,
            options(nomem, nostack)
        )
    };
    (cr0, cr3, cr4)
}

/// The boot CPU's GDTR, IDTR and code and data selectors.
fn tables() -> ([u16; 8], [u16; 8], u64, u64) {
    let (mut gdtr, mut idtr) = ([0u16; 8], [0u16; 8]);
    let (cs, ds): (u64, u64);
    // SAFETY: `sgdt` and `sidt` store 10 bytes each into the 16-byte arrays; reading the
    // selectors has no side effect.
    unsafe {
        asm!(
            "sgdt [{g}]", "sidt [{i}]", "mov {cs:e}, cs", "mov {ds:e}, ds",
            g = in(reg) gdtr.as_mut_ptr(),
            i = in(reg) idtr.as_mut_ptr(),
            cs = out(reg) cs,
            ds = out(reg) ds,
            options(nostack)
        )
    };
    (gdtr, idtr, cs & 0xffff, ds & 0xffff)
}

/// This CPU's APIC id as CPUID says it: leaf 0xB's x2APIC id when the CPU has that leaf,
/// else leaf 1's initial (8-bit) APIC id.
fn cpuid_apic_id() -> u32 {
    use core::arch::x86_64::{__cpuid, __cpuid_count};
    // CPUID has no side effect, and every x86_64 CPU has it (the intrinsics are safe).
    if __cpuid(0).eax >= 0xb {
        let topology = __cpuid_count(0xb, 0);
        if topology.ebx & 0xffff != 0 {
            return topology.edx;
        }
    }
    __cpuid(1).ebx >> 24
}

/// Where another CPU runs Rust: it takes its work from the block, says it has (the boot
/// CPU may then write the next CPU's block), runs it, marks itself done and halts until
/// the boot CPU's INIT.
extern "C" fn entry(block: *const Block) -> ! {
    // SAFETY: the boot CPU wrote the block whole before the start-up IPI and does not
    // write it again before `ack`; nothing of it is read after.
    let (work, arg, state) = unsafe { ((*block).work, (*block).arg, (*block).state) };
    // SAFETY: as above; `ack` is atomic, and the boot CPU waits for it.
    unsafe { (*block).ack.store(1, Ordering::Release) };
    work(arg);
    // SAFETY: `state` is this CPU's slot of `Apic::state`, which the boot CPU keeps until
    // it has seen `Done` (`is_off`); Release: what the work wrote is seen first.
    unsafe { (*state).store(State::Done as u32, Ordering::Release) };
    loop {
        // SAFETY: halting with interrupts off, until the boot CPU's INIT; no memory.
        unsafe { asm!("cli", "hlt", options(nomem, nostack)) };
    }
}

impl Apic {
    /// The PC's other CPUs, from the MADT of the tables the RSDP at `rsdp` leads to (0:
    /// the firmware gave none, and the BIOS area is searched), started at `page` (below 640
    /// KiB; `None`: no such page is free). Why not when the MADT cannot be read or this
    /// CPU is not in it, or when there are others but no page; no other CPU: none, and
    /// nothing is asked of the local APIC.
    pub(crate) fn of(rsdp: u64, page: Option<u64>) -> Result<Apic, String> {
        let rsdp = match rsdp {
            0 => phys(0xe_0000, 0x2_0000)
                .and_then(|area| restorer::pvh::find_rsdp(area, 0xe_0000))
                .ok_or_else(|| restorer::pvh::AcpiError::NoRsdp.to_string())?,
            at => at,
        };
        let madt = restorer::pvh::madt(rsdp, &phys).map_err(|e| e.to_string())?;
        let me = cpuid_apic_id();
        if !madt.cpus.contains(&me) {
            return Err(alloc::format!(
                "this CPU's APIC id {me:#x} is not among the MADT's enabled CPUs {:x?}",
                madt.cpus
            ));
        }
        let others: Vec<u64> = madt
            .cpus
            .iter()
            .filter(|&&c| c != me)
            .map(|&c| u64::from(c))
            .collect();
        let page = match page {
            _ if others.is_empty() => 0,
            Some(p) if p % PAGE == 0 && p + PAGE <= 0xa_0000 && p >= PAGE => p,
            Some(p) => {
                return Err(alloc::format!(
                    "the start-up page {p:#x} is not a page below 640 KiB"
                ))
            }
            None => return Err("no RAM page below 640 KiB is free for the start-up code".into()),
        };
        Ok(Apic {
            state: others.iter().map(|_| AtomicU32::new(0)).collect(),
            others,
            page,
            me,
            init: Cell::new(Init::No),
            hz: Cell::new(0),
        })
    }

    /// The counter's ticks per second (learnt once; [`UNKNOWN_HZ`] when it cannot be).
    fn hz(&self) -> u64 {
        if self.hz.get() == 0 {
            let hz = super::x86_64::cycle_rate().map_or(UNKNOWN_HZ, |r| r.hz.max(1));
            self.hz.set(hz);
        }
        self.hz.get()
    }

    /// Waits until `done` says so, `us` microseconds at most; whether it did.
    fn wait(&self, us: u64, done: impl Fn() -> bool) -> bool {
        let ticks = us.saturating_mul(self.hz()) / 1_000_000;
        let since = super::x86_64::cycles();
        loop {
            if done() {
                return true;
            }
            if super::x86_64::cycles().wrapping_sub(since) > ticks {
                return done();
            }
            core::hint::spin_loop();
        }
    }

    /// The local APIC as the firmware left it, checked to be this CPU's: why not when it
    /// is off or says another id.
    fn lapic(&self) -> Result<Lapic, String> {
        let base = rdmsr(APIC_BASE_MSR);
        if base & APIC_ENABLED == 0 {
            return Err(alloc::format!(
                "the local APIC is off (APIC base MSR {base:#x})"
            ));
        }
        let (lapic, id) = if base & X2APIC_MODE != 0 {
            (Lapic::X2, rdmsr(X2APIC_ID) as u32)
        } else {
            let at = base & APIC_BASE_ADDRESS;
            if at >= 1 << 32 {
                return Err(alloc::format!(
                    "the local APIC lies at {at:#x}, above the identity map's 4 GiB"
                ));
            }
            // SAFETY: the local APIC's ID register, MMIO identity mapped below 4 GiB;
            // reading it has no side effect.
            let id = unsafe { core::ptr::read_volatile((at + XAPIC_ID) as *const u32) } >> 24;
            (Lapic::X(at), id)
        };
        if id != self.me {
            return Err(alloc::format!(
                "the local APIC's id {id:#x} is not this CPU's as CPUID says it, {:#x}",
                self.me
            ));
        }
        Ok(lapic)
    }

    /// Sends the IPI whose ICR low word is `low` to APIC id `dest`.
    fn send(&self, lapic: Lapic, dest: u64, low: u32) -> Result<(), String> {
        let dest = u32::try_from(dest).map_err(|_| alloc::format!("APIC id {dest:#x}"))?;
        // What was written for the other CPU (its block, its state) is visible before the
        // IPI can start it (a WRMSR to the x2APIC is not ordered after stores by itself).
        // SAFETY: a fence; no memory is touched.
        unsafe { asm!("mfence", options(nostack)) };
        match lapic {
            Lapic::X2 => {
                let v = icr::x2apic(dest, low);
                // SAFETY: writing the x2APIC's ICR sends one IPI to `dest`, another CPU
                // (never this one: `others` leaves it out); no memory is touched.
                unsafe {
                    asm!(
                        "wrmsr", in("ecx") X2APIC_ICR, in("eax") v as u32,
                        in("edx") (v >> 32) as u32, options(nomem, nostack)
                    )
                };
                Ok(())
            }
            Lapic::X(base) => {
                let high = icr::xapic_high(dest).ok_or_else(|| {
                    alloc::format!("APIC id {dest:#x} cannot be named in xAPIC mode")
                })?;
                let (lo, hi) = (
                    (base + XAPIC_ICR_LOW) as *mut u32,
                    (base + XAPIC_ICR_HIGH) as *mut u32,
                );
                // SAFETY: the xAPIC's ICR, MMIO identity mapped below 4 GiB (`lapic`).
                let idle = || unsafe { core::ptr::read_volatile(lo) } & SEND_PENDING == 0;
                if !self.wait(SEND_WAIT_US, idle) {
                    return Err("the local APIC is still sending an IPI after 10 ms".into());
                }
                // SAFETY: as above; the high word first, the low word sends one IPI to
                // `dest`, another CPU.
                unsafe {
                    core::ptr::write_volatile(hi, high);
                    core::ptr::write_volatile(lo, low);
                }
                if self.wait(SEND_WAIT_US, idle) {
                    Ok(())
                } else {
                    Err(alloc::format!(
                        "the local APIC did not send IPI {low:#x} to APIC id {dest:#x} in 10 ms"
                    ))
                }
            }
        }
    }

    /// INIT asserted to every other CPU; the counter then.
    fn assert_init(&self, lapic: Lapic) -> Result<u64, String> {
        for &o in &self.others {
            self.send(lapic, o, icr::INIT_ASSERT)?;
        }
        let since = super::x86_64::cycles();
        self.init.set(Init::Asserted(since));
        Ok(since)
    }

    /// INIT to `dest`: it stops whatever it does and waits for a start-up IPI.
    fn init(&self, lapic: Lapic, dest: u64) -> Result<(), String> {
        self.send(lapic, dest, icr::INIT_ASSERT)?;
        self.send(lapic, dest, icr::INIT_DEASSERT)
    }

    /// The start-up code copied to the start-up page and the block for one CPU written
    /// after it; why not when the boot CPU's page tables lie above 4 GiB or the code does
    /// not have its layout.
    fn write_block(
        &self,
        stack_top: u64,
        work: fn(usize),
        arg: usize,
        state: &AtomicU32,
    ) -> Result<*const Block, String> {
        let (cr0, cr3, cr4) = control();
        if cr3 >= 1 << 32 {
            return Err(alloc::format!(
                "this CPU's page tables lie at {cr3:#x}, above 4 GiB, where the 32-bit start-up code cannot load them"
            ));
        }
        let at = |s: &u8| s as *const u8 as u64;
        // SAFETY: the start-up code's symbols (asm/secondary_x86_64.s); only their
        // addresses are used.
        let (start, block, gdt, pm, lm, end) = unsafe {
            (
                at(&secondary_x86),
                at(&secondary_x86_block),
                at(&secondary_x86_gdt),
                at(&secondary_x86_pm),
                at(&secondary_x86_lm),
                at(&secondary_x86_end),
            )
        };
        let len = end - start;
        if block - start != BLOCK_AT || len > PAGE || gdt < block + BLOCK_ROOM as u64 {
            return Err(alloc::format!(
                "the start-up code's layout: block at byte {}, GDT at {}, {len} bytes",
                block - start,
                gdt - start
            ));
        }
        let page = self.page;
        let (gdtr, idtr, cs, ds) = tables();
        let gdt_at = page + (gdt - start);
        // SAFETY: the start-up page is RAM below 1 MiB that only this code uses while any
        // other CPU may start (a busy range of `place`; no other CPU is in it now: the one
        // before acknowledged its block, or was sent INIT); the code is `len` bytes.
        unsafe {
            core::ptr::copy_nonoverlapping(start as *const u8, page as *mut u8, len as usize)
        };
        let b = (page + BLOCK_AT) as *mut Block;
        // SAFETY: the block's room in the start-up page (aligned: `BLOCK_AT`), written
        // whole before the start-up IPI.
        unsafe {
            b.write(Block {
                gdtd: [GDT_LIMIT, gdt_at as u16, (gdt_at >> 16) as u16, 0],
                pm_jump: [(page + (pm - start)) as u32, CODE32],
                lm_jump: [(page + (lm - start)) as u32, CODE64],
                cr0,
                cr3,
                cr4: cr4 & !CR4_PCIDE,
                efer: rdmsr(EFER_MSR) & !EFER_LMA,
                gdtr,
                idtr,
                cs,
                ds,
                stack_top,
                entry,
                work,
                arg,
                state,
                ack: AtomicU32::new(0),
            })
        };
        Ok(b)
    }
}

/// The PC's other CPUs as [`Apic::of`] finds them, boxed for `crate::smp`; the boot CPU
/// alone ([`super::OneCpu`]) when there is none or they cannot be started (the console
/// then says why).
pub(crate) fn helpers(rsdp: u64, page: Option<u64>) -> alloc::boxed::Box<dyn Cpus> {
    match Apic::of(rsdp, page) {
        Ok(apic) if !apic.others().is_empty() => alloc::boxed::Box::new(apic),
        Ok(_) => alloc::boxed::Box::new(super::OneCpu),
        Err(why) => {
            say!("snapboot-restorer: decoding on this CPU alone: {why}");
            alloc::boxed::Box::new(super::OneCpu)
        }
    }
}

impl Cpus for Apic {
    fn others(&self) -> &[u64] {
        &self.others
    }

    fn start(&self, id: u64, stack_top: u64, work: fn(usize), arg: usize) -> Result<(), String> {
        let i = self
            .others
            .iter()
            .position(|&o| o == id)
            .ok_or_else(|| alloc::format!("APIC id {id:#x} is not in the MADT"))?;
        let lapic = self.lapic()?;
        let state = &self.state[i];
        let block = self.write_block(stack_top, work, arg, state)?;
        // Every other CPU INIT once (whatever the firmware left it doing), then the MP
        // specification's 10 ms, counted from the INIT (`prepare` may have sent it).
        let since = match self.init.get() {
            Init::No => self.assert_init(lapic)?,
            Init::Asserted(since) => since,
            Init::Done => 0,
        };
        if !matches!(self.init.get(), Init::Done) {
            let ticks = INIT_WAIT_US * self.hz() / 1_000_000;
            self.wait(INIT_WAIT_US, || {
                super::x86_64::cycles().wrapping_sub(since) > ticks
            });
            for &o in &self.others {
                self.send(lapic, o, icr::INIT_DEASSERT)?;
            }
            self.init.set(Init::Done);
        }
        state.store(State::Running as u32, Ordering::Release);
        // SAFETY: `block` was just written and stays until its `ack`.
        let acked = || unsafe { (*block).ack.load(Ordering::Acquire) } != 0;
        // Two start-up IPIs, as the MP specification says (one in wait-for-SIPI ignores
        // the second once it runs).
        let vector = icr::startup(self.page);
        for _ in 0..2 {
            self.send(lapic, id, vector)?;
            self.wait(SIPI_WAIT_US, || false);
        }
        if self.wait(START_WAIT_US, acked) {
            return Ok(());
        }
        // Not started: INIT again, so that it cannot start later on another CPU's block.
        let parked = self.init(lapic, id);
        state.store(State::Parked as u32, Ordering::Release);
        Err(alloc::format!(
            "APIC id {id:#x} did not reach its entry in {} ms after INIT and two start-up IPIs (vector {:#x}){}",
            START_WAIT_US / 1000,
            vector & 0xff,
            parked.err().map_or_else(String::new, |e| alloc::format!("; INIT again: {e}"))
        ))
    }

    fn is_off(&self, id: u64) -> Result<bool, String> {
        let Some(i) = self.others.iter().position(|&o| o == id) else {
            return Ok(true);
        };
        match self.state[i].load(Ordering::Acquire) {
            s if s == State::Running as u32 => Ok(false),
            s if s == State::Done as u32 => {
                // Done and halted: INIT parks it in wait-for-SIPI.
                self.init(self.lapic()?, id)
                    .map_err(|e| alloc::format!("parking APIC id {id:#x}: {e}"))?;
                self.state[i].store(State::Parked as u32, Ordering::Release);
                Ok(true)
            }
            _ => Ok(true),
        }
    }

    fn prepare(&self) {
        // A failure here is said by `start`, which tries again.
        if let (Init::No, Ok(lapic)) = (self.init.get(), self.lapic()) {
            let _ = self.assert_init(lapic);
        }
    }

    fn busy(&self) -> Option<(u64, u64)> {
        (!self.others.is_empty()).then_some((self.page, self.page + PAGE))
    }

    fn force_off(&self, id: u64) {
        if let Some(i) = self.others.iter().position(|&o| o == id) {
            if let Ok(lapic) = self.lapic() {
                if self.init(lapic, id).is_ok() {
                    self.state[i].store(State::Parked as u32, Ordering::Release);
                }
            }
        }
    }
}
