//! The guest kernel: fetching a stock distribution kernel without installing it, and turning
//! its compressed `bzImage` into the uncompressed ELF `vmlinux` that QEMU boots through PVH
//! (x86_64), or its gzipped `vmlinuz` into the uncompressed `Image` (arm64, see
//! [`crate::arm64_image`]).
//!
//! Under TCG the in-kernel XZ decompressor alone costs seconds of every cold boot, so the board
//! decompresses the payload once on the host (an uncompressed kernel: under TCG the bzImage's own decompressor costs seconds at every boot).

use crate::arm64_image;
use guestarch::Arch;
use kernelpack::bzimage::{bzimage_release, SetupHeader};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Errors while fetching, locating or unpacking a kernel.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// A host command (apt-get, dpkg-deb, ...) failed.
    #[error("`{cmd}` failed: {reason}")]
    Command { cmd: String, reason: String },
    /// The file is missing.
    #[error("{what} not found at {path}")]
    Missing { what: &'static str, path: PathBuf },
    /// The bzImage is malformed or uses an unsupported compressor.
    #[error("cannot extract vmlinux from {path}: {reason}")]
    Extract { path: PathBuf, reason: String },
    /// apt knows no packages of the foreign architecture the kernel is for.
    #[error(
        "apt knows no {debian} packages ({meta} not found): run `dpkg --add-architecture \
         {debian} && apt-get update` once, as root"
    )]
    NoForeignPackages {
        /// Debian's name of the architecture.
        debian: &'static str,
        /// The meta package asked for.
        meta: String,
    },
    /// The arm64 `vmlinuz` does not give an uncompressed Image.
    #[error("cannot unpack the arm64 Image from {path}")]
    Arm64Image {
        /// The compressed kernel.
        path: PathBuf,
        /// Why.
        #[source]
        source: arm64_image::UnpackError,
    },
    /// The kernel image's banner names another release than its package does.
    #[error("{path}: the banner says release {banner:?}, the package {package:?}")]
    ReleaseMismatch {
        /// The uncompressed kernel.
        path: PathBuf,
        /// `Linux version RELEASE` of the banner (empty when there is none).
        banner: String,
        /// The release of `vmlinuz-RELEASE` and the modules directory.
        package: String,
    },
    /// Filesystem error.
    #[error("{path}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> KernelError + '_ {
    move |source| KernelError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A kernel the board can boot: image, modules and (when known) its config.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KernelInfo {
    /// `uname -r` of the kernel.
    pub release: String,
    /// The kernel as the distribution ships it (bzImage).
    pub bzimage: PathBuf,
    /// Directory holding `kernel/.../*.ko` for this release.
    pub modules_dir: PathBuf,
    /// The kernel's `.config`, if shipped.
    pub config: Option<PathBuf>,
    /// Where the kernel came from (Debian package name, or "user").
    pub source: String,
    /// The architecture it runs on (records written before arm64 was known are x86_64).
    #[serde(default)]
    pub arch: Arch,
    /// The uncompressed kernel unpacked when it was fetched: arm64's `Image`. (x86_64's
    /// vmlinux is extracted into each bundle instead.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<PathBuf>,
    /// Its `uname -v` ([`uts_version`]), when read at fetch (arm64: a restore kernel has to
    /// carry the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl KernelInfo {
    /// Describes a kernel given by path. The release is read from the bzImage header, or
    /// from the modules directory name when the image is an ELF vmlinux.
    pub fn from_paths(kernel: &Path, modules: &Path) -> Result<Self, KernelError> {
        if !kernel.is_file() {
            return Err(KernelError::Missing {
                what: "kernel image",
                path: kernel.to_path_buf(),
            });
        }
        if !modules.is_dir() {
            return Err(KernelError::Missing {
                what: "modules directory",
                path: modules.to_path_buf(),
            });
        }
        let data = fs::read(kernel).map_err(io_err(kernel))?;
        let arm64 = arm64_image::is_image(&data);
        let release = bzimage_release(&data)
            .ok()
            .map(str::to_string)
            .or_else(|| arm64.then(|| banner_release(&data)).flatten())
            .or_else(|| {
                modules
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "unknown".into());
        let config = modules
            .parent()
            .and_then(|p| p.parent())
            .map(|root| root.join("boot").join(format!("config-{release}")))
            .filter(|p| p.is_file());
        Ok(Self {
            version: arm64.then(|| uts_version(&data, &release)).flatten(),
            release,
            bzimage: kernel.to_path_buf(),
            modules_dir: modules.to_path_buf(),
            config,
            source: "user".into(),
            arch: if arm64 { Arch::Arm64 } else { Arch::X86_64 },
            image: arm64.then(|| kernel.to_path_buf()),
        })
    }

    /// Loads a kernel description saved by [`fetch_debian`].
    pub fn load(path: &Path) -> Result<Self, KernelError> {
        let text = fs::read_to_string(path).map_err(io_err(path))?;
        serde_json::from_str(&text).map_err(|e| KernelError::Extract {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
    }
}

pub(crate) fn run(cmd: &mut Command) -> Result<String, KernelError> {
    hostcmd::output(cmd)
        .map(|out| String::from_utf8_lossy(&out).into_owned())
        .map_err(|f| KernelError::Command {
            cmd: f.cmd,
            reason: f.reason,
        })
}

/// Resolves the package that `meta` (e.g. `linux-image-amd64`) depends on.
pub fn resolve_meta_package(meta: &str) -> Result<String, KernelError> {
    let out = run(Command::new("apt-cache").args(["depends", meta]))?;
    parse_depends(&out).ok_or_else(|| KernelError::Command {
        cmd: format!("apt-cache depends {meta}"),
        reason: "no linux-image dependency listed (run apt-get update?)".into(),
    })
}

fn parse_depends(out: &str) -> Option<String> {
    out.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .map(|p| p.trim().trim_matches(|c| c == '<' || c == '>'))
        .find(|p| p.starts_with("linux-image-"))
        .map(str::to_string)
}

/// Resolves the kernel package of `arch`'s `meta` package (e.g. `linux-image-arm64:arm64`),
/// saying how to teach apt a foreign architecture when it knows none of its packages.
pub fn resolve_kernel_package(arch: Arch, meta: &str) -> Result<String, KernelError> {
    resolve_meta_package(meta).map_err(|e| foreign_hint(arch, meta, e))
}

/// `apt-cache depends PKG:ARCH` answers "No packages found" when apt knows no packages of
/// that architecture: that becomes [`KernelError::NoForeignPackages`], which says what to do.
fn foreign_hint(arch: Arch, meta: &str, e: KernelError) -> KernelError {
    match e {
        KernelError::Command { reason, .. }
            if meta.contains(':') && reason.contains("No packages found") =>
        {
            KernelError::NoForeignPackages {
                debian: arch.debian(),
                meta: meta.to_string(),
            }
        }
        other => other,
    }
}

/// Downloads the kernel package `meta` depends on with `apt-get download` and unpacks it with
/// `dpkg-deb -x` below `cache` (never installing it on the host). Reuses an earlier unpack.
/// An arm64 kernel's gzipped `vmlinuz` is unpacked to `Image` beside the package's tree, its
/// banner's release checked against the package's and its `uname -v` recorded.
pub fn fetch_debian(cache: &Path, arch: Arch, meta: &str) -> Result<KernelInfo, KernelError> {
    let pkg = resolve_kernel_package(arch, meta)?;
    // `linux-image-6.1.0-56-arm64:arm64`: the name already says the architecture.
    let dir = cache.join(pkg.split(':').next().unwrap_or(&pkg));
    let info_path = dir.join("kernel.json");
    if let Ok(info) = KernelInfo::load(&info_path) {
        let image_ok = info.image.as_ref().is_none_or(|p| p.is_file());
        if info.arch == arch && info.bzimage.is_file() && info.modules_dir.is_dir() && image_ok {
            return Ok(info);
        }
    }
    let dl = dir.join("download");
    fs::create_dir_all(&dl).map_err(io_err(&dl))?;
    run(Command::new("apt-get")
        .args(["download", "-q", &pkg])
        .current_dir(&dl))?;
    let deb = fs::read_dir(&dl)
        .map_err(io_err(&dl))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .ok_or(KernelError::Missing {
            what: "downloaded .deb",
            path: dl.clone(),
        })?;
    let root = dir.join("root");
    let _ = fs::remove_dir_all(&root);
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root))?;
    let _ = fs::remove_file(&deb);
    let mut info = locate_in_tree(&root, &pkg, arch)?;
    if arch == Arch::Arm64 {
        unpack_arm64_image(&mut info, &dir.join("Image"))?;
    }
    let json = serde_json::to_string_pretty(&info).unwrap_or_default();
    fs::write(&info_path, json).map_err(io_err(&info_path))?;
    Ok(info)
}

/// Unpacks `info`'s gzipped arm64 `vmlinuz` to the uncompressed Image `out`, checks that the
/// banner's release is the package's and records the Image and its `uname -v` in `info`.
pub fn unpack_arm64_image(info: &mut KernelInfo, out: &Path) -> Result<(), KernelError> {
    let data = fs::read(&info.bzimage).map_err(io_err(&info.bzimage))?;
    let image =
        arm64_image::write_uncompressed(&data, out).map_err(|source| KernelError::Arm64Image {
            path: info.bzimage.clone(),
            source,
        })?;
    let banner = banner_release(&image).unwrap_or_default();
    if banner != info.release {
        return Err(KernelError::ReleaseMismatch {
            path: out.to_path_buf(),
            banner,
            package: info.release.clone(),
        });
    }
    info.version = uts_version(&image, &info.release);
    info.image = Some(out.to_path_buf());
    Ok(())
}

/// The release of the last `Linux version RELEASE (` banner in an uncompressed kernel image.
pub fn banner_release(image: &[u8]) -> Option<String> {
    let needle = b"Linux version ";
    let at = image.windows(needle.len()).rposition(|w| w == needle)? + needle.len();
    let rest = image.get(at..at + 128.min(image.len() - at))?;
    let end = rest.iter().position(|&b| b == b' ')?;
    let release = std::str::from_utf8(&rest[..end]).ok()?;
    (rest.get(end + 1) == Some(&b'(') && !release.is_empty()).then(|| release.to_string())
}

/// The kernel's `uname -v` (`UTS_VERSION`, e.g. `#1 SMP PREEMPT_DYNAMIC Debian 6.1.192-2
/// (2026-11-16)`), read from the `Linux version RELEASE (...) (...) UTS_VERSION` banner in an
/// uncompressed kernel image. 6.1 links two banners, `init/version.c`'s without the build
/// number (`# SMP …`) and `init/version-timestamp.c`'s with it, which is what `uname -v`
/// reports; the last one is that.
pub fn uts_version(vmlinux: &[u8], release: &str) -> Option<String> {
    let needle = format!("Linux version {release} (");
    let at = vmlinux
        .windows(needle.len())
        .rposition(|w| w == needle.as_bytes())?;
    let rest = &vmlinux[at..];
    let end = rest.iter().position(|&b| b == b'\n' || b == 0)?;
    let banner = std::str::from_utf8(&rest[..end]).ok()?;
    let v = &banner[banner.find(") #")? + 2..];
    Some(v.trim_end().to_string())
}

/// Finds bzImage, modules and config in an unpacked kernel package (`/lib` or merged `/usr/lib`).
pub fn locate_in_tree(root: &Path, source: &str, arch: Arch) -> Result<KernelInfo, KernelError> {
    let boot = root.join("boot");
    let image = fs::read_dir(&boot)
        .map_err(io_err(&boot))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
        .ok_or(KernelError::Missing {
            what: "boot/vmlinuz-*",
            path: boot.clone(),
        })?;
    let release = image
        .file_name()
        .map(|n| {
            n.to_string_lossy()
                .trim_start_matches("vmlinuz-")
                .to_string()
        })
        .unwrap_or_default();
    let modules_dir = ["lib/modules", "usr/lib/modules"]
        .iter()
        .map(|m| root.join(m).join(&release))
        .find(|p| p.is_dir())
        .ok_or(KernelError::Missing {
            what: "modules directory",
            path: root.join("lib/modules").join(&release),
        })?;
    let config = Some(boot.join(format!("config-{release}"))).filter(|p| p.is_file());
    Ok(KernelInfo {
        release,
        bzimage: image,
        modules_dir,
        config,
        source: source.to_string(),
        arch,
        image: None,
        version: None,
    })
}

/// Writes the uncompressed ELF kernel contained in `bzimage` to `out`. An input that already
/// is an ELF file is copied unchanged. Supports every compressor but LZO that the kernel
/// offers: gzip, bzip2, lzma, xz, lz4 (legacy frame) and zstd.
pub fn extract_vmlinux(bzimage: &Path, out: &Path) -> Result<(), KernelError> {
    let data = fs::read(bzimage).map_err(io_err(bzimage))?;
    let fail = |reason: &str| KernelError::Extract {
        path: bzimage.to_path_buf(),
        reason: reason.to_string(),
    };
    let elf = if data.starts_with(b"\x7fELF") {
        data
    } else {
        let payload = SetupHeader::parse(&data)
            .and_then(|h| h.payload(&data))
            .map_err(|e| fail(&e.to_string()))?;
        decompress_payload(payload).map_err(|r| fail(&r))?
    };
    if !elf.starts_with(b"\x7fELF") {
        return Err(fail("payload is not an ELF image"));
    }
    let tmp = out.with_extension("tmp");
    let mut f = fs::File::create(&tmp).map_err(io_err(&tmp))?;
    f.write_all(&elf).map_err(io_err(&tmp))?;
    fs::rename(&tmp, out).map_err(io_err(out))
}

/// Magic of the kernel's LZ4 payload: the LZ4 *legacy* frame (`lz4 -l`).
const LZ4_LEGACY_MAGIC: u32 = 0x184C_2102;
/// Largest block of an LZ4 legacy frame, decompressed.
const LZ4_LEGACY_BLOCK: usize = 8 << 20;

fn decompress_payload(p: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(p.len() * 4);
    if p.starts_with(b"\xfd7zXZ\0") {
        // The kernel appends the decompressed size after the stream: decode exactly one
        // stream and stop at its end.
        let st =
            xz2::stream::Stream::new_stream_decoder(u64::MAX, 0).map_err(|e| format!("xz: {e}"))?;
        lzma_stream(st, p, &mut out).map_err(|e| format!("xz: {e}"))?;
    } else if p.starts_with(&[0x5d, 0x00, 0x00]) {
        // Legacy .lzma ("lzma -9"), end marker, then the kernel's size word.
        let st =
            xz2::stream::Stream::new_lzma_decoder(u64::MAX).map_err(|e| format!("lzma: {e}"))?;
        lzma_stream(st, p, &mut out).map_err(|e| format!("lzma: {e}"))?;
    } else if p.starts_with(&[0x1f, 0x8b]) {
        flate2::read::GzDecoder::new(p)
            .read_to_end(&mut out)
            .map_err(|e| format!("gzip: {e}"))?;
    } else if p.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        let mut d = zstd::stream::read::Decoder::new(p)
            .map_err(|e| e.to_string())?
            .single_frame();
        d.read_to_end(&mut out).map_err(|e| format!("zstd: {e}"))?;
    } else if p.starts_with(b"BZh") {
        bzip2::read::BzDecoder::new(p)
            .read_to_end(&mut out)
            .map_err(|e| format!("bzip2: {e}"))?;
    } else if p.starts_with(&LZ4_LEGACY_MAGIC.to_le_bytes()) {
        lz4_legacy(p, &mut out)?;
    } else if p.starts_with(b"\x89LZO\0\r\n\x1a\n") {
        return Err(
            "the payload is LZO-compressed, which the board does not extract: \
                    extract it with the kernel's scripts/extract-vmlinux and pass the \
                    resulting vmlinux with --kernel"
                .into(),
        );
    } else {
        let magic: Vec<String> = p.iter().take(4).map(|b| format!("{b:02x}")).collect();
        return Err(format!(
            "unsupported payload compression (magic {}): extract the ELF vmlinux with the \
             kernel's scripts/extract-vmlinux and pass it with --kernel",
            magic.join(" ")
        ));
    }
    Ok(out)
}

