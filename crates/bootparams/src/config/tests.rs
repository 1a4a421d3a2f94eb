//! The config file: parsing, every refusal with its message, precedence under the kernel
//! command line, the round trip with the kernel words, and the committed documents in step.

use super::*;
use crate::settings::SETTINGS;
use crate::{key, Encrypt, StoreAddress};
use proptest::prelude::*;

fn parse(text: &str) -> Result<ConfigFile, ConfigError> {
    ConfigFile::parse(CONFIG_PATH, text)
}

fn params_of(text: &str) -> BootParams {
    effective("", Some(parse(text).unwrap())).unwrap().params
}

#[test]
fn a_file_of_key_value_lines_comments_and_blanks() {
    let text = "# the store\n\
                store = PARTLABEL=snapstore\n\
                \n\
                \tencrypt=tpm\n\
                  attempts =  3  \n\
                dedupe = selective:90\n\
                noverity = yes\n";
    let f = parse(text).unwrap();
    let lines: Vec<usize> = f.entries.iter().map(|e| e.line).collect();
    assert_eq!(lines, [2, 4, 5, 6, 7]);
    let p = params_of(text);
    assert_eq!(p.store, Some(StoreAddress::PartLabel("snapstore".into())));
    assert_eq!(p.encrypt, Encrypt::Tpm { pcrs: Vec::new() });
    assert_eq!(p.attempts, 3);
    assert_eq!(p.dedupe, Some(storelayout::Dedupe::SELECTIVE));
    assert!(!p.verity);
    // Flags: yes, no, true, false.
    assert!(params_of("pin = true\nonce = yes").pin);
    assert!(!params_of("pin = false").pin);
    assert!(params_of("norecapture = no").recapture);
    // Nothing set: the defaults.
    assert_eq!(params_of("# nothing\n\n"), BootParams::default());
}

#[test]
fn every_refusal_names_the_file_the_line_and_why() {
    for (text, want) in [
        (
            "store = /dev/vdb\nstore /dev/vdc",
            "/etc/snapboot/snapboot.conf:2: expected `key = value`, found \"store /dev/vdc\"",
        ),
        (
            "= 3",
            "/etc/snapboot/snapboot.conf:1: expected `key = value`, found \"= 3\"",
        ),
        (
            "stroe = /dev/vdb",
            "/etc/snapboot/snapboot.conf:1: unknown key \"stroe\" (did you mean store?)",
        ),
        (
            "snapboot.store = /dev/vdb",
            "/etc/snapboot/snapboot.conf:1: unknown key \"snapboot.store\" (did you mean store?)",
        ),
        (
            "threads = 2",
            "/etc/snapboot/snapboot.conf:1: unknown key \"threads\"",
        ),
        (
            "\ncapture = yes",
            "/etc/snapboot/snapboot.conf:2: capture is only on the kernel command line \
             (snapboot.capture): it asks one boot for something",
        ),
        (
            "memfault = offline",
            "/etc/snapboot/snapboot.conf:1: memfault is only on the kernel command line \
             (snapboot.memfault): it breaks one boot on purpose, for tests",
        ),
        (
            "attempts = 3\n# again\nattempts = 4",
            "/etc/snapboot/snapboot.conf:3: attempts is set again (first on line 1)",
        ),
        (
            "attempts = 0",
            "/etc/snapboot/snapboot.conf:1: attempts = 0: expected a count (1 or more)",
        ),
        (
            "noverity = 1",
            "/etc/snapboot/snapboot.conf:1: noverity = 1: expected no value, or yes, no, true \
             or false",
        ),
        (
            "store = PARTUUID=xyz",
            "/etc/snapboot/snapboot.conf:1: store = PARTUUID=xyz: PARTUUID=\"xyz\": expected a \
             GPT partition GUID (8-4-4-4-12 hex digits) or an MBR SSSSSSSS-PP",
        ),
        (
            "attempts = 3 # three",
            "/etc/snapboot/snapboot.conf:1: attempts = 3 # three: a value is one word \
             (comments go on lines of their own)",
        ),
        (
            "lazy =",
            "/etc/snapboot/snapboot.conf:1: lazy = : no value: takes max or a size such as 96M",
        ),
    ] {
        assert_eq!(parse(text).unwrap_err().to_string(), want, "{text:?}");
    }
}

