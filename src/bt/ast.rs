//! The syntax tree of a bpftrace program, as bpftrace 0.17's parser builds it (`ast/ast.h`), every node with
//! the span bison gives it. Attach points are kept as the text the grammar assembles from their tokens;
//! [`super::attach`] reads them into typed probes.
use super::diag::Span;

/// A whole program: preprocessor lines and struct definitions first, then the probes.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    /// `#include`, `#define` and other `#` lines, in order, with their spans.
    pub preproc: Vec<(String, Span)>,
    /// `struct X { ... };` definitions given in the program (for casts to struct types).
    pub structs: Vec<(String, Span)>,
    pub probes: Vec<Probe>,
}

impl Program {
    /// The headers the program `#include`s (`linux/sched.h` for `#include <linux/sched.h>`).
    pub fn includes(&self) -> Vec<(String, Span)> {
        self.preproc
            .iter()
            .filter_map(|(line, span)| {
                let rest = line
                    .strip_prefix('#')?
                    .trim_start()
                    .strip_prefix("include")?;
                let name = rest.trim().trim_matches(|c| matches!(c, '<' | '>' | '"'));
                Some((name.to_string(), *span))
            })
            .collect()
    }
}

/// One block with its attach points (several: `a, b { }`), its predicate and its statements.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub attach_points: Vec<AttachPoint>,
    pub pred: Option<Expr>,
    /// The predicate with its slashes (`/.../`), as bpftrace's messages about it mark it.
    pub pred_span: Span,
    pub block: Vec<Stmt>,
    /// From the first attach point to the end of the block.
    pub span: Span,
}

