//! Functions that give a value: `str buf ksym usym kstack ustack ntop strncmp strcontains sizeof bswap macaddr
//! strerror strftime uptr cgroupid cgroup_path`. `reg()` is a value the probe fetched (see `eval`). What needs
//! memory an event does not carry (`uaddr`...) reads as 0 with one line on stderr.
use super::eval::until_nul;
use super::exec::{as_int, Exec};
use crate::bt::ast::{Expr, ExprKind};
use crate::bt::strftime::strftime_text;
use crate::bt::types::{int_cast, Ty};
use crate::bt::value::{Int, StackKind, StackMode, Timestamp, Value, DEFAULT_STACK_LIMIT};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

impl Exec<'_, '_, '_> {
    /// The functions that give a value.
    pub(super) fn value_call(&mut self, name: &str, args: &[Expr]) -> Value {
        match name {
            "str" | "buf" => self.str_call(args),
            "ksym" | "usym" => {
                let kind = if name == "ksym" {
                    StackKind::Kernel
                } else {
                    StackKind::User
                };
                self.sym(kind, args)
            }
            "kstack" => self.stack_call(StackKind::Kernel, args),
            "ustack" => self.stack_call(StackKind::User, args),
            "ntop" => self.ntop(args),
            "strncmp" => {
                let (a, b) = (self.arg_bytes(args, 0), self.arg_bytes(args, 1));
                let n = args
                    .get(2)
                    .map_or(0, |e| as_int(&self.eval(e)).extended() as usize);
                Value::uint(u64::from(strncmp(&a, &b, n)))
            }
            "strcontains" => {
                let (h, n) = (self.arg_bytes(args, 0), self.arg_bytes(args, 1));
                let found = n.is_empty() || h.windows(n.len()).any(|w| w == n.as_slice());
                Value::uint(u64::from(found))
            }
            "sizeof" => self.sizeof(args),
            "bswap" => {
                let i = self.int_arg(args, 0);
                let raw = i.raw();
                let v = match i.ty.bits {
                    16 => u64::from((raw as u16).swap_bytes()),
                    32 => u64::from((raw as u32).swap_bytes()),
                    64 => raw.swap_bytes(),
                    _ => raw,
                };
                Value::Int(Int::new(v as i64, i.ty))
            }
            "macaddr" => {
                let b = self.arg_bytes_raw(args, 0);
                let mut parts = b
                    .iter()
                    .take(6)
                    .map(|x| format!("{x:02X}"))
                    .collect::<Vec<_>>();
                parts.resize(6, "00".to_string());
                Value::Str(parts.join(":").into_bytes())
            }
            "strerror" => {
                let n = self.int_arg(args, 0).extended() as i32;
                Value::Str(nix::errno::Errno::from_raw(n).desc().as_bytes().to_vec())
            }
            "strftime" => {
                let fmt = match args.first().map(|a| &a.kind) {
                    Some(ExprKind::Str(f)) => String::from_utf8_lossy(f).into_owned(),
                    _ => String::new(),
                };
                let nsecs = self.int_arg(args, 1).extended();
                let text = strftime_text(&fmt, self.rt.boot_ns, nsecs, &self.rt.zone);
                Value::Timestamp(Timestamp { nsecs, text })
            }
            "pton" => {
                let text = self.arg_bytes(args, 0);
                match String::from_utf8_lossy(&text).parse::<IpAddr>() {
                    Ok(IpAddr::V4(a)) => Value::Str(a.octets().to_vec()),
                    Ok(IpAddr::V6(a)) => Value::Str(a.octets().to_vec()),
                    Err(_) => self.unsupported("pton() of text that is no address (read as 0)"),
                }
            }
            "uptr" => Value::uint(self.int_arg(args, 0).extended()),
            "cgroupid" => Value::uint(0),
            "cgroup_path" => Value::Str(Vec::new()),
            _ => {
                for a in args {
                    self.eval(a);
                }
                let text = format!("{name}() is not run here (read as 0)");
                self.unsupported(&text)
            }
        }
    }

    /// `str(x[, n])` of what no probe fetched: a positional parameter's text, a string as it is.
    fn str_call(&mut self, args: &[Expr]) -> Value {
        let Some(first) = args.first() else {
            return Value::Str(Vec::new());
        };
        let strlen = self.rt.opts.strlen;
        let limit = match args.get(1) {
            Some(n) => (as_int(&self.eval(n)).extended() as usize)
                .saturating_add(1)
                .min(strlen),
            None => strlen,
        };
        let text = match &first.kind {
            ExprKind::Param(crate::bt::ast::Param::Positional(n)) => self
                .rt
                .opts
                .params
                .get((*n as usize).wrapping_sub(1))
                .map(|p| p.as_bytes().to_vec()),
            _ => match self.eval(first) {
                Value::Str(s) => Some(s),
                _ => None,
            },
        };
        match text {
            Some(t) => Value::str_bytes(&t, limit),
            None => {
                self.unsupported("str() of an address this event did not fetch reads memory, which is not run here (read as \"\")");
                Value::Str(Vec::new())
            }
        }
    }

    fn sym(&mut self, kind: StackKind, args: &[Expr]) -> Value {
        let addr = self.int_arg(args, 0).extended();
        let sym = match self.ev {
            Some(ev) => ev.sym(kind, addr),
            None => crate::bt::value::Sym {
                kind,
                addr,
                pid: 0,
                name: None,
            },
        };
        Value::Sym(sym)
    }

    /// `kstack(N)`, `ustack(perf)`, `ustack(perf, N)`.
    fn stack_call(&mut self, kind: StackKind, args: &[Expr]) -> Value {
        let mut mode = StackMode::Bpftrace;
        let mut limit = DEFAULT_STACK_LIMIT;
        for a in args {
            match &a.kind {
                ExprKind::StackMode(m) if m == "perf" => mode = StackMode::Perf,
                ExprKind::StackMode(_) => mode = StackMode::Bpftrace,
                _ => limit = as_int(&self.eval(a)).extended() as usize,
            }
        }
        self.stack(kind, mode, limit)
    }

    /// `ntop([af, ]addr)`: an integer is an IPv4 address as it lies in memory; bytes are IPv6 when there
    /// are 16 (or `af` is 10, AF_INET6), else IPv4.
    fn ntop(&mut self, args: &[Expr]) -> Value {
        let Some(last) = args.last() else {
            return Value::int(0);
        };
        let af = if args.len() == 2 {
            Some(self.int_arg(args, 0).extended())
        } else {
            None
        };
        let addr = match self.eval(last) {
            Value::Int(i) => IpAddr::V4(Ipv4Addr::from((i.raw() as u32).to_le_bytes())),
            Value::Tuple(items) => return self.ntop_bytes(af, &array_bytes(&items)),
            Value::Str(b) => return self.ntop_bytes(af, &b),
            _ => return self.unsupported("ntop() of this value is not run here (read as 0)"),
        };
        Value::Inet(addr)
    }

    /// `ntop()` of an address's bytes: IPv6 for 16 bytes or AF_INET6 (10), else IPv4.
    fn ntop_bytes(&mut self, af: Option<u64>, b: &[u8]) -> Value {
        let v6 = af.map_or(b.len() >= 16, |af| af == 10);
        let addr = match v6 {
            true => {
                let mut a = [0u8; 16];
                a.iter_mut().zip(b).for_each(|(d, s)| *d = *s);
                IpAddr::V6(Ipv6Addr::from(a))
            }
            _ => {
                let mut a = [0u8; 4];
                a.iter_mut().zip(b).for_each(|(d, s)| *d = *s);
                IpAddr::V4(Ipv4Addr::from(a))
            }
        };
        Value::Inet(addr)
    }

    fn sizeof(&mut self, args: &[Expr]) -> Value {
        let Some(a) = args.first() else {
            return Value::uint(0);
        };
        if let ExprKind::Ident(name) = &a.kind {
            if let Some(Ty::Int { bits, .. }) = int_cast(name) {
                return Value::uint(u64::from(bits / 8));
            }
        }
        let size = match self.eval(a) {
            Value::Int(i) => u64::from(i.ty.bits / 8),
            Value::Str(_) => self.rt.opts.strlen as u64,
            _ => 8,
        };
        Value::uint(size)
    }

    fn int_arg(&mut self, args: &[Expr], i: usize) -> Int {
        match args.get(i) {
            Some(a) => as_int(&self.eval(a)),
            None => Int::i64(0),
        }
    }

    /// Argument `i` as a C string's bytes (up to its NUL).
    fn arg_bytes(&mut self, args: &[Expr], i: usize) -> Vec<u8> {
        until_nul(&self.arg_bytes_raw(args, i)).to_vec()
    }

    fn arg_bytes_raw(&mut self, args: &[Expr], i: usize) -> Vec<u8> {
        match args.get(i).map(|a| self.eval(a)) {
            Some(Value::Str(s)) => s,
            Some(Value::Tuple(items)) => array_bytes(&items),
            Some(v) => v.text().into_bytes(),
            None => Vec::new(),
        }
    }
}

/// C's `strncmp(a, b, n) != 0` on NUL-terminated strings: 0 when the first `n` bytes match.
fn strncmp(a: &[u8], b: &[u8], n: usize) -> bool {
    let at = |s: &[u8], i: usize| s.get(i).copied().unwrap_or(0);
    for i in 0..n {
        let (x, y) = (at(a, i), at(b, i));
        if x != y {
            return true;
        }
        if x == 0 {
            return false;
        }
    }
    false
}

/// The bytes of an array of integers (a `__u8 addr[4]` field fetched as a tuple).
fn array_bytes(items: &[Value]) -> Vec<u8> {
    items.iter().map(|v| as_int(v).raw() as u8).collect()
}
