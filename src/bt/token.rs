//! The tokens of bpftrace 0.17's language (`lexer.l`, `parser.yy`'s `%token`s): how bison names each in its
//! syntax errors, how an identifier sorts into keyword, builtin, call or stack mode by its whole word, and the
//! literals: integers as bpftrace's `int_parser` reads them, `#define NAME VALUE` lines.
/// One token. The names in [`Tok::describe`] are bison's, as its syntax errors spell them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tok {
    Eof,
    Colon,
    Semi,
    LBrace,
    RBrace,
    LBracket,
    RBracket,
    LParen,
    RParen,
    Ques,
    EndPred,
    Comma,
    ParamCount,
    Assign,
    /// `+=`, `<<=`...: the operator's text without `=`.
    CompoundAssign(&'static str),
    Eq,
    Ne,
    Le,
    Ge,
    Left,
    Right,
    Lt,
    Gt,
    LAnd,
    LOr,
    Plus,
    Increment,
    Minus,
    Decrement,
    Mul,
    Div,
    Mod,
    BAnd,
    BOr,
    BXor,
    LNot,
    BNot,
    Dot,
    Ptr,
    If,
    Else,
    Unroll,
    While,
    For,
    Return,
    Continue,
    Break,
    Builtin(String),
    Call(String),
    CallBuiltin(String),
    Ident(String),
    Path(String),
    Preproc(String),
    StructDefn(String),
    Str(Vec<u8>),
    Map(String),
    Var(String),
    Param(String),
    Int(u64),
    StackMode(String),
}

impl Tok {
    /// How bison names the token in "syntax error, unexpected X, expecting Y".
    pub fn describe(&self) -> &'static str {
        use Tok::*;
        match self {
            Eof => "end of file",
            Colon => ":",
            Semi => ";",
            LBrace => "{",
            RBrace => "}",
            LBracket => "[",
            RBracket => "]",
            LParen => "(",
            RParen => ")",
            Ques => "?",
            EndPred => "end predicate",
            Comma => "\",\"",
            ParamCount => "$#",
            Assign => "=",
            CompoundAssign(op) => compound_name(op),
            Eq => "==",
            Ne => "!=",
            Le => "<=",
            Ge => ">=",
            Left => "<<",
            Right => ">>",
            Lt => "<",
            Gt => ">",
            LAnd => "&&",
            LOr => "||",
            Plus => "+",
            Increment => "++",
            Minus => "-",
            Decrement => "--",
            Mul => "*",
            Div => "/",
            Mod => "%",
            BAnd => "&",
            BOr => "|",
            BXor => "^",
            LNot => "!",
            BNot => "~",
            Dot => ".",
            Ptr => "->",
            If => "if",
            Else => "else",
            Unroll => "unroll",
            While => "while",
            For => "for",
            Return => "return",
            Continue => "continue",
            Break => "break",
            Builtin(_) => "builtin",
            Call(_) => "call",
            CallBuiltin(_) => "call_builtin",
            Ident(_) => "identifier",
            Path(_) => "path",
            Preproc(_) => "preprocessor directive",
            StructDefn(_) => "struct definition",
            Str(_) => "string",
            Map(_) => "map",
            Var(_) => "variable",
            Param(_) => "positional parameter",
            Int(_) => "integer",
            StackMode(_) => "stack_mode",
        }
    }
}

fn compound_name(op: &str) -> &'static str {
    match op {
        "<<" => "<<=",
        ">>" => ">>=",
        "+" => "+=",
        "-" => "-=",
        "*" => "*=",
        "/" => "/=",
        "%" => "%=",
        "&" => "&=",
        "|" => "|=",
        _ => "^=",
    }
}

const BUILTINS: &[&str] = &[
    "args", "cgroup", "comm", "cpid", "numaid", "cpu", "ctx", "curtask", "elapsed", "func", "gid",
    "nsecs", "pid", "probe", "rand", "retval", "tid", "uid", "username",
];
const CALLS: &[&str] = &[
    "avg",
    "buf",
    "cat",
    "cgroupid",
    "clear",
    "count",
    "delete",
    "exit",
    "hist",
    "join",
    "kaddr",
    "kptr",
    "ksym",
    "lhist",
    "macaddr",
    "max",
    "min",
    "ntop",
    "override",
    "print",
    "printf",
    "cgroup_path",
    "reg",
    "signal",
    "sizeof",
    "stats",
    "str",
    "strerror",
    "strftime",
    "strncmp",
    "strcontains",
    "sum",
    "system",
    "time",
    "uaddr",
    "uptr",
    "usym",
    "zero",
    "path",
    "unwatch",
    "bswap",
    "skboutput",
    "pton",
    "debugf",
];
/// How deep `#define` constants may refer to each other.
/// How an identifier lexes: keyword, stack mode, builtin, call, or plain identifier (the lexer's rule order).
pub fn classify(word: &str) -> Tok {
    let keyword = match word {
        "if" => Some(Tok::If),
        "else" => Some(Tok::Else),
        "unroll" => Some(Tok::Unroll),
        "while" => Some(Tok::While),
        "for" => Some(Tok::For),
        "return" => Some(Tok::Return),
        "continue" => Some(Tok::Continue),
        "break" => Some(Tok::Break),
        _ => None,
    };
    let numbered = |prefix: &str| {
        word.strip_prefix(prefix)
            .is_some_and(|d| d.len() == 1 && d.as_bytes()[0].is_ascii_digit())
    };
    if word == "bpftrace" || word == "perf" {
        Tok::StackMode(word.into())
    } else if BUILTINS.contains(&word) || numbered("arg") || numbered("sarg") {
        Tok::Builtin(word.into())
    } else if CALLS.contains(&word) {
        Tok::Call(word.into())
    } else if word == "kstack" || word == "ustack" {
        Tok::CallBuiltin(word.into())
    } else if let Some(k) = keyword {
        k
    } else {
        Tok::Ident(word.into())
    }
}

