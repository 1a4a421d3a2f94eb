//! `snapboot trace` on a serial port: a pseudo-terminal stands in for a real board's UART.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::time::Duration;

#[test]
fn trace_stamps_a_serial_console_until_ready() {
    let pty = nix::pty::openpty(None, None).unwrap();
    let slave_path = nix::unistd::ttyname(&pty.slave).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("t.json");
    let mut c = crate::common::snapboot();
    c.args(["trace", "--tty"]).arg(&slave_path);
    c.args(["--baud", "115200", "--timeout", "30", "--timeline"])
        .arg(&json);
    c.stdout(std::process::Stdio::piped());
    c.stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    // Ready when it says it listens: the port is open and raw, so no byte written from here
    // is lost or cooked by the line discipline.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("power the board on") {
        let mut line = String::new();
        let n = stderr.read_line(&mut line).unwrap();
        assert!(n > 0, "trace ended before listening: {said}");
        said.push_str(&line);
    }
    let rest = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap());
    let mut master = std::fs::File::from(pty.master);
    let lines = [
        "[    0.000000] Linux version 6.1.0-56-amd64 (builder) #1 SMP",
        "[    0.350000] Run /init as init process",
        "snapboot: @init",
        "snapboot: @root-mounted",
        "snapboot: @ready",
    ];
    for l in lines {
        write!(master, "{l}\r\n").unwrap();
        master.flush().unwrap();
        std::thread::sleep(Duration::from_millis(150));
    }
    let out = child.wait_with_output().unwrap();
    let so = String::from_utf8_lossy(&out.stdout);
    let se = rest.join().unwrap();
    assert!(out.status.success(), "{so}\n{se}");
    assert!(said.contains(&slave_path.display().to_string()), "{said}");
    assert!(
        so.contains(" | snapboot: @init"),
        "stamped lines echoed: {so}"
    );
    let tl: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let t = |kind: &str| {
        tl["milestones"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["kind"] == kind)
            .and_then(|m| m["t"].as_f64())
            .unwrap_or_else(|| panic!("{kind} missing"))
    };
    let (v, i, r) = (t("linux_version"), t("init_start"), t("app_ready"));
    assert!(v < i && i < r, "in order: {v} {i} {r}");
    assert!(r - v > 0.4, "host stamps follow arrival times: {v}..{r}");
    assert_eq!(tl["tti"].as_f64(), Some(r));
    let _ = pty.slave.as_raw_fd();
}
