//! One perf event file descriptor and its ioctls.
use super::{Attr, PerfError};
use perf_event_open_sys as sys;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// An open perf event.
#[derive(Debug)]
pub struct PerfEvent {
    fd: OwnedFd,
    id: u64,
}

impl PerfEvent {
    /// perf_event_open(attr, pid, cpu): `pid` -1 means every task on `cpu`; `cpu` -1 means any CPU.
    pub fn open(attr: &Attr, pid: i32, cpu: i32) -> Result<PerfEvent, PerfError> {
        Self::open_with(attr, pid, cpu, 0)
    }

    /// perf_event_open(attr, cgroup, cpu, PERF_FLAG_PID_CGROUP): the tasks of the cgroup whose directory
    /// `cgroup` is open (and of its descendants) while they run on `cpu`, which must be a CPU (not -1).
    pub fn open_cgroup(
        attr: &Attr,
        cgroup: BorrowedFd<'_>,
        cpu: i32,
    ) -> Result<PerfEvent, PerfError> {
        Self::open_with(
            attr,
            cgroup.as_raw_fd(),
            cpu,
            sys::bindings::PERF_FLAG_PID_CGROUP as _,
        )
    }

    fn open_with(attr: &Attr, pid: i32, cpu: i32, flags: u64) -> Result<PerfEvent, PerfError> {
        let cgroup = flags & sys::bindings::PERF_FLAG_PID_CGROUP as u64 != 0;
        let mut raw = attr.raw;
        // SAFETY: `raw` is a fully initialized perf_event_attr whose `size` matches what we declare; the kernel
        // only reads it (and may write back `size` on E2BIG). With PERF_FLAG_PID_CGROUP, `pid` is a directory
        // fd the caller keeps open for the call (a BorrowedFd); the kernel takes its own reference to the
        // cgroup. No group fd; CLOEXEC so children don't inherit it.
        let fd = unsafe {
            sys::perf_event_open(
                &mut raw,
                pid,
                cpu,
                -1,
                (sys::bindings::PERF_FLAG_FD_CLOEXEC as u64 | flags) as _,
            )
        };
        if fd < 0 {
            let err = std::io::Error::last_os_error();
            let target = match cgroup {
                true => "a cgroup".to_string(),
                false => format!("pid={pid}"),
            };
            return Err(match err.raw_os_error() {
                Some(libc::EACCES) | Some(libc::EPERM) => PerfError::Denied {
                    paranoid: super::paranoid_level(),
                    source: err,
                },
                Some(libc::ESRCH) if !cgroup => PerfError::NoSuchProcess { pid },
                _ => PerfError::Open {
                    what: format!("{attr:?} {target} cpu={cpu}"),
                    source: err,
                },
            });
        }
        // SAFETY: perf_event_open returned a new, valid file descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut id = 0u64;
        // SAFETY: PERF_EVENT_IOC_ID writes one u64 through the pointer, which points to a live local.
        let rc = unsafe { sys::ioctls::ID(fd.as_raw_fd(), &mut id) };
        if rc < 0 {
            return Err(PerfError::Ioctl {
                what: "ID",
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(PerfEvent { fd, id })
    }

    /// The kernel's id of this event (PERF_SAMPLE_ID / IDENTIFIER values).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Start counting/sampling.
    pub fn enable(&self) -> Result<(), PerfError> {
        // SAFETY: ENABLE takes no pointer; the fd is a perf event we own.
        let rc = unsafe { sys::ioctls::ENABLE(self.fd.as_raw_fd(), 0) };
        check(rc, "ENABLE")
    }

    /// Stop counting/sampling.
    pub fn disable(&self) -> Result<(), PerfError> {
        // SAFETY: DISABLE takes no pointer; the fd is a perf event we own.
        let rc = unsafe { sys::ioctls::DISABLE(self.fd.as_raw_fd(), 0) };
        check(rc, "DISABLE")
    }

    /// Send this event's records into `target`'s ring buffer (both must be on the same CPU, or both per task).
    pub fn set_output(&self, target: &PerfEvent) -> Result<(), PerfError> {
        // SAFETY: SET_OUTPUT takes another perf event fd by value; both fds are open perf events we own.
        let rc = unsafe { sys::ioctls::SET_OUTPUT(self.fd.as_raw_fd(), target.fd.as_raw_fd()) };
        check(rc, "SET_OUTPUT")
    }

    /// The value of a counting event (with `inherit`, the children's counts included).
    pub fn read_count(&self) -> Result<u64, PerfError> {
        let mut b = [0u8; 8];
        match nix::unistd::read(&self.fd, &mut b) {
            Ok(8) => Ok(u64::from_ne_bytes(b)),
            Ok(n) => Err(PerfError::Ioctl {
                what: "read of a counter",
                source: std::io::Error::other(format!("{n} bytes instead of 8")),
            }),
            Err(e) => Err(PerfError::Ioctl {
                what: "read of a counter",
                source: e.into(),
            }),
        }
    }

    /// The value of a counting event opened with [`Attr::read_times`]: (count, time enabled, time running),
    /// the times in nanoseconds.
    pub fn read_timed(&self) -> Result<(u64, u64, u64), PerfError> {
        let mut b = [0u8; 24];
        match nix::unistd::read(&self.fd, &mut b) {
            Ok(24) => {
                let word =
                    |i: usize| u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
                Ok((word(0), word(1), word(2)))
            }
            Ok(n) => Err(PerfError::Ioctl {
                what: "read of a counter",
                source: std::io::Error::other(format!("{n} bytes instead of 24")),
            }),
            Err(e) => Err(PerfError::Ioctl {
                what: "read of a counter",
                source: e.into(),
            }),
        }
    }

    /// Set a tracepoint filter expression (e.g. "common_pid == 42").
    pub fn set_filter(&self, filter: &str) -> Result<(), PerfError> {
        let c = std::ffi::CString::new(filter).map_err(|e| PerfError::Ioctl {
            what: "SET_FILTER",
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
        })?;
        // SAFETY: the kernel reads a NUL-terminated string through the pointer, which `c` keeps alive.
        let rc = unsafe { sys::ioctls::SET_FILTER(self.fd.as_raw_fd(), c.as_ptr() as *mut _) };
        check(rc, "SET_FILTER")
    }
}

impl AsFd for PerfEvent {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn check(rc: i32, what: &'static str) -> Result<(), PerfError> {
    if rc < 0 {
        Err(PerfError::Ioctl {
            what,
            source: std::io::Error::last_os_error(),
        })
    } else {
        Ok(())
    }
}