/// An attach point as written, its tokens joined (`tracepoint:syscalls:sys_enter_openat`, positional
/// parameters kept as `$N` to be replaced when the attach point is read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachPoint {
    pub raw: String,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum StmtKind {
    Expr(Expr),
    /// `@m[k] = e`, or `@m[k] op= e` with `compound` holding `op` (the value is then `@m[k] op e`).
    AssignMap {
        map: Expr,
        value: Expr,
        compound: Option<BinOp>,
    },
    /// `$v = e` or `$v op= e`.
    AssignVar {
        var: Expr,
        value: Expr,
        compound: Option<BinOp>,
    },
    If {
        cond: Expr,
        then: Vec<Stmt>,
        otherwise: Option<Vec<Stmt>>,
    },
    /// `unroll(N) { }`: N an integer or a positional parameter.
    Unroll {
        count: Expr,
        body: Vec<Stmt>,
    },
    While {
        cond: Expr,
        body: Vec<Stmt>,
    },
    Jump(Jump),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jump {
    Break,
    Continue,
    Return,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

/// A positional parameter: `$N` (from 1) or `$#`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    Positional(u64),
    Count,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    Int(i64),
    Str(Vec<u8>),
    /// A bare identifier: an enum or `#define`-less constant, a type name (`sizeof(T)`), or an error.
    Ident(String),
    /// `pid`, `comm`, `args`, `kstack`, `arg0`...
    Builtin(String),
    /// `bpftrace` or `perf` (a stack mode argument).
    StackMode(String),
    Param(Param),
    /// `@name` (`@` alone for the unnamed map) with its keys.
    Map {
        name: String,
        keys: Vec<Expr>,
    },
    Var(String),
    Call {
        name: String,
        args: Vec<Expr>,
    },
    Binop {
        op: BinOp,
        left: Box<Expr>,
        right: Box<Expr>,
    },
    Unop {
        op: UnOp,
        expr: Box<Expr>,
        /// `x++` rather than `++x`.
        postfix: bool,
    },
    Ternary {
        cond: Box<Expr>,
        then: Box<Expr>,
        otherwise: Box<Expr>,
    },
    /// `e.f`, or `e->f` with `arrow` (bpftrace reads it as `(*e).f`).
    Field {
        expr: Box<Expr>,
        field: String,
        arrow: bool,
    },
    /// `t.0` of a tuple.
    TupleIndex {
        expr: Box<Expr>,
        index: i64,
    },
    Index {
        expr: Box<Expr>,
        index: Box<Expr>,
    },
    /// `(type) e`, `(type *) e`, `(type **) e`.
    Cast {
        ty: String,
        pointer_depth: u8,
        expr: Box<Expr>,
    },
    Tuple(Vec<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Plus,
    Minus,
    Mul,
    Div,
    Mod,
    BAnd,
    BOr,
    BXor,
    Left,
    Right,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    LAnd,
    LOr,
}

impl BinOp {
    /// The operator as bpftrace writes it in messages (`opstr`).
    pub fn text(self) -> &'static str {
        use BinOp::*;
        match self {
            Plus => "+",
            Minus => "-",
            Mul => "*",
            Div => "/",
            Mod => "%",
            BAnd => "&",
            BOr => "|",
            BXor => "^",
            Left => "<<",
            Right => ">>",
            Eq => "==",
            Ne => "!=",
            Lt => "<",
            Le => "<=",
            Gt => ">",
            Ge => ">=",
            LAnd => "&&",
            LOr => "||",
        }
    }

    /// The operator of a compound assignment (`+=` gives `+`).
    pub fn from_text(text: &str) -> Option<BinOp> {
        use BinOp::*;
        Some(match text {
            "+" => Plus,
            "-" => Minus,
            "*" => Mul,
            "/" => Div,
            "%" => Mod,
            "&" => BAnd,
            "|" => BOr,
            "^" => BXor,
            "<<" => Left,
            ">>" => Right,
            _ => return None,
        })
    }

    pub fn is_comparison(self) -> bool {
        use BinOp::*;
        matches!(self, Eq | Ne | Lt | Le | Gt | Ge)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnOp {
    /// `*e`: a memory read.
    Deref,
    BNot,
    LNot,
    Neg,
    Increment,
    Decrement,
}

impl Expr {
    pub fn new(kind: ExprKind, span: Span) -> Expr {
        Expr { kind, span }
    }

    /// Every expression directly inside this one, in source order.
    pub fn children(&self) -> Vec<&Expr> {
        use ExprKind::*;
        match &self.kind {
            Int(_) | Str(_) | Ident(_) | Builtin(_) | StackMode(_) | Param(_) | Var(_) => vec![],
            Map { keys, .. } => keys.iter().collect(),
            Call { args, .. } | Tuple(args) => args.iter().collect(),
            Binop { left, right, .. } => vec![left, right],
            Unop { expr, .. }
            | Field { expr, .. }
            | TupleIndex { expr, .. }
            | Cast { expr, .. } => vec![expr],
            Ternary {
                cond,
                then,
                otherwise,
            } => vec![cond, then, otherwise],
            Index { expr, index } => vec![expr, index],
        }
    }
}

/// Every expression of a block and its nested blocks (depth first, each expression before its children).
pub fn walk_exprs<'a>(stmts: &'a [Stmt], visit: &mut dyn FnMut(&'a Expr)) {
    fn expr<'a>(e: &'a Expr, visit: &mut dyn FnMut(&'a Expr)) {
        visit(e);
        for c in e.children() {
            expr(c, visit);
        }
    }
    for s in stmts {
        match &s.kind {
            StmtKind::Expr(e) => expr(e, visit),
            StmtKind::AssignMap { map: t, value, .. }
            | StmtKind::AssignVar { var: t, value, .. } => {
                expr(t, visit);
                expr(value, visit);
            }
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => {
                expr(cond, visit);
                walk_exprs(then, visit);
                walk_exprs(otherwise.as_deref().unwrap_or(&[]), visit);
            }
            StmtKind::Unroll { count: cond, body } | StmtKind::While { cond, body } => {
                expr(cond, visit);
                walk_exprs(body, visit);
            }
            StmtKind::Jump(_) => {}
        }
    }
}
