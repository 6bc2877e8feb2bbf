//! The tokens of a bpftrace program, as bpftrace 0.17's `lexer.l` makes them: identifiers sorted into builtins,
//! calls, stack modes and keywords by their whole word; `:path` words of attach points (so `a?b:c` lexes `:c` as a
//! path there too); `/` before `/` or `{` ends a predicate; `struct X` up to `*` or `)` is one identifier;
//! `#...` lines are preprocessor directives, and the constants of `#define NAME VALUE` are substituted where the
//! name appears. Errors (an unterminated string or comment, a bad escape, a bad character) are collected, and
//! lexing goes on as bpftrace's does.
use super::diag::{Diagnostic, Pos, Span};
pub use super::token::Tok;
use super::token::{classify, parse_define, parse_int, suffix_len};

/// A token and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub tok: Tok,
    pub span: Span,
}

/// The tokens of a program (ending with [`Tok::Eof`]) and the lexer's errors.
#[derive(Debug, Default)]
pub struct Lexed {
    pub tokens: Vec<Token>,
    pub errors: Vec<Diagnostic>,
}

/// How deep `#define` constants may refer to each other, and how many expansions one program may make in all
/// (bpftrace stops at 1,000 characters put back).
const MACRO_DEPTH: usize = 16;
const MACRO_BUDGET: usize = 1000;

/// Lex `source` (the `#define NAME VALUE` constants are read from the program as it goes).
pub fn lex(source: &str) -> Lexed {
    let mut lexer = Lexer {
        src: source.as_bytes(),
        at: 0,
        pos: Pos { line: 1, col: 1 },
        step: Pos { line: 1, col: 1 },
        out: Lexed::default(),
        defines: Vec::new(),
        budget: MACRO_BUDGET,
    };
    lexer.run();
    lexer.out
}

struct Lexer<'a> {
    src: &'a [u8],
    at: usize,
    pos: Pos,
    /// Where the next token's span begins: bison's `loc.step()` runs only on white space, so a token right after
    /// another (`print(args`) begins where the first one did, and bpftrace's spans show that.
    step: Pos,
    out: Lexed,
    defines: Vec<(String, String)>,
    /// Expansions of `#define`s still allowed.
    budget: usize,
}

fn is_ident_start(b: u8) -> bool {
    b == b'_' || b.is_ascii_alphabetic()
}

fn is_ident(b: u8) -> bool {
    b == b'_' || b.is_ascii_alphanumeric()
}

fn is_path(b: u8) -> bool {
    matches!(b, b'_' | b'-' | b'.' | b'/' | b'#' | b'*') || b.is_ascii_alphanumeric()
}

impl<'a> Lexer<'a> {
    fn peek(&self, n: usize) -> u8 {
        self.src.get(self.at + n).copied().unwrap_or(0)
    }

    fn rest_starts(&self, s: &str) -> bool {
        self.src[self.at..].starts_with(s.as_bytes())
    }

    /// Move over `n` bytes (none of them a newline), column by column.
    fn advance(&mut self, n: usize) {
        self.at += n;
        self.pos.col += n as u32;
    }

    fn newline(&mut self) {
        self.at += 1;
        self.pos.line += 1;
        self.pos.col = 1;
    }

    fn span(&self) -> Span {
        Span {
            begin: self.step,
            end: self.pos,
        }
    }

    fn push(&mut self, tok: Tok) {
        let span = self.span();
        self.out.tokens.push(Token { tok, span });
    }

    fn error(&mut self, message: impl Into<String>) {
        let span = self.span();
        self.out.errors.push(Diagnostic::error(span, message));
    }

    fn run(&mut self) {
        while self.at < self.src.len() {
            let b = self.peek(0);
            match b {
                b'\n' => {
                    self.newline();
                    self.step = self.pos;
                }
                b' ' | b'\t' | b'\r' => {
                    self.advance(1);
                    self.step = self.pos;
                }
                b'#' if self.peek(1) == b'!'
                    && (self.at == 0 || self.src[self.at - 1] == b'\n') =>
                {
                    self.skip_line()
                }
                b'/' if self.peek(1) == b'/' => self.skip_line(),
                b'/' if self.peek(1) == b'*' => self.comment(),
                b'"' => self.string(),
                b'#' if self.peek(1) != b'!' && self.peek(1) != b'\n' && self.peek(1) != 0 => {
                    self.preproc()
                }
                b':' if is_path(self.peek(1)) || self.peek(1) == b'\\' => self.path(),
                b'0'..=b'9' => self.number(),
                b'@' => {
                    self.advance(1);
                    let len = self.ident_len();
                    let name = self.take(len);
                    self.push(Tok::Map(format!("@{name}")));
                }
                b'$' => self.dollar(),
                _ if is_ident_start(b) => self.word(0),
                _ => self.punct(),
            }
        }
        // bison's end-of-file token has the location as the lexer left it.
        self.push(Tok::Eof);
    }

