//! Functions that act: `printf`, `print`, `time`, `join`, `system`, `cat`, `debugf`, `clear`, `zero`,
//! `delete`, `exit`, `signal`. The value functions are in [`super::funcs`].
//!
//! Messages go through [`Printer`](crate::bt::print::Printer) so `-f json` works; in bpftrace 0.17 every one
//! of these but `delete` and `signal` is an asynchronous action handled by bpftrace's reader, so after
//! `exit()` they are dropped (see [`super::runtime`]).
use super::exec::{as_int, Exec};
use crate::bt::ast::{Expr, ExprKind};
use crate::bt::format::{self, Arg, FormatString};
use crate::bt::print::MessageType;
use crate::bt::strftime::{time_text, DEFAULT_TIME_FORMAT};
use crate::bt::value::Value;

impl Exec<'_, '_, '_> {
    /// The value of the call `name(args)` (0 for functions that give none).
    pub(super) fn call(&mut self, name: &str, args: &[Expr]) -> Value {
        match name {
            "printf" | "debugf" => {
                let text = self.formatted(args);
                self.message(MessageType::Printf, &text, false);
            }
            "print" => self.print(args),
            "time" => self.time(args),
            "join" => self.join(args),
            "system" => self.system(args),
            "cat" => self.cat(args),
            "clear" | "zero" => self.clear(name, args),
            "delete" => self.delete(args),
            "exit" => {
                self.exited = true;
                self.rt.exiting = true;
            }
            "signal" => self.signal(args),
            _ => return self.value_call(name, args),
        }
        Value::int(0)
    }

    /// A message as the printer spells it, unless `exit()` ran.
    fn message(&mut self, ty: MessageType, text: &str, newline: bool) {
        let out = self.rt.printer.message(ty, text, newline);
        self.rt.emit(self.io, &out);
    }

    /// `fmt` (the first argument, a literal) applied to the rest, as bpftrace's printf formats them.
    pub(super) fn formatted(&mut self, args: &[Expr]) -> String {
        let Some(ExprKind::Str(fmt)) = args.first().map(|a| &a.kind) else {
            return String::new();
        };
        let fmt = FormatString::parse(&String::from_utf8_lossy(fmt));
        let values: Vec<Arg> = args[1..].iter().map(|a| self.printf_arg(a)).collect();
        fmt.format(&values)
    }

    fn printf_arg(&mut self, a: &Expr) -> Arg {
        let buffer = matches!(&a.kind, ExprKind::Call { name, .. } if name == "buf");
        match self.eval(a) {
            Value::Int(i) => Arg::Int(i),
            Value::Str(s) if buffer => Arg::Buf(s),
            Value::Str(s) => Arg::Str(s),
            v => Arg::Str(v.text().into_bytes()),
        }
    }

    /// `print(@m[, top[, div]])` or `print(value)`.
    fn print(&mut self, args: &[Expr]) {
        let Some(first) = args.first() else {
            return;
        };
        if let ExprKind::Map { name, keys } = &first.kind {
            if keys.is_empty() {
                let mut n = [0u32; 2];
                for (slot, a) in n.iter_mut().zip(&args[1..]) {
                    *slot = as_int(&self.eval(a)).extended() as u32;
                }
                let Some(map) = self.rt.maps.get(name) else {
                    return;
                };
                let text = self.rt.printer.map(map, n[0], n[1]);
                return self.rt.emit(self.io, &text);
            }
        }
        let v = self.eval(first);
        let text = self.rt.printer.value(&v);
        self.rt.emit(self.io, &text);
    }

    /// `time(fmt)`: the wall clock now, in the local zone.
    fn time(&mut self, args: &[Expr]) {
        let fmt = match args.first().map(|a| &a.kind) {
            Some(ExprKind::Str(f)) => String::from_utf8_lossy(f).into_owned(),
            _ => DEFAULT_TIME_FORMAT.to_string(),
        };
        // The wall-clock second of the event (its monotonic time on the boot's wall-clock base): bpftrace prints
        // the second it handles the message, within milliseconds of the event; rprof handles events up to a
        // reading round later, which would often print the next second.
        let now = (self.rt.boot_ns.saturating_add(self.now_ns) / 1_000_000_000) as i64;
        match time_text(&fmt, now, &self.rt.zone) {
            Some(text) => self.message(MessageType::Time, &text, false),
            None => self.rt.warn_once(self.io, "strftime returned 0"),
        }
    }

    /// `join(argv[, sep])`: the strings the event fetched for `argv` (a tuple of strings, or one string).
    fn join(&mut self, args: &[Expr]) {
        let sep = match args.get(1).map(|a| &a.kind) {
            Some(ExprKind::Str(s)) => String::from_utf8_lossy(s).into_owned(),
            _ => " ".to_string(),
        };
        let Some(first) = args.first() else {
            return;
        };
        let parts: Vec<Vec<u8>> = match self.eval(first) {
            Value::Tuple(items) => items
                .into_iter()
                .map(|v| match v {
                    Value::Str(s) => s,
                    v => v.text().into_bytes(),
                })
                .collect(),
            Value::Str(s) => vec![s],
            _ => {
                // The line stays whole (join ends it), with nothing where the strings would be.
                self.unsupported("join() of a pointer array (execve's argv) needs its strings read in the kernel, which a tracepoint cannot do without BPF: printed empty (`rprof tool execsnoop` reads argv through ld.so)");
                Vec::new()
            }
        };
        let text = format::join(&parts, &sep);
        self.message(MessageType::Join, &text, true);
    }

    /// `system(fmt, ...)` (with `--unsafe`): `sh -c` the text, its output a message, in order.
    fn system(&mut self, args: &[Expr]) {
        let cmd = self.formatted(args);
        if !self.rt.opts.unsafe_ok {
            self.unsupported("system() runs only with --unsafe");
            return;
        }
        if self.rt.exiting {
            return;
        }
        match std::process::Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .output()
        {
            Ok(out) => {
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                self.message(MessageType::Syscall, &text, false);
            }
            Err(e) => self
                .rt
                .warn_once(self.io, &format!("system(\"{cmd}\"): {e}")),
        }
    }

    /// `cat(fmt, ...)`: the named file's text (bpftrace 0.17: an error line and an empty message when it cannot
    /// be read).
    fn cat(&mut self, args: &[Expr]) {
        let path = self.formatted(args);
        if self.rt.exiting {
            return;
        }
        match std::fs::read(&path) {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                self.message(MessageType::Cat, &text, false);
            }
            Err(e) => {
                // bpftrace says so each time, and prints an empty message.
                let why = nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(0)).desc();
                let _ = writeln!(self.io.err, "ERROR: failed to open file '{path}': {why}");
                self.message(MessageType::Cat, "", false);
            }
        }
    }

    /// `clear(@m)`, `zero(@m)`.
    fn clear(&mut self, name: &str, args: &[Expr]) {
        let Some(ExprKind::Map { name: map, .. }) = args.first().map(|a| &a.kind) else {
            return;
        };
        if self.rt.exiting {
            return;
        }
        if let Some(m) = self.rt.maps.get_mut(map) {
            if name == "clear" {
                m.clear();
            } else {
                m.zero();
            }
        }
    }

    /// `delete(@m[k])`.
    fn delete(&mut self, args: &[Expr]) {
        let Some(ExprKind::Map { name, keys }) = args.first().map(|a| &a.kind) else {
            return;
        };
        let key = self.key(keys);
        if let Some(m) = self.rt.maps.get_mut(name) {
            m.delete(&key);
        }
        self.key_done(key);
    }

    /// `signal(SIG)`: to the event's process (bpftrace's `bpf_send_signal`).
    fn signal(&mut self, args: &[Expr]) {
        use nix::sys::signal::{kill, Signal};
        let sig = match args.first().map(|a| &a.kind) {
            Some(ExprKind::Str(s)) => {
                let name = String::from_utf8_lossy(s).into_owned();
                let full = if name.starts_with("SIG") {
                    name
                } else {
                    format!("SIG{name}")
                };
                full.parse::<Signal>().ok()
            }
            Some(ExprKind::Int(n)) => Signal::try_from(*n as i32).ok(),
            _ => None,
        };
        let (Some(sig), Some(ev)) = (sig, self.ev) else {
            self.unsupported("signal() needs a signal and an event's process (none sent)");
            return;
        };
        if ev.pid != 0 {
            let _ = kill(nix::unistd::Pid::from_raw(ev.pid as i32), sig);
        }
    }
}
