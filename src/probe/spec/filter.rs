//! `PATTERN if EXPR`: which events of a probe count. The syntax is ftrace's event filter syntax, so that the
//! kernel can evaluate it: `NAME OP VALUE` with `== != < <= > >=`, `NAME ~ "GLOB"` on strings, `NAME & MASK`
//! (true when any bit of MASK is set), `!`, `&&`, `||` and parentheses. A NAME is a value the probe can
//! fetch (`arg0`, a parameter or field name) or the process context (`comm`, `pid`, `tid`, `cpu`). A VALUE is
//! an integer, a `"string"`, or a name (an enum value, which a later stage resolves from the event's `print
//! fmt`).
//!
//! [`Expr::split`] divides a filter into the conjuncts the kernel evaluates and those rprof evaluates;
//! [`Expr::ftrace`] writes the kernel's part as the text the event's `filter` file (or
//! `PERF_EVENT_IOC_SET_FILTER`) takes.

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// `~`: a glob on a string.
    Glob,
}

impl CmpOp {
    pub fn text(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
            CmpOp::Glob => "~",
        }
    }
}

/// The right side of a comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Literal {
    Int(i128),
    Str(String),
    /// A bare name (`TCP_SYN_SENT`): an enum value, resolved from the event's `print fmt` by a later stage.
    Name(String),
}

impl std::fmt::Display for Literal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Literal::Int(v) => write!(f, "{v}"),
            Literal::Str(s) => write!(f, "\"{s}\""),
            Literal::Name(n) => write!(f, "{n}"),
        }
    }
}

/// A filter expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    Cmp {
        name: String,
        op: CmpOp,
        value: Literal,
    },
    /// `NAME & MASK`: true when any of MASK's bits is set.
    Mask {
        name: String,
        mask: u64,
    },
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
}

/// How the kernel knows a name on one event: its field there and whether it holds text or a signed number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelField {
    /// The field's name in the filter text (`common_pid`, `comm`, `v0`, `filename`, `filename.ustring`).
    pub name: String,
    pub text: bool,
    pub signed: bool,
    /// A pointer to text: the name under which the kernel compares the text it points to with a string
    /// (`filename.ustring` for a syscall's pointer into the process, the name itself for a kernel `char *`).
    pub pointee: Option<String>,
}

impl Expr {
    /// Every name the expression reads, once each, in order.
    pub fn names(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        self.visit(&mut |n| {
            if !out.contains(&n) {
                out.push(n);
            }
        });
        out
    }

    /// Every value compared with (a later stage resolves [`Literal::Name`]s from the event's `print fmt`).
    pub fn literals(&self) -> Vec<&Literal> {
        match self {
            Expr::Cmp { value, .. } => vec![value],
            Expr::Mask { .. } => Vec::new(),
            Expr::Not(e) => e.literals(),
            Expr::And(a, b) | Expr::Or(a, b) => {
                let mut v = a.literals();
                v.extend(b.literals());
                v
            }
        }
    }

    /// The expression with every [`Literal::Name`] compared with a field replaced by its number, as `value`
    /// finds it for (field, name); the error names the first one it cannot find.
    pub fn resolve_names(
        &self,
        value: &dyn Fn(&str, &str) -> Result<i128, String>,
    ) -> Result<Expr, String> {
        Ok(match self {
            Expr::Cmp {
                name,
                op,
                value: Literal::Name(n),
            } => Expr::Cmp {
                name: name.clone(),
                op: *op,
                value: Literal::Int(value(name, n)?),
            },
            // A quoted name of a field's values (`prev_state == "R+"`, a name that is no identifier); a string
            // where the field has no such name.
            Expr::Cmp {
                name,
                op,
                value: Literal::Str(n),
            } if *op != CmpOp::Glob => match value(name, n) {
                Ok(v) => Expr::Cmp {
                    name: name.clone(),
                    op: *op,
                    value: Literal::Int(v),
                },
                Err(_) => self.clone(),
            },
            Expr::Cmp { .. } | Expr::Mask { .. } => self.clone(),
            Expr::Not(e) => Expr::Not(Box::new(e.resolve_names(value)?)),
            Expr::And(a, b) => Expr::And(
                Box::new(a.resolve_names(value)?),
                Box::new(b.resolve_names(value)?),
            ),
            Expr::Or(a, b) => Expr::Or(
                Box::new(a.resolve_names(value)?),
                Box::new(b.resolve_names(value)?),
            ),
        })
    }

