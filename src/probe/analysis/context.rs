//! The process context of each event: the process and thread, the command name and the CPU, values like the
//! fetched ones (`--by comm`, filters, traces). Names come from the kernel's COMM records as they happen (an
//! exec's, with `comm_exec`; a rename's) and pass from parent to child at each FORK; /proc is read only for
//! tasks that existed before the session (and are still there). A process's parent (`ppid`) comes from the
//! FORK record that made it, else from /proc (bcc's execsnoop falls back to /proc the same way).
use crate::probe::value::Value;
use crate::resolve::FastMap;
use std::sync::Arc;

/// Who an event ran for. Empty (but for the CPU) for an event in an interrupt: it belongs to no process, and
/// the task it interrupted is not named.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ctx {
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub comm: Option<Arc<str>>,
    pub cpu: Option<u32>,
    /// The process's parent process.
    pub ppid: Option<u32>,
}

impl Ctx {
    /// The value of context name `name` (`comm`, `pid`, `tid`, `cpu`; a pair's `start.comm`... is its call's,
    /// whose context is its START's).
    pub fn value(&self, name: &str) -> Option<Value> {
        match name.strip_prefix("start.").unwrap_or(name) {
            "comm" => self.comm.as_ref().map(|c| Value::Str(c.as_ref().into())),
            "pid" => self.pid.map(|v| Value::UInt(v.into())),
            "tid" => self.tid.map(|v| Value::UInt(v.into())),
            "cpu" => self.cpu.map(|v| Value::UInt(v.into())),
            "ppid" => self.ppid.map(|v| Value::UInt(v.into())),
            _ => None,
        }
    }
}

/// Exited threads whose names are kept (their last events may still be in the merge) before they are forgotten.
const EXITED_KEPT: usize = 4096;

/// The command name of every thread seen.
#[derive(Debug, Default)]
pub struct Comms {
    names: FastMap<u32, Arc<str>>,
    exited: Vec<u32>,
    /// process -> its parent process (None: not in /proc when asked, so not asked again).
    parents: FastMap<u32, Option<u32>>,
}

impl Comms {
    /// Thread `tid` is named `comm` from now on.
    pub fn set(&mut self, tid: u32, comm: Arc<str>) {
        self.names.insert(tid, comm);
    }

    /// Thread `tid` was forked by `parent`: it has its name (until it execs). An id the kernel used before (it
    /// recycles them: pid_max is 32768 here) names a new task: the name kept for the ended one is not its.
    pub fn fork(&mut self, tid: u32, parent: u32) {
        match self.get(parent) {
            Some(c) => self.names.insert(tid, c),
            None => self.names.remove(&tid),
        };
    }

    /// Process `pid` was forked by process `ppid`.
    pub fn set_parent(&mut self, pid: u32, ppid: u32) {
        self.parents.insert(pid, Some(ppid));
    }

    /// Thread `tid` ended; its name (and, for a process, its parent) is forgotten after [`EXITED_KEPT`] more
    /// exits.
    pub fn exit(&mut self, tid: u32) {
        self.exited.push(tid);
        if self.exited.len() > EXITED_KEPT {
            for t in self.exited.drain(..EXITED_KEPT / 2) {
                self.names.remove(&t);
                self.parents.remove(&t);
            }
        }
    }

    /// The parent of process `pid`: from its FORK record, else (a process older than the session) from
    /// /proc/PID/stat, while it is there.
    pub fn parent(&mut self, pid: u32) -> Option<u32> {
        if let Some(p) = self.parents.get(&pid) {
            return *p;
        }
        if pid == 0 {
            return None;
        }
        let ppid = proc_parent(pid);
        self.parents.insert(pid, ppid);
        ppid
    }

    /// The names of the tasks running now, from /proc: a task older than the session that ends before its
    /// first hit is read (a probe's events can be read after the task exited) keeps its name, as bpftrace's
    /// `comm`, read in the kernel at the event, has it. Later tasks are named by their COMM and FORK records.
    pub fn of_running_tasks() -> Comms {
        let mut comms = Comms::default();
        for pid in crate::process::all_pids() {
            for tid in crate::process::threads(pid).unwrap_or_default() {
                if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")) {
                    comms
                        .names
                        .insert(tid as u32, text.trim_end_matches('\n').into());
                }
            }
        }
        comms
    }

    /// The name of `tid`: from the records, else (a task older than the session) from /proc.
    pub fn get(&mut self, tid: u32) -> Option<Arc<str>> {
        if let Some(c) = self.names.get(&tid) {
            return Some(Arc::clone(c));
        }
        if tid == 0 {
            return None;
        }
        let text = std::fs::read_to_string(format!("/proc/{tid}/comm")).ok()?;
        let c: Arc<str> = text.trim_end_matches('\n').into();
        self.names.insert(tid, Arc::clone(&c));
        Some(c)
    }
}

/// The parent of process `pid` in /proc/PID/stat: `PID (COMM) STATE PPID ...`, read after the last `)` (COMM
/// may hold spaces and parentheses).
fn proc_parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that the tasks running when the session starts are named without /proc at the hit: this test's
    /// own thread, and a child that has exited (and been reaped) since.
    #[test]
    fn running_tasks_are_named_at_the_start() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut c = Comms::of_running_tasks();
        child.wait().unwrap();
        assert_eq!(c.get(child.id()).as_deref(), Some("sleep"));
        let me = std::process::id();
        let mine = std::fs::read_to_string(format!("/proc/{me}/comm")).unwrap();
        assert_eq!(c.get(me).as_deref(), Some(mine.trim_end()));
    }

    /// Check that a child has its parent's name until its exec names it, and that exited names are bounded.
    #[test]
    fn names_follow_forks_and_execs() {
        let mut c = Comms::default();
        c.set(4_000_001, "sh".into());
        c.fork(4_000_002, 4_000_001);
        assert_eq!(c.get(4_000_002).as_deref(), Some("sh"));
        c.set(4_000_002, "ls".into());
        assert_eq!(c.get(4_000_002).as_deref(), Some("ls"));
        // The id of an ended task, given to a new one: the parent's name, not the ended task's.
        c.set(4_000_003, "true".into());
        c.exit(4_000_003);
        c.fork(4_000_003, 4_000_001);
        assert_eq!(c.get(4_000_003).as_deref(), Some("sh"));
        assert_eq!(c.get(4_000_001).as_deref(), Some("sh"));
        c.set_parent(4_000_002, 4_000_001);
        assert_eq!(c.parent(4_000_002), Some(4_000_001));
        let me = std::process::id();
        let parent = std::os::unix::process::parent_id();
        assert_eq!(c.parent(me), Some(parent), "from /proc");
        assert_eq!(c.parent(4_100_000), None, "no such process");
        c.set_parent(4_100_000, 1);
        assert_eq!(c.parent(4_100_000), Some(1), "its FORK record, read later");
        for t in 0..(EXITED_KEPT as u32 + 1) {
            c.exit(4_000_001 + t);
        }
        assert_eq!(c.parent(4_000_002), None);
        assert_eq!(c.get(4_000_001), None);
        let ctx = Ctx {
            pid: Some(7),
            comm: Some("ls".into()),
            ..Ctx::default()
        };
        assert_eq!(ctx.value("comm"), Some(Value::Str("ls".into())));
        assert_eq!(
            (ctx.value("pid"), ctx.value("tid")),
            (Some(Value::UInt(7)), None)
        );
    }
}
