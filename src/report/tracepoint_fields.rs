//! A tracepoint sample's fields as text, the way `perf script` prints them (libtraceevent's rendering of the
//! event's `print fmt`): `prev_comm=rprof prev_pid=12721 prev_prio=120 prev_state=R ==> next_comm=tail ...`.
//!
//! The formats come from the recording's HEADER_TRACING_DATA ([`crate::recording::decode_tracing_data`]), the
//! field layout from [`parse_format`], the names of symbolic and flag values from [`field_displays`]. The
//! `print fmt` is rendered for the common cases: the conversions `%d %i %u %x %X %o %c %s %p` with flags,
//! width, precision and the `hh h l ll z` lengths; the arguments `REC->field`, casts of them to integer and
//! pointer types, `__get_str(field)`, `__print_symbolic(...)`, `__print_flags(...)` with sched_switch's
//! conditional and its `+` mark. An event whose `print fmt` holds anything else (helpers such as
//! `__print_hex`, arithmetic, `%pS`...) is printed as `field=value` pairs instead, and so is a sample whose
//! value cannot be known for sure (a negative narrow field printed as a wider number): never a wrong value.
use crate::recording::decode_tracing_data;
use crate::tracefs::print_fmt::{matching, print_fmt, rec_field, split_top, string_literal};
use crate::tracefs::{field_displays, parse_format, FieldDisplay, FormatField};
use std::collections::HashMap;

/// How one event's samples are printed.
#[derive(Clone, Debug)]
pub struct EventPrinter {
    fields: Vec<FormatField>,
    /// The `print fmt` as pieces, or None when it holds what is not rendered (then `field=value` pairs).
    pieces: Option<Vec<Piece>>,
}

#[derive(Clone, Debug)]
enum Piece {
    Text(String),
    Conv(Spec, Arg),
}

/// One printf conversion: `%-08.3lx`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Spec {
    left: bool,
    zero: bool,
    alt: bool,
    plus: bool,
    space: bool,
    width: usize,
    precision: Option<usize>,
    /// The bits of the argument as the length modifier says: 8 (`hh`), 16 (`h`), 32 (none), 64 (`l`...).
    bits: u32,
    conv: char,
}

/// One argument of the `print fmt`.
#[derive(Clone, Debug)]
enum Arg {
    /// `REC->f`: the field of this index.
    Field(usize),
    /// `__get_str(f)`.
    Str(usize),
    /// `__print_symbolic` / `__print_flags` of a field.
    Named(usize, FieldDisplay),
    /// sched_switch's `REC->prev_state & BIT ? "+" : ""`: the mark the field's [`FieldDisplay`] already shows.
    Empty,
    /// `(TYPE)ARG`: to `bits` bits, sign-extended when `signed`.
    Cast {
        bits: u32,
        signed: bool,
        arg: Box<Arg>,
    },
}

/// A value: a number of `bits` known bits (the rest are unknown: libtraceevent does not widen fields), or a
/// string.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Val {
    Num { v: u64, bits: u32, signed: bool },
    Str(String),
}

/// The printers of a recording's tracepoint events, by tracepoint id.
#[derive(Debug, Default)]
pub struct TraceEvents {
    by_id: HashMap<u64, EventPrinter>,
}

impl TraceEvents {
    /// The events of a HEADER_TRACING_DATA section; none when it is empty or cannot be read.
    pub fn from_tracing_data(bytes: &[u8]) -> TraceEvents {
        let events = match bytes.is_empty() {
            true => Vec::new(),
            false => decode_tracing_data(bytes).unwrap_or_default(),
        };
        TraceEvents {
            by_id: events
                .into_iter()
                .filter_map(|e| Some((e.id?, EventPrinter::new(&e.format))))
                .collect(),
        }
    }

    pub fn get(&self, id: u64) -> Option<&EventPrinter> {
        self.by_id.get(&id)
    }
}

impl EventPrinter {
    /// The printer of an event's `format` text.
    pub fn new(format: &str) -> EventPrinter {
        let fields = parse_format(format);
        let pieces = pieces(format, &fields);
        EventPrinter { fields, pieces }
    }

