//! The PC's real-time clock (the CMOS RTC) as seconds since the epoch: what the restorer
//! stamps a restore attempt in the store's boot log with, as resume stamps it with the
//! kernel's clock. The port I/O is the binary's (`hw::rtc`); this is the decoding: BCD or
//! binary, 12- or 24-hour, and the calendar. The clock is taken to run in UTC and in the
//! 21st century (the century register's place varies by firmware).

/// CMOS registers.
pub mod reg {
    /// Seconds.
    pub const SECONDS: u8 = 0x00;
    /// Minutes.
    pub const MINUTES: u8 = 0x02;
    /// Hours (bit 7: PM, in 12-hour mode).
    pub const HOURS: u8 = 0x04;
    /// Day of the month.
    pub const DAY: u8 = 0x07;
    /// Month.
    pub const MONTH: u8 = 0x08;
    /// Year in the century.
    pub const YEAR: u8 = 0x09;
    /// Status A: bit 7, an update is in progress.
    pub const STATUS_A: u8 = 0x0A;
    /// Status B: bit 1, 24-hour mode; bit 2, binary (not BCD).
    pub const STATUS_B: u8 = 0x0B;
}

/// Status A: the clock is updating its registers now.
pub const UPDATE_IN_PROGRESS: u8 = 0x80;
const HOURS_24: u8 = 0x02;
const BINARY: u8 = 0x04;
/// Status B of fields held in binary, 24-hour (a firmware's clock read as numbers).
pub const BINARY_24H: u8 = BINARY | HOURS_24;
const PM: u8 = 0x80;

/// The clock's registers as read: seconds, minutes, hours, day, month, year.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registers {
    /// Seconds, minutes, hours, day, month, year, as the clock holds them.
    pub fields: [u8; 6],
    /// Status B (the fields' encoding).
    pub status_b: u8,
}

fn from_bcd(v: u8) -> u8 {
    (v >> 4) * 10 + (v & 0x0F)
}

/// Days from 1970-01-01 to `y`-`m`-`d` (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

impl Registers {
    /// Seconds since the epoch, or `None` when a field is out of range (no clock, or a
    /// clock never set).
    pub fn unix(&self) -> Option<u64> {
        let binary = self.status_b & BINARY != 0;
        let pm = self.fields[2] & PM != 0 && self.status_b & HOURS_24 == 0;
        let decode = |v: u8| if binary { v } else { from_bcd(v) };
        let [s, mi, h, d, mo, y] = self.fields;
        let (s, mi, d, mo, y) = (decode(s), decode(mi), decode(d), decode(mo), decode(y));
        let mut h = decode(h & !PM);
        if self.status_b & HOURS_24 == 0 {
            h %= 12;
            if pm {
                h += 12;
            }
        }
        if s > 59
            || mi > 59
            || h > 23
            || !(1..=31).contains(&d)
            || !(1..=12).contains(&mo)
            || y > 99
        {
            return None;
        }
        let days = days_from_civil(2000 + i64::from(y), i64::from(mo), i64::from(d));
        let secs = days * 86_400 + i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(s);
        u64::try_from(secs).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bcd_and_binary_12_and_24_hour_clocks_give_the_same_second() {
        // 2026-11-27 15:04:05 UTC.
        let want = Some(1_795_791_845);
        let bcd24 = Registers {
            fields: [0x05, 0x04, 0x15, 0x27, 0x11, 0x26],
            status_b: HOURS_24,
        };
        assert_eq!(bcd24.unix(), want);
        let bin12 = Registers {
            fields: [5, 4, 3 | PM, 27, 11, 26],
            status_b: BINARY,
        };
        assert_eq!(bin12.unix(), want);
        // 12 AM is midnight; the epoch's leap days are counted.
        let midnight = Registers {
            fields: [0, 0, 0x12, 0x01, 0x03, 0x24],
            status_b: 0,
        };
        assert_eq!(midnight.unix(), Some(1_709_251_200));
        let unset = Registers {
            fields: [0xFF; 6],
            status_b: HOURS_24,
        };
        assert_eq!(unset.unix(), None);
    }
}
