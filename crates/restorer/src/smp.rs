//! The program's side of decoding on every CPU ([`restorer::parallel`] holds the jobs and
//! the loop): the other CPUs started on the shared jobs through the platform's [`Cpus`]
//! (arm64: PSCI `CPU_ON`, `crate::cpu::Psci`; the PC: INIT and start-up IPIs,
//! `crate::cpu::Apic`), the boot CPU's own work meanwhile, then the
//! jobs joined, and every other CPU waited for until it has published its tally and is off
//! again (the image kernel starts its secondary CPUs itself, from off: the PC's are parked
//! in wait-for-SIPI by INIT, `crate::cpu::Apic`). One CPU
//! (`crate::cpu::OneCpu`, or no other CPU that starts) is the plain path: the boot CPU does
//! every job.

use crate::cpu::Cpus;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use restorer::parallel::{Jobs, Pages, Slot, Tally};
use storelayout::Damage;

/// Bytes of each other CPU's stack (the worker loop and LZ4 need a few KiB).
const STACK: usize = 64 << 10;
/// Seconds the boot CPU waits, once it has no job left, for the other CPUs to finish
/// theirs and turn off.
const WAIT_S: u64 = 10;

/// Physical pages, identity mapped: a job's are unpacked into, then cleaned for the image
/// kernel (`crate::cpu::written`).
pub(crate) struct Phys;

impl Pages for Phys {
    fn fill(
        &self,
        to: u64,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<(), Damage>,
    ) -> Result<(), Damage> {
        // SAFETY: `len` bytes of consecutive pages from `to`: RAM pages of the image
        // (checked against the memory map before any is written), outside the restorer's
        // busy ranges, written by this job alone (`Split::of`); identity mapped. A failed
        // unpack leaves them partly written, which is harmless: nothing lives there.
        let out = unsafe { core::slice::from_raw_parts_mut(to as *mut u8, len) };
        let r = fill(out);
        crate::cpu::written(to, len as u64);
        r
    }
}

/// What another CPU is given: the jobs and its slot.
struct Helper<'j, 'a> {
    jobs: &'j Jobs<'a>,
    slot: Slot,
}

/// Another CPU's work: the jobs, then its tally published.
fn helper(arg: usize) {
    // SAFETY: `arg` is a `Helper` that `run` keeps alive, and does not move, until this
    // CPU's slot is published and the CPU is off (lifetimes do not exist at run time: the
    // jobs it names outlive the helper).
    let h = unsafe { &*(arg as *const Helper<'static, 'static>) };
    let t = h.jobs.work(&Phys, &crate::cpu::cycles);
    h.slot.publish(&t);
}

/// What decoding on every CPU came to.
pub(crate) struct Outcome {
    /// Every CPU's tally, the boot CPU's included, summed.
    pub(crate) tally: Tally,
    /// CPUs that did at least one job, the boot CPU counted always (it decodes its own
    /// chunks).
    pub(crate) workers: u32,
    /// Why a CPU did not help, for the console.
    pub(crate) notes: Vec<String>,
}

/// Runs `jobs` on every CPU `cpus` has: starts the others, runs `meanwhile` (the boot
/// CPU's own chunks), takes jobs itself until none is left, and waits until every job is
/// done and every CPU started is off again. Allocates before the first CPU starts only.
/// `Err` only when a CPU that started does not finish and turn off in [`WAIT_S`] seconds:
/// the image cannot be entered with it running (every CPU started is then stopped where
/// the platform can: [`Cpus::force_off`]).
pub(crate) fn run<R>(
    jobs: &Jobs,
    cpus: &dyn Cpus,
    meanwhile: impl FnOnce() -> R,
) -> Result<(R, Outcome), String> {
    let others = cpus.others();
    let helpers: Vec<Helper> = others
        .iter()
        .map(|_| Helper {
            jobs,
            slot: Slot::new(),
        })
        .collect();
    let stacks: Vec<Box<[u8]>> = others
        .iter()
        .map(|_| alloc::vec![0u8; STACK].into_boxed_slice())
        .collect();
    let mut notes = Vec::new();
    let mut started = Vec::with_capacity(others.len());
    for ((&id, h), stack) in others.iter().zip(&helpers).zip(&stacks) {
        let top = (stack.as_ptr() as u64 + STACK as u64) & !15;
        match cpus.start(id, top, helper, h as *const Helper as usize) {
            Ok(()) => started.push((id, h)),
            Err(why) => notes.push(alloc::format!("CPU {id:#x} not started: {why}")),
        }
    }
    let r = meanwhile();
    let mut tally = jobs.work(&Phys, &crate::cpu::cycles);
    let mut workers = 1;
    let hz = crate::cpu::cycle_rate().map_or(1_000_000_000, |r| r.hz);
    let since = crate::cpu::cycles();
    let late = || crate::cpu::cycles().wrapping_sub(since) > WAIT_S * hz;
    let stop = |why: String| {
        for &(id, _) in &started {
            cpus.force_off(id);
        }
        why
    };
    while !jobs.finished() {
        if late() {
            return Err(stop(alloc::format!(
                "the other CPUs did not finish their chunks in {WAIT_S} s"
            )));
        }
        core::hint::spin_loop();
    }
    for &(id, h) in &started {
        let t = loop {
            if let Some(t) = h.slot.take() {
                break t;
            }
            if late() {
                return Err(stop(alloc::format!(
                    "CPU {id:#x} did not report back in {WAIT_S} s"
                )));
            }
            core::hint::spin_loop();
        };
        while !cpus.is_off(id).map_err(&stop)? {
            if late() {
                return Err(stop(alloc::format!(
                    "CPU {id:#x} did not turn off in {WAIT_S} s"
                )));
            }
            core::hint::spin_loop();
        }
        if t.jobs > 0 {
            workers += 1;
        } else {
            notes.push(alloc::format!(
                "CPU {id:#x} started too late to take a chunk"
            ));
        }
        tally = tally.plus(t);
    }
    // The helpers and their stacks are no longer used by any CPU.
    drop((helpers, stacks));
    Ok((
        r,
        Outcome {
            tally,
            workers,
            notes,
        },
    ))
}
