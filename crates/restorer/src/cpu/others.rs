//! The board's other CPUs as the restorer sees them: how a platform starts one on a job
//! and learns that it is off again ([`Cpus`]; arm64: `super::psci`; the PC:
//! `super::apic`), or that there is none to start ([`OneCpu`]: a board of one CPU, or one
//! whose others cannot be started). `crate::smp` runs the jobs on them.

use alloc::string::String;

/// How a platform starts and stops its other CPUs.
pub(crate) trait Cpus {
    /// The other CPUs' ids (arm64: MPIDRs), none when only the boot CPU decodes.
    fn others(&self) -> &[u64];
    /// Starts CPU `id` running `work(arg)` on the stack ending at `stack_top`, then off.
    fn start(&self, id: u64, stack_top: u64, work: fn(usize), arg: usize) -> Result<(), String>;
    /// Whether CPU `id` is off.
    fn is_off(&self, id: u64) -> Result<bool, String>;
    /// Gets the other CPUs ready to start, as long before [`Cpus::start`] as the platform
    /// likes it (the PC: INIT, whose 10 ms then pass while the boot CPU writes the zero
    /// pages). Nothing by default.
    fn prepare(&self) {}
    /// Memory starting the other CPUs takes, `[start, end)`, which must stay as it is until
    /// every one is off again (the PC: the real-mode start-up page): a busy range for the
    /// image's pages while they decode. None by default.
    fn busy(&self) -> Option<(u64, u64)> {
        None
    }
    /// Stops CPU `id` whatever it is doing, when it did not finish in time, where the
    /// platform can (the PC: INIT); by default it cannot.
    fn force_off(&self, _id: u64) {}
}

/// The boot CPU alone.
pub(crate) struct OneCpu;

impl Cpus for OneCpu {
    fn others(&self) -> &[u64] {
        &[]
    }

    fn start(&self, id: u64, _: u64, _: fn(usize), _: usize) -> Result<(), String> {
        Err(alloc::format!("no other CPU to start ({id:#x})"))
    }

    fn is_off(&self, _: u64) -> Result<bool, String> {
        Ok(true)
    }
}
