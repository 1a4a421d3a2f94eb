//! The board's other CPUs as the restorer sees them: how a platform starts one on a job
//! and learns that it is off again ([`Cpus`]; arm64: `super::psci`), or that there is
//! none to start ([`OneCpu`], the PC's programs for now). `crate::smp` runs the jobs on
//! them.

use alloc::string::String;

/// How a platform starts and stops its other CPUs.
pub(crate) trait Cpus {
    /// The other CPUs' ids (arm64: MPIDRs), none when only the boot CPU decodes.
    fn others(&self) -> &[u64];
    /// Starts CPU `id` running `work(arg)` on the stack ending at `stack_top`, then off.
    fn start(&self, id: u64, stack_top: u64, work: fn(usize), arg: usize) -> Result<(), String>;
    /// Whether CPU `id` is off.
    fn is_off(&self, id: u64) -> Result<bool, String>;
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