    /// The first name compared with a string for which `not_text` holds (a value that is no text).
    pub fn string_compared(&self, not_text: &dyn Fn(&str) -> bool) -> Option<&str> {
        match self {
            Expr::Cmp {
                name,
                value: Literal::Str(_),
                ..
            } if not_text(name) => Some(name),
            Expr::Cmp { .. } | Expr::Mask { .. } => None,
            Expr::Not(e) => e.string_compared(not_text),
            Expr::And(a, b) | Expr::Or(a, b) => a
                .string_compared(not_text)
                .or_else(|| b.string_compared(not_text)),
        }
    }

    /// The first name for which `is_text` holds (a value that is text) compared with a number or a mask.
    pub fn number_compared(&self, is_text: &dyn Fn(&str) -> bool) -> Option<&str> {
        match self {
            Expr::Cmp {
                name,
                value: Literal::Int(_),
                ..
            }
            | Expr::Mask { name, .. }
                if is_text(name) =>
            {
                Some(name)
            }
            Expr::Cmp { .. } | Expr::Mask { .. } => None,
            Expr::Not(e) => e.number_compared(is_text),
            Expr::And(a, b) | Expr::Or(a, b) => a
                .number_compared(is_text)
                .or_else(|| b.number_compared(is_text)),
        }
    }

    fn visit<'a>(&'a self, f: &mut dyn FnMut(&'a str)) {
        match self {
            Expr::Cmp { name, .. } | Expr::Mask { name, .. } => f(name),
            Expr::Not(e) => e.visit(f),
            Expr::And(a, b) | Expr::Or(a, b) => {
                a.visit(f);
                b.visit(f);
            }
        }
    }

    /// The top-level `&&` terms.
    pub fn conjuncts(&self) -> Vec<&Expr> {
        match self {
            Expr::And(a, b) => {
                let mut v = a.conjuncts();
                v.extend(b.conjuncts());
                v
            }
            e => vec![e],
        }
    }

    /// The conjunction of `terms` (None when empty).
    pub fn all(terms: Vec<Expr>) -> Option<Expr> {
        terms
            .into_iter()
            .reduce(|a, b| Expr::And(Box::new(a), Box::new(b)))
    }

    /// The expression as the kernel's filter text, when every name is a field of the event (`field`) and every
    /// comparison one the kernel takes on it (no negative number on an unsigned field, globs and equality only
    /// on text, no names of values).
    pub fn ftrace(&self, field: &dyn Fn(&str) -> Option<KernelField>) -> Option<String> {
        Some(match self {
            Expr::Cmp { name, op, value } => {
                let f = field(name)?;
                let text_name = match (f.text, &f.pointee) {
                    (true, _) => Some(&f.name),
                    (false, pointee) => pointee.as_ref(),
                };
                let (name, v) = match (value, text_name) {
                    (Literal::Int(v), _)
                        if !f.text && *op != CmpOp::Glob && (*v >= 0 || f.signed) =>
                    {
                        (&f.name, v.to_string())
                    }
                    (Literal::Str(s), Some(name))
                        if matches!(op, CmpOp::Eq | CmpOp::Ne | CmpOp::Glob)
                            && !s.contains(['"', '\\']) =>
                    {
                        (name, format!("\"{s}\""))
                    }
                    _ => return None,
                };
                format!("{name} {} {v}", op.text())
            }
            Expr::Mask { name, mask } => {
                let f = field(name).filter(|f| !f.text)?;
                format!("{} & {mask}", f.name)
            }
            Expr::Not(e) => format!("!({})", e.ftrace(field)?),
            Expr::And(a, b) => format!("({}) && ({})", a.ftrace(field)?, b.ftrace(field)?),
            Expr::Or(a, b) => format!("({}) || ({})", a.ftrace(field)?, b.ftrace(field)?),
        })
    }

    /// The expression as written (normalized), for `-l` and errors.
    pub fn text(&self) -> String {
        match self {
            Expr::Cmp { name, op, value } => format!("{name} {} {value}", op.text()),
            Expr::Mask { name, mask } => format!("{name} & {mask:#x}"),
            Expr::Not(e) => format!("!({})", e.text()),
            Expr::And(a, b) => format!("{} && {}", paren_or(a), paren_or(b)),
            Expr::Or(a, b) => format!("{} || {}", a.text(), b.text()),
        }
    }
}

fn paren_or(e: &Expr) -> String {
    match e {
        Expr::Or(..) => format!("({})", e.text()),
        e => e.text(),
    }
}

/// Split `PATTERN if EXPR` at its first ` if ` outside quotes; the filter is None without one.
pub fn split_if(spec: &str) -> (&str, Option<&str>) {
    let mut quoted = false;
    let bytes = spec.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'"' {
            quoted = !quoted;
        }
        if !quoted && spec[i..].starts_with(" if ") {
            return (spec[..i].trim_end(), Some(spec[i + 4..].trim()));
        }
    }
    (spec, None)
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Ident(String),
    Int(i128),
    Str(String),
    Op(&'static str),
}