#[test]
fn each_kernel_only_key_is_refused_in_the_file() {
    let refused: Vec<&str> = SETTINGS
        .iter()
        .filter(|s| !s.in_file())
        .filter(|s| {
            let text = format!("{} = {}", s.name(), s.example);
            matches!(parse(&text), Err(ConfigError::KernelOnly { .. }))
        })
        .map(|s| s.name())
        .collect();
    assert_eq!(
        refused,
        [
            "capture",
            "nodrop",
            "nocompact",
            "profilecheck",
            "khibernate",
            "kresume",
            "coldkernel",
            "handedover",
            "pmtimes",
            "memfault",
            "baseline"
        ]
    );
}

#[test]
fn store_none_on_the_kernel_command_line_leaves_the_file_s_store_unused() {
    let file = || Some(parse("store = PARTLABEL=snapstore\nattempts = 3").unwrap());
    let e = effective("console=ttyS0 snapboot.store=none", file()).unwrap();
    assert_eq!(e.params.store, None);
    assert_eq!(e.params.attempts, 3);
    assert_eq!(e.source(key::STORE), Source::Kernel);
    // The last word wins, as for every key.
    let e = effective("snapboot.store=none snapboot.store=/dev/vdc", file()).unwrap();
    assert_eq!(e.params.store, Some(StoreAddress::path("/dev/vdc")));
}

#[test]
fn the_kernel_command_line_wins_key_by_key_over_the_file_over_the_defaults() {
    let file = parse("store = /dev/vdb\nattempts = 3\nnoverity = yes\nimage = factory").unwrap();
    let e = effective(
        "console=ttyS0 snapboot.store=/dev/vdc snapboot.noverity=no snapboot.capture",
        Some(file),
    )
    .unwrap();
    assert_eq!(e.params.store, Some(StoreAddress::path("/dev/vdc")));
    assert_eq!(e.params.attempts, 3);
    assert!(e.params.verity && e.params.capture);
    assert_eq!(e.params.images, ["factory"]);
    assert_eq!(e.source(key::STORE), Source::Kernel);
    assert_eq!(e.source(key::NOVERITY), Source::Kernel);
    assert_eq!(e.source(key::ATTEMPTS), Source::File);
    assert_eq!(e.source(key::CONFIRM), Source::Default);
    let report = e.report();
    assert!(
        report.contains("store        = /dev/vdc  (kernel)\n"),
        "{report}"
    );
    assert!(
        report.contains("attempts     = 3  (file /etc/snapboot/snapboot.conf:2)\n"),
        "{report}"
    );
    assert!(report.contains("noverity     = no  (kernel)\n"), "{report}");
    assert!(
        report.contains("confirm      = auto  (default)\n"),
        "{report}"
    );
    assert!(
        report.contains("dedupe       = selective:90  (default)\n"),
        "{report}"
    );
    // No file: the command line alone, as before there was one.
    let cmdline = "snapboot.store=/dev/vdb snapboot.once";
    let alone = effective(cmdline, None).unwrap();
    assert_eq!(alone.params, BootParams::parse(cmdline).unwrap());
    // A bad kernel word is the kernel's error, as before.
    let bad = effective("snapboot.onse", None).unwrap_err();
    assert!(bad
        .to_string()
        .starts_with("unknown boot parameter \"snapboot.onse\""));
}

#[test]
fn from_text_is_the_file_under_the_command_line_without_a_file_system() {
    let text = "store = PARTLABEL=snapstore\nimage = current,factory\nattempts = 3\n";
    let e = from_text("ro snapboot.image=factory", Some(text)).unwrap();
    assert_eq!(
        e.params.store,
        Some(StoreAddress::PartLabel("snapstore".into()))
    );
    assert_eq!(e.params.images, ["factory"]);
    assert_eq!(e.params.attempts, 3);
    assert_eq!(e.file, Some(parse(text).unwrap()));
    let none = from_text("snapboot.store=/dev/vdb", None).unwrap();
    assert_eq!(none.params.store, Some(StoreAddress::path("/dev/vdb")));
    assert_eq!(none.params.attempts, crate::DEFAULT_ATTEMPTS);
    let e = from_text("", Some("image = a/b\n")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "/etc/snapboot/snapboot.conf:1: image = a/b: image name \"a/b\": '/' is not one of \
         A-Z a-z 0-9 . _ -"
    );
    let e = from_text("snapboot.image=a,,b", Some(text)).unwrap_err();
    assert!(
        matches!(e, SettingsError::Cmdline(BootParamsError::ImageName { .. })),
        "{e:?}"
    );
}

