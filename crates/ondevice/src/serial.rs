//! Serial ports of real boards: raw mode at a given baud rate, so `snapboot trace` sees the
//! console bytes exactly as the board sends them.

use rustix::termios::{tcgetattr, tcsetattr, OptionalActions};
use std::os::fd::AsFd;

/// Puts a tty into raw mode (no echo, no line editing, 8N1) at `baud`.
pub fn make_raw<Fd: AsFd>(fd: Fd, baud: u32) -> std::io::Result<()> {
    let mut t = tcgetattr(&fd)?;
    t.make_raw();
    t.set_speed(baud)?;
    tcsetattr(&fd, OptionalActions::Now, &t)?;
    Ok(())
}
