//! bpftrace's runtime values, as bpftrace 0.17 types, stores, compares and spells them.
//!
//! A value here is already resolved: a stack carries its frames' names, a `usym`/`ksym` its name, a timestamp
//! its formatted text. Resolving (symbols, clocks) is the runtime's job; this module only holds and spells.
//!
//! Facts from bpftrace v0.17.0 (`src/mapkey.cpp`, `src/output.cpp`, `src/bpftrace.cpp`):
//! - integers in map keys print as signed whatever their type (`MapKey::argument_value` reads `int64_t`), in
//!   values by their type's sign and width;
//! - a string is at most `BPFTRACE_STRLEN - 1` bytes (64 by default: the NUL takes the last byte);
//! - a stack prints as `\n` then one line per frame: `indent` spaces and `name+offset` (bpftrace mode), or a tab,
//!   the address in hex, a space, `name+offset` and for user stacks ` (module)` (perf mode); indentation is 4 in
//!   a key and 8 in a value;
//! - unresolved addresses print as C++ prints a `void *` (`0x1234`);
//! - inet addresses print as `inet_ntop` spells them ([`super::inet`]).

use super::inet::ntop;
use std::net::IpAddr;

/// bpftrace's default `BPFTRACE_STRLEN`.
pub const DEFAULT_STRLEN: usize = 64;

/// An integer type: width in bits (8, 16, 32, 64) and sign.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IntType {
    pub bits: u8,
    pub signed: bool,
}

impl IntType {
    pub const I64: IntType = IntType {
        bits: 64,
        signed: true,
    };
    pub const U64: IntType = IntType {
        bits: 64,
        signed: false,
    };
    pub const I32: IntType = IntType {
        bits: 32,
        signed: true,
    };
    pub const U32: IntType = IntType {
        bits: 32,
        signed: false,
    };

    fn mask(self) -> u64 {
        if self.bits >= 64 {
            u64::MAX
        } else {
            (1u64 << self.bits) - 1
        }
    }
}

/// An integer of a bpftrace type: its two's-complement bits truncated to the type's width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Int {
    bits: u64,
    pub ty: IntType,
}

impl Int {
    /// `v` truncated to `ty` (as a C cast does).
    pub fn new(v: i64, ty: IntType) -> Int {
        Int {
            bits: (v as u64) & ty.mask(),
            ty,
        }
    }

    pub fn i64(v: i64) -> Int {
        Int::new(v, IntType::I64)
    }

    pub fn u64(v: u64) -> Int {
        Int {
            bits: v,
            ty: IntType::U64,
        }
    }

    /// The value sign-extended (signed types) or zero-extended (unsigned) to 64 bits, as bits.
    pub fn extended(self) -> u64 {
        if self.ty.signed && self.ty.bits < 64 && self.bits >> (self.ty.bits - 1) & 1 == 1 {
            self.bits | !self.ty.mask()
        } else {
            self.bits
        }
    }

    /// The value as a signed 64-bit number (what `int64_t` holds after the C promotion).
    pub fn as_i64(self) -> i64 {
        self.extended() as i64
    }

    /// The raw bits of the type's width, zero-extended.
    pub fn raw(self) -> u64 {
        self.bits
    }

    /// As bpftrace prints a value of this type.
    pub fn value_text(self) -> String {
        if self.ty.signed {
            self.as_i64().to_string()
        } else {
            self.bits.to_string()
        }
    }

    /// As bpftrace prints this integer in a map key: signed, whatever the type.
    pub fn key_text(self) -> String {
        let signed = Int {
            bits: self.bits,
            ty: IntType {
                bits: self.ty.bits,
                signed: true,
            },
        };
        signed.as_i64().to_string()
    }
}

/// Which stack a stack value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StackKind {
    Kernel,
    User,
}

/// `kstack(MODE)`: bpftrace 0.17 knows `bpftrace` (the default) and `perf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StackMode {
    Bpftrace,
    Perf,
}

/// bpftrace's default stack depth (`kstack` with no limit).
pub const DEFAULT_STACK_LIMIT: usize = 127;