/// Runs an xz or lzma decoder over `p` until its stream ends (what follows, such as the
/// kernel's appended size word, is ignored).
fn lzma_stream(mut st: xz2::stream::Stream, p: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    use xz2::stream::{Action, Status};
    loop {
        if out.capacity() - out.len() < (1 << 20) {
            out.reserve(1 << 24);
        }
        let (in_before, out_before) = (st.total_in() as usize, out.len());
        let rest = p.get(in_before..).unwrap_or_default();
        match st.process_vec(rest, out, Action::Run) {
            Ok(Status::StreamEnd) => return Ok(()),
            Ok(_) if st.total_in() as usize == in_before && out.len() == out_before => {
                return Err("stream ended early".into())
            }
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Decodes an LZ4 legacy frame: the magic, then blocks, each a little-endian u32 length
/// and that many bytes of LZ4 block data decompressing to at most 8 MiB. A length that
/// does not fit what is left is the kernel's appended size word: the end.
fn lz4_legacy(p: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    let mut at = 4;
    while let Some(word) = p.get(at..at + 4) {
        let len = u32::from_le_bytes(word.try_into().unwrap_or_default());
        at += 4;
        if len == LZ4_LEGACY_MAGIC {
            continue; // concatenated frames
        }
        let Some(block) = p.get(at..at + len as usize) else {
            break;
        };
        let data = lz4_flex::block::decompress(block, LZ4_LEGACY_BLOCK)
            .map_err(|e| format!("lz4: block at byte {}: {e}", at - 4))?;
        out.extend_from_slice(&data);
        at += len as usize;
    }
    if out.is_empty() {
        return Err("lz4: no data in the legacy frame".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uts_version_comes_from_the_banner() {
        let img = b"\0Linux version 6.1.0-56-amd64 (d@l) (gcc-12 (Debian 12.2.0) 12.2.0) # SMP PREEMPT_DYNAMIC Debian 6.1.192-2 (2026-11-16)\n\0\0Linux version 6.1.0-56-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14+deb12u1) 12.2.0, GNU ld (GNU Binutils for Debian) 2.40) #1 SMP PREEMPT_DYNAMIC Debian 6.1.192-2 (2026-11-16)\n\0";
        assert_eq!(
            uts_version(img, "6.1.0-56-amd64").as_deref(),
            Some("#1 SMP PREEMPT_DYNAMIC Debian 6.1.192-2 (2026-11-16)")
        );
        assert_eq!(uts_version(img, "6.1.0-57-amd64"), None);
    }

    #[test]
    fn banner_release_is_the_last_banners() {
        let img = b"\0Linux version 6.1.0-56-arm64 (d@l) # SMP x\n\0Linux version 6.1.0-56-arm64 (d@l) #1 SMP x\n";
        assert_eq!(banner_release(img).as_deref(), Some("6.1.0-56-arm64"));
        assert_eq!(banner_release(b"Linux version of nothing"), None);
        assert_eq!(banner_release(b"no banner at all"), None);
    }

    #[test]
    fn a_kernel_record_from_before_arm64_loads_as_x86_64() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kernel.json");
        fs::write(
            &p,
            r#"{"release":"6.1.0-56-amd64","bzimage":"/b","modules_dir":"/m","config":null,"source":"s"}"#,
        )
        .unwrap();
        let k = KernelInfo::load(&p).unwrap();
        assert_eq!((k.arch, k.image, k.version), (Arch::X86_64, None, None));
    }

    /// A gzipped arm64 Image whose banner names `release`.
    fn arm64_vmlinuz(release: &str) -> Vec<u8> {
        let mut img = vec![0u8; 64];
        img[arm64_image::MAGIC_OFFSET..][..4].copy_from_slice(&arm64_image::MAGIC);
        img.extend_from_slice(
            format!("Linux version {release} (d@l) (gcc) #1 SMP Debian 6.1.192-2 (2026-11-16)\n")
                .as_bytes(),
        );
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&img).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn an_arm64_vmlinuz_is_unpacked_and_its_version_recorded_when_the_release_agrees() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir_all(root.join("boot")).unwrap();
        fs::create_dir_all(root.join("usr/lib/modules/6.1.0-56-arm64")).unwrap();
        let vmlinuz = root.join("boot/vmlinuz-6.1.0-56-arm64");
        fs::write(&vmlinuz, arm64_vmlinuz("6.1.0-56-arm64")).unwrap();
        let mut info = locate_in_tree(&root, "pkg", Arch::Arm64).unwrap();
        assert_eq!(info.arch, Arch::Arm64);
        let out = dir.path().join("Image");
        unpack_arm64_image(&mut info, &out).unwrap();
        assert_eq!(info.image.as_deref(), Some(out.as_path()));
        assert_eq!(
            info.version.as_deref(),
            Some("#1 SMP Debian 6.1.192-2 (2026-11-16)")
        );
        let user = KernelInfo::from_paths(&out, &info.modules_dir).unwrap();
        assert_eq!(
            (user.arch, user.release.as_str(), user.version),
            (Arch::Arm64, "6.1.0-56-arm64", info.version.clone()),
            "a user's uncompressed Image is recognised too"
        );

        fs::write(&vmlinuz, arm64_vmlinuz("6.1.0-57-arm64")).unwrap();
        let err = unpack_arm64_image(&mut info, &out).unwrap_err();
        assert!(
            err.to_string().ends_with(
                "the banner says release \"6.1.0-57-arm64\", the package \"6.1.0-56-arm64\""
            ),
            "{err}"
        );
        fs::write(&vmlinuz, b"\x1f\x8b not really gzip").unwrap();
        let err = unpack_arm64_image(&mut info, &out).unwrap_err();
        assert!(matches!(err, KernelError::Arm64Image { .. }), "{err}");
    }

    #[test]
    fn apt_without_arm64_packages_is_told_how_to_learn_them() {
        let not_found = || KernelError::Command {
            cmd: "apt-cache depends linux-image-arm64:arm64".into(),
            reason: "E: No packages found".into(),
        };
        let e = foreign_hint(Arch::Arm64, "linux-image-arm64:arm64", not_found());
        assert_eq!(
            e.to_string(),
            "apt knows no arm64 packages (linux-image-arm64:arm64 not found): run \
             `dpkg --add-architecture arm64 && apt-get update` once, as root"
        );
        let native = foreign_hint(Arch::X86_64, "linux-image-amd64", not_found());
        assert!(matches!(native, KernelError::Command { .. }), "{native}");
    }

    #[test]
    fn parses_apt_cache_depends() {
        let out = "linux-image-amd64\n  Depends: linux-image-6.1.0-56-amd64\n";
        assert_eq!(
            parse_depends(out).as_deref(),
            Some("linux-image-6.1.0-56-amd64")
        );
        assert_eq!(parse_depends("linux-image-amd64\n"), None);
    }

    fn fake_bzimage(payload: &[u8]) -> Vec<u8> {
        let mut d = vec![0u8; 0x1000];
        d[0x1f1] = 3; // setup sectors -> protected-mode code at 4*512
        d[0x202..0x206].copy_from_slice(b"HdrS");
        d[0x20e..0x210].copy_from_slice(&0x300u16.to_le_bytes());
        d[0x500..0x50c].copy_from_slice(b"6.9.9-test x");
        d[0x248..0x24c].copy_from_slice(&16u32.to_le_bytes());
        d[0x24c..0x250].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        d.resize(0x800 + 16, 0);
        d.extend_from_slice(payload);
        d.extend_from_slice(&[1, 2, 3, 4]); // trailing size word, as the kernel appends
        d
    }

    #[test]
    fn extracts_gzip_and_xz_payloads() {
        let elf = b"\x7fELF-and-some-kernel-bytes".repeat(100);
        let dir = tempfile::tempdir().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&elf).unwrap();
        let mut xz = xz2::write::XzEncoder::new(Vec::new(), 1);
        xz.write_all(&elf).unwrap();
        for payload in [gz.finish().unwrap(), xz.finish().unwrap()] {
            let img = fake_bzimage(&payload);
            assert_eq!(bzimage_release(&img), Ok("6.9.9-test"));
            let (src, dst) = (dir.path().join("bz"), dir.path().join("vmlinux"));
            fs::write(&src, &img).unwrap();
            extract_vmlinux(&src, &dst).unwrap();
            assert_eq!(fs::read(&dst).unwrap(), elf);
        }
    }

    /// The kernel's `lz4 -l` framing around lz4_flex blocks, `block` input bytes each.
    fn lz4_legacy_frame(data: &[u8], block: usize) -> Vec<u8> {
        let mut f = LZ4_LEGACY_MAGIC.to_le_bytes().to_vec();
        for chunk in data.chunks(block) {
            let c = lz4_flex::block::compress(chunk);
            f.extend_from_slice(&(c.len() as u32).to_le_bytes());
            f.extend_from_slice(&c);
        }
        f
    }

    #[test]
    fn extracts_bzip2_lzma_and_lz4_payloads() {
        let elf: Vec<u8> = b"\x7fELF"
            .iter()
            .copied()
            .chain((0..300_000u32).map(|i| (i % 251) as u8 ^ (i / 4096) as u8))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let mut bz = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
        bz.write_all(&elf).unwrap();
        let opts = xz2::stream::LzmaOptions::new_preset(1).unwrap();
        let st = xz2::stream::Stream::new_lzma_encoder(&opts).unwrap();
        let mut lz = xz2::write::XzEncoder::new_stream(Vec::new(), st);
        lz.write_all(&elf).unwrap();
        // Small blocks so that the frame has several, as a real kernel's 8 MiB blocks do.
        for (name, payload) in [
            ("bzip2", bz.finish().unwrap()),
            ("lzma", lz.finish().unwrap()),
            ("lz4", lz4_legacy_frame(&elf, 65536)),
        ] {
            let (src, dst) = (dir.path().join("bz"), dir.path().join("vmlinux"));
            fs::write(&src, fake_bzimage(&payload)).unwrap();
            extract_vmlinux(&src, &dst).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(
                fs::read(&dst).unwrap() == elf,
                "{name} payload extracts exactly"
            );
        }
        assert_eq!(&lz4_legacy_frame(b"x", 1)[..4], &[0x02, 0x21, 0x4c, 0x18]);
    }

    #[test]
    fn damaged_lz4_block_is_named() {
        let mut f = lz4_legacy_frame(&b"\x7fELF".repeat(10_000), 8192);
        f[12] ^= 0xff;
        f[13] ^= 0xff;
        let err = decompress_payload(&f).unwrap_err();
        assert!(err.starts_with("lz4: block at byte 4"), "{err}");
    }

    #[test]
    fn refuses_lzo_and_unknown_compression_saying_how_to_proceed() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("bz");
        for (payload, want) in [
            (&b"\x89LZO\0\r\n\x1a\n\x10\x30"[..], "LZO-compressed"),
            (
                &b"QQQQ-not-a-compressor"[..],
                "unsupported payload compression (magic 51 51 51 51)",
            ),
        ] {
            fs::write(&src, fake_bzimage(payload)).unwrap();
            let err = extract_vmlinux(&src, &dir.path().join("v")).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains(want), "{msg}");
            assert!(msg.contains("scripts/extract-vmlinux"), "{msg}");
        }
    }
}
