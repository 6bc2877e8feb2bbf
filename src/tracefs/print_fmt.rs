//! How the kernel prints an event's fields: its `format` file's `print fmt` line, a C format string and its
//! arguments. From it come the names of enum values (`__print_symbolic(REC->newstate, { 1, "TCP_ESTABLISHED" },
//! ...)`), of flags (`__print_flags(REC->prev_state, "|", { 0x01, "S" }, ...)`) and which fields are addresses
//! (`%pI4`, `%pI6c`) or socket addresses (`%pISpc`). Pure: parsed from the file's text.
use std::collections::HashMap;

/// How one field is shown, as its event's `print fmt` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldDisplay {
    /// `__print_symbolic`: a name per value.
    Symbolic(Vec<(u64, String)>),
    /// `__print_flags`: the names of the set flags, joined by `delim`; `zero` names a value without flags
    /// (sched_switch's `prev_state ? __print_flags(...) : "R"`).
    Flags {
        delim: String,
        names: Vec<(u64, String)>,
        zero: Option<String>,
        /// The bits named (`__print_flags(REC->f & MASK, ...)`); others are left out.
        mask: Option<u64>,
        /// A mark printed after the names when these bits are set: sched_switch's `+` for a preempted task
        /// (`REC->prev_state & BIT ? "+" : ""`, the next argument), so `R+`.
        suffix: Option<(u64, String)>,
    },
    /// `%pI4`: 4 bytes of an IPv4 address.
    Ipv4,
    /// `%pI6`/`%pI6c`: 16 bytes of an IPv6 address.
    Ipv6,
    /// `%pIS...`: a `struct sockaddr_in` or `sockaddr_in6`, by its family.
    Sockaddr,
}

impl FieldDisplay {
    /// The name of `value` (symbolic or flags; None for others, and for a value without a name).
    /// Flags no name covers are shown in hex after the names, as the kernel does (`S|0x100`).
    pub fn name(&self, value: u64) -> Option<String> {
        match self {
            FieldDisplay::Symbolic(names) => names
                .iter()
                .find(|(v, _)| *v == value)
                .map(|(_, n)| n.clone()),
            FieldDisplay::Flags {
                delim,
                names,
                zero,
                mask,
                suffix,
            } => {
                let mark = match suffix {
                    Some((bits, mark)) if value & bits != 0 => mark.as_str(),
                    _ => "",
                };
                let named = Self::flag_names(
                    delim,
                    names,
                    zero.as_ref(),
                    value & mask.unwrap_or(u64::MAX),
                )?;
                Some(format!("{named}{mark}"))
            }
            _ => None,
        }
    }

    /// The names of the set flags of `value` (already masked), joined by `delim`; `zero` for none.
    fn flag_names(
        delim: &str,
        names: &[(u64, String)],
        zero: Option<&String>,
        value: u64,
    ) -> Option<String> {
        if value == 0 {
            return zero
                .cloned()
                .or_else(|| names.iter().find(|(v, _)| *v == 0).map(|(_, n)| n.clone()));
        }
        let mut left = value;
        let mut parts: Vec<String> = Vec::new();
        for (mask, name) in names {
            if *mask != 0 && left & mask == *mask {
                parts.push(name.clone());
                left &= !mask;
            }
        }
        if left != 0 {
            parts.push(format!("0x{left:x}"));
        }
        (!parts.is_empty() && left != value).then(|| parts.join(delim))
    }
}

/// The `print fmt:` line's text (after the label), if the format has one.
pub fn print_fmt(format: &str) -> Option<&str> {
    format
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("print fmt:"))
        .map(str::trim)
}