/// The length of an integer suffix (`u`, `l`, `ul`, `ll`, `ull`, any case) at the start of `rest`.
pub(super) fn suffix_len(rest: &[u8]) -> usize {
    let lower: Vec<u8> = rest
        .iter()
        .take(3)
        .map(|b| b.to_ascii_lowercase())
        .collect();
    for s in ["ull", "ll", "ul", "u", "l"] {
        if lower.starts_with(s.as_bytes()) {
            return s.len();
        }
    }
    0
}

/// `NAME VALUE` of a `#define NAME VALUE` line (a function-like macro is not a constant and gives nothing).
pub fn parse_define(line: &str) -> Option<(String, String)> {
    let rest = line
        .strip_prefix('#')?
        .trim_start()
        .strip_prefix("define")?;
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    let rest = rest.trim_start();
    let name_len = rest
        .bytes()
        .take_while(|&b| b == b'_' || b.is_ascii_alphanumeric())
        .count();
    let (name, value) = rest.split_at(name_len);
    if name.is_empty() || value.starts_with('(') {
        return None;
    }
    let value = value.split("//").next().unwrap_or("").trim();
    Some((name.to_string(), value.to_string()))
}

/// An integer literal as bpftrace 0.17 reads it (`int_parser::to_uint` with base 0): `_` separators, hex, a
/// leading 0 for octal, `1e6`, and C's `u`/`l`/`ll` suffixes.
pub fn parse_int(text: &str) -> Result<u64, String> {
    let n: String = text.chars().filter(|&c| c != '_').collect();
    if let Some(hex) = n.strip_prefix("0x").or_else(|| n.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).map_err(|_| "stoull".to_string());
    }
    if let Some(e) = n.find(['e', 'E']) {
        let (coeff, exp) = (&n[..e], &n[e + 1..]);
        let c: u64 = coeff.parse().map_err(|_| {
            format!("Coefficient part of scientific literal is not a valid number: {coeff}: stoull")
        })?;
        let x: u64 = exp.parse().map_err(|_| {
            format!("Exponent part of scientific literal is not a valid number: {exp}: stoull")
        })?;
        if c > 9 {
            return Err(format!(
                "Coefficient part of scientific literal must be in range (0,9), got: {coeff}"
            ));
        }
        if x > 16 {
            return Err(format!("Exponent will overflow integer range: {exp}"));
        }
        return Ok(c * 10u64.pow(x as u32));
    }
    let digits_end = n.bytes().take_while(|b| b.is_ascii_digit()).count();
    let (digits, suffix) = n.split_at(digits_end);
    let (value, used) = if digits.len() > 1 && digits.starts_with('0') {
        let octal = digits
            .bytes()
            .take_while(|b| (b'0'..=b'7').contains(b))
            .count();
        (u64::from_str_radix(&digits[..octal], 8), octal)
    } else {
        (digits.parse::<u64>(), digits.len())
    };
    let value = value.map_err(|_| "stoull".to_string())?;
    let trail = &n[used..];
    if !trail.is_empty() && (used < digits.len() || suffix_len(suffix.as_bytes()) != suffix.len()) {
        return Err("Found trailing non-numeric characters".into());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check integer literals: separators, hex, octal, exponents, suffixes, and bpftrace's errors.
    #[test]
    fn integers() {
        assert_eq!(parse_int("1_000_000"), Ok(1_000_000));
        assert_eq!(parse_int("0x1F"), Ok(31));
        assert_eq!(parse_int("010"), Ok(8));
        assert_eq!(parse_int("1e6"), Ok(1_000_000));
        assert_eq!(parse_int("10ULL"), Ok(10));
        assert_eq!(
            parse_int("08"),
            Err("Found trailing non-numeric characters".into())
        );
        assert_eq!(
            parse_int("10e3"),
            Err("Coefficient part of scientific literal must be in range (0,9), got: 10".into())
        );
    }
}
