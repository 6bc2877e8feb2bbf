//! bpftrace 0.17's `printf` (and the format strings of `system` and `cat`), and `join`.
//!
//! Facts from bpftrace v0.17.0 (`src/format_string.cpp`, `src/printf_format_types.h`, `src/printf.cpp`),
//! checked on this machine's bpftrace 0.17 (tests/bt_output.rs):
//! - a conversion is `%`, an optional `-`, digits, an optional `.digits`, and one of `s`, `r`, `rx`, `rh`, `c`,
//!   or a length (none, `hh`, `h`, `l`, `ll`, `j`, `z`, `t`) with `d u o x X p`. Nothing else is one: `%f`, `%i`,
//!   `%#x`, `%+d` are not counted (and `%%d` counts as a `%d`!);
//! - the string is cut after each conversion and each piece goes through C's `snprintf` with its one argument,
//!   integers passed as 64-bit (so `%d` prints the low 32 bits, `%hhd` the low 8); the text after the last
//!   conversion is written as it is, so a trailing `100%%` prints `100%%` while `%%` before a conversion
//!   prints `%`;
//! - `%s` takes strings and everything printed as text (stacks, symbols, inet, timestamps...), `%r` buffers,
//!   the others integers (and pointers); a mismatch is an error naming both types.

use super::value::Int;
use regex::Regex;
use std::sync::OnceLock;

/// bpftrace's conversion tokens (`printf_format_types`).
const TOKENS: [&str; 46] = [
    "rx", "rh", "r", "s", "c", "hhd", "hhu", "hho", "hhx", "hhX", "hhp", "hd", "hu", "ho", "hx",
    "hX", "hp", "lld", "llu", "llo", "llx", "llX", "llp", "ld", "lu", "lo", "lx", "lX", "lp", "jd",
    "ju", "jo", "jx", "jX", "jp", "zd", "zu", "zo", "zx", "zX", "zp", "td", "tu", "to", "tx", "tX",
];
const TOKENS_MORE: [&str; 7] = ["tp", "d", "u", "o", "x", "X", "p"];

fn specifier_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        let alts: Vec<&str> = TOKENS.iter().chain(TOKENS_MORE.iter()).copied().collect();
        Regex::new(&format!("%-?[0-9]*(\\.[0-9]+)?({})", alts.join("|")))
            .expect("the conversion pattern compiles")
    })
}

/// The type an argument has for `printf`'s checks, as bpftrace names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgClass {
    Integer,
    String,
    Buffer,
}

impl ArgClass {
    fn name(self) -> &'static str {
        match self {
            ArgClass::Integer => "integer",
            ArgClass::String => "string",
            ArgClass::Buffer => "buffer",
        }
    }
}

/// A `printf` argument as it reaches `snprintf`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arg {
    Int(Int),
    /// A string, or any value printed as text.
    Str(Vec<u8>),
    /// `buf()`'s bytes.
    Buf(Vec<u8>),
}

/// A format string split as bpftrace splits it: piece `i` ends with conversion `i`; a last piece may follow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatString {
    pieces: Vec<String>,
    tokens: Vec<String>,
}

impl FormatString {
    pub fn parse(fmt: &str) -> FormatString {
        let mut pieces = Vec::new();
        let mut tokens = Vec::new();
        let mut last = 0;
        for m in specifier_re().find_iter(fmt) {
            pieces.push(fmt[last..m.end()].to_string());
            tokens.push(m.as_str().to_string());
            last = m.end();
        }
        if last != fmt.len() {
            pieces.push(fmt[last..].to_string());
        }
        FormatString { pieces, tokens }
    }

    /// How many arguments the string takes.
    pub fn conversions(&self) -> usize {
        self.tokens.len()
    }

    /// bpftrace's `validate_format_string`: the message (without its newline) when `args` do not fit; `func`
    /// names the caller (`printf`, `system`, `cat`).
    pub fn validate(&self, func: &str, args: &[ArgClass]) -> Result<(), String> {
        let (supplied, expected) = (args.len(), self.tokens.len());
        if supplied < expected {
            return Err(format!(
                "{func}: Not enough arguments for format string ({supplied} supplied, {expected} expected)"
            ));
        }
        if supplied > expected {
            return Err(format!("{func}: Too many arguments for format string ({supplied} supplied, {expected} expected)"));
        }
        for (token, arg) in self.tokens.iter().zip(args) {
            let conv = token.trim_start_matches('%').trim_start_matches('-');
            let conv = conv.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
            let want = match conv {
                "s" => ArgClass::String,
                c if c.starts_with('r') => ArgClass::Buffer,
                _ => ArgClass::Integer,
            };
            if want != *arg {
                return Err(format!(
                    "{func}: %{conv} specifier expects a value of type {} ({} supplied)",
                    want.name(),
                    arg.name()
                ));
            }
        }
        Ok(())
    }

