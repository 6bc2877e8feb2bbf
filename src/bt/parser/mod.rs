//! The parser: tokens into a [`Program`], by bpftrace 0.17's grammar (`parser.yy`) read as recursive descent,
//! with its precedence (`?:` < `||` < `&&` < `|` < `^` < `&` < `== !=` < `< <= > >=` < `<< >>` < `+ -` <
//! `* / %` < casts and unary operators < postfix `. -> [] ++ --`), its statement rules (an expression needs `;`
//! unless it is the last of a block; `if`, `unroll` and `while` blocks take none) and the spans bison gives each
//! node. Like bison, it stops at the first syntax error and names the token it did not expect
//! ("syntax error, unexpected }, expecting ) or \",\""); where bison's tables would list more than four expected
//! tokens it names none, as bison does.
use super::ast::*;
use super::diag::{Diagnostic, Pos, Span};
use super::lexer::{lex, Tok, Token};

mod expr;
#[cfg(test)]
mod tests;

/// What parsing a program gave: the tree (when there was no error at all) and the errors in bpftrace's order.
#[derive(Debug)]
pub struct Parsed {
    pub program: Option<Program>,
    pub errors: Vec<Diagnostic>,
}

/// Parse the text of a program.
pub fn parse(source: &str) -> Parsed {
    let lexed = lex(source);
    let mut p = Parser {
        toks: lexed.tokens,
        i: 0,
    };
    let result = p.program();
    // bpftrace lexes as it parses: lexer errors after the token that stopped the parser are never seen.
    let stop = match &result {
        Ok(_) => Pos {
            line: u32::MAX,
            col: u32::MAX,
        },
        Err(_) => p.peek_span().end,
    };
    let mut errors: Vec<Diagnostic> = lexed
        .errors
        .into_iter()
        .filter(|e| e.span.is_some_and(|s| s.end <= stop))
        .collect();
    let program = match result {
        Ok(program) => Some(program),
        Err(e) => {
            errors.push(e);
            None
        }
    };
    Parsed {
        program: program.filter(|_| errors.is_empty()),
        errors,
    }
}

pub(super) type PResult<T> = Result<T, Diagnostic>;

pub(super) struct Parser {
    pub(super) toks: Vec<Token>,
    pub(super) i: usize,
}

/// What may follow an expression where it stands, as bison's message lists it.
pub(super) const AFTER_ARG: &str = ") or \",\"";
pub(super) const AFTER_KEY: &str = "] or \",\"";

impl Parser {
    pub(super) fn peek(&self) -> &Tok {
        &self.toks[self.i].tok
    }

    pub(super) fn peek_at(&self, n: usize) -> &Tok {
        let last = self.toks.len() - 1;
        &self.toks[(self.i + n).min(last)].tok
    }

    pub(super) fn peek_span(&self) -> Span {
        self.toks[self.i].span
    }

    /// The end of the token before the current one: where bison places an empty rule.
    fn prev_end(&self) -> Span {
        match self.i {
            0 => Span {
                begin: Pos { line: 1, col: 1 },
                end: Pos { line: 1, col: 1 },
            },
            i => self.toks[i - 1].span.after(),
        }
    }

    pub(super) fn bump(&mut self) -> Token {
        let t = self.toks[self.i].clone();
        if self.i + 1 < self.toks.len() {
            self.i += 1;
        }
        t
    }

    pub(super) fn is(&self, tok: &Tok) -> bool {
        self.peek() == tok
    }

    /// The syntax error at the current token, with the expected tokens when bison names them.
    pub(super) fn unexpected(&self, expecting: Option<&str>) -> Diagnostic {
        let mut message = format!("syntax error, unexpected {}", self.peek().describe());
        if let Some(e) = expecting {
            message.push_str(", expecting ");
            message.push_str(e);
        }
        Diagnostic::error(self.peek_span(), message)
    }

    pub(super) fn expect(&mut self, tok: Tok, expecting: &str) -> PResult<Token> {
        if self.is(&tok) {
            Ok(self.bump())
        } else {
            Err(self.unexpected(Some(expecting)))
        }
    }

    fn program(&mut self) -> PResult<Program> {
        let mut program = Program {
            preproc: Vec::new(),
            structs: Vec::new(),
            probes: Vec::new(),
        };
        loop {
            match self.peek().clone() {
                Tok::Preproc(line) => program.preproc.push((line, self.bump().span)),
                Tok::StructDefn(def) => program.structs.push((def, self.bump().span)),
                _ => break,
            }
        }
        loop {
            program.probes.push(self.probe()?);
            if self.is(&Tok::Eof) {
                return Ok(program);
            }
        }
    }

