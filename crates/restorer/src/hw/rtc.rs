//! The CMOS real-time clock, read through its index and data ports (0x70, 0x71); the
//! decoding is `restorer::rtc`'s.

use super::port::{inb, outb};
use restorer::rtc::{reg, Registers, UPDATE_IN_PROGRESS};

const INDEX: u16 = 0x70;
const DATA: u16 = 0x71;
/// Status A reads to wait for an update in progress to end (one takes under 2 ms).
const WAIT_READS: u32 = 1 << 20;

fn read(r: u8) -> u8 {
    outb(INDEX, r);
    inb(DATA)
}

/// The registers, read once no update is in progress (or after waiting too long).
fn registers() -> Registers {
    for _ in 0..WAIT_READS {
        if read(reg::STATUS_A) & UPDATE_IN_PROGRESS == 0 {
            break;
        }
        core::hint::spin_loop();
    }
    Registers {
        fields: [
            reg::SECONDS,
            reg::MINUTES,
            reg::HOURS,
            reg::DAY,
            reg::MONTH,
            reg::YEAR,
        ]
        .map(read),
        status_b: read(reg::STATUS_B),
    }
}

/// Seconds since the epoch by the clock, or `None` when it reads out of range. Two equal
/// reads in a row, so an update between the fields is not mistaken for a time.
pub fn now() -> Option<u64> {
    let mut last = registers();
    for _ in 0..4 {
        let next = registers();
        if next == last {
            return next.unix();
        }
        last = next;
    }
    None
}