const OPS: [&str; 13] = [
    "&&", "||", "==", "!=", "<=", ">=", "<", ">", "~", "&", "!", "(", ")",
];

fn tokens(text: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let c = rest.chars().next().unwrap_or(' ');
        if c == '"' {
            let end = rest[1..]
                .find('"')
                .ok_or_else(|| format!("unterminated string at `{rest}`"))?;
            out.push(Token::Str(rest[1..=end].to_string()));
            rest = &rest[end + 2..];
        } else if c.is_ascii_digit()
            || (c == '-' && rest[1..].starts_with(|d: char| d.is_ascii_digit()))
        {
            let len = rest[1..]
                .find(|d: char| !d.is_ascii_alphanumeric())
                .map_or(rest.len(), |n| n + 1);
            let word = &rest[..len];
            out.push(Token::Int(
                parse_int(word).ok_or_else(|| format!("`{word}` is not a number"))?,
            ));
            rest = &rest[len..];
        } else if c.is_ascii_alphabetic() || c == '_' {
            let len = rest
                .find(|d: char| !(d.is_ascii_alphanumeric() || d == '_'))
                .unwrap_or(rest.len());
            out.push(Token::Ident(rest[..len].to_string()));
            rest = &rest[len..];
        } else {
            let op = OPS
                .iter()
                .find(|op| rest.starts_with(**op))
                .ok_or_else(|| format!("unexpected `{c}` in `{text}`"))?;
            out.push(Token::Op(op));
            rest = &rest[op.len()..];
        }
        rest = rest.trim_start();
    }
    Ok(out)
}

fn parse_int(word: &str) -> Option<i128> {
    let (neg, digits) = match word.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, word),
    };
    let v = match digits.strip_prefix("0x") {
        Some(hex) => i128::from_str_radix(hex, 16).ok()?,
        None => digits.parse().ok()?,
    };
    Some(if neg { -v } else { v })
}

/// Parse a filter expression (the text after ` if `).
pub fn parse(text: &str) -> Result<Expr, String> {
    let toks = tokens(text)?;
    let mut p = Parser { toks: &toks, at: 0 };
    let e = p.or()?;
    match p.toks.get(p.at) {
        None => Ok(e),
        Some(t) => Err(format!("unexpected {} after `{}`", show(t), e.text())),
    }
}

fn show(t: &Token) -> String {
    match t {
        Token::Ident(s) => format!("`{s}`"),
        Token::Int(v) => format!("`{v}`"),
        Token::Str(s) => format!("\"{s}\""),
        Token::Op(o) => format!("`{o}`"),
    }
}

struct Parser<'a> {
    toks: &'a [Token],
    at: usize,
}

impl Parser<'_> {
    fn next(&mut self) -> Option<&Token> {
        let t = self.toks.get(self.at);
        self.at += 1;
        t
    }

    fn eat(&mut self, op: &str) -> bool {
        if matches!(self.toks.get(self.at), Some(Token::Op(o)) if *o == op) {
            self.at += 1;
            return true;
        }
        false
    }

    fn or(&mut self) -> Result<Expr, String> {
        let mut e = self.and()?;
        while self.eat("||") {
            e = Expr::Or(Box::new(e), Box::new(self.and()?));
        }
        Ok(e)
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut e = self.unary()?;
        while self.eat("&&") {
            e = Expr::And(Box::new(e), Box::new(self.unary()?));
        }
        Ok(e)
    }

    fn unary(&mut self) -> Result<Expr, String> {
        if self.eat("!") {
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        if self.eat("(") {
            let e = self.or()?;
            if !self.eat(")") {
                return Err(format!("missing `)` after `{}`", e.text()));
            }
            return Ok(e);
        }
        self.predicate()
    }

    fn predicate(&mut self) -> Result<Expr, String> {
        let name = match self.next() {
            Some(Token::Ident(n)) => n.clone(),
            Some(t) => return Err(format!("expected a value name, found {}", show(t))),
            None => return Err("the filter ends where a value name should be".into()),
        };
        let op = match self.next() {
            Some(Token::Op("&")) => {
                return match self.next() {
                    Some(Token::Int(m)) if *m >= 0 => Ok(Expr::Mask {
                        name,
                        mask: *m as u64,
                    }),
                    _ => Err(format!("`{name} &` takes a non-negative number (a mask)")),
                }
            }
            Some(Token::Op(o)) => match *o {
                "==" => CmpOp::Eq,
                "!=" => CmpOp::Ne,
                "<" => CmpOp::Lt,
                "<=" => CmpOp::Le,
                ">" => CmpOp::Gt,
                ">=" => CmpOp::Ge,
                "~" => CmpOp::Glob,
                _ => return Err(format!("`{name}` is followed by `{o}`, not a comparison")),
            },
            _ => {
                return Err(format!(
                    "`{name}` needs a comparison (== != < <= > >= ~) or `& MASK`"
                ))
            }
        };
        let value = match self.next() {
            Some(Token::Int(v)) => Literal::Int(*v),
            Some(Token::Str(s)) => Literal::Str(s.clone()),
            Some(Token::Ident(n)) => Literal::Name(n.clone()),
            _ => return Err(format!("`{name} {}` needs a value", op.text())),
        };
        if op == CmpOp::Glob && !matches!(value, Literal::Str(_)) {
            return Err(format!("`{name} ~` takes a \"glob\""));
        }
        Ok(Expr::Cmp { name, op, value })
    }
}

