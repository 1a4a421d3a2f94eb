//! The short human description of an image that `snapboot image inspect` prints.

use crate::info::ImageInfo;
use std::fmt::Write;

fn mib(b: u64) -> f64 {
    b as f64 / 1048576.0
}

impl ImageInfo {
    /// A few lines for people: identity, generation, pages, bytes, lazy region, binding.
    /// The checksum verdict is the caller's to add (it knows whether it verified).
    pub fn summary(&self) -> String {
        let mut o = String::new();
        let id = &self.identity;
        let s = &self.stats;
        let _ = writeln!(
            o,
            "image      generation {} in slot {}, format {}, created {} (unix){}",
            self.generation,
            self.slot,
            self.format_version,
            self.created_unix,
            if self.invalidated {
                ", INVALIDATED (boot-once image already used)"
            } else {
                ""
            }
        );
        let _ = writeln!(
            o,
            "kernel     {} {} ({}), RAM {:.0} MiB",
            id.release,
            id.machine,
            id.version,
            mib(id.ram_bytes)
        );
        let _ = writeln!(
            o,
            "pages      {} raw: {} zero, {} duplicate, {} unique",
            s.raw_pages, s.zero_pages, s.duplicate_pages, s.unique_pages
        );
        let ratio = if s.raw_bytes == 0 {
            0.0
        } else {
            s.stored_bytes as f64 / s.raw_bytes as f64
        };
        let comp = match s.level {
            Some(l) => format!("{} level {l}", s.compressor),
            None => s.compressor.to_string(),
        };
        let _ = writeln!(
            o,
            "bytes      {:.1} MiB raw, {:.1} MiB stored ({ratio:.2}x, {comp}, {} chunks)",
            mib(s.raw_bytes),
            mib(s.stored_bytes),
            s.chunk_count
        );
        if let Some(sw) = &self.swap {
            let _ = writeln!(
                o,
                "lazy       {} pages ({:.1} MiB) wait in a {:.1} MiB swap region at byte {}",
                sw.used_pages,
                mib(sw.used_pages * 4096),
                mib(sw.bytes),
                sw.offset
            );
        }
        match &self.binding {
            Some(b) => {
                for d in &b.devices {
                    let _ = writeln!(
                        o,
                        "bound to   {} on /dev/{} ({}, {:.1} MiB, {})",
                        d.mount,
                        d.device,
                        d.fstype,
                        mib(d.bytes),
                        &crate::hex(&d.digest)[..12]
                    );
                }
                let _ = writeln!(o, "bound to   command line: {}", b.cmdline.join(" "));
                let _ = writeln!(
                    o,
                    "bound to   initramfs /init {}, files {}, snapboot {}",
                    &crate::hex(&b.boot_setup.init)[..12],
                    &crate::hex(&b.boot_setup.files)[..12],
                    crate::hex(&b.boot_setup.snapboot_build_id)
                );
            }
            None => {
                let _ = writeln!(
                    o,
                    "bound to   nothing recorded: resume refuses this image (capture again)"
                );
            }
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use crate::kstream::{synthetic_stream, PAGE_SIZE};

    #[test]
    fn summary_names_identity_pages_bytes_and_binding() {
        let mut store = crate::tests::mem_store(16 << 20);
        let mut w = store.writer(crate::tests::meta()).unwrap();
        for p in synthetic_stream(300, 3).chunks_exact(PAGE_SIZE) {
            w.push_page(p.try_into().unwrap()).unwrap();
        }
        let info = w.commit().unwrap();
        let s = info.summary();
        assert!(
            s.starts_with("image      generation 1 in slot A, format 2"),
            "{s}"
        );
        assert!(s.contains("kernel     6.1.0-18-amd64 x86_64"), "{s}");
        assert!(
            s.contains(&format!("pages      {} raw:", info.stats.raw_pages)),
            "{s}"
        );
        assert!(s.contains("MiB stored ("), "{s}");
        assert!(
            s.contains("bound to   / on /dev/vda (squashfs, 42.0 MiB, 0a0a0a0a0a0a)"),
            "{s}"
        );
        assert!(s.contains("command line: console=ttyS0 ro"), "{s}");
        let mut unbound = info.clone();
        unbound.binding = None;
        assert!(unbound.summary().contains("resume refuses this image"));
    }
}
