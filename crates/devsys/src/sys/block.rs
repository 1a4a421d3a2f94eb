//! Block-device ioctls (include/uapi/linux/fs.h): `BLKFLSBUF`.

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

// BLKFLSBUF = _IO(0x12, 97).
nix::ioctl_none_bad!(
    /// `BLKFLSBUF`.
    ///
    /// # Safety
    ///
    /// `fd` must be an open block device (the request code means this only there).
    ioc_blkflsbuf,
    nix::request_code_none!(0x12, 97)
);

/// `BLKFLSBUF`: writes back and drops the kernel's cached blocks of the block device at
/// `path`. Anything else (a plain file, a missing path) is left alone: `Ok(false)`.
pub fn flush_buffers(path: &Path) -> std::io::Result<bool> {
    let Ok(f) = std::fs::File::open(path) else {
        return Ok(false);
    };
    if !f.metadata()?.file_type().is_block_device() {
        return Ok(false);
    }
    // SAFETY: the fd is an open block device (checked on the open file itself, so the node
    // cannot be swapped in between), whose generic block layer handles BLKFLSBUF; the ioctl
    // takes no argument.
    unsafe { ioc_blkflsbuf(f.as_raw_fd()) }?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_files_and_missing_paths_are_left_alone() {
        let f = tempfile::NamedTempFile::new().unwrap();
        assert!(!flush_buffers(f.path()).unwrap());
        assert!(!flush_buffers(Path::new("/nonexistent/store")).unwrap());
    }
}