    fn probe(&mut self) -> PResult<Probe> {
        let mut attach_points = vec![self.attach_point()?];
        while self.is(&Tok::Comma) {
            self.bump();
            attach_points.push(self.attach_point()?);
        }
        let start = attach_points[0].span;
        if self.is(&Tok::Eof) {
            let span = start.to(self.peek_span());
            return Err(Diagnostic::error(
                span,
                "unexpected end of file, expected {",
            ));
        }
        let mut pred_span = self.prev_end();
        let pred = if self.is(&Tok::Div) {
            let open = self.bump().span;
            let e = self.expr()?;
            let close = self.expect(Tok::EndPred, "end predicate")?.span;
            pred_span = open.to(close);
            Some(e)
        } else {
            None
        };
        let (block, end) = self.block()?;
        Ok(Probe {
            attach_points,
            pred,
            pred_span,
            block,
            span: start.to(end),
        })
    }

    /// The tokens of one attach point, joined as the grammar joins them.
    fn attach_point(&mut self) -> PResult<AttachPoint> {
        let mut span = self.prev_end();
        let mut raw = String::new();
        loop {
            let t = self.peek().clone();
            match t {
                Tok::Ident(s)
                | Tok::Builtin(s)
                | Tok::Call(s)
                | Tok::CallBuiltin(s)
                | Tok::StackMode(s) => raw.push_str(&s),
                Tok::Path(s) => raw.push_str(&s),
                Tok::Str(s) => {
                    let text = String::from_utf8_lossy(&s).replace('"', "\\\"");
                    raw.push('"');
                    raw.push_str(&text);
                    raw.push('"');
                }
                Tok::Int(n) => raw.push_str(&(n as i64).to_string()),
                Tok::Colon => raw.push(':'),
                Tok::Dot => raw.push('.'),
                Tok::Plus => raw.push('+'),
                Tok::Mul => raw.push('*'),
                Tok::LBracket => raw.push('['),
                Tok::RBracket => raw.push(']'),
                Tok::Param(_) | Tok::ParamCount => {
                    let at = self.peek_span();
                    match self.param()? {
                        Param::Positional(n) => raw.push_str(&format!("${n}")),
                        Param::Count => {
                            return Err(Diagnostic::error(
                                span.to(at),
                                "Not a positional parameter",
                            ))
                        }
                    }
                    span = span.to(at);
                    continue;
                }
                Tok::Comma | Tok::Div | Tok::LBrace | Tok::Eof => break,
                _ => return Err(self.unexpected(Some("{"))),
            }
            span = span.to(self.bump().span);
        }
        Ok(AttachPoint { raw, span })
    }

    pub(super) fn param(&mut self) -> PResult<Param> {
        let t = self.bump();
        match t.tok {
            Tok::ParamCount => Ok(Param::Count),
            Tok::Param(text) => match text[1..].parse::<i64>() {
                Ok(n) if n > 0 => Ok(Param::Positional(n as u64)),
                _ => Err(Diagnostic::error(
                    t.span,
                    format!("param {text} is out of integer range [1, {}]", i64::MAX),
                )),
            },
            _ => unreachable!("param() is called on a parameter token"),
        }
    }

    /// `{ stmt_list }`, giving the statements and the span of the closing brace.
    fn block(&mut self) -> PResult<(Vec<Stmt>, Span)> {
        self.expect(Tok::LBrace, "{")?;
        let mut stmts = Vec::new();
        loop {
            match self.peek() {
                Tok::RBrace => return Ok((stmts, self.bump().span)),
                Tok::If | Tok::Unroll | Tok::While => {
                    stmts.push(self.block_stmt()?);
                    continue;
                }
                t if starts_expr(t) || matches!(t, Tok::Break | Tok::Continue | Tok::Return) => {}
                _ => return Err(self.unexpected(Some("}"))),
            }
            stmts.push(self.expr_stmt()?);
            match self.peek() {
                Tok::Semi => {
                    self.bump();
                }
                Tok::RBrace => {}
                _ => return Err(self.unexpected(Some("}"))),
            }
        }
    }