    /// The text bpftrace prints for `args` (as many as [`FormatString::conversions`]).
    pub fn format(&self, args: &[Arg]) -> String {
        let mut out = Vec::new();
        for (i, arg) in args.iter().enumerate().take(self.tokens.len()) {
            let piece = &self.pieces[i];
            let buf_mode = match self.tokens[i].rsplit('%').next().unwrap_or("") {
                t if t.ends_with("rx") => Some(BufMode::Hex),
                t if t.ends_with("rh") => Some(BufMode::HexSpaced),
                t if t.ends_with('r') => Some(BufMode::Ascii),
                _ => None,
            };
            c_snprintf(piece, arg, buf_mode, &mut out);
        }
        if let Some(rest) = self.pieces.get(args.len().min(self.tokens.len())) {
            out.extend_from_slice(rest.as_bytes());
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// How `%r`, `%rx` and `%rh` spell a buffer (bpftrace's `hex_format_buffer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BufMode {
    /// Printable bytes as they are, others `\xNN`.
    Ascii,
    /// Every byte `\xNN`.
    Hex,
    /// Every byte `NN`, separated by spaces.
    HexSpaced,
}

fn hex_buffer(bytes: &[u8], mode: BufMode) -> Vec<u8> {
    let mut out = String::new();
    for (i, &b) in bytes.iter().enumerate() {
        match mode {
            BufMode::Ascii if (32..=126).contains(&b) => out.push(b as char),
            BufMode::Ascii | BufMode::Hex => out.push_str(&format!("\\x{b:02x}")),
            BufMode::HexSpaced => out.push_str(&format!(
                "{b:02x}{}",
                if i + 1 == bytes.len() { "" } else { " " }
            )),
        }
    }
    out.into_bytes()
}

/// One conversion's flags, width, precision, length and character.
#[derive(Default, Debug)]
struct Spec {
    left: bool,
    zero: bool,
    plus: bool,
    space: bool,
    alt: bool,
    width: usize,
    precision: Option<usize>,
    length: String,
    conv: u8,
}

/// Parses the conversion after a `%` at `s[0..]`; returns it and the bytes it took.
fn parse_spec(s: &[u8]) -> (Spec, usize) {
    let mut spec = Spec::default();
    let mut i = 0;
    while let Some(&c) = s.get(i) {
        match c {
            b'-' => spec.left = true,
            b'0' => spec.zero = true,
            b'+' => spec.plus = true,
            b' ' => spec.space = true,
            b'#' => spec.alt = true,
            _ => break,
        }
        i += 1;
    }
    let digits = |i: &mut usize| {
        let mut n = 0usize;
        while let Some(d) = s.get(*i).filter(|c| c.is_ascii_digit()) {
            n = n.saturating_mul(10).saturating_add(usize::from(d - b'0'));
            *i += 1;
        }
        n
    };
    spec.width = digits(&mut i);
    if s.get(i) == Some(&b'.') {
        i += 1;
        spec.precision = Some(digits(&mut i));
    }
    while let Some(&c) = s.get(i).filter(|c| b"hljztLq".contains(c)) {
        spec.length.push(c as char);
        i += 1;
    }
    spec.conv = s.get(i).copied().unwrap_or(0);
    // bpftrace rewrites `%r[x|h]?` to `%s` before snprintf.
    if spec.conv == b'r' && s.get(i + 1).is_some_and(|c| b"xh|".contains(c)) {
        i += 1;
    }
    (spec, (i + 1).min(s.len()))
}

/// C's `snprintf(piece, arg)` for the conversions bpftrace lets through: `%%` is `%`; the first conversion
/// takes `arg`; any other conversion (undefined in C) is written as it stands.
fn c_snprintf(piece: &str, arg: &Arg, buf_mode: Option<BufMode>, out: &mut Vec<u8>) {
    let s = piece.as_bytes();
    let mut used = false;
    let mut i = 0;
    while i < s.len() {
        if s[i] != b'%' {
            out.push(s[i]);
            i += 1;
            continue;
        }
        if s.get(i + 1) == Some(&b'%') {
            out.push(b'%');
            i += 2;
            continue;
        }
        let (spec, took) = parse_spec(&s[i + 1..]);
        let text = if used {
            None
        } else {
            convert(&spec, arg, buf_mode)
        };
        match text {
            Some(t) => {
                out.extend(t);
                used = true;
            }
            None => out.extend_from_slice(&s[i..i + 1 + took]),
        }
        i += 1 + took;
    }
}

fn pad(body: Vec<u8>, spec: &Spec) -> Vec<u8> {
    if body.len() >= spec.width {
        return body;
    }
    let fill = vec![b' '; spec.width - body.len()];
    if spec.left {
        [body, fill].concat()
    } else {
        [fill, body].concat()
    }
}

/// One conversion of `arg`; `None` when it is not one this port formats (left as text).
fn convert(spec: &Spec, arg: &Arg, buf_mode: Option<BufMode>) -> Option<Vec<u8>> {
    match (spec.conv, arg) {
        (b's', Arg::Str(bytes)) => {
            let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            let keep = spec.precision.map_or(end, |p| p.min(end));
            Some(pad(bytes[..keep].to_vec(), spec))
        }
        (b'r', Arg::Buf(bytes)) => {
            let hex = hex_buffer(bytes, buf_mode.unwrap_or(BufMode::Ascii));
            let keep = spec.precision.map_or(hex.len(), |p| p.min(hex.len()));
            Some(pad(hex[..keep].to_vec(), spec))
        }
        (b'c', Arg::Int(v)) => Some(pad(vec![v.raw() as u8], spec)),
        (b'p', Arg::Int(v)) => Some(pointer(spec, v.extended())),
        (b'd' | b'i' | b'u' | b'o' | b'x' | b'X', Arg::Int(v)) => Some(integer(spec, v.extended())),
        _ => None,
    }
}

/// The argument's 64 bits as C reads them for the conversion's length: `int` by default, `char` for `hh`,
/// `short` for `h`, 64 bits for the others.
fn read_as(spec: &Spec, bits: u64, signed: bool) -> (bool, u64) {
    let width = match spec.length.as_str() {
        "" => 32,
        "hh" => 8,
        "h" => 16,
        _ => 64,
    };
    let mask = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    let v = bits & mask;
    if signed && width < 64 && v >> (width - 1) & 1 == 1 {
        (true, (!v & mask) + 1)
    } else if signed && width == 64 && (v as i64) < 0 {
        (true, (v as i64).unsigned_abs())
    } else {
        (false, v)
    }
}

fn integer(spec: &Spec, bits: u64) -> Vec<u8> {
    let signed = matches!(spec.conv, b'd' | b'i');
    let (negative, magnitude) = read_as(spec, bits, signed);
    let mut digits = match spec.conv {
        b'o' => format!("{magnitude:o}"),
        b'x' => format!("{magnitude:x}"),
        b'X' => format!("{magnitude:X}"),
        _ => magnitude.to_string(),
    };
    if spec.precision == Some(0) && magnitude == 0 {
        digits.clear();
    }
    if let Some(p) = spec.precision {
        if digits.len() < p {
            digits = "0".repeat(p - digits.len()) + &digits;
        }
    }
    let sign = match (negative, signed) {
        (true, _) => "-",
        (false, true) if spec.plus => "+",
        (false, true) if spec.space => " ",
        _ => "",
    };
    let prefix = match spec.conv {
        b'x' if spec.alt && magnitude != 0 => "0x",
        b'X' if spec.alt && magnitude != 0 => "0X",
        b'o' if spec.alt && !digits.starts_with('0') => "0",
        _ => "",
    };
    zero_fill(sign.to_string() + prefix, digits, spec)
}

/// Sign and prefix, then zeros up to the width when `0` is given (without `-` or a precision), then digits.
fn zero_fill(head: String, digits: String, spec: &Spec) -> Vec<u8> {
    let len = head.len() + digits.len();
    if spec.zero && !spec.left && spec.precision.is_none() && len < spec.width {
        return (head + &"0".repeat(spec.width - len) + &digits).into_bytes();
    }
    pad((head + &digits).into_bytes(), spec)
}

/// glibc's `%p`: `(nil)` for 0, else `0x` and hex.
fn pointer(spec: &Spec, bits: u64) -> Vec<u8> {
    if bits == 0 {
        return pad(b"(nil)".to_vec(), spec);
    }
    let mut digits = format!("{bits:x}");
    if let Some(p) = spec.precision {
        if digits.len() < p {
            digits = "0".repeat(p - digits.len()) + &digits;
        }
    }
    zero_fill("0x".to_string(), digits, spec)
}

/// bpftrace's `join(argv, delim)` (default delimiter a space): up to 16 arguments, each of at most 1023 bytes,
/// stopping at the first empty one. Printed as a message with a newline.
pub fn join(args: &[Vec<u8>], delim: &str) -> String {
    const JOIN_ARGNUM: usize = 16;
    const JOIN_ARGSIZE: usize = 1024;
    let mut out = Vec::new();
    for (i, a) in args.iter().take(JOIN_ARGNUM).enumerate() {
        let end = a
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(a.len())
            .min(JOIN_ARGSIZE - 1);
        if end == 0 {
            break;
        }
        if i > 0 {
            out.extend_from_slice(delim.as_bytes());
        }
        out.extend_from_slice(&a[..end]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bt::value::IntType;

    fn i(v: i64) -> Arg {
        Arg::Int(Int::i64(v))
    }

    fn s(v: &str) -> Arg {
        Arg::Str(v.as_bytes().to_vec())
    }

    #[test]
    fn pieces_and_percent_signs_as_bpftrace() {
        // bpftrace -e 'BEGIN { printf("no args 100%%\n"); printf("%d%%\n", 3); printf("a%%d b %d\n", 1, 2); }'
        assert_eq!(
            FormatString::parse("no args 100%%\n").format(&[]),
            "no args 100%%\n"
        );
        assert_eq!(FormatString::parse("%d%%\n").format(&[i(3)]), "3%%\n");
        let odd = FormatString::parse("a%%d b %d\n");
        assert_eq!(odd.conversions(), 2);
        assert_eq!(odd.format(&[i(1), i(2)]), "a%d b 2\n");
        assert_eq!(FormatString::parse("%f %d").conversions(), 1);
    }

    #[test]
    fn validation_messages_as_bpftrace() {
        let f = FormatString::parse("%d %s");
        assert_eq!(
            f.validate("printf", &[ArgClass::Integer]),
            Err(
                "printf: Not enough arguments for format string (1 supplied, 2 expected)"
                    .to_string()
            )
        );
        assert_eq!(
            FormatString::parse("[%-05d]").validate("printf", &[ArgClass::Integer; 5]),
            Err(
                "printf: Too many arguments for format string (5 supplied, 1 expected)".to_string()
            )
        );
        assert_eq!(
            f.validate("printf", &[ArgClass::String, ArgClass::String]),
            Err(
                "printf: %d specifier expects a value of type integer (string supplied)"
                    .to_string()
            )
        );
        assert_eq!(
            f.validate("printf", &[ArgClass::Integer, ArgClass::String]),
            Ok(())
        );
    }

    #[test]
    fn unsigned_and_narrow_arguments() {
        let u32v = Arg::Int(Int::new(4_000_000_000, IntType::U32));
        // bpftrace: printf("%u %d\n", (uint32)4000000000, (uint32)4000000000) -> "4000000000 -294967296"
        assert_eq!(
            FormatString::parse("%u %d\n").format(&[u32v.clone(), u32v]),
            "4000000000 -294967296\n"
        );
        let i8v = Arg::Int(Int::new(
            -1,
            IntType {
                bits: 8,
                signed: true,
            },
        ));
        assert_eq!(
            FormatString::parse("%lu\n").format(&[i8v]),
            "18446744073709551615\n"
        );
        let b = Arg::Buf(vec![b'a', 0, 0xff]);
        assert_eq!(
            FormatString::parse("%r").format(std::slice::from_ref(&b)),
            "a\\x00\\xff"
        );
        assert_eq!(
            FormatString::parse("%rx").format(std::slice::from_ref(&b)),
            "\\x61\\x00\\xff"
        );
        assert_eq!(FormatString::parse("%rh").format(&[b]), "61 00 ff");
        assert_eq!(
            FormatString::parse("%s|%s").format(&[s("ab"), s("")]),
            "ab|"
        );
    }

    #[test]
    fn join_stops_at_the_first_empty_argument() {
        let args = vec![b"ls".to_vec(), b"-l".to_vec(), Vec::new(), b"x".to_vec()];
        assert_eq!(join(&args, " "), "ls -l");
        assert_eq!(join(&args, ","), "ls,-l");
    }
}