/// How each field is shown, by field name, from a `format` file's `print fmt` (fields it prints plainly are
/// absent).
pub fn field_displays(format: &str) -> HashMap<String, FieldDisplay> {
    let mut out = HashMap::new();
    let Some(text) = print_fmt(format) else {
        return out;
    };
    let Some((fmt, rest)) = string_literal(text) else {
        return out;
    };
    let args = split_top(rest.trim_start().trim_start_matches(',').trim_start(), ',');
    let specs = conversions(&fmt);
    for (i, arg) in args.iter().enumerate() {
        if let Some((field, mut display)) = named_arg(arg) {
            if let (FieldDisplay::Flags { suffix, .. }, Some(next)) =
                (&mut display, args.get(i + 1))
            {
                *suffix = flag_mark(next)
                    .filter(|(f, ..)| *f == field)
                    .map(|(_, b, m)| (b, m));
            }
            out.entry(field).or_insert(display);
            continue;
        }
        let Some(field) = arg.trim().strip_prefix("REC->").filter(|f| is_ident(f)) else {
            continue;
        };
        let display = match specs.get(i).map(String::as_str) {
            Some(s) if s.starts_with("pI4") || s.starts_with("pi4") => FieldDisplay::Ipv4,
            Some(s) if s.starts_with("pI6") || s.starts_with("pi6") => FieldDisplay::Ipv6,
            Some(s) if s.starts_with("pIS") || s.starts_with("piS") => FieldDisplay::Sockaddr,
            _ => continue,
        };
        out.entry(field.to_string()).or_insert(display);
    }
    out
}

/// The names of each enum and flag field's values, by field name: `newstate -> [(1, "TCP_ESTABLISHED"), ...]`
/// (for filters that compare a field with a name).
pub fn symbolic_names(format: &str) -> HashMap<String, Vec<(u64, String)>> {
    field_displays(format)
        .into_iter()
        .filter_map(|(field, d)| match d {
            FieldDisplay::Symbolic(names) => Some((field, names)),
            // The name of no flag (`R`), and with the mark after it (`R+`: the preemption bit).
            FieldDisplay::Flags {
                mut names,
                zero,
                suffix,
                ..
            } => {
                if let Some(zero) = zero {
                    if let Some((bits, mark)) = suffix {
                        names.push((bits, format!("{zero}{mark}")));
                    }
                    names.push((0, zero));
                }
                Some((field, names))
            }
            _ => None,
        })
        .collect()
}

/// `__print_symbolic(REC->f, {v, "N"}...)` or `[COND ?] __print_flags(REC->f..., "|", {v, "N"}...) [: "Z"]`
/// (their `_u64` forms too): the field and its names.
fn named_arg(arg: &str) -> Option<(String, FieldDisplay)> {
    let (at, flags) = match (arg.find("__print_symbolic"), arg.find("__print_flags")) {
        (Some(a), _) => (a, false),
        (None, Some(a)) => (a, true),
        (None, None) => return None,
    };
    let open = at + arg[at..].find('(')?;
    let close = open + matching(&arg[open..])?;
    let inner = split_top(&arg[open + 1..close], ',');
    let field = rec_field(inner.first()?)?;
    let pairs =
        |items: &[&str]| -> Vec<(u64, String)> { items.iter().filter_map(|p| pair(p)).collect() };
    if !flags {
        return Some((field, FieldDisplay::Symbolic(pairs(&inner[1..]))));
    }
    let (delim, _) = string_literal(inner.get(1)?.trim())?;
    let after = arg[close + 1..].trim_start();
    let zero = after
        .strip_prefix(':')
        .and_then(|z| string_literal(z.trim()))
        .map(|(z, _)| z);
    let names = pairs(&inner[2..]);
    // `REC->f & MASK`: the bits named.
    let first = inner[0].trim();
    let mask = first
        .strip_prefix("REC->")
        .map(|r| r.trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '_'))
        .and_then(|r| r.trim().strip_prefix('&'))
        .and_then(eval);
    Some((
        field,
        FieldDisplay::Flags {
            delim,
            names,
            zero,
            mask,
            suffix: None,
        },
    ))
}

/// `REC->f & BITS ? "MARK" : ""`: a mark printed after a field's flags when those bits are set.
fn flag_mark(arg: &str) -> Option<(String, u64, String)> {
    let (cond, rest) = arg.split_once('?')?;
    let field = rec_field(cond)?;
    let bits = cond
        .trim()
        .strip_prefix("REC->")?
        .trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '_')
        .trim()
        .strip_prefix('&')
        .and_then(eval)?;
    let (mark, after) = string_literal(rest.trim())?;
    let (none, _) = string_literal(after.trim().strip_prefix(':')?.trim())?;
    (none.is_empty() && !mark.is_empty()).then_some((field, bits, mark))
}

