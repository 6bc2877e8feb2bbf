//! Launching the profiled command: fork a child that waits on a pipe, open the events on it, then let it exec.
//! (perf's `evlist__prepare_workload` does the same.) Exec failures come back through a close-on-exec pipe.
//! Unless it is kept, the command gets SIGKILL when rprof dies, even by SIGKILL (`PR_SET_PDEATHSIG`, set in
//! the child before exec), and SIGTERM when rprof ends before it.
//!
//! The program is found in PATH before the fork ([`Command::find`]), so the child makes one `execve`, the
//! command's own: a search in the child would show its failed `execve`s to a probe of the child's syscalls.
//! Its argument and environment arrays are built before the fork too, and the child makes the syscall itself
//! ([`raw_execve`]): once the events are enabled it calls no libc function and allocates nothing, which a probe
//! of libc (`c:malloc`, `c:execve`) would count as the command's.
use super::PerfError;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{ForkResult, Pid};
use std::ffi::{CStr, CString, OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A command to launch: its program, found before the fork, and its arguments (`argv[0]` as given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    pub program: PathBuf,
    pub argv: Vec<OsString>,
}

/// Where the program is searched when PATH is not set (glibc's `execvp` default).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

impl Command {
    /// `argv` with its program found as `execvp` finds it: a name with a `/` is a path; else the first
    /// executable regular file of that name in the directories of `path` (the value of PATH; an empty entry is
    /// the current directory). A name found nowhere stays as given, and [`Workload::prepare`] then fails with
    /// ENOENT.
    pub fn find<A: AsRef<OsStr>>(argv: &[A], path: Option<&OsStr>) -> Command {
        let argv: Vec<OsString> = argv.iter().map(|a| a.as_ref().to_os_string()).collect();
        let name = argv.first().cloned().unwrap_or_default();
        let program = if name.is_empty() || name.as_bytes().contains(&b'/') {
            PathBuf::from(&name)
        } else {
            let dirs = path.unwrap_or(OsStr::new(DEFAULT_PATH));
            dirs.as_bytes()
                .split(|&b| b == b':')
                .map(|d| match d {
                    b"" => Path::new(".").join(&name),
                    d => Path::new(OsStr::from_bytes(d)).join(&name),
                })
                .find(|p| is_executable(p))
                .unwrap_or_else(|| PathBuf::from(&name))
        };
        Command { program, argv }
    }
}

/// A regular file this process may execute.
fn is_executable(p: &Path) -> bool {
    p.metadata().is_ok_and(|m| m.is_file())
        && nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok()
}

/// Wait (up to 2 s) until the forked child blocks in its read of the go pipe, so that its own syscalls before it
/// (prctl, getppid, closes) come before the caller enables any event: a syscall probe then counts the command's
/// syscalls only (the read's return is the one left, which probe's sink drops). `/proc/PID/syscall` names the
/// syscall a blocked task is in (`0 ...`: read on x86-64).
fn wait_blocked_in_read(child: Pid) {
    let path = format!("/proc/{child}/syscall");
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(2) {
        match std::fs::read_to_string(&path) {
            Ok(s) if s.starts_with("0 ") => return,
            Ok(_) => std::thread::sleep(std::time::Duration::from_micros(100)),
            // Gone (it found rprof dead), or not readable: nothing to wait for.
            Err(_) => return,
        }
    }
}

/// `strings`' pointers, then the null pointer that ends an `argv` or `envp` array. The strings must outlive it.
fn ptr_array(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// execve(2) made with the `syscall` instruction itself, in the forked child once the events are enabled:
/// libc's `execve` (and `syscall`) are functions a probe of libc would count as the command's, and nix's
/// `execv` would also allocate its pointer array (a `malloc` counted as the command's). `argv` and `envp` end
/// with a null pointer ([`ptr_array`]). Returns the errno when the exec failed (it does not return otherwise).
fn raw_execve(path: &CStr, argv: &[*const libc::c_char], envp: &[*const libc::c_char]) -> i32 {
    debug_assert!(
        argv.last().is_some_and(|p| p.is_null()) && envp.last().is_some_and(|p| p.is_null())
    );
    let ret: i64;
    // SAFETY: the execve syscall (x86-64: number in rax, arguments in rdi, rsi, rdx; the kernel clobbers rcx
    // and r11, returns in rax). `path` is a NUL-terminated string, `argv` and `envp` null-terminated arrays of
    // NUL-terminated strings, all alive for the call. On success the process image is replaced; on failure
    // nothing in memory changed and rax holds -errno.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") libc::SYS_execve => ret,
            in("rdi") path.as_ptr(),
            in("rsi") argv.as_ptr(),
            in("rdx") envp.as_ptr(),
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    -(ret as i32)
}

impl std::fmt::Display for Command {
    /// The arguments joined by spaces (bytes that are not UTF-8 shown as U+FFFD).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let words: Vec<_> = self.argv.iter().map(|a| a.to_string_lossy()).collect();
        f.write_str(&words.join(" "))
    }
}

/// A forked child that has not exec'd yet, then the running command.
pub struct Workload {
    pid: Pid,
    go: Option<std::fs::File>,
    exec_status: Option<std::fs::File>,
    program: String,
    reaped: Option<WaitStatus>,
    /// `--keep-workload`: leave the command running when rprof ends or dies.
    keep: bool,
}

impl Workload {
    /// Fork a child that will exec `cmd` once [`Workload::start`] is called. Unless `keep`, the child dies
    /// with rprof.
    pub fn prepare(cmd: &Command, keep: bool) -> Result<Workload, PerfError> {
        let program = cmd
            .argv
            .first()
            .map(|a| a.to_string_lossy().into_owned())
            .unwrap_or_default();
        let exec_err = |source| PerfError::Exec {
            program: program.clone(),
            source,
        };
        let invalid = |e| exec_err(std::io::Error::new(std::io::ErrorKind::InvalidInput, e));
        let cargs: Vec<CString> = cmd
            .argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(invalid)?;
        let cpath = CString::new(cmd.program.as_os_str().as_bytes()).map_err(invalid)?;
        // A file without a `#!` line that the kernel cannot run (ENOEXEC) is run by /bin/sh, as execvp does.
        let sh = c"/bin/sh";
        let mut sh_args = vec![sh.to_owned(), cpath.clone()];
        sh_args.extend(cargs.iter().skip(1).cloned());
        let env: Vec<CString> = std::env::vars_os()
            .map(|(k, v)| {
                let mut kv = k.into_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                CString::new(kv)
            })
            .collect::<Result<_, _>>()
            .map_err(invalid)?;
        // Not found in PATH: execv would take the bare name relative to the current directory.
        if !cmd.program.as_os_str().as_bytes().contains(&b'/') {
            return Err(exec_err(std::io::Error::from_raw_os_error(libc::ENOENT)));
        }
        if cargs.is_empty() {
            return Err(exec_err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "empty command",
            )));
        }
        // Every array execve reads is built here, before the fork: the child allocates nothing (see
        // [`raw_execve`]).
        let (argv, sh_argv, envp) = (ptr_array(&cargs), ptr_array(&sh_args), ptr_array(&env));
        let (go_r, go_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| PerfError::Spawn(e.into()))?;
        let (st_r, st_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| PerfError::Spawn(e.into()))?;
        let parent = nix::unistd::getpid();
        // SAFETY: rprof is single-threaded when it launches the workload (record/probe call this before
        // starting any thread). The child only calls prctl, reads a pipe, makes the execve syscall and writes
        // an errno before _exit: it allocates nothing.
        match unsafe { nix::unistd::fork() }.map_err(|e| PerfError::Spawn(e.into()))? {
            ForkResult::Child => {
                drop(go_w);
                drop(st_r);
                // The signal comes when the thread that forked us ends: rprof's main thread, which lives as long
                // as rprof. If rprof died before prctl, getppid no longer names it.
                if !keep
                    && (nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err()
                        || nix::unistd::getppid() != parent)
                {
                    // SAFETY: _exit ends the forked child without running the parent's atexit handlers.
                    unsafe { libc::_exit(126) };
                }
                let mut go = std::fs::File::from(go_r);
                let mut byte = [0u8; 1];
                if !matches!(go.read(&mut byte), Ok(1)) {
                    // The parent gave up before starting us.
                    // SAFETY: _exit ends the forked child without running the parent's atexit handlers.
                    unsafe { libc::_exit(126) };
                }
                let mut err = raw_execve(&cpath, &argv, &envp);
                if err == libc::ENOEXEC {
                    err = raw_execve(sh, &sh_argv, &envp);
                }
                let mut st = std::fs::File::from(st_w);
                let _ = st.write_all(&err.to_ne_bytes());
                // SAFETY: as above.
                unsafe { libc::_exit(127) };
            }
            ForkResult::Parent { child } => {
                drop::<OwnedFd>(go_r);
                drop::<OwnedFd>(st_w);
                wait_blocked_in_read(child);
                Ok(Workload {
                    pid: child,
                    go: Some(go_w.into()),
                    exec_status: Some(st_r.into()),
                    program,
                    reaped: None,
                    keep,
                })
            }
        }
    }

    /// The child's pid.
    pub fn pid(&self) -> i32 {
        self.pid.as_raw()
    }

    /// Let the child exec; fails if exec failed.
    pub fn start(&mut self) -> Result<(), PerfError> {
        if let Some(mut go) = self.go.take() {
            go.write_all(&[1]).map_err(PerfError::Spawn)?;
        }
        if let Some(mut st) = self.exec_status.take() {
            let mut buf = [0u8; 4];
            if st.read_exact(&mut buf).is_ok() {
                let errno = i32::from_ne_bytes(buf);
                self.reaped = waitpid(self.pid, None).ok();
                return Err(PerfError::Exec {
                    program: self.program.clone(),
                    source: std::io::Error::from_raw_os_error(errno),
                });
            }
        }
        Ok(())
    }

    /// The exit status if the command has ended (reaps it).
    pub fn try_wait(&mut self) -> Option<WaitStatus> {
        if self.reaped.is_none() {
            match waitpid(self.pid, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => {}
                Ok(s) => self.reaped = Some(s),
                Err(_) => self.reaped = Some(WaitStatus::StillAlive),
            }
        }
        self.reaped
    }

    /// End the command and return its exit code for rprof to mirror: wait up to `grace` for it to end on its
    /// own, then (unless it is kept) send it SIGTERM and reap it, so that a command rprof ended reads as ended
    /// by SIGTERM (143), one a Ctrl-C ended as ended by SIGINT (130), as perf re-raises. None while a kept
    /// command runs on.
    pub fn end(&mut self, grace: Duration) -> Option<i32> {
        if self.go.is_some() {
            return None; // never started
        }
        let deadline = Instant::now() + grace;
        while self.try_wait().is_none() && !self.keep && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if self.try_wait().is_none() && !self.keep {
            let _ = kill(self.pid, Signal::SIGTERM);
            self.reaped = waitpid(self.pid, None).ok();
        }
        self.exit_code()
    }

    /// Exit code for rprof to mirror, when the command ended.
    pub fn exit_code(&self) -> Option<i32> {
        match self.reaped? {
            WaitStatus::Exited(_, code) => Some(code),
            WaitStatus::Signaled(_, sig, _) => Some(128 + sig as i32),
            _ => None,
        }
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        if self.go.is_some() {
            // Never started: the child is blocked on the pipe; closing it makes the child exit.
            self.go = None;
            let _ = waitpid(self.pid, None);
        } else if !self.keep && self.try_wait().is_none() {
            let _ = kill(self.pid, Signal::SIGTERM);
            let _ = waitpid(self.pid, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a program is found in PATH's directories in order (an empty entry is the current
    /// directory), that a name with a `/` is taken as it is, and that a name found nowhere stays bare.
    #[test]
    fn finds_programs_as_execvp() {
        let found = |argv: &[&str], path: &str| Command::find(argv, Some(OsStr::new(path))).program;
        assert_eq!(
            found(&["sh", "-c", "true"], "/nonexistent:/bin"),
            Path::new("/bin/sh")
        );
        assert_eq!(found(&["./x"], "/bin"), Path::new("./x"));
        assert_eq!(
            found(&["no-such-program-rprof"], "/bin:/usr/bin"),
            Path::new("no-such-program-rprof")
        );
        // A file without execute permission and a directory of the name are passed over.
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (plain, exe) = (dir.path().join("plain"), dir.path().join("exe"));
        for d in [&plain, &exe] {
            std::fs::create_dir_all(d.join("dir").join("prog")).unwrap();
        }
        std::fs::write(plain.join("prog"), "").unwrap();
        std::fs::write(exe.join("prog"), "").unwrap();
        std::fs::set_permissions(exe.join("prog"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!("{0}/dir:{0}:{1}", plain.display(), exe.display());
        assert_eq!(found(&["prog"], &path), exe.join("prog"));
        let cmd = Command::find(&["sh", "-c", "true"], None);
        assert_eq!(
            (cmd.program.as_path(), cmd.to_string()),
            (Path::new("/bin/sh"), "sh -c true".into())
        );
        let missing = Command::find(&["no-such-program-rprof"], None);
        let err = Workload::prepare(&missing, false)
            .err()
            .map(|e| e.to_string());
        assert!(
            err.is_some_and(|e| e.contains("No such file")),
            "{missing:?}"
        );
    }
}