    fn block_stmt(&mut self) -> PResult<Stmt> {
        match self.peek() {
            Tok::If => self.if_stmt(),
            Tok::Unroll => {
                let first = self.bump().span;
                self.expect(Tok::LParen, "(")?;
                let count = match self.peek() {
                    Tok::Param(_) | Tok::ParamCount => {
                        let span = self.peek_span();
                        Expr::new(ExprKind::Param(self.param()?), span)
                    }
                    Tok::Int(_) | Tok::Minus if self.int_ahead() => self.int_literal(),
                    _ => {
                        return Err(
                            self.unexpected(Some("$# or - or positional parameter or integer"))
                        )
                    }
                };
                let close = self.expect(Tok::RParen, ")")?.span;
                let (body, _) = self.block()?;
                Ok(Stmt {
                    kind: StmtKind::Unroll { count, body },
                    span: first.to(close),
                })
            }
            _ => {
                let first = self.bump().span;
                self.expect(Tok::LParen, "(")?;
                let cond = self.expr()?;
                self.expect(Tok::RParen, ")")?;
                let (body, _) = self.block()?;
                Ok(Stmt {
                    kind: StmtKind::While { cond, body },
                    span: first,
                })
            }
        }
    }

    fn if_stmt(&mut self) -> PResult<Stmt> {
        let first = self.bump().span;
        self.expect(Tok::LParen, "(")?;
        let cond = self.expr()?;
        self.expect(Tok::RParen, ")")?;
        let (then, mut end) = self.block()?;
        let otherwise = if self.is(&Tok::Else) {
            self.bump();
            match self.peek() {
                Tok::If => {
                    let nested = self.if_stmt()?;
                    end = nested.span;
                    Some(vec![nested])
                }
                Tok::LBrace => {
                    let (stmts, e) = self.block()?;
                    end = e;
                    Some(stmts)
                }
                _ => return Err(self.unexpected(Some("{ or if"))),
            }
        } else {
            None
        };
        Ok(Stmt {
            kind: StmtKind::If {
                cond,
                then,
                otherwise,
            },
            span: first.to(end),
        })
    }

    fn expr_stmt(&mut self) -> PResult<Stmt> {
        let jump = match self.peek() {
            Tok::Break => Some(Jump::Break),
            Tok::Continue => Some(Jump::Continue),
            Tok::Return => Some(Jump::Return),
            _ => None,
        };
        if let Some(jump) = jump {
            let span = self.bump().span;
            return Ok(Stmt {
                kind: StmtKind::Jump(jump),
                span,
            });
        }
        let target = self.expr()?;
        let compound = match self.peek() {
            Tok::Assign => None,
            Tok::CompoundAssign(op) => BinOp::from_text(op),
            _ => {
                let span = target.span;
                return Ok(Stmt {
                    kind: StmtKind::Expr(target),
                    span,
                });
            }
        };
        let is_tuple_index = matches!(target.kind, ExprKind::TupleIndex { .. });
        let assignable = matches!(target.kind, ExprKind::Map { .. } | ExprKind::Var(_));
        if !(assignable || (is_tuple_index && compound.is_none())) {
            return Err(self.unexpected(Some("}")));
        }
        let op = self.bump().span;
        let value = self.expr()?;
        if is_tuple_index {
            return Err(Diagnostic::error(
                target.span.to(value.span),
                "Tuples are immutable once created. Consider creating a new tuple and assigning it instead.",
            ));
        }
        let span = if compound.is_some() {
            target.span.to(value.span)
        } else {
            op
        };
        let kind = if matches!(target.kind, ExprKind::Map { .. }) {
            StmtKind::AssignMap {
                map: target,
                value,
                compound,
            }
        } else {
            StmtKind::AssignVar {
                var: target,
                value,
                compound,
            }
        };
        Ok(Stmt { kind, span })
    }
}

pub(super) fn step_error(span: Span, op: &str) -> Diagnostic {
    Diagnostic::error(
        span,
        format!("The {op} operator must be applied to a map or variable"),
    )
}

pub(super) fn is_ident_like(t: &Tok) -> bool {
    matches!(
        t,
        Tok::Ident(_) | Tok::Builtin(_) | Tok::Call(_) | Tok::CallBuiltin(_) | Tok::StackMode(_)
    )
}

/// Whether a token can begin an expression.
fn starts_expr(t: &Tok) -> bool {
    is_ident_like(t)
        || matches!(
            t,
            Tok::Int(_)
                | Tok::Str(_)
                | Tok::Param(_)
                | Tok::ParamCount
                | Tok::Map(_)
                | Tok::Var(_)
                | Tok::LParen
                | Tok::Mul
                | Tok::BNot
                | Tok::LNot
                | Tok::Minus
                | Tok::Increment
                | Tok::Decrement
        )
}