/// The first `REC->NAME` of an expression.
pub(crate) fn rec_field(expr: &str) -> Option<String> {
    let at = expr.find("REC->")? + 5;
    let name: String = expr[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// `{ VALUE, "NAME" }`.
fn pair(text: &str) -> Option<(u64, String)> {
    let inner = text.trim().strip_prefix('{')?.strip_suffix('}')?;
    let parts = split_top(inner, ',');
    let [value, name] = parts.as_slice() else {
        return None;
    };
    let (name, _) = string_literal(name.trim())?;
    Some((eval(value)?, name))
}

/// A C string literal at the start of `text` (adjacent literals joined), and the text after it.
pub(crate) fn string_literal(text: &str) -> Option<(String, &str)> {
    let mut rest = text.strip_prefix('"')?;
    let mut out = String::new();
    loop {
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    c => out.push(c),
                },
                (_, c) => out.push(c),
            }
        };
        rest = &rest[end + 1..];
        match rest.trim_start().strip_prefix('"') {
            Some(next) => rest = next,
            None => return Some((out, rest)),
        }
    }
}

/// The characters of `text` outside string literals (quotes and escapes skipped), each with the bracket depth
/// after it: an opening bracket counts itself, a closing one is at the depth it returns to.
fn outside_strings(text: &str) -> impl Iterator<Item = (usize, char, i32)> + '_ {
    let (mut depth, mut in_str, mut escaped) = (0i32, false, false);
    text.char_indices().filter_map(move |(i, c)| {
        match (in_str, c) {
            (true, _) if escaped => escaped = false,
            (true, '\\') => escaped = true,
            (true, '"') => in_str = false,
            (true, _) => {}
            (false, '"') => in_str = true,
            (false, _) => {
                match c {
                    '(' | '{' | '[' => depth += 1,
                    ')' | '}' | ']' => depth -= 1,
                    _ => {}
                }
                return Some((i, c, depth));
            }
        }
        None
    })
}

/// The offset of the bracket that closes the one `text` starts with.
pub(crate) fn matching(text: &str) -> Option<usize> {
    outside_strings(text)
        .find(|&(_, c, depth)| depth == 0 && matches!(c, ')' | '}' | ']'))
        .map(|(i, _, _)| i)
}

/// `text` split at each `sep` outside brackets and string literals.
pub(crate) fn split_top(text: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c, depth) in outside_strings(text) {
        if c == sep && depth == 0 {
            out.push(&text[start..i]);
            start = i + c.len_utf8();
        }
    }
    if !text[start..].trim().is_empty() || !out.is_empty() {
        out.push(&text[start..]);
    }
    out
}

/// The conversions of a printf format, one per argument they take (`*` widths take one, as `*`): `d`, `s`,
/// `pI4`, `pISpc`...
fn conversions(fmt: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = fmt.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            continue;
        }
        if chars.peek() == Some(&'%') {
            chars.next();
            continue;
        }
        while let Some(&c) = chars.peek() {
            match c {
                '-'
                | '+'
                | ' '
                | '#'
                | '0'..='9'
                | '.'
                | 'h'
                | 'l'
                | 'z'
                | 'j'
                | 't'
                | 'L'
                | 'q' => {
                    chars.next();
                }
                '*' => {
                    out.push("*".to_string());
                    chars.next();
                }
                _ => break,
            }
        }
        let Some(conv) = chars.next() else {
            break;
        };
        let mut spec = conv.to_string();
        if conv == 'p' {
            while let Some(&c) = chars.peek().filter(|c| c.is_ascii_alphanumeric()) {
                spec.push(c);
                chars.next();
            }
        }
        out.push(spec);
    }
    out
}