#[cfg(feature = "std")]
#[test]
fn load_reads_the_file_and_a_missing_one_is_the_defaults() {
    let dir = std::env::temp_dir().join(format!("snapboot-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = load("snapboot.store=/dev/vdb", &dir.join("none.conf")).unwrap();
    assert!(missing.file.is_none());
    assert_eq!(missing.params.store, Some(StoreAddress::path("/dev/vdb")));
    let path = dir.join("snapboot.conf");
    std::fs::write(&path, "store = /dev/vdb\nattempts = 4\n").unwrap();
    assert_eq!(load("", &path).unwrap().params.attempts, 4);
    std::fs::write(&path, "atempts = 4\n").unwrap();
    let e = load("", &path).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}:1: unknown key \"atempts\" (did you mean attempts?)",
            path.display()
        )
    );
    // A directory where the file should be cannot be read: an error, not the defaults.
    let e = load("", &dir).unwrap_err();
    assert!(
        matches!(e, SettingsError::File(ConfigError::Read { .. })),
        "{e:?}"
    );
    std::fs::write(&path, vec![b'#'; CONFIG_MAX_BYTES as usize + 1]).unwrap();
    assert!(matches!(
        load("", &path),
        Err(SettingsError::File(ConfigError::TooBig { .. }))
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn closest_keys() {
    assert_eq!(edit_distance("store", "store"), 0);
    assert_eq!(edit_distance("stroe", "store"), 2);
    assert_eq!(edit_distance("atempts", "attempts"), 1);
    assert_eq!(closest("dedup"), Some("dedupe"));
    assert_eq!(closest("snapboot.encrypt"), Some("encrypt"));
    assert_eq!(closest("compression"), None);
}

/// A file line that says what a kernel word says (the file's flags are `yes`).
fn line_of(word: &str) -> String {
    let (k, v) = word.split_once('=').unwrap_or((word, ""));
    let s = crate::settings::setting(k).unwrap();
    let v = match v {
        "" if s.is_flag() => "yes",
        "" => "max",
        v => v,
    };
    format!("{} = {v}", s.name())
}

proptest! {
    #[test]
    fn a_file_written_from_kernel_words_reads_back_the_same(p in crate::tests::params()) {
        // The file carries what it may; the command line the rest (and `noresume`, which
        // is no setting).
        let (file, kernel): (Vec<String>, Vec<String>) = p
            .render()
            .into_iter()
            .partition(|w| crate::settings::setting(w.split('=').next().unwrap()).is_some_and(|s| s.in_file()));
        let text: Vec<String> = file.iter().map(|w| line_of(w)).collect();
        let e = effective(&kernel.join(" "), Some(parse(&text.join("\n")).unwrap())).unwrap();
        prop_assert_eq!(e.params, p);
    }
}

#[test]
fn the_default_file_is_in_step_with_the_table_and_every_line_of_it_parses() {
    let committed = include_str!("../../../../guest/snapboot.conf");
    assert_eq!(
        committed,
        default_file(),
        "guest/snapboot.conf differs from bootparams::config::default_file(): rewrite it \
         with `snapboot config default > guest/snapboot.conf`"
    );
    assert_eq!(params_of(committed), BootParams::default());
    // Uncommented, each setting's line parses, and says the default where it shows one.
    let uncommented: Vec<&str> = committed
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .filter(|l| !l.starts_with(' ') && l.contains(" = "))
        .collect();
    let in_file = SETTINGS.iter().filter(|s| s.in_file()).count();
    assert_eq!(uncommented.len(), in_file);
    parse(&uncommented.join("\n")).unwrap();
}

#[test]
fn the_docs_table_is_in_step_with_the_table() {
    let docs = include_str!("../../../../docs/config.md");
    assert!(
        docs.contains(&markdown_table()),
        "docs/config.md lacks bootparams::config::markdown_table(): paste \
         `snapboot config table` into it"
    );
    assert_eq!(markdown_table().lines().count(), SETTINGS.len() + 2);
}

#[test]
fn the_man_page_has_every_key_and_no_stray_roff_requests() {
    let page = man_page();
    assert!(page.starts_with(".TH SNAPBOOT.CONF 5 "), "{page}");
    for s in &SETTINGS {
        assert!(
            page.contains(&format!(".B {}\n", s.name().replace('-', "\\-"))),
            "{}",
            s.key
        );
    }
    let requests = [
        ".TH", ".SH", ".TP", ".B", ".BR", ".BI", ".IB", ".IR", ".I", ".PP", ".nf", ".fi",
    ];
    for line in page.lines().filter(|l| l.starts_with('.')) {
        let request = line.split_whitespace().next().unwrap();
        assert!(requests.contains(&request), "{line}");
    }
}
