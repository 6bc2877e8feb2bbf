//! The supervisor: no probe outlives rprof, even after a SIGKILL.
//!
//! Every probe session starts a small process, rprof itself run again (`/proc/self/exe`, so a fresh,
//! single-threaded process, and the same binary even if the file was replaced) with the hidden argument
//! [`ARG`], in a process group of its own (Ctrl-C at the terminal does not reach it). It holds the read end of
//! a pipe whose write end only the session holds, and blocks reading it. The pipe closes when the session
//! drops its end after removing its probes itself, or when the kernel closes rprof's files as it dies, however
//! it dies. Then the supervisor removes the session's tracefs instance and probe group, retrying while the dead
//! session's perf events and ring files are still being closed, and exits.
//!
//! A pipe, not a pidfd or `PR_SET_PDEATHSIG`: it needs nothing of the kernel beyond pipes, the supervisor
//! learns of the death without polling, and it cannot mistake a reused pid for its session.
use super::group::GROUP_PREFIX;
use crate::tracefs::instance::Instance;
use crate::tracefs::{Tracefs, TracefsError};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// The hidden first argument that makes rprof a supervisor: `rprof __probe-supervisor TRACEFS GROUP`.
pub const ARG: &str = "__probe-supervisor";

/// How long the supervisor keeps trying to remove what a dead session left (its files may close slowly).
const GIVE_UP: Duration = Duration::from_secs(10);

/// A running supervisor, from the session's side. Dropping it closes the pipe and waits for the supervisor
/// to finish.
pub struct Supervisor {
    child: Child,
    pipe: Option<ChildStdin>,
}

impl Supervisor {
    /// Start the supervisor of the probe group `group` (and the instance of the same name) in `tracefs`.
    pub fn spawn(tracefs: &Tracefs, group: &str) -> std::io::Result<Supervisor> {
        let mut child = Command::new("/proc/self/exe")
            .arg(ARG)
            .arg(tracefs.root())
            .arg(group)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let pipe = child.stdin.take();
        Ok(Supervisor { child, pipe })
    }
}

impl Supervisor {
    /// The supervisor's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.pipe = None;
        let _ = self.child.wait();
    }
}

/// The supervisor's side: wait until the session's pipe (standard input) closes, then remove the instance and
/// the group `group` of the tracefs at `root`. Only rprof's own groups are touched.
pub fn supervise(root: &Path, group: &str) -> Result<(), TracefsError> {
    let mut buf = [0u8; 64];
    let mut stdin = std::io::stdin().lock();
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    if !group.starts_with(GROUP_PREFIX) || group.contains('/') {
        return Ok(());
    }
    let tracefs = Tracefs::at(root);
    let deadline = Instant::now() + GIVE_UP;
    loop {
        let removed = remove(&tracefs, group);
        if removed.is_ok() || Instant::now() >= deadline {
            return removed;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Remove the instance (its enabled events keep the probes busy), then the group.
fn remove(tracefs: &Tracefs, group: &str) -> Result<(), TracefsError> {
    if tracefs.instance_supported() && tracefs.instances()?.iter().any(|i| i == group) {
        Instance::open_existing(tracefs, group)?.remove()?;
    }
    tracefs.remove_group(group)
}
