//! Reading another process's memory with `process_vm_readv` (nix's safe wrapper): no ptrace stop, the target
//! keeps running while it is read, so what is read can change under the read (the caller checks what it reads).
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;
use std::io::IoSliceMut;

/// The most iovecs one `process_vm_readv` takes (Linux's UIO_MAXIOV).
const IOV_MAX: usize = 1024;

/// Why a read of the target's memory failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The process is gone (ESRCH).
    #[error("the process exited")]
    Exited,
    /// The address is not mapped (EFAULT), or fewer bytes than asked were readable.
    #[error("address {0:#x} is not readable")]
    Unmapped(u64),
    /// Not allowed (EPERM): another user's process without CAP_SYS_PTRACE.
    #[error("not allowed to read the process's memory (run as root or with CAP_SYS_PTRACE)")]
    Denied,
}

/// The memory of one process.
#[derive(Clone, Copy, Debug)]
pub struct Memory {
    pid: i32,
}

impl Memory {
    pub fn new(pid: u32) -> Memory {
        Memory { pid: pid as i32 }
    }

    /// `buf.len()` bytes at `addr`.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        if addr == 0 {
            return Err(ReadError::Unmapped(0));
        }
        let len = buf.len();
        self.readv(
            &mut [IoSliceMut::new(buf)],
            &[RemoteIoVec {
                base: addr as usize,
                len,
            }],
        )
    }

    /// One `process_vm_readv`: every byte the remote iovecs name, into `local`.
    fn readv(&self, local: &mut [IoSliceMut<'_>], remote: &[RemoteIoVec]) -> Result<(), ReadError> {
        let addr = remote.first().map_or(0, |r| r.base as u64);
        let want: usize = remote.iter().map(|r| r.len).sum();
        match process_vm_readv(Pid::from_raw(self.pid), local, remote) {
            Ok(n) if n == want => Ok(()),
            Ok(_) | Err(nix::errno::Errno::EFAULT) => Err(ReadError::Unmapped(addr)),
            Err(nix::errno::Errno::ESRCH) => Err(ReadError::Exited),
            Err(nix::errno::Errno::EPERM) => Err(ReadError::Denied),
            Err(_) => Err(ReadError::Unmapped(addr)),
        }
    }

    /// `len` bytes at `addr`.
    pub fn bytes(&self, addr: u64, len: usize) -> Result<Vec<u8>, ReadError> {
        let mut buf = vec![0; len];
        self.read(addr, &mut buf)?;
        Ok(buf)
    }

    /// The u64s at `addrs`, in one `process_vm_readv` per [`IOV_MAX`] of them.
    pub fn words(&self, addrs: &[u64]) -> Result<Vec<u64>, ReadError> {
        let mut out = Vec::with_capacity(addrs.len());
        for chunk in addrs.chunks(IOV_MAX) {
            if chunk.contains(&0) {
                return Err(ReadError::Unmapped(0));
            }
            let remote: Vec<RemoteIoVec> = chunk
                .iter()
                .map(|&a| RemoteIoVec {
                    base: a as usize,
                    len: 8,
                })
                .collect();
            let mut buf = vec![0u8; 8 * chunk.len()];
            self.readv(&mut [IoSliceMut::new(&mut buf)], &remote)?;
            out.extend((0..chunk.len()).map(|i| u64_at(&buf, 8 * i)));
        }
        Ok(out)
    }

    pub fn u64(&self, addr: u64) -> Result<u64, ReadError> {
        let mut b = [0; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }
}

/// The u64 at `offset` of `buf` (0 past its end).
pub fn u64_at(buf: &[u8], offset: usize) -> u64 {
    buf.get(offset..offset + 8)
        .map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
}

/// The i32 at `offset` of `buf` (0 past its end).
pub fn i32_at(buf: &[u8], offset: usize) -> i32 {
    buf.get(offset..offset + 4)
        .map_or(0, |b| i32::from_ne_bytes(b.try_into().unwrap_or([0; 4])))
}