    fn take(&mut self, len: usize) -> String {
        let s = String::from_utf8_lossy(&self.src[self.at..self.at + len]).into_owned();
        self.advance(len);
        s
    }

    fn ident_len(&self) -> usize {
        if !is_ident_start(self.peek(0)) {
            return 0;
        }
        (0..).take_while(|&i| is_ident(self.peek(i))).count()
    }

    fn skip_line(&mut self) {
        while self.at < self.src.len() && self.peek(0) != b'\n' {
            self.advance(1);
        }
    }

    fn comment(&mut self) {
        self.advance(2);
        loop {
            if self.at >= self.src.len() {
                return self.error("end of file during comment");
            }
            if self.rest_starts("*/") {
                self.advance(2);
                return;
            }
            if self.peek(0) == b'\n' {
                self.newline();
            } else {
                self.advance(1);
            }
        }
    }

    fn string(&mut self) {
        self.advance(1);
        let mut buf = Vec::new();
        loop {
            let b = self.peek(0);
            if self.at >= self.src.len() {
                self.error("unterminated string");
                return;
            }
            match b {
                b'"' => {
                    self.advance(1);
                    self.push(Tok::Str(buf));
                    return;
                }
                b'\n' => {
                    self.error("unterminated string");
                    self.newline();
                    return;
                }
                b'\\' => self.escape(&mut buf),
                _ => {
                    buf.push(b);
                    self.advance(1);
                }
            }
        }
    }

    fn escape(&mut self, buf: &mut Vec<u8>) {
        let e = self.peek(1);
        let simple = match e {
            b'n' => Some(b'\n'),
            b't' => Some(b'\t'),
            b'r' => Some(b'\r'),
            b'"' => Some(b'"'),
            b'\\' => Some(b'\\'),
            _ => None,
        };
        if let Some(c) = simple {
            buf.push(c);
            self.advance(2);
        } else if (b'0'..=b'7').contains(&e) {
            let digits = (1..4)
                .take_while(|&i| (b'0'..=b'7').contains(&self.peek(i)))
                .count();
            let text = self.take(1 + digits);
            let value = u32::from_str_radix(&text[1..], 8).unwrap_or(0);
            if value > 255 {
                self.error(format!("octal escape sequence out of range '{text}'"));
            }
            buf.push(value as u8);
        } else if (e == b'x' || e == b'X') && self.peek(2).is_ascii_hexdigit() {
            let digits = if self.peek(3).is_ascii_hexdigit() {
                2
            } else {
                1
            };
            let text = self.take(2 + digits);
            buf.push(u8::from_str_radix(&text[2..], 16).unwrap_or(0));
        } else if e == b'\n' || e == 0 {
            // A backslash at the end of a line: the newline ends the string unterminated.
            self.advance(1);
        } else {
            let len = utf8_len(e);
            let text = self.take(1 + len);
            self.error(format!("invalid escape character '{text}'"));
        }
    }

    fn preproc(&mut self) {
        let start = self.at;
        self.skip_line();
        let text = String::from_utf8_lossy(&self.src[start..self.at]).into_owned();
        if let Some((name, value)) = parse_define(&text) {
            self.defines.push((name, value));
        }
        self.push(Tok::Preproc(text));
    }

    fn path(&mut self) {
        let start = self.at;
        self.advance(1);
        loop {
            let b = self.peek(0);
            if b == b'\\' && self.peek(1) != 0 && self.peek(1) != b'\n' {
                self.advance(1 + utf8_len(self.peek(1)));
            } else if is_path(b) {
                self.advance(1);
            } else {
                break;
            }
        }
        let text = String::from_utf8_lossy(&self.src[start..self.at]).into_owned();
        self.push(Tok::Path(text));
    }

    fn number(&mut self) {
        let len =
            if (self.peek(1) == b'x' || self.peek(1) == b'X') && self.peek(2).is_ascii_hexdigit() {
                2 + (2..)
                    .take_while(|&i| self.peek(i).is_ascii_hexdigit())
                    .count()
            } else {
                let int = |from: usize| -> usize {
                    let digits = (from..)
                        .take_while(|&i| self.peek(i).is_ascii_digit() || self.peek(i) == b'_')
                        .count();
                    // An int may not end with `_`: give the trailing ones back.
                    let mut n = digits;
                    while n > 1 && self.peek(from + n - 1) == b'_' {
                        n -= 1;
                    }
                    n
                };
                let mut n = int(0);
                if matches!(self.peek(n), b'e' | b'E') && self.peek(n + 1).is_ascii_digit() {
                    n += 1 + int(n + 1);
                } else {
                    n += suffix_len(&self.src[self.at + n..]);
                }
                n
            };
        let text = self.take(len);
        match parse_int(&text) {
            Ok(n) => self.push(Tok::Int(n)),
            Err(e) => self.error(e),
        }
    }