/// One frame of a stack: its address and, when resolved, symbol, offset in it and module.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    pub addr: u64,
    pub sym: Option<(String, u64)>,
    pub module: Option<String>,
}

impl Frame {
    pub fn unresolved(addr: u64) -> Frame {
        Frame {
            addr,
            sym: None,
            module: None,
        }
    }

    pub fn named(addr: u64, name: &str, offset: u64, module: Option<&str>) -> Frame {
        Frame {
            addr,
            sym: Some((name.to_string(), offset)),
            module: module.map(str::to_string),
        }
    }

    /// `name+offset`, or the address as a `void *` prints.
    fn symbol_text(&self) -> String {
        match &self.sym {
            Some((name, off)) => format!("{name}+{off}"),
            None => void_ptr(self.addr),
        }
    }
}

/// A stack value: the frames (leaf first) as bpftrace captured them, with its type (kind, mode, limit) and,
/// for user stacks, the process (bpftrace keys user stacks by stack id and pid).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Stack {
    pub kind: StackKind,
    pub mode: StackMode,
    pub limit: usize,
    pub pid: u32,
    pub frames: Vec<Frame>,
}

impl Stack {
    /// A stack of type `kstack(mode, limit)` / `ustack(mode, limit)`: frames beyond `limit` are dropped, and
    /// the first zero address ends it, as in bpftrace's stack map.
    pub fn new(
        kind: StackKind,
        mode: StackMode,
        limit: usize,
        pid: u32,
        mut frames: Vec<Frame>,
    ) -> Stack {
        if let Some(zero) = frames.iter().position(|f| f.addr == 0) {
            frames.truncate(zero);
        }
        frames.truncate(limit);
        Stack {
            kind,
            mode,
            limit,
            pid,
            frames,
        }
    }

    /// bpftrace's `get_stack(..., indent)`: a newline, then a line per frame.
    pub fn text(&self, indent: usize) -> String {
        let mut out = String::from("\n");
        for f in &self.frames {
            match self.mode {
                StackMode::Bpftrace => {
                    out.push_str(&" ".repeat(indent));
                    out.push_str(&f.symbol_text());
                }
                StackMode::Perf => {
                    out.push_str(&format!("\t{:x} {}", f.addr, f.symbol_text()));
                    if self.kind == StackKind::User {
                        out.push_str(&format!(
                            " ({})",
                            f.module.as_deref().unwrap_or("[unknown]")
                        ));
                    }
                }
            }
            out.push('\n');
        }
        out
    }
}

/// A `ksym(addr)` / `usym(addr)` value: the symbol's name without offset, or the address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sym {
    pub kind: StackKind,
    pub addr: u64,
    pub pid: u32,
    pub name: Option<String>,
}

impl Sym {
    pub fn text(&self) -> String {
        self.name.clone().unwrap_or_else(|| void_ptr(self.addr))
    }
}

/// A `strftime()` value, already formatted (bpftrace formats it when printing, from the same two inputs).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Timestamp {
    pub nsecs: u64,
    pub text: String,
}

/// A bpftrace runtime value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Value {
    Int(Int),
    /// A string's bytes (no NUL; at most `BPFTRACE_STRLEN - 1`).
    Str(Vec<u8>),
    Tuple(Vec<Value>),
    Stack(Stack),
    Sym(Sym),
    Inet(IpAddr),
    Timestamp(Timestamp),
}

impl Value {
    pub fn int(v: i64) -> Value {
        Value::Int(Int::i64(v))
    }

    pub fn uint(v: u64) -> Value {
        Value::Int(Int::u64(v))
    }

    pub fn typed(v: i64, ty: IntType) -> Value {
        Value::Int(Int::new(v, ty))
    }

    /// A string as `str()` reads it into a buffer of `strlen` bytes: up to the first NUL, at most `strlen - 1`
    /// bytes. `str(p)` has a buffer of `BPFTRACE_STRLEN`; `str(p, n)` one of `min(n + 1, BPFTRACE_STRLEN)`.
    pub fn str_bytes(bytes: &[u8], strlen: usize) -> Value {
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        let keep = end.min(strlen.saturating_sub(1));
        Value::Str(bytes[..keep].to_vec())
    }

