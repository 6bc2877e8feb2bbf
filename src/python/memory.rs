//! Reading another process's memory with `process_vm_readv` (nix's safe wrapper): no ptrace stop, the target
//! keeps running while it is read, so what is read can change under the read (the caller checks what it reads).
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;
use std::io::IoSliceMut;

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
        let remote = [RemoteIoVec {
            base: addr as usize,
            len,
        }];
        let mut local = [IoSliceMut::new(buf)];
        match process_vm_readv(Pid::from_raw(self.pid), &mut local, &remote) {
            Ok(n) if n == len => Ok(()),
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
