//! Expressions, by precedence from `?:` down to primaries, with the spans bison gives them.
use super::{is_ident_like, step_error, PResult, Parser, AFTER_ARG, AFTER_KEY};
use crate::bt::ast::*;
use crate::bt::diag::Diagnostic;
use crate::bt::lexer::Tok;

impl Parser {
    pub(super) fn expr(&mut self) -> PResult<Expr> {
        let cond = self.binary(0)?;
        if !self.is(&Tok::Ques) {
            return Ok(cond);
        }
        self.bump();
        let then = self.expr()?;
        self.expect(Tok::Colon, ":")?;
        let otherwise = self.expr()?;
        let span = cond.span.to(otherwise.span);
        Ok(Expr::new(
            ExprKind::Ternary {
                cond: Box::new(cond),
                then: Box::new(then),
                otherwise: Box::new(otherwise),
            },
            span,
        ))
    }

    /// Left-associative binary operators from precedence `level` up (0 is `||`).
    fn binary(&mut self, level: usize) -> PResult<Expr> {
        const LEVELS: &[&[(Tok, BinOp)]] = &[
            &[(Tok::LOr, BinOp::LOr)],
            &[(Tok::LAnd, BinOp::LAnd)],
            &[(Tok::BOr, BinOp::BOr)],
            &[(Tok::BXor, BinOp::BXor)],
            &[(Tok::BAnd, BinOp::BAnd)],
            &[(Tok::Eq, BinOp::Eq), (Tok::Ne, BinOp::Ne)],
            &[
                (Tok::Le, BinOp::Le),
                (Tok::Ge, BinOp::Ge),
                (Tok::Lt, BinOp::Lt),
                (Tok::Gt, BinOp::Gt),
            ],
            &[(Tok::Left, BinOp::Left), (Tok::Right, BinOp::Right)],
            &[(Tok::Plus, BinOp::Plus), (Tok::Minus, BinOp::Minus)],
            &[
                (Tok::Mul, BinOp::Mul),
                (Tok::Div, BinOp::Div),
                (Tok::Mod, BinOp::Mod),
            ],
        ];
        let Some(ops) = LEVELS.get(level) else {
            return self.cast();
        };
        let mut left = self.binary(level + 1)?;
        while let Some((_, op)) = ops.iter().find(|(t, _)| self.is(t)) {
            let span = self.bump().span;
            let right = self.binary(level + 1)?;
            left = Expr::new(
                ExprKind::Binop {
                    op: *op,
                    left: Box::new(left),
                    right: Box::new(right),
                },
                span,
            );
        }
        Ok(left)
    }

    /// `(type) e`, `(type *) e`, `(type **) e`, or a unary expression. bison shifts `( IDENT )` into a cast
    /// whenever it can, so `(x)` is always a cast and `(x * 2)` a syntax error, as in bpftrace.
    fn cast(&mut self) -> PResult<Expr> {
        let is_cast = self.is(&Tok::LParen)
            && matches!(self.peek_at(1), Tok::Ident(_))
            && matches!(self.peek_at(2), Tok::RParen | Tok::Mul);
        if !is_cast {
            return self.unary();
        }
        let open = self.bump().span;
        let Tok::Ident(ty) = self.bump().tok else {
            unreachable!("checked above")
        };
        let mut pointer_depth = 0;
        while pointer_depth < 2 && self.is(&Tok::Mul) {
            self.bump();
            pointer_depth += 1;
        }
        let close = self.expect(Tok::RParen, ")")?.span;
        let expr = self.cast()?;
        Ok(Expr::new(
            ExprKind::Cast {
                ty,
                pointer_depth,
                expr: Box::new(expr),
            },
            open.to(close),
        ))
    }

    fn unary(&mut self) -> PResult<Expr> {
        let op = match self.peek() {
            Tok::Mul => UnOp::Deref,
            Tok::BNot => UnOp::BNot,
            Tok::LNot => UnOp::LNot,
            Tok::Minus if !matches!(self.peek_at(1), Tok::Int(_)) => UnOp::Neg,
            Tok::Increment | Tok::Decrement => return self.prefix_step(),
            _ => return self.postfix(),
        };
        let span = self.bump().span;
        let expr = self.cast()?;
        Ok(Expr::new(
            ExprKind::Unop {
                op,
                expr: Box::new(expr),
                postfix: false,
            },
            span,
        ))
    }