    fn dollar(&mut self) {
        if self.peek(1) == b'#' {
            self.advance(2);
            self.push(Tok::ParamCount);
        } else if self.peek(1).is_ascii_digit() {
            let n = 1 + (1..).take_while(|&i| self.peek(i).is_ascii_digit()).count();
            let text = self.take(n);
            self.push(Tok::Param(text));
        } else if is_ident_start(self.peek(1)) {
            self.advance(1);
            let len = self.ident_len();
            let name = self.take(len);
            self.push(Tok::Var(format!("${name}")));
        } else {
            self.advance(1);
            self.error("invalid character '$'");
        }
    }

    /// An identifier, keyword or builtin; `struct X` as one identifier; a `#define`d name replaced by its value.
    fn word(&mut self, depth: usize) {
        let len = self.ident_len();
        let word = self.take(len);
        if matches!(word.as_str(), "struct" | "union" | "enum") {
            return self.struct_type(word);
        }
        let define = self.defines.iter().rev().find(|(n, _)| *n == word).cloned();
        match define {
            Some((name, value)) if value != name && depth < MACRO_DEPTH && self.budget > 0 => {
                self.budget -= 1;
                self.expand(&value, depth)
            }
            Some((name, value)) if value != name => {
                self.error(format!("Macro recursion limit reached: {name}, {value}"))
            }
            _ => self.push(classify(&word)),
        }
    }

    /// The tokens of a `#define`d value, each with the span of the name they replace.
    fn expand(&mut self, value: &str, depth: usize) {
        let mut inner = Lexer {
            src: value.as_bytes(),
            at: 0,
            pos: Pos { line: 1, col: 1 },
            step: Pos { line: 1, col: 1 },
            out: Lexed::default(),
            defines: self.defines.clone(),
            budget: self.budget,
        };
        while inner.at < inner.src.len() {
            let b = inner.peek(0);
            if is_ident_start(b) {
                inner.word(depth + 1);
            } else if b == b' ' || b == b'\t' {
                inner.advance(1);
            } else if b.is_ascii_digit() {
                inner.number();
            } else if b == b'"' {
                inner.string();
            } else {
                inner.punct();
            }
        }
        self.budget = inner.budget;
        let span = self.span();
        for mut t in inner.out.tokens {
            t.span = span;
            self.out.tokens.push(t);
        }
        for mut e in inner.out.errors {
            e.span = Some(span);
            self.out.errors.push(e);
        }
    }

    /// After `struct`: up to `*` or `)` the type's name (one identifier `struct NAME`), or a `{...}` definition.
    fn struct_type(&mut self, keyword: String) {
        let mut buf = String::new();
        let mut braces = 0usize;
        while self.at < self.src.len() {
            let b = self.peek(0);
            if braces == 0 && (b == b'*' || b == b')') {
                let name = format!("{keyword} {}", buf.trim());
                return self.push(Tok::Ident(name));
            }
            if b == b'\n' {
                buf.push('\n');
                self.newline();
                continue;
            }
            if b == b'{' {
                braces += 1;
            } else if b == b'}' && braces > 0 {
                braces -= 1;
                self.advance(1);
                buf.push('}');
                if braces == 0 {
                    if self.peek(0) == b';' {
                        self.advance(1);
                        buf.push(';');
                    }
                    return self.push(Tok::StructDefn(format!("{keyword}{buf}")));
                }
                continue;
            }
            buf.push(b as char);
            self.advance(1);
        }
        // End of file inside a struct's name: bpftrace's lexer gives nothing back.
    }

