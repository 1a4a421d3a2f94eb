//! The PC's 8254 timer, channel 2: a clock of known rate (`restorer::telemetry::PIT_HZ`)
//! that the TSC is timed against when the CPU does not say how fast it counts, as Linux's
//! `pit_calibrate_tsc` does. Channel 2 drives only the speaker: its gate is bit 0 of port
//! 0x61 and its output bit 5; the speaker's enable (bit 1) stays off and the port's value
//! is written back afterwards. Channel 0 (the firmware's and the kernel's tick) is not
//! touched. Interrupts are off whenever the restorer runs its own code, so nothing stretches
//! the wait.

use super::port::{inb, outb};

/// The PIT's mode/command register.
const COMMAND: u16 = 0x43;
/// Channel 2's data port.
const CHANNEL_2: u16 = 0x42;
/// The system control port B: bit 0 gates channel 2, bit 1 enables the speaker, bit 5
/// reads channel 2's output.
const PORT_B: u16 = 0x61;
const GATE: u8 = 0x01;
const SPEAKER: u8 = 0x02;
const OUTPUT: u8 = 0x20;
/// Channel 2, low then high byte, mode 0 (the output goes low when the mode is set and
/// high when the count reaches zero), binary.
const CHANNEL_2_MODE_0: u8 = 0xb0;

/// The PIT's ticks one measurement waits: 10 ms.
pub const TICKS: u16 = 11_932;
/// Fewer polls than this of a low output before it rose: bit 5 does not follow a counting
/// channel (no PIT, or nothing at port 0x61), and the time is no measurement.
const MIN_POLLS: u64 = 100;
/// Counter ticks after which the wait is given up (the output never rose): 10 ms of any
/// counter slower than 100 GHz are fewer.
const GIVE_UP: u64 = 1 << 30;

/// The ticks `counter` advances while channel 2 counts [`TICKS`] down; `None` when the
/// channel does not behave as a PIT's does.
pub fn time(counter: impl Fn() -> u64) -> Option<u64> {
    let saved = inb(PORT_B);
    outb(PORT_B, (saved & !SPEAKER) | GATE);
    outb(COMMAND, CHANNEL_2_MODE_0);
    let [low, high] = TICKS.to_le_bytes();
    outb(CHANNEL_2, low);
    outb(CHANNEL_2, high);
    // Counting starts with the high byte written.
    let start = counter();
    let mut polls = 0u64;
    let end = loop {
        let now = counter();
        if inb(PORT_B) & OUTPUT != 0 {
            break Some(now);
        }
        if now.wrapping_sub(start) > GIVE_UP {
            break None;
        }
        polls += 1;
    };
    outb(PORT_B, saved);
    end.filter(|_| polls >= MIN_POLLS)
        .map(|end| end.wrapping_sub(start))
}