    /// `++@x`, `--$x`; on anything else bpftrace's own error.
    fn prefix_step(&mut self) -> PResult<Expr> {
        let t = self.bump();
        let (op, text) = if t.tok == Tok::Increment {
            (UnOp::Increment, "++")
        } else {
            (UnOp::Decrement, "--")
        };
        if !matches!(self.peek(), Tok::Map(_) | Tok::Var(_)) {
            if is_ident_like(self.peek()) {
                return Err(step_error(t.span, text));
            }
            return Err(self.unexpected(None));
        }
        let target = self.map_or_var()?;
        Ok(Expr::new(
            ExprKind::Unop {
                op,
                expr: Box::new(target),
                postfix: false,
            },
            t.span,
        ))
    }

    fn postfix(&mut self) -> PResult<Expr> {
        let mut e = self.primary()?;
        loop {
            match self.peek() {
                Tok::Dot => {
                    let dot = self.bump().span;
                    if let Tok::Int(n) = *self.peek() {
                        let at = self.bump().span;
                        e = Expr::new(
                            ExprKind::TupleIndex {
                                expr: Box::new(e),
                                index: n as i64,
                            },
                            at,
                        );
                        continue;
                    }
                    let field = self.ident()?;
                    e = Expr::new(
                        ExprKind::Field {
                            expr: Box::new(e),
                            field,
                            arrow: false,
                        },
                        dot,
                    );
                }
                Tok::Ptr => {
                    self.bump();
                    let end = self.peek_span();
                    let field = self.ident()?;
                    let span = e.span.to(end);
                    e = Expr::new(
                        ExprKind::Field {
                            expr: Box::new(e),
                            field,
                            arrow: true,
                        },
                        span,
                    );
                }
                Tok::LBracket => {
                    let open = self.bump().span;
                    let index = self.expr()?;
                    let close = self.expect(Tok::RBracket, "]")?.span;
                    e = Expr::new(
                        ExprKind::Index {
                            expr: Box::new(e),
                            index: Box::new(index),
                        },
                        open.to(close),
                    );
                }
                Tok::Increment | Tok::Decrement
                    if matches!(e.kind, ExprKind::Map { .. } | ExprKind::Var(_)) =>
                {
                    let t = self.bump();
                    let op = if t.tok == Tok::Increment {
                        UnOp::Increment
                    } else {
                        UnOp::Decrement
                    };
                    e = Expr::new(
                        ExprKind::Unop {
                            op,
                            expr: Box::new(e),
                            postfix: true,
                        },
                        t.span,
                    );
                }
                _ => return Ok(e),
            }
        }
    }

    /// An identifier where the grammar's `ident` stands (field names): builtins and call names count.
    fn ident(&mut self) -> PResult<String> {
        match self.peek().clone() {
            Tok::Ident(s)
            | Tok::Builtin(s)
            | Tok::Call(s)
            | Tok::CallBuiltin(s)
            | Tok::StackMode(s) => {
                self.bump();
                Ok(s)
            }
            _ => Err(self.unexpected(None)),
        }
    }

    pub(super) fn int_ahead(&self) -> bool {
        matches!(self.peek(), Tok::Int(_))
            || (self.is(&Tok::Minus) && matches!(self.peek_at(1), Tok::Int(_)))
    }

    /// `INT` or `- INT` as one literal.
    pub(super) fn int_literal(&mut self) -> Expr {
        let first = self.bump();
        let (negative, last) = match first.tok {
            Tok::Minus => (true, self.bump()),
            _ => (false, first.clone()),
        };
        let Tok::Int(n) = last.tok else {
            unreachable!("int_ahead() checked it")
        };
        let value = if negative {
            (n as i64).wrapping_neg()
        } else {
            n as i64
        };
        Expr::new(ExprKind::Int(value), first.span.to(last.span))
    }