    /// The text of a sample's fields (`raw`: its PERF_SAMPLE_RAW data).
    pub fn render(&self, raw: &[u8]) -> String {
        self.pieces
            .as_ref()
            .and_then(|p| self.printf(p, raw))
            .unwrap_or_else(|| self.pairs(raw))
    }

    fn printf(&self, pieces: &[Piece], raw: &[u8]) -> Option<String> {
        let mut out = String::new();
        for piece in pieces {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Conv(spec, arg) => out.push_str(&convert(spec, &self.value(arg, raw)?)?),
            }
        }
        Some(out)
    }

    /// `name=value` for each field that is not common, as libtraceevent lists fields.
    fn pairs(&self, raw: &[u8]) -> String {
        let shown = |f: &FormatField| -> Option<String> {
            if f.is_char_array() || f.is_data_loc() {
                return string_of(f, raw);
            }
            let Val::Num { v, .. } = number(f, raw)? else {
                return None;
            };
            Some(match (f.signed, f.is_pointer() || f.size == 8) {
                (true, _) => sign_extend(v, 8 * f.size as u32).to_string(),
                (false, true) => format!("0x{v:x}"),
                (false, false) => v.to_string(),
            })
        };
        let parts: Vec<String> = self
            .fields
            .iter()
            .filter(|f| !f.is_common())
            .map(|f| format!("{}={}", f.name, shown(f).unwrap_or_else(|| "?".into())))
            .collect();
        parts.join(" ")
    }

    fn value(&self, arg: &Arg, raw: &[u8]) -> Option<Val> {
        Some(match arg {
            Arg::Field(i) => {
                let f = &self.fields[*i];
                match f.is_char_array() || f.is_data_loc() {
                    true => Val::Str(string_of(f, raw)?),
                    false => number(f, raw)?,
                }
            }
            Arg::Str(i) => Val::Str(string_of(&self.fields[*i], raw)?),
            Arg::Named(i, display) => {
                let Val::Num { v, .. } = number(&self.fields[*i], raw)? else {
                    return None;
                };
                Val::Str(display.name(v)?)
            }
            Arg::Empty => Val::Str(String::new()),
            Arg::Cast { bits, signed, arg } => {
                let Val::Num {
                    v,
                    bits: known,
                    signed: inner,
                } = self.value(arg, raw)?
                else {
                    return None;
                };
                let mask = low_bits(*bits);
                match (*signed, known >= *bits) {
                    (true, true) => Val::Num {
                        v: sign_extend(v & mask, *bits) as u64,
                        bits: 64,
                        signed: true,
                    },
                    (false, true) => Val::Num {
                        v: v & mask,
                        bits: *bits,
                        signed: false,
                    },
                    // Widening: a signed value's high bits are not sure (libtraceevent reads no more).
                    (_, false) => Val::Num {
                        v,
                        bits: known,
                        signed: inner,
                    },
                }
            }
        })
    }
}

/// The pieces of an event's `print fmt`; None if it has none or holds what is not rendered.
fn pieces(format: &str, fields: &[FormatField]) -> Option<Vec<Piece>> {
    let (fmt, rest) = string_literal(print_fmt(format)?)?;
    let rest = rest.trim_start();
    let args = match rest.strip_prefix(',') {
        Some(r) => split_top(r, ','),
        None if rest.is_empty() => Vec::new(),
        None => return None,
    };
    let displays = field_displays(format);
    let mut args = args.into_iter();
    let mut out = Vec::new();
    let mut text = String::new();
    let mut chars = fmt.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            text.push(c);
            continue;
        }
        if chars.peek() == Some(&'%') {
            chars.next();
            text.push('%');
            continue;
        }
        let spec = spec(&mut chars)?;
        let arg = parse_arg(args.next()?, fields, &displays)?;
        out.push(Piece::Text(std::mem::take(&mut text)));
        out.push(Piece::Conv(spec, arg));
    }
    out.push(Piece::Text(text));
    args.next().is_none().then_some(out)
}

