//! Builtins: `pid tid uid gid nsecs elapsed cpu comm cgroup rand numaid probe func username cpid kstack
//! ustack`. In a block without an event (BEGIN, END, `interval`) they describe this process, as bpftrace's
//! describe bpftrace's own process there (its `comm` is `bpftrace`, rprof's is `rprof`).
use super::exec::Exec;
use super::Event;
use crate::bt::value::{
    Frame, Int, IntType, Stack, StackKind, StackMode, Value, DEFAULT_STACK_LIMIT,
};
use std::hash::{BuildHasher, Hasher};

impl Exec<'_, '_, '_> {
    /// The value of the builtin `name`.
    pub(super) fn builtin(&mut self, name: &str) -> Value {
        let ev = self.ev;
        match name {
            "pid" => Value::uint(ev.map_or(u64::from(std::process::id()), |e| u64::from(e.pid))),
            "tid" => {
                Value::uint(ev.map_or(nix::unistd::gettid().as_raw() as u64, |e| u64::from(e.tid)))
            }
            "uid" => Value::uint(ev.map_or(u64::from(nix::unistd::getuid().as_raw()), |e| {
                u64::from(e.uid)
            })),
            "gid" => Value::uint(ev.map_or(u64::from(nix::unistd::getgid().as_raw()), |e| {
                u64::from(e.gid)
            })),
            "nsecs" => Value::uint(self.now_ns),
            "elapsed" => Value::uint(
                self.now_ns
                    .saturating_sub(self.rt.start_ns.unwrap_or(self.now_ns)),
            ),
            "cpu" => Value::uint(ev.map_or_else(this_cpu, |e| u64::from(e.cpu))),
            "comm" => Value::Str(ev.map_or_else(this_comm, |e| e.comm.to_vec())),
            "cgroup" | "numaid" => Value::uint(0),
            "rand" => Value::uint(self.rand()),
            "probe" => Value::Str(self.probe_name().into_bytes()),
            "func" => Value::Str(ev.map_or(Vec::new(), |e| e.func.as_bytes().to_vec())),
            "username" => Value::Str(self.username().into_bytes()),
            "cpid" => Value::Int(Int::new(
                i64::from(self.rt.opts.cpid.unwrap_or(0)),
                IntType::U32,
            )),
            "kstack" => self.stack(StackKind::Kernel, StackMode::Bpftrace, DEFAULT_STACK_LIMIT),
            "ustack" => self.stack(StackKind::User, StackMode::Bpftrace, DEFAULT_STACK_LIMIT),
            _ => {
                let text = format!("the builtin {name} is not given to this block (read as 0)");
                self.unsupported(&text)
            }
        }
    }

    /// `kstack`, `ustack(perf, 5)`: the event's frames, cut to `limit` (frames the session left unresolved
    /// named through the event's [`Symbols`](super::Symbols)); an empty stack without an event.
    pub(super) fn stack(&mut self, kind: StackKind, mode: StackMode, limit: usize) -> Value {
        let (frames, pid) = match self.ev {
            Some(ev) => {
                let frames = match kind {
                    StackKind::Kernel => ev.kstack,
                    StackKind::User => ev.ustack,
                };
                let pid = if kind == StackKind::User { ev.pid } else { 0 };
                let frames = frames.unwrap_or(&[]).iter().map(|f| resolved(ev, kind, f));
                (frames.collect(), pid)
            }
            None => (Vec::new(), 0),
        };
        Value::Stack(Stack::new(kind, mode, limit, pid, frames))
    }

    /// `probe`: the event's, or the block's own attach point (BEGIN, END, `interval:s:1`).
    fn probe_name(&self) -> String {
        match self.ev {
            Some(ev) => ev.probe.to_string(),
            None => {
                let specs = self.rt.checked.probes.get(self.block);
                super::setup::probe_name(specs.map_or(&[], |s| s.as_slice()))
            }
        }
    }

    /// `username`: the name of the event's uid (or the uid as a number where it has none).
    fn username(&self) -> String {
        let uid = self.ev.map_or(nix::unistd::getuid().as_raw(), |e| e.uid);
        match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
            Ok(Some(user)) => user.name,
            _ => uid.to_string(),
        }
    }

    /// `rand`: a 32-bit pseudo-random number (bpftrace's `bpf_get_prandom_u32`).
    fn rand(&mut self) -> u64 {
        self.rt.rand_seq += 1;
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(self.rt.rand_seq);
        h.finish() & 0xffff_ffff
    }
}

/// The CPU this thread runs on.
fn this_cpu() -> u64 {
    nix::sched::sched_getcpu().map_or(0, |c| c as u64)
}

/// This thread's command name.
fn this_comm() -> Vec<u8> {
    let text = std::fs::read("/proc/thread-self/comm").unwrap_or_default();
    let end = text.iter().position(|&b| b == b'\n').unwrap_or(text.len());
    text[..end].to_vec()
}

/// A frame with its symbol: as the session gave it, else from the event's symbols.
fn resolved(ev: &Event<'_>, kind: StackKind, f: &Frame) -> Frame {
    if f.sym.is_some() {
        return f.clone();
    }
    let sym = match kind {
        StackKind::Kernel => ev.symbols.kernel(f.addr),
        StackKind::User => ev.symbols.user(ev.pid, f.addr),
    };
    Frame { sym, ..f.clone() }
}
