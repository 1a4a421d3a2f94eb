//! How command bytes reach a TPM and the response comes back: the kernel's character devices
//! (`/dev/tpmrm0`, the resource-managed one, else `/dev/tpm0`), where one `write` carries a
//! whole command and one `read` returns the whole response; and a swtpm TCP data port, a
//! byte stream where the response's length comes from its header.

use crate::error::TpmError;
use crate::marshal::{HEADER_LEN, MAX_RESPONSE};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Sends one command and returns its response, whole.
pub trait Transport {
    /// Sends `command` and returns the response bytes. The caller checks the response.
    fn transact(&mut self, command: &[u8]) -> Result<Vec<u8>, io::Error>;
}

impl<T: Transport + ?Sized> Transport for &mut T {
    fn transact(&mut self, command: &[u8]) -> Result<Vec<u8>, io::Error> {
        (**self).transact(command)
    }
}

/// The kernel's in-kernel resource manager: transient handles are per open file and flushed
/// when it closes.
pub const TPMRM_PATH: &str = "/dev/tpmrm0";
/// The raw TPM device: one user at a time, transient handles are global.
pub const TPM_PATH: &str = "/dev/tpm0";

/// A TPM character device.
#[derive(Debug)]
pub struct DeviceTransport {
    file: File,
    path: PathBuf,
}

impl DeviceTransport {
    /// Opens [`TPMRM_PATH`], falling back to [`TPM_PATH`] when it does not exist.
    pub fn open() -> Result<Self, TpmError> {
        match Self::open_path(Path::new(TPMRM_PATH)) {
            Err(TpmError::Open { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                match Self::open_path(Path::new(TPM_PATH)) {
                    Err(TpmError::Open { source, .. })
                        if source.kind() == io::ErrorKind::NotFound =>
                    {
                        Err(TpmError::NoDevice {
                            resource_manager: TPMRM_PATH.into(),
                            direct: TPM_PATH.into(),
                        })
                    }
                    other => other,
                }
            }
            other => other,
        }
    }

    /// Opens the TPM device at `path`.
    pub fn open_path(path: &Path) -> Result<Self, TpmError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|source| TpmError::Open {
                path: path.to_owned(),
                source,
            })?;
        Ok(DeviceTransport {
            file,
            path: path.to_owned(),
        })
    }

    /// The device this transport talks to.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Transport for DeviceTransport {
    fn transact(&mut self, command: &[u8]) -> Result<Vec<u8>, io::Error> {
        // The driver takes a command in one write and refuses a partial one.
        let written = self.file.write(command)?;
        if written != command.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!(
                    "{}: wrote {written} of {} command bytes",
                    self.path.display(),
                    command.len()
                ),
            ));
        }
        let mut buf = vec![0u8; MAX_RESPONSE];
        let n = self.file.read(&mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }
}

/// How long a TCP transport waits for a response before giving up.
pub const TCP_TIMEOUT: Duration = Duration::from_secs(60);

/// A swtpm (`swtpm socket --server type=tcp`) data port, or anything speaking its framing.
#[derive(Debug)]
pub struct TcpTransport {
    stream: TcpStream,
}

impl TcpTransport {
    /// Connects to the data port at `addr`; reads and writes time out after [`TCP_TIMEOUT`].
    pub fn connect(addr: impl ToSocketAddrs) -> io::Result<Self> {
        let stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(TCP_TIMEOUT))?;
        stream.set_write_timeout(Some(TCP_TIMEOUT))?;
        stream.set_nodelay(true)?;
        Ok(TcpTransport { stream })
    }
}

/// Reads one response from a byte stream: the header, then the rest its size field says.
fn read_framed(r: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; HEADER_LEN];
    r.read_exact(&mut buf)?;
    let size = u32::from_be_bytes([buf[2], buf[3], buf[4], buf[5]]) as usize;
    if !(HEADER_LEN..=MAX_RESPONSE).contains(&size) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("response header says {size} bytes (must be {HEADER_LEN} to {MAX_RESPONSE})"),
        ));
    }
    buf.resize(size, 0);
    r.read_exact(&mut buf[HEADER_LEN..])?;
    Ok(buf)
}

impl Transport for TcpTransport {
    fn transact(&mut self, command: &[u8]) -> Result<Vec<u8>, io::Error> {
        self.stream.write_all(command)?;
        read_framed(&mut self.stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framed_read_takes_exactly_the_size_in_the_header() {
        let mut stream: &[u8] = &[0x80, 0x01, 0, 0, 0, 12, 0, 0, 0, 0, 0xAB, 0xCD, 0xEE];
        assert_eq!(
            read_framed(&mut stream).unwrap(),
            [0x80, 0x01, 0, 0, 0, 12, 0, 0, 0, 0, 0xAB, 0xCD]
        );
        assert_eq!(stream, [0xEE]);
    }

    #[test]
    fn framed_read_refuses_absurd_sizes_and_short_streams() {
        let mut tiny: &[u8] = &[0x80, 0x01, 0, 0, 0, 4, 0, 0, 0, 0];
        assert_eq!(
            read_framed(&mut tiny).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        let mut huge: &[u8] = &[0x80, 0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0];
        let e = read_framed(&mut huge).unwrap_err();
        assert!(e.to_string().contains("4294967295"), "{e}");
        let mut short: &[u8] = &[0x80, 0x01, 0, 0, 0, 20, 0, 0, 0, 0, 1];
        assert_eq!(
            read_framed(&mut short).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }

    #[test]
    fn missing_device_path_is_an_open_error_with_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tpmrm9");
        match DeviceTransport::open_path(&path) {
            Err(TpmError::Open { path: p, source }) => {
                assert_eq!(p, path);
                assert_eq!(source.kind(), io::ErrorKind::NotFound);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn device_transport_writes_once_and_reads_once() {
        // A regular file stands in for the device: the command is written, then the read
        // continues from the file position, where a canned response was placed.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tpm");
        let command = [0x80, 0x01, 0, 0, 0, 10, 0, 0, 0x01, 0x7B];
        let response = [0x80, 0x01, 0, 0, 0, 10, 0, 0, 0x01, 0x01];
        let mut content = vec![0u8; command.len()];
        content.extend_from_slice(&response);
        std::fs::write(&path, &content).unwrap();
        let mut t = DeviceTransport::open_path(&path).unwrap();
        assert_eq!(t.path(), path);
        assert_eq!(t.transact(&command).unwrap(), response);
        assert_eq!(&std::fs::read(&path).unwrap()[..10], command);
    }
}