    fn primary(&mut self) -> PResult<Expr> {
        let span = self.peek_span();
        let tok = self.peek().clone();
        let kind = match tok {
            Tok::Int(_) | Tok::Minus => return Ok(self.int_literal()),
            Tok::Str(s) => ExprKind::Str(s),
            Tok::StackMode(s) | Tok::Builtin(s) | Tok::Ident(s)
                if matches!(self.peek_at(1), Tok::LParen) =>
            {
                return Err(Diagnostic::error(span, format!("Unknown function: {s}")))
            }
            Tok::Ident(_) | Tok::Builtin(_) | Tok::StackMode(_)
                if matches!(self.peek_at(1), Tok::Increment | Tok::Decrement) =>
            {
                let text = if self.peek_at(1) == &Tok::Increment {
                    "++"
                } else {
                    "--"
                };
                return Err(step_error(span, text));
            }
            Tok::Ident(s) => ExprKind::Ident(s),
            Tok::StackMode(s) => ExprKind::StackMode(s),
            Tok::Builtin(s) => ExprKind::Builtin(s),
            Tok::CallBuiltin(s) if !matches!(self.peek_at(1), Tok::LParen) => ExprKind::Builtin(s),
            Tok::Call(_) | Tok::CallBuiltin(_) => return self.call(),
            Tok::Param(_) | Tok::ParamCount => ExprKind::Param(self.param()?),
            Tok::Map(_) | Tok::Var(_) => return self.map_or_var(),
            Tok::LParen => return self.paren(),
            _ => return Err(self.unexpected(None)),
        };
        if !matches!(kind, ExprKind::Param(_)) {
            self.bump();
        }
        Ok(Expr::new(kind, span))
    }

    fn call(&mut self) -> PResult<Expr> {
        let t = self.bump();
        let (Tok::Call(name) | Tok::CallBuiltin(name)) = t.tok else {
            unreachable!("call() is called on a call token")
        };
        self.expect(Tok::LParen, "(")?;
        let args = if self.is(&Tok::RParen) {
            Vec::new()
        } else {
            self.vargs(AFTER_ARG)?
        };
        let close = self.expect(Tok::RParen, AFTER_ARG)?.span;
        Ok(Expr::new(ExprKind::Call { name, args }, t.span.to(close)))
    }

    /// `e, e, ...` up to a closing token, whose expected-token message is `after`.
    fn vargs(&mut self, after: &str) -> PResult<Vec<Expr>> {
        let mut args = vec![self.expr()?];
        loop {
            match self.peek() {
                Tok::Comma => {
                    self.bump();
                    args.push(self.expr()?);
                }
                Tok::RParen | Tok::RBracket => return Ok(args),
                _ => return Err(self.unexpected(Some(after))),
            }
        }
    }

    fn map_or_var(&mut self) -> PResult<Expr> {
        let t = self.bump();
        match t.tok {
            Tok::Var(name) => Ok(Expr::new(ExprKind::Var(name), t.span)),
            Tok::Map(name) => {
                if !self.is(&Tok::LBracket) {
                    return Ok(Expr::new(
                        ExprKind::Map {
                            name,
                            keys: Vec::new(),
                        },
                        t.span,
                    ));
                }
                self.bump();
                let keys = self.vargs(AFTER_KEY)?;
                let close = self.expect(Tok::RBracket, AFTER_KEY)?.span;
                Ok(Expr::new(ExprKind::Map { name, keys }, t.span.to(close)))
            }
            _ => unreachable!("map_or_var() is called on a map or variable"),
        }
    }

    /// `( e )` or a tuple `( e, e... )`.
    fn paren(&mut self) -> PResult<Expr> {
        let open = self.bump().span;
        let first = self.expr()?;
        match self.peek() {
            Tok::RParen => {
                self.bump();
                Ok(first)
            }
            Tok::Comma => {
                self.bump();
                let mut items = vec![first];
                items.extend(self.vargs(AFTER_ARG)?);
                let close = self.expect(Tok::RParen, AFTER_ARG)?.span;
                Ok(Expr::new(ExprKind::Tuple(items), open.to(close)))
            }
            _ => Err(self.unexpected(Some(AFTER_ARG))),
        }
    }
}