#[cfg(test)]
mod tests {
    /// Check that names compared with a field become the numbers the lookup gives, and that the lookup's error
    /// comes back.
    #[test]
    fn resolves_names() {
        let e = super::parse("newstate == TCP_SYN_SENT && !(oldstate != TCP_CLOSE) && pid > 3")
            .unwrap();
        let value = |field: &str, name: &str| match (field, name) {
            ("newstate", "TCP_SYN_SENT") => Ok(2),
            ("oldstate", "TCP_CLOSE") => Ok(7),
            _ => Err(format!("{field} {name}")),
        };
        let r = e.resolve_names(&value).unwrap();
        assert_eq!(
            r,
            super::parse("newstate == 2 && !(oldstate != 7) && pid > 3").unwrap()
        );
        let bad = super::parse("newstate == NOPE").unwrap();
        assert_eq!(bad.resolve_names(&value).unwrap_err(), "newstate NOPE");
    }

    use super::*;

    fn field(name: &str) -> Option<KernelField> {
        let (kname, text, signed) = match name {
            "comm" => ("comm", true, false),
            "tid" => ("common_pid", false, true),
            "arg0" => ("v0", false, true),
            "flags" => ("flags", false, false),
            "filename" => ("filename", false, false),
            _ => return None,
        };
        Some(KernelField {
            name: kname.into(),
            text,
            signed,
            pointee: (name == "filename").then(|| "filename.ustring".into()),
        })
    }

    /// Check that filters parse with C's precedence and are written as ftrace's filter text.
    #[test]
    fn parses_and_writes_ftrace() {
        let e = parse("arg0 < 100 && (comm == \"a b\" || !(flags & 0x40))").unwrap();
        assert_eq!(e.names(), vec!["arg0", "comm", "flags"]);
        assert_eq!(
            e.ftrace(&field).unwrap(),
            "(v0 < 100) && ((comm == \"a b\") || (!(flags & 64)))"
        );
        assert_eq!(e.conjuncts().len(), 2);
        let e = parse("a == 1 || b == 2 && c == 3").unwrap();
        assert!(matches!(e, Expr::Or(..)));
        assert_eq!(
            parse("comm ~ \"py*\"").unwrap().ftrace(&field).unwrap(),
            "comm ~ \"py*\""
        );
    }

    /// Check what stays out of the kernel: unknown names, negative numbers on unsigned fields, enum names.
    #[test]
    fn kernel_refusals() {
        assert!(parse("pid == 5").unwrap().ftrace(&field).is_none());
        assert!(parse("flags == -1").unwrap().ftrace(&field).is_none());
        assert!(parse("arg0 == -1").unwrap().ftrace(&field).is_some());
        assert!(parse("flags == O_RDONLY").unwrap().ftrace(&field).is_none());
        assert!(parse("comm < 3").unwrap().ftrace(&field).is_none());
        // A pointer to text: its text compared with strings (equality and globs only), itself with numbers.
        let text = |f: &str| parse(f).unwrap().ftrace(&field);
        assert_eq!(
            text("filename ~ \"/etc*\"").as_deref(),
            Some("filename.ustring ~ \"/etc*\"")
        );
        assert_eq!(text("filename != 0").as_deref(), Some("filename != 0"));
        assert!(text("filename < \"/etc\"").is_none());
        assert!(text("flags == \"x\"").is_none());
    }

    /// Check the errors of bad filters and the ` if ` split.
    #[test]
    fn errors_and_split() {
        for bad in [
            "",
            "arg0",
            "arg0 <",
            "(arg0 < 1",
            "arg0 ~ 3",
            "arg0 < 1 arg1",
            "arg0 & -1",
            "\"x",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            split_if("c:f(arg0) if comm == \"a if b\""),
            ("c:f(arg0)", Some("comm == \"a if b\""))
        );
        assert_eq!(split_if("f"), ("f", None));
    }
}
