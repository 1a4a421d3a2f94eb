//! The arm64 board's other CPUs, through PSCI (the CPU power interface QEMU's `virt` board
//! and real boards' secure firmware implement; `/psci`'s `method` says whether it is called
//! with `hvc` or `smc`): `CPU_ON` starts one at the stub in asm/secondary_arm64.s with
//! the boot CPU's translation regime copied into a boot block, `CPU_OFF` (called by the
//! CPU itself once its work is done) stops it, and `AFFINITY_INFO` tells the boot CPU it
//! is off: the image kernel expects its secondary CPUs off, and starts them itself.

use super::aarch64::{el, mpidr, written, MPIDR_AFFINITY};
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::arch::{asm, global_asm};
use restorer::fdt::PsciMethod;

global_asm!(include_str!("../asm/secondary_arm64.s"));

extern "C" {
    // The other CPUs' entry (asm/secondary_arm64.s) and its end.
    static secondary_a64: u8;
    static secondary_a64_end: u8;
}

/// `PSCI_VERSION`.
const VERSION: u32 = 0x8400_0000;
/// `CPU_OFF`.
const CPU_OFF: u32 = 0x8400_0002;
/// `CPU_ON`, SMC64.
const CPU_ON: u32 = 0xc400_0003;
/// `AFFINITY_INFO`, SMC64.
const AFFINITY_INFO: u32 = 0xc400_0004;
/// `AFFINITY_INFO`'s answer for a CPU that is off.
const OFF: i64 = 1;

/// What an arm64 CPU started by `CPU_ON` needs before it runs Rust (the layout
/// asm/secondary_arm64.s reads).
#[repr(C, align(64))]
struct Block {
    mair: u64,
    tcr: u64,
    ttbr0: u64,
    sctlr: u64,
    /// CPACR_EL1 at EL1, CPTR_EL2 at EL2: the FP/SIMD access Rust code needs.
    fp: u64,
    vbar: u64,
    stack_top: u64,
    entry: extern "C" fn(&Block) -> !,
    work: fn(usize),
    arg: usize,
    method: PsciMethod,
}

const _: () = assert!(core::mem::offset_of!(Block, stack_top) == 48);
const _: () = assert!(core::mem::offset_of!(Block, entry) == 56);

/// The board's other CPUs and how to reach PSCI.
pub(crate) struct Psci {
    method: PsciMethod,
    others: Vec<u64>,
}

/// A PSCI error code as PSCI names it.
fn error_name(e: i64) -> &'static str {
    match e {
        -1 => "NOT_SUPPORTED",
        -2 => "INVALID_PARAMETERS",
        -3 => "DENIED",
        -4 => "ALREADY_ON",
        -5 => "ON_PENDING",
        -6 => "INTERNAL_FAILURE",
        -7 => "NOT_PRESENT",
        -8 => "DISABLED",
        -9 => "INVALID_ADDRESS",
        _ => "an unknown error",
    }
}

/// Calls PSCI function `f` with `a`, `b`, `c` (x1 to x3) through `method`; its x0.
fn call(method: PsciMethod, f: u32, a: u64, b: u64, c: u64) -> i64 {
    let r: i64;
    // SAFETY: an SMC Calling Convention call into the firmware (or QEMU's PSCI), which
    // may clobber x0 to x17 and touches no memory of this program.
    unsafe {
        match method {
            PsciMethod::Hvc => asm!(
                "hvc #0",
                inlateout("x0") u64::from(f) => r,
                inlateout("x1") a => _,
                inlateout("x2") b => _,
                inlateout("x3") c => _,
                clobber_abi("C"),
                options(nostack)
            ),
            PsciMethod::Smc => asm!(
                "smc #0",
                inlateout("x0") u64::from(f) => r,
                inlateout("x1") a => _,
                inlateout("x2") b => _,
                inlateout("x3") c => _,
                clobber_abi("C"),
                options(nostack)
            ),
        }
    }
    r
}

