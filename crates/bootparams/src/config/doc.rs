//! The documents made from the reference table ([`SETTINGS`]): the man page
//! `snapboot.conf(5)` in roff, the default config file `guest/snapboot.conf` and the
//! markdown table of docs/config.md. Unit tests keep the committed files equal to these.

use crate::settings::{Scope, Setting, CONFIG_PATH, SETTINGS};
use crate::PREFIX;
use alloc::format;
use alloc::string::{String, ToString};

/// Lines of the default file's comments wrap before this column.
const WIDTH: usize = 78;

/// What a setting's commented-out line in the default file assigns: its default when that
/// is a value the key takes, else an example.
fn shown_value(s: &Setting) -> &'static str {
    let described = s.default.contains(' ') || matches!(s.default, "none" | "off");
    if described && !s.is_flag() {
        s.example
    } else {
        s.default
    }
}

/// `text` broken into lines of at most [`WIDTH`] columns, each starting with `lead`.
fn wrapped(lead: &str, text: &str) -> String {
    let mut out = String::new();
    let mut line = String::from(lead);
    for word in text.split_whitespace() {
        if line.len() > lead.len() && line.len() + 1 + word.len() > WIDTH {
            out.push_str(line.trim_end());
            out.push('\n');
            line = String::from(lead);
        }
        if line.len() > lead.len() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// The default config file: every setting the file may carry, commented out, with its
/// meaning, its values and its default. The Debian package installs it as its conffile.
pub fn default_file() -> String {
    let mut out = format!(
        "# {CONFIG_PATH}: snapboot's settings (snapboot.conf(5)).\n\
         #\n\
         # KEY = VALUE, one a line; the keys are the kernel command line's {PREFIX}KEY words.\n\
         # A {PREFIX}KEY word on the kernel command line overrides the line here.\n\
         # Every setting below is commented out and shows its default (or, where the\n\
         # default is no value, an example). Check the file with `snapboot config check`;\n\
         # a file that does not parse is not acted on: the device boots cold, saying why.\n\
         # Copy the file into the initramfs after a change: update-initramfs -u.\n"
    );
    for s in SETTINGS.iter().filter(|s| s.in_file()) {
        out.push('\n');
        out.push_str(&wrapped("# ", &format!("{}: {}.", s.name(), s.meaning)));
        out.push_str(&wrapped(
            "# ",
            &format!("Values: {}. Default: {}.", s.values, s.default),
        ));
        out.push_str(&format!("#{} = {}\n", s.name(), shown_value(s)));
    }
    out
}

/// `text` safe in roff running text: backslashes escaped, hyphens as minus signs, and no
/// line starting with a control character.
fn roff(text: &str) -> String {
    let t = text.replace('\\', "\\e").replace('-', "\\-");
    if t.starts_with('.') || t.starts_with('\'') {
        format!("\\&{t}")
    } else {
        t
    }
}

/// One setting as a roff tagged paragraph.
fn man_entry(s: &Setting, with_values: bool) -> String {
    let mut out = format!(".TP\n.B {}\n", roff(s.name()));
    out.push_str(&format!("{}.\n", roff(s.meaning)));
    if with_values {
        out.push_str(&format!(
            "Values: {}.\nDefault: {}.\n",
            roff(s.values),
            roff(s.default)
        ));
    }
    if let Scope::KernelOnly(reason) = s.scope {
        out.push_str(&format!(
            "Only on the kernel command line, as \\fB{}\\fR: {}.\n",
            roff(s.key),
            roff(reason)
        ));
    }
    out
}

/// The man page `snapboot.conf(5)`, in roff.
pub fn man_page() -> String {
    let mut out = format!(
        ".TH SNAPBOOT.CONF 5 \"\" \"snapboot {}\" \"File Formats\"\n\
         .SH NAME\n\
         snapboot.conf \\- settings of snapboot, snapshot boot for Linux\n\
         .SH SYNOPSIS\n\
         {}\n\
         .SH DESCRIPTION\n\
         The settings of snapboot on this device: which store holds its images, how images\n\
         are captured, which ones restore. Each line is\n\
         .IB key \" = \" value\n\
         or a comment starting with\n\
         .BR # ;\n\
         blank lines are skipped. A key is the kernel command line's word\n\
         .BI {} key\n\
         without its prefix, and takes the same values; a flag takes\n\
         .BR yes ,\n\
         .BR no ,\n\
         .B true\n\
         or\n\
         .BR false .\n\
         A value is one word.\n\
         .PP\n\
         Each setting comes from the first of: the kernel command line, this file, the\n\
         built-in default. So a boot entry can override the file for one boot, and\n\
         .BI {} key =no\n\
         turns off a flag the file turns on.\n\
         .PP\n\
         The file is read on the root filesystem and, for the restore at power-on, in the\n\
         initramfs, where the initramfs-tools hook copies it: run\n\
         .B update\\-initramfs \\-u\n\
         after a change. Images are bound to the initramfs's file listing (each file's path\n\
         and size): a copy of another size in it refuses the stored images as taken with\n\
         another boot setup.\n\
         .SH SETTINGS\n",
        env!("CARGO_PKG_VERSION"),
        roff(CONFIG_PATH),
        roff(PREFIX),
        roff(PREFIX),
    );
    for s in SETTINGS.iter().filter(|s| s.in_file()) {
        out.push_str(&man_entry(s, true));
    }
    out.push_str(
        ".SH KERNEL COMMAND LINE ONLY\n\
         These words are about one boot, or are for measuring and tests; the file refuses\n\
         them.\n",
    );
    for s in SETTINGS.iter().filter(|s| !s.in_file()) {
        out.push_str(&man_entry(s, false));
    }
    out.push_str(&format!(
        ".SH ERRORS\n\
         A file that does not parse is refused as a whole, never used in part: a line that\n\
         is not\n\
         .IR key \" = \" value ,\n\
         an unknown key (the closest known one is named), a key only the kernel command line\n\
         takes, a key set twice, or a value the key does not take. The message names the\n\
         file and the line.\n\
         .B snapboot config check\n\
         shows it. At power-on the device then restores nothing and boots cold, with the\n\
         message on the console (the\n\
         .B fallback\n\
         marker); at the ready point it captures nothing (the\n\
         .B capture\\-failed\n\
         marker, when the kernel command line asks for a capture). A missing file is no\n\
         settings: the defaults and the kernel command line.\n\
         .SH EXAMPLE\n\
         .nf\n\
         # {}\n\
         store = PARTLABEL=snapstore\n\
         encrypt = tpm\n\
         attempts = 3\n\
         dedupe = selective:90\n\
         .fi\n\
         .SH FILES\n\
         .TP\n\
         .I {}\n\
         The settings.\n\
         .TP\n\
         .I /etc/snapboot/device.key\n\
         The device key file of\n\
         .BR \"encrypt = key\" .\n\
         .SH SEE ALSO\n\
         .BR snapboot (8),\n\
         .BR update\\-initramfs (8)\n",
        roff(CONFIG_PATH),
        roff(CONFIG_PATH),
    ));
    out
}

/// `text` safe in a markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The markdown table of every setting, for docs/config.md.
pub fn markdown_table() -> String {
    let mut out =
        String::from("| key | values | default | meaning | in the file |\n|---|---|---|---|---|\n");
    for s in &SETTINGS {
        let file = match s.scope {
            Scope::Anywhere => "yes".to_string(),
            Scope::KernelOnly(reason) => format!("no: {reason}"),
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            s.name(),
            cell(s.values),
            cell(s.default),
            cell(s.meaning),
            file
        ));
    }
    out
}