    /// A string literal or a short known string (comm, probe name), with the default length.
    pub fn str(s: &str) -> Value {
        Value::str_bytes(s.as_bytes(), DEFAULT_STRLEN)
    }

    /// The kinds whose values `-f json` quotes (bpftrace's `is_quoted_type`; timestamps are not among them).
    pub fn json_quoted(&self) -> bool {
        matches!(
            self,
            Value::Str(_) | Value::Stack(_) | Value::Sym(_) | Value::Inet(_)
        )
    }

    /// As bpftrace prints the value (`Output::value_to_str`, text mode).
    pub fn text(&self) -> String {
        match self {
            Value::Int(i) => i.value_text(),
            Value::Str(b) => String::from_utf8_lossy(b).into_owned(),
            Value::Tuple(items) => {
                let parts: Vec<String> = items.iter().map(Value::text).collect();
                format!("({})", parts.join(", "))
            }
            Value::Stack(s) => s.text(8),
            Value::Sym(s) => s.text(),
            Value::Inet(a) => ntop(a),
            Value::Timestamp(t) => t.text.clone(),
        }
    }

    /// As bpftrace prints the value in `-f json`: strings and symbols quoted and escaped, tuples as arrays.
    pub fn json(&self) -> String {
        match self {
            Value::Tuple(items) => {
                let parts: Vec<String> = items.iter().map(Value::json).collect();
                format!("[{}]", parts.join(","))
            }
            v if v.json_quoted() => format!("\"{}\"", json_escape(&v.text())),
            v => v.text(),
        }
    }

    /// As bpftrace prints the value as one argument of a map key (`MapKey::argument_value`).
    pub fn key_text(&self) -> String {
        match self {
            Value::Int(i) => i.key_text(),
            Value::Stack(s) => s.text(4),
            Value::Tuple(items) => {
                let parts: Vec<String> = items.iter().map(Value::key_text).collect();
                format!("({})", parts.join(", "))
            }
            v => v.text(),
        }
    }

    /// The bytes bpftrace would hold for this value in a map key, where they decide an order (integers little
    /// endian at their width, strings NUL-padded); `None` for kinds bpftrace orders by ids (stacks, symbols).
    pub fn key_bytes(&self) -> Option<Vec<u8>> {
        match self {
            Value::Int(i) => {
                Some(i.raw().to_le_bytes()[..usize::from(i.ty.bits / 8).max(1)].to_vec())
            }
            Value::Str(b) => {
                let mut out = b.clone();
                out.resize(DEFAULT_STRLEN.max(b.len() + 1), 0);
                Some(out)
            }
            Value::Tuple(items) => {
                let mut out = Vec::new();
                for item in items {
                    out.extend(item.key_bytes()?);
                }
                Some(out)
            }
            _ => None,
        }
    }
}

/// A C++ `ostream << (void *)addr`: `0x` and lowercase hex, `0` for null.
pub fn void_ptr(addr: u64) -> String {
    if addr == 0 {
        "0".to_string()
    } else {
        format!("{addr:#x}")
    }
}