    fn punct(&mut self) {
        const OPS: &[(&str, Tok)] = &[
            ("<<=", Tok::CompoundAssign("<<")),
            (">>=", Tok::CompoundAssign(">>")),
            ("+=", Tok::CompoundAssign("+")),
            ("-=", Tok::CompoundAssign("-")),
            ("*=", Tok::CompoundAssign("*")),
            ("/=", Tok::CompoundAssign("/")),
            ("%=", Tok::CompoundAssign("%")),
            ("&=", Tok::CompoundAssign("&")),
            ("|=", Tok::CompoundAssign("|")),
            ("^=", Tok::CompoundAssign("^")),
            ("==", Tok::Eq),
            ("!=", Tok::Ne),
            ("<=", Tok::Le),
            (">=", Tok::Ge),
            ("<<", Tok::Left),
            (">>", Tok::Right),
            ("&&", Tok::LAnd),
            ("||", Tok::LOr),
            ("++", Tok::Increment),
            ("--", Tok::Decrement),
            ("->", Tok::Ptr),
            (":", Tok::Colon),
            (";", Tok::Semi),
            ("{", Tok::LBrace),
            ("}", Tok::RBrace),
            ("[", Tok::LBracket),
            ("]", Tok::RBracket),
            ("(", Tok::LParen),
            (")", Tok::RParen),
            (",", Tok::Comma),
            ("=", Tok::Assign),
            ("<", Tok::Lt),
            (">", Tok::Gt),
            ("+", Tok::Plus),
            ("-", Tok::Minus),
            ("*", Tok::Mul),
            ("%", Tok::Mod),
            ("&", Tok::BAnd),
            ("|", Tok::BOr),
            ("^", Tok::BXor),
            ("!", Tok::LNot),
            ("~", Tok::BNot),
            (".", Tok::Dot),
            ("?", Tok::Ques),
        ];
        if self.peek(0) == b'/' && !self.rest_starts("/=") {
            let after = (1..)
                .take_while(|&i| matches!(self.peek(i), b' ' | b'\t' | b'\n' | b'\r'))
                .count();
            let ends = matches!(self.peek(1 + after), b'/' | b'{');
            self.advance(1);
            return self.push(if ends { Tok::EndPred } else { Tok::Div });
        }
        if let Some((text, tok)) = OPS.iter().find(|(t, _)| self.rest_starts(t)) {
            self.advance(text.len());
            return self.push(tok.clone());
        }
        let len = utf8_len(self.peek(0));
        let text = self.take(len.min(self.src.len() - self.at));
        self.error(format!("invalid character '{text}'"));
    }
}

fn utf8_len(b: u8) -> usize {
    match b {
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(src: &str) -> Vec<Tok> {
        lex(src).tokens.into_iter().map(|t| t.tok).collect()
    }

    /// Check that attach points lex as bpftrace's lexer makes them: an identifier, then `:path` words.
    #[test]
    fn attach_point_paths() {
        assert_eq!(
            toks("uprobe:/bin/bash:readline { }"),
            vec![
                Tok::Ident("uprobe".into()),
                Tok::Path(":/bin/bash".into()),
                Tok::Path(":readline".into()),
                Tok::LBrace,
                Tok::RBrace,
                Tok::Eof
            ]
        );
        assert_eq!(
            toks("interval:s:$3"),
            vec![
                Tok::Ident("interval".into()),
                Tok::Path(":s".into()),
                Tok::Colon,
                Tok::Param("$3".into()),
                Tok::Eof
            ]
        );
    }

    /// Check that `/` ends a predicate only before `/` or `{`, and `struct X *` is one identifier.
    #[test]
    fn predicates_and_struct_casts() {
        assert_eq!(
            toks("/a / 2/ {"),
            vec![
                Tok::Div,
                Tok::Ident("a".into()),
                Tok::Div,
                Tok::Int(2),
                Tok::EndPred,
                Tok::LBrace,
                Tok::Eof
            ]
        );
        assert_eq!(
            toks("(struct task_struct *)curtask")[1],
            Tok::Ident("struct task_struct".into())
        );
    }

    /// Check string escapes and the errors of strings and comments with their spans.
    #[test]
    fn strings_and_errors() {
        assert_eq!(toks(r#""a\n\x41\101\"""#)[0], Tok::Str(b"a\nAA\"".to_vec()));
        let l = lex("BEGIN { \"abc }");
        assert_eq!(l.errors[0].message, "unterminated string");
        assert_eq!(l.errors[0].span.unwrap().begin.col, 9);
        assert_eq!(l.errors[0].span.unwrap().end.col, 15);
        let l = lex("BEGIN { /* abc ");
        assert_eq!(l.errors[0].message, "end of file during comment");
        assert_eq!(l.tokens.last().unwrap().span.begin.col, 9);
    }

    /// Check that a `#define` constant replaces its name, and function-like macros are left alone.
    #[test]
    fn defines() {
        let t = toks("#define TASK_RUNNING 0\nBEGIN { print(TASK_RUNNING) }");
        assert!(t.contains(&Tok::Int(0)));
        assert_eq!(parse_define("#define F(x) x"), None);
        // Self-multiplying constants stop at the budget instead of growing without bound.
        let l = lex("#define A A A A A A A A\nBEGIN { A }");
        assert!(l.tokens.len() < 10_000, "{}", l.tokens.len());
        assert!(l.errors[0]
            .message
            .starts_with("Macro recursion limit reached: A, A A"));
        assert_eq!(
            parse_define("#define N 0x10"),
            Some(("N".into(), "0x10".into()))
        );
    }
}