/// The conversion after a `%`; None for those not rendered (`*` widths, `%pS`, floats...).
fn spec(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<Spec> {
    let mut s = Spec::default();
    while let Some(&c) = chars.peek() {
        match c {
            '-' => s.left = true,
            '0' => s.zero = true,
            '#' => s.alt = true,
            '+' => s.plus = true,
            ' ' => s.space = true,
            _ => break,
        }
        chars.next();
    }
    let digits = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        let mut n = 0usize;
        while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
            n = n * 10 + d as usize;
            chars.next();
        }
        n
    };
    s.width = digits(chars);
    if chars.peek() == Some(&'.') {
        chars.next();
        s.precision = Some(digits(chars));
    }
    let mut length = String::new();
    while let Some(&c) = chars
        .peek()
        .filter(|c| matches!(c, 'h' | 'l' | 'z' | 'L' | 'j' | 't'))
    {
        length.push(c);
        chars.next();
    }
    s.bits = match length.as_str() {
        "" => 32,
        "hh" => 8,
        "h" => 16,
        "l" | "ll" | "z" | "L" | "j" | "t" => 64,
        _ => return None,
    };
    s.conv = chars.next()?;
    let special_pointer = s.conv == 'p' && chars.peek().is_some_and(|c| c.is_ascii_alphanumeric());
    (matches!(s.conv, 'd' | 'i' | 'u' | 'x' | 'X' | 'o' | 'c' | 's' | 'p') && !special_pointer)
        .then_some(s)
}

/// One argument; None for what is not rendered.
fn parse_arg(
    text: &str,
    fields: &[FormatField],
    displays: &HashMap<String, FieldDisplay>,
) -> Option<Arg> {
    let t = strip_parens(text.trim());
    let index = |name: &str| fields.iter().position(|f| f.name == name);
    if t.contains("__print_symbolic") || t.contains("__print_flags") {
        let field = rec_field(t)?;
        return Some(Arg::Named(index(&field)?, displays.get(&field)?.clone()));
    }
    if let Some(inner) = t
        .strip_prefix("__get_str(")
        .and_then(|r| r.strip_suffix(')'))
    {
        let f = index(inner.trim())?;
        return fields[f].is_data_loc().then_some(Arg::Str(f));
    }
    if t.contains('?') {
        let field = rec_field(t)?;
        return match displays.get(&field)? {
            FieldDisplay::Flags {
                suffix: Some((_, mark)),
                ..
            } if t.contains(&format!("\"{mark}\"")) => Some(Arg::Empty),
            _ => None,
        };
    }
    if t.starts_with('(') {
        let close = matching(t)?;
        let (bits, signed) = cast_type(&t[1..close])?;
        let arg = Box::new(parse_arg(&t[close + 1..], fields, displays)?);
        return Some(Arg::Cast { bits, signed, arg });
    }
    let name = t.strip_prefix("REC->")?;
    index(name).map(Arg::Field)
}

/// `text` without the parentheses around all of it.
fn strip_parens(mut t: &str) -> &str {
    while t.starts_with('(') && matching(t) == Some(t.len() - 1) {
        t = t[1..t.len() - 1].trim();
    }
    t
}

/// The bits and signedness of a cast's type (pointers are 64-bit); None for other types.
fn cast_type(ty: &str) -> Option<(u32, bool)> {
    let ty = ty.split_whitespace().collect::<Vec<_>>().join(" ");
    if ty.ends_with('*') {
        return Some((64, false));
    }
    let unsigned = ty.starts_with("unsigned") || ty.starts_with('u') || ty.starts_with("__u");
    let bits = match ty
        .trim_start_matches("unsigned")
        .trim_start_matches("signed")
        .trim()
    {
        "" | "int" | "u32" | "s32" | "__u32" | "__s32" => 32,
        "long" | "long int" | "long long" | "long long int" | "u64" | "s64" | "__u64" | "__s64"
        | "size_t" => 64,
        "short" | "u16" | "s16" | "__u16" | "__s16" => 16,
        "char" | "u8" | "s8" | "__u8" | "__s8" => 8,
        _ => return None,
    };
    Some((bits, !unsigned))
}

fn low_bits(bits: u32) -> u64 {
    match bits {
        64.. => u64::MAX,
        b => (1u64 << b) - 1,
    }
}