/// bpftrace's `json_escape`: `"`, `\`, newline, carriage return and tab by name, other control bytes as
/// `\u00XX`.
pub fn json_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) <= 0x1f => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_truncate_and_print_by_type() {
        assert_eq!(
            Value::typed(
                -3,
                IntType {
                    bits: 8,
                    signed: true
                }
            )
            .text(),
            "-3"
        );
        assert_eq!(
            Value::typed(
                250,
                IntType {
                    bits: 8,
                    signed: false
                }
            )
            .text(),
            "250"
        );
        assert_eq!(
            Value::typed(4_000_000_000, IntType::U32).text(),
            "4000000000"
        );
        assert_eq!(
            Value::typed(
                300,
                IntType {
                    bits: 8,
                    signed: false
                }
            )
            .text(),
            "44"
        );
        assert_eq!(
            Int::new(
                -1,
                IntType {
                    bits: 8,
                    signed: true
                }
            )
            .extended(),
            u64::MAX
        );
        // Keys print signed whatever the type.
        assert_eq!(Value::uint(u64::MAX).key_text(), "-1");
        assert_eq!(Value::uint(u64::MAX).text(), "18446744073709551615");
    }

    #[test]
    fn strings_keep_strlen_minus_one_bytes() {
        // `str(args->filename, 10)` (a buffer of 11) printed `/lib/x86_6` for /lib/x86_64-linux-gnu/libc.so.6 in
        // bpftrace 0.17.
        assert_eq!(
            Value::str_bytes(b"/lib/x86_64-linux-gnu/libc.so.6", 11),
            Value::Str(b"/lib/x86_6".to_vec())
        );
        assert_eq!(Value::str_bytes(b"ab\0cd", 64), Value::Str(b"ab".to_vec()));
        let long = vec![b'y'; 100];
        assert_eq!(Value::str_bytes(&long, DEFAULT_STRLEN).text().len(), 63);
    }

    #[test]
    fn stacks_print_as_bpftrace() {
        // bpftrace -e 'BEGIN { @u = ustack(2); @p[ustack(perf, 3)] = count(); exit(); }' (bpftrace 0.17 here)
        let frames = vec![
            Frame::named(
                0x7f9055b1f829,
                "syscall",
                25,
                Some("/usr/lib/x86_64-linux-gnu/libc.so.6"),
            ),
            Frame::unresolved(0x7ffc3f5e1ea8),
            Frame::unresolved(0x5555fef33a60),
        ];
        let two = Stack::new(StackKind::User, StackMode::Bpftrace, 2, 1, frames.clone());
        assert_eq!(
            two.text(8),
            "\n        syscall+25\n        0x7ffc3f5e1ea8\n"
        );
        assert_eq!(two.text(4), "\n    syscall+25\n    0x7ffc3f5e1ea8\n");
        let perf = Stack::new(StackKind::User, StackMode::Perf, 3, 1, frames);
        assert_eq!(
            perf.text(4),
            "\n\t7f9055b1f829 syscall+25 (/usr/lib/x86_64-linux-gnu/libc.so.6)\n\
             \t7ffc3f5e1ea8 0x7ffc3f5e1ea8 ([unknown])\n\t5555fef33a60 0x5555fef33a60 ([unknown])\n"
        );
        let k = Stack::new(
            StackKind::Kernel,
            StackMode::Perf,
            5,
            0,
            vec![Frame::named(0x10, "f", 1, None)],
        );
        assert_eq!(k.text(4), "\n\t10 f+1\n");
        let cut = Stack::new(
            StackKind::Kernel,
            StackMode::Bpftrace,
            9,
            0,
            vec![Frame::unresolved(1), Frame::unresolved(0)],
        );
        assert_eq!(cut.frames.len(), 1);
    }

    #[test]
    fn tuples_symbols_and_json() {
        let t = Value::Tuple(vec![Value::int(1), Value::str("two"), Value::int(-3)]);
        assert_eq!(t.text(), "(1, two, -3)");
        assert_eq!(t.json(), "[1,\"two\",-3]");
        let s = Value::Sym(Sym {
            kind: StackKind::Kernel,
            addr: 0x1234,
            pid: 0,
            name: None,
        });
        assert_eq!(s.text(), "0x1234");
        assert_eq!(Value::str("a\"b\n\x01").json(), "\"a\\\"b\\n\\u0001\"");
        let ts = Value::Timestamp(Timestamp {
            nsecs: 1,
            text: "12:00".into(),
        });
        assert_eq!(ts.json(), "12:00");
    }

    #[test]
    fn key_bytes_order_as_bpftrace_holds_them() {
        // Little endian: 256 sorts before 1 by bytes, as in bpftrace's std::map of keys.
        assert!(Value::int(256).key_bytes() < Value::int(1).key_bytes());
        assert!(Value::str("a").key_bytes() < Value::str("ab").key_bytes());
        assert_eq!(
            Value::Sym(Sym {
                kind: StackKind::User,
                addr: 1,
                pid: 1,
                name: None
            })
            .key_bytes(),
            None
        );
    }
}