fn is_ident(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The value of a constant C expression of the kind formats hold: literals (`0x10`, `9ULL`, `-1`), casts,
/// parentheses, `~ - << >> & | ^ + - *`.
fn eval(expr: &str) -> Option<u64> {
    let tokens = tokens(expr)?;
    let mut p = Parser { tokens, at: 0 };
    let v = p.binary(0)?;
    (p.at == p.tokens.len()).then_some(v)
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Num(u64),
    Ident,
    Op(&'static str),
}

fn tokens(expr: &str) -> Option<Vec<Tok>> {
    const OPS: [&str; 12] = ["<<", ">>", "(", ")", "~", "-", "+", "*", "&", "|", "^", "!"];
    let mut out = Vec::new();
    let mut rest = expr.trim();
    while !rest.is_empty() {
        let c = rest.chars().next()?;
        if c.is_ascii_digit() {
            let end = rest
                .find(|c: char| !c.is_ascii_alphanumeric())
                .unwrap_or(rest.len());
            let lit = rest[..end].trim_end_matches(['u', 'U', 'l', 'L']);
            let v = match lit.strip_prefix("0x").or_else(|| lit.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16).ok()?,
                None if lit.len() > 1 && lit.starts_with('0') => {
                    u64::from_str_radix(lit, 8).ok()?
                }
                None => lit.parse().ok()?,
            };
            out.push(Tok::Num(v));
            rest = &rest[end..];
        } else if c.is_ascii_alphabetic() || c == '_' {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            out.push(Tok::Ident);
            rest = &rest[end..];
        } else {
            let op = OPS.iter().find(|op| rest.starts_with(**op))?;
            out.push(Tok::Op(op));
            rest = &rest[op.len()..];
        }
        rest = rest.trim_start();
    }
    Some(out)
}

struct Parser {
    tokens: Vec<Tok>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.at)
    }

    /// Binary operators at or above `min` precedence (C's: `|` < `^` < `&` < shifts < `+ -` < `*`).
    fn binary(&mut self, min: u8) -> Option<u64> {
        let mut lhs = self.unary()?;
        loop {
            let Some(Tok::Op(op)) = self.peek().cloned() else {
                return Some(lhs);
            };
            let prec = match op {
                "|" => 1,
                "^" => 2,
                "&" => 3,
                "<<" | ">>" => 4,
                "+" | "-" => 5,
                "*" => 6,
                _ => return Some(lhs),
            };
            if prec < min {
                return Some(lhs);
            }
            self.at += 1;
            let rhs = self.binary(prec + 1)?;
            lhs = match op {
                "|" => lhs | rhs,
                "^" => lhs ^ rhs,
                "&" => lhs & rhs,
                "<<" => lhs.checked_shl(u32::try_from(rhs).ok()?)?,
                ">>" => lhs.checked_shr(u32::try_from(rhs).ok()?)?,
                "+" => lhs.wrapping_add(rhs),
                "-" => lhs.wrapping_sub(rhs),
                _ => lhs.wrapping_mul(rhs),
            };
        }
    }

    /// A literal, a parenthesized expression, a cast (`(gfp_t)x`, `( unsigned long)x`) or a unary operator.
    fn unary(&mut self) -> Option<u64> {
        match self.tokens.get(self.at)?.clone() {
            Tok::Num(v) => {
                self.at += 1;
                Some(v)
            }
            Tok::Op("-") => {
                self.at += 1;
                Some(self.unary()?.wrapping_neg())
            }
            Tok::Op("~") => {
                self.at += 1;
                Some(!self.unary()?)
            }
            Tok::Op("!") => {
                self.at += 1;
                Some(u64::from(self.unary()? == 0))
            }
            Tok::Op("(") => {
                let close = self.at
                    + 1
                    + self.tokens[self.at + 1..]
                        .iter()
                        .position(|t| *t != Tok::Ident && *t != Tok::Op("*"))?;
                if close > self.at + 1 && self.tokens.get(close) == Some(&Tok::Op(")")) {
                    // A cast: its type's words, then the operand.
                    self.at = close + 1;
                    return self.unary();
                }
                self.at += 1;
                let v = self.binary(0)?;
                (self.peek() == Some(&Tok::Op(")"))).then(|| self.at += 1)?;
                Some(v)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
