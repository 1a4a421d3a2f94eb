//! The kernel random generator's ioctls on `/dev/urandom` (include/uapi/linux/random.h):
//! `RNDADDENTROPY` to mix in and credit fresh entropy, `RNDRESEEDCRNG` to reseed the CRNG
//! from it at once; and the CPU's own generator, x86 `RDRAND`.

use std::fs::File;
use std::os::fd::AsRawFd;

/// The node the ioctls are issued on.
pub const URANDOM: &str = "/dev/urandom";

// RNDADDENTROPY = _IOW('R', 0x03, int[2]); RNDRESEEDCRNG = _IO('R', 0x07).
nix::ioctl_write_ptr_bad!(
    /// `RNDADDENTROPY`.
    ///
    /// # Safety
    ///
    /// `fd` must be an open `/dev/urandom` (or `/dev/random`), and `data` must point to a
    /// `struct rand_pool_info`: two ints (entropy bits, buffer bytes `n`) followed by at
    /// least `n` readable bytes, live until the call returns.
    ioc_add_entropy,
    nix::request_code_write!(b'R', 0x03, 2 * std::mem::size_of::<libc::c_int>()),
    libc::c_int
);
nix::ioctl_none_bad!(
    /// `RNDRESEEDCRNG`.
    ///
    /// # Safety
    ///
    /// `fd` must be an open `/dev/urandom` (or `/dev/random`).
    ioc_reseed_crng,
    nix::request_code_none!(b'R', 0x07)
);

/// `/dev/urandom`, open for the random ioctls.
#[derive(Debug)]
pub struct RandomDev {
    file: File,
}

impl RandomDev {
    /// Opens [`URANDOM`] for writing.
    pub fn open() -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new().write(true).open(URANDOM)?;
        Ok(Self { file })
    }

    /// `RNDADDENTROPY`: mixes `data` into the input pool and credits the first
    /// `credited_bytes` of it as entropy (needs CAP_SYS_ADMIN).
    pub fn add_entropy(&self, data: &[u8], credited_bytes: usize) -> std::io::Result<()> {
        let info = rand_pool_info(data, credited_bytes)?;
        // SAFETY: the fd is /dev/urandom (only `open` makes a RandomDev). `info` is a
        // `struct rand_pool_info {int entropy_count; int buf_size; __u32 buf[];}` laid out as
        // ints, with at least buf_size bytes of buffer after the two header ints (see
        // `rand_pool_info`); the kernel only reads it, and it outlives the call.
        unsafe { ioc_add_entropy(self.file.as_raw_fd(), info.as_ptr()) }?;
        Ok(())
    }

    /// `RNDRESEEDCRNG`: reseeds the CRNG from the input pool now (needs CAP_SYS_ADMIN).
    pub fn reseed_crng(&self) -> std::io::Result<()> {
        // SAFETY: the fd is /dev/urandom; RNDRESEEDCRNG takes no argument.
        unsafe { ioc_reseed_crng(self.file.as_raw_fd()) }?;
        Ok(())
    }
}

/// `struct rand_pool_info` for `data`, as a vector of ints: entropy count in bits (at most
/// what `data` holds), buffer size in bytes, then `data` zero-padded to whole ints.
fn rand_pool_info(data: &[u8], credited_bytes: usize) -> std::io::Result<Vec<libc::c_int>> {
    let too_big = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "entropy too large");
    let bits = credited_bytes
        .min(data.len())
        .checked_mul(8)
        .ok_or_else(too_big)?;
    let mut info = vec![
        libc::c_int::try_from(bits).map_err(|_| too_big())?,
        libc::c_int::try_from(data.len()).map_err(|_| too_big())?,
    ];
    info.extend(data.chunks(4).map(|c| {
        let mut w = [0u8; 4];
        w[..c.len()].copy_from_slice(c);
        libc::c_int::from_ne_bytes(w)
    }));
    Ok(info)
}

/// `words` values from the CPU's RDRAND, or fewer (none) when the CPU lacks it or it fails.
pub fn cpu_random(words: usize) -> Vec<u64> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("rdrand") {
        let mut out = Vec::with_capacity(words);
        for _ in 0..words {
            let mut v = 0u64;
            // SAFETY: the CPU supports RDRAND (detected above), which is all the intrinsic
            // requires; it writes one u64 through a reference to a live local.
            if unsafe { std::arch::x86_64::_rdrand64_step(&mut v) } == 1 {
                out.push(v);
            }
        }
        return out;
    }
    let _ = words;
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_info_has_header_and_padded_buffer() {
        let info = rand_pool_info(&[1, 2, 3, 4, 5], 4).unwrap();
        assert_eq!(info.len(), 2 + 2);
        assert_eq!(
            (info[0], info[1]),
            (32, 5),
            "4 bytes credited, 5 in the buffer"
        );
        assert_eq!(info[2], libc::c_int::from_ne_bytes([1, 2, 3, 4]));
        assert_eq!(info[3], libc::c_int::from_ne_bytes([5, 0, 0, 0]));
        // Never credits more than it carries.
        assert_eq!(rand_pool_info(&[9; 8], 100).unwrap()[0], 64);
        assert_eq!(rand_pool_info(&[], 0).unwrap(), vec![0, 0]);
    }

    #[test]
    fn cpu_random_yields_at_most_what_was_asked() {
        let v = cpu_random(4);
        assert!(v.len() <= 4);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("rdrand") && v.len() == 4 {
            // Four equal 64-bit draws would mean a broken generator.
            assert!(v.iter().any(|&x| x != v[0]), "{v:?}");
        }
    }
}