fn sign_extend(v: u64, bits: u32) -> i64 {
    match bits {
        64.. => v as i64,
        b => ((v << (64 - b)) as i64) >> (64 - b),
    }
}

/// A number field's value (1, 2, 4 or 8 bytes, little-endian), as read: not widened.
fn number(f: &FormatField, raw: &[u8]) -> Option<Val> {
    let bytes = raw.get(f.offset..f.offset.checked_add(f.size)?)?;
    if !matches!(f.size, 1 | 2 | 4 | 8) {
        return None;
    }
    let v = bytes
        .iter()
        .rev()
        .fold(0u64, |acc, &b| acc << 8 | u64::from(b));
    Some(Val::Num {
        v,
        bits: 8 * f.size as u32,
        signed: f.signed,
    })
}

/// A string field: a char array up to its NUL, or a `__data_loc` string (u32: length << 16 | offset).
fn string_of(f: &FormatField, raw: &[u8]) -> Option<String> {
    let bytes = match f.is_data_loc() {
        true => {
            let Val::Num { v, .. } = number(f, raw)? else {
                return None;
            };
            let (at, len) = ((v & 0xffff) as usize, (v >> 16 & 0xffff) as usize);
            raw.get(at..at + len)?
        }
        false => raw.get(f.offset..f.offset.checked_add(f.size)?)?,
    };
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    Some(String::from_utf8_lossy(&bytes[..end]).into_owned())
}

/// One conversion of a value, as printf makes it; None when the value does not fit it or is not known for
/// sure.
fn convert(spec: &Spec, val: &Val) -> Option<String> {
    let (v, bits, signed) = match (val, spec.conv) {
        (Val::Str(s), 's') => {
            let s: String = match spec.precision {
                Some(p) => s.chars().take(p).collect(),
                None => s.clone(),
            };
            return Some(pad(spec, "", &s));
        }
        (Val::Num { v, bits, signed }, c) if c != 's' => (*v, *bits, *signed),
        _ => return None,
    };
    let target = if spec.conv == 'p' { 64 } else { spec.bits };
    if bits < target && signed && v >> (bits - 1) & 1 == 1 {
        return None;
    }
    let v = v & low_bits(target);
    let (sign, digits) = match spec.conv {
        'd' | 'i' => {
            let n = sign_extend(v, target);
            let sign = match (n < 0, spec.plus, spec.space) {
                (true, ..) => "-",
                (false, true, _) => "+",
                (false, false, true) => " ",
                _ => "",
            };
            (sign, n.unsigned_abs().to_string())
        }
        'u' => ("", v.to_string()),
        'x' | 'p' => (
            if (spec.alt || spec.conv == 'p') && v != 0 {
                "0x"
            } else {
                ""
            },
            format!("{v:x}"),
        ),
        'X' => (if spec.alt && v != 0 { "0X" } else { "" }, format!("{v:X}")),
        'o' => (if spec.alt && v != 0 { "0" } else { "" }, format!("{v:o}")),
        'c' => return Some(pad(spec, "", &char::from(v as u8).to_string())),
        _ => return None,
    };
    if spec.conv == 'p' && v == 0 {
        return Some(pad(spec, "", "(nil)"));
    }
    let digits = match spec.precision {
        Some(0) if v == 0 => String::new(),
        Some(p) => format!("{digits:0>p$}"),
        None => digits,
    };
    Some(pad(spec, sign, &digits))
}

/// `prefix` and `body` padded to the width: spaces before (after with `-`), or zeros between them (`0`, for
/// numbers without a precision).
fn pad(spec: &Spec, prefix: &str, body: &str) -> String {
    let len = prefix.chars().count() + body.chars().count();
    let fill = spec.width.saturating_sub(len);
    let numeric = !matches!(spec.conv, 's' | 'c');
    match (spec.left, spec.zero && numeric && spec.precision.is_none()) {
        (true, _) => format!("{prefix}{body}{}", " ".repeat(fill)),
        (false, true) => format!("{prefix}{}{body}", "0".repeat(fill)),
        (false, false) => format!("{}{prefix}{body}", " ".repeat(fill)),
    }
}

#[cfg(test)]
mod tests;