impl Psci {
    /// The CPUs of `cpus` (the device tree's MPIDRs) other than this one, started through
    /// `method`; why not when there are others but PSCI cannot start them (no `/psci`
    /// node, a version before 0.2). No other CPU: none, and PSCI is not asked.
    pub(crate) fn of(method: Option<PsciMethod>, cpus: &[u64]) -> Result<Psci, String> {
        let here = mpidr();
        let others: Vec<u64> = cpus
            .iter()
            .map(|c| c & MPIDR_AFFINITY)
            .filter(|&c| c != here)
            .collect();
        let Some(method) = method else {
            return if others.is_empty() {
                Ok(Psci {
                    method: PsciMethod::Smc,
                    others,
                })
            } else {
                Err("the device tree has no /psci node with method hvc or smc".into())
            };
        };
        if others.is_empty() {
            return Ok(Psci { method, others });
        }
        let v = call(method, VERSION, 0, 0, 0);
        let (major, minor) = ((v >> 16) & 0x7fff, v & 0xffff);
        if v < 0 || (major, minor) < (0, 2) {
            return Err(alloc::format!(
                "PSCI version {major}.{minor} ({v:#x}): CPU_ON by these numbers needs 0.2"
            ));
        }
        Ok(Psci { method, others })
    }
}

/// Where another CPU runs Rust: its work, then itself off.
extern "C" fn entry(block: &Block) -> ! {
    (block.work)(block.arg);
    // SAFETY: completes this CPU's cleaning of what it wrote (`written`) before it goes
    // off; touches no memory.
    unsafe { asm!("dsb sy", options(nostack)) };
    // CPU_OFF returns only when it failed: the boot CPU's AFFINITY_INFO then never says
    // off, and it refuses to enter the image.
    let _ = call(block.method, CPU_OFF, 0, 0, 0);
    loop {
        // SAFETY: waiting for an event; touches no memory.
        unsafe { asm!("wfe", options(nomem, nostack)) };
    }
}

/// This CPU's translation regime and the rest of a [`Block`].
fn this_cpu() -> [u64; 6] {
    let (mair, tcr, ttbr0, sctlr, fp, vbar): (u64, u64, u64, u64, u64, u64);
    // SAFETY: reading the current level's system registers has no side effect.
    unsafe {
        if el() == 2 {
            asm!(
                "mrs {}, mair_el2", "mrs {}, tcr_el2", "mrs {}, ttbr0_el2",
                "mrs {}, sctlr_el2", "mrs {}, cptr_el2", "mrs {}, vbar_el2",
                out(reg) mair, out(reg) tcr, out(reg) ttbr0, out(reg) sctlr, out(reg) fp,
                out(reg) vbar, options(nomem, nostack)
            );
        } else {
            asm!(
                "mrs {}, mair_el1", "mrs {}, tcr_el1", "mrs {}, ttbr0_el1",
                "mrs {}, sctlr_el1", "mrs {}, cpacr_el1", "mrs {}, vbar_el1",
                out(reg) mair, out(reg) tcr, out(reg) ttbr0, out(reg) sctlr, out(reg) fp,
                out(reg) vbar, options(nomem, nostack)
            );
        }
    }
    [mair, tcr, ttbr0, sctlr, fp, vbar]
}

impl super::others::Cpus for Psci {
    fn others(&self) -> &[u64] {
        &self.others
    }

    fn start(&self, id: u64, stack_top: u64, work: fn(usize), arg: usize) -> Result<(), String> {
        let [mair, tcr, ttbr0, sctlr, fp, vbar] = this_cpu();
        // Never freed: the CPU reads it until it runs Rust (the heap is the busy range).
        let block = Box::leak(Box::new(Block {
            mair,
            tcr,
            ttbr0,
            sctlr,
            fp,
            vbar,
            stack_top,
            entry,
            work,
            arg,
            method: self.method,
        }));
        let at = block as *const Block as u64;
        // The CPU reads its block and fetches the stub with its MMU and caches off.
        written(at, core::mem::size_of::<Block>() as u64);
        let (stub, stub_end) = (
            core::ptr::addr_of!(secondary_a64) as u64,
            core::ptr::addr_of!(secondary_a64_end) as u64,
        );
        written(stub, stub_end - stub);
        // SAFETY: completes the cleaning before the CPU can start; touches no memory.
        unsafe { asm!("dsb sy", options(nostack)) };
        let r = call(self.method, CPU_ON, id, stub, at);
        if r != 0 {
            return Err(alloc::format!("PSCI CPU_ON: {} ({r})", error_name(r)));
        }
        Ok(())
    }

    fn is_off(&self, id: u64) -> Result<bool, String> {
        match call(self.method, AFFINITY_INFO, id, 0, 0) {
            r if r < 0 => Err(alloc::format!(
                "PSCI AFFINITY_INFO for CPU {id:#x}: {} ({r})",
                error_name(r)
            )),
            r => Ok(r == OFF),
        }
    }
}
