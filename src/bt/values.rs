//! The values an event brings to a block: which expressions read something the kernel fetches for the event
//! (a tracepoint's field, an argument register, the return value, the user string behind one of them). The
//! plan asks the probes for exactly these, and the runtime finds them in the event by the same [`ValueRef`];
//! everything else (`pid`, `comm`, `nsecs`, maps, variables) the runtime computes itself.
use super::ast::{walk_exprs, Expr, ExprKind, Stmt};

/// A value fetched by the probe, named by what the program wrote.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ValueRef {
    /// `args->NAME` (or `args.NAME`) at a tracepoint: the field as the event holds it (an integer, a
    /// `char[N]` or a `__data_loc` string).
    Field(String),
    /// `str(args->NAME)`: the user string a pointer field points to (a syscall's `filename`), or the field's
    /// own text where it is one.
    FieldStr(String),
    /// `argN` at a uprobe or USDT probe.
    Arg(u8),
    /// `str(argN)`: the NUL-terminated user string at argument N.
    ArgStr(u8),
    /// `retval` at a uretprobe.
    Retval,
    /// `str(retval)`.
    RetvalStr,
    /// `reg("NAME")`: the register where the probe fired, as the probe read it (at a uprobe `%ip` is the probed
    /// address, at a uretprobe the return address; at profile: and software: probes the interrupted context's).
    Reg(String),
}

impl ValueRef {
    /// The fetched value `e` reads, if it reads one: `args->f`, `str(args->f)`, `argN`, `str(argN)`,
    /// `retval`, `str(retval)` (a `str()` with a length reads the same string, cut by the runtime).
    pub fn of(e: &Expr) -> Option<ValueRef> {
        match &e.kind {
            ExprKind::Field { expr, field, .. } if is_args(expr) => {
                Some(ValueRef::Field(field.clone()))
            }
            ExprKind::Builtin(name) if name == "retval" => Some(ValueRef::Retval),
            ExprKind::Builtin(name) => arg_index(name).map(ValueRef::Arg),
            ExprKind::Call { name, args } if name == "reg" => match &args.first()?.kind {
                ExprKind::Str(reg) => {
                    Some(ValueRef::Reg(String::from_utf8_lossy(reg).into_owned()))
                }
                _ => None,
            },
            ExprKind::Call { name, args } if name == "str" => match ValueRef::of(args.first()?)? {
                ValueRef::Field(f) => Some(ValueRef::FieldStr(f)),
                ValueRef::Arg(n) => Some(ValueRef::ArgStr(n)),
                ValueRef::Retval => Some(ValueRef::RetvalStr),
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether it is read when the function returns (a uretprobe's `retval`).
    pub fn at_return(&self) -> bool {
        matches!(self, ValueRef::Retval | ValueRef::RetvalStr)
    }
}

fn is_args(e: &Expr) -> bool {
    matches!(&e.kind, ExprKind::Builtin(b) if b == "args")
}

/// `arg0`..`arg9` to its number.
fn arg_index(name: &str) -> Option<u8> {
    let n = name.strip_prefix("arg")?;
    match n.len() {
        1 => n.parse().ok(),
        _ => None,
    }
}

/// What one block (its predicate and statements) reads from its events, each once, in first-read order; a
/// `str()` of a value reads the string only (the pointer itself is fetched too where the block also uses it
/// bare).
pub fn refs_of_block(pred: Option<&Expr>, block: &[Stmt]) -> Vec<ValueRef> {
    let mut refs: Vec<ValueRef> = Vec::new();
    let mut inside_str: Vec<*const Expr> = Vec::new();
    let mut visit = |e: &Expr| {
        if inside_str.contains(&(e as *const Expr)) {
            return;
        }
        if let Some(r) = ValueRef::of(e) {
            if let ExprKind::Call { args, .. } = &e.kind {
                // The pointer under `str(...)` is not read for itself.
                inside_str.push(&args[0] as *const Expr);
            }
            if !refs.contains(&r) {
                refs.push(r);
            }
        }
    };
    if let Some(p) = pred {
        walk_exprs(
            &[Stmt {
                kind: super::ast::StmtKind::Expr(p.clone()),
                span: p.span,
            }],
            &mut visit,
        );
    }
    walk_exprs(block, &mut visit);
    refs
}

/// The maps whose values a `str()` reads (`str(@name[tid])`) somewhere in the program.
pub fn str_read_maps(program: &super::ast::Program) -> Vec<String> {
    let mut maps = Vec::new();
    let mut visit = |e: &Expr| {
        if let ExprKind::Call { name, args } = &e.kind {
            if let (true, Some(ExprKind::Map { name: m, .. })) =
                (name == "str", args.first().map(|a| &a.kind))
            {
                if !maps.contains(m) {
                    maps.push(m.clone());
                }
            }
        }
    };
    for p in &program.probes {
        if let Some(pred) = &p.pred {
            let stmt = Stmt {
                kind: super::ast::StmtKind::Expr(pred.clone()),
                span: pred.span,
            };
            walk_exprs(std::slice::from_ref(&stmt), &mut visit);
        }
        walk_exprs(&p.block, &mut visit);
    }
    maps
}

/// The arguments a block stores as they are into one of `maps` (`@name[tid] = arg0`, gethostlatency.bt), which
/// a `str()` reads later (at the return): fetched as the strings they point to at this probe too, since without
/// BPF user memory is read only while the probe's event is in the kernel. The value is then that text.
pub fn args_kept_as_strings(block: &[Stmt], maps: &[String]) -> Vec<ValueRef> {
    let mut out = Vec::new();
    for s in block {
        match &s.kind {
            super::ast::StmtKind::AssignMap {
                map,
                value,
                compound: None,
            } => {
                let kept = matches!(&map.kind, ExprKind::Map { name, .. } if maps.contains(name));
                if let (true, Some(ValueRef::Arg(n))) = (kept, ValueRef::of(value)) {
                    out.push(ValueRef::ArgStr(n));
                }
            }
            super::ast::StmtKind::If {
                then, otherwise, ..
            } => {
                out.extend(args_kept_as_strings(then, maps));
                out.extend(args_kept_as_strings(
                    otherwise.as_deref().unwrap_or(&[]),
                    maps,
                ));
            }
            super::ast::StmtKind::Unroll { body, .. }
            | super::ast::StmtKind::While { body, .. } => {
                out.extend(args_kept_as_strings(body, maps))
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(src: &str) -> Vec<ValueRef> {
        let parsed = crate::bt::parser::parse(src);
        let program = parsed.program.expect("parses");
        let p = &program.probes[0];
        refs_of_block(p.pred.as_ref(), &p.block)
    }

    /// Check that a block's fetched values are found once each, strings apart from their pointers.
    #[test]
    fn refs_of_a_block() {
        let r = refs(
            "tracepoint:syscalls:sys_enter_openat /args->flags > 0/ \
             { printf(\"%s %d\\n\", str(args->filename), args->flags); @[str(args->filename)] = count(); }",
        );
        assert_eq!(
            r,
            vec![
                ValueRef::Field("flags".into()),
                ValueRef::FieldStr("filename".into())
            ]
        );
        let r = refs("uretprobe:/bin/bash:readline { printf(\"%s %d\\n\", str(retval), arg1); }");
        assert_eq!(r, vec![ValueRef::RetvalStr, ValueRef::Arg(1)]);
        let r = refs("uprobe:/bin/bash:readline { printf(\"%lx\\n\", reg(\"ip\")); }");
        assert_eq!(r, vec![ValueRef::Reg("ip".into())]);
    }

    /// Check that an argument stored into a map that a `str()` reads later is fetched as its string too
    /// (gethostlatency.bt's `@name[tid] = arg0`, `str(@name[tid])` at the return), and one kept for its number
    /// is not.
    #[test]
    fn args_kept_for_str_are_fetched_as_strings() {
        let src = "uprobe:libc:getaddrinfo { @start[tid] = nsecs; if (1) { @name[tid] = arg0; } @n[tid] = arg1; } \
                   uretprobe:libc:getaddrinfo { printf(\"%s\\n\", str(@name[tid])); }";
        let program = crate::bt::parser::parse(src).program.expect("parses");
        let maps = str_read_maps(&program);
        assert_eq!(maps, ["@name"]);
        let kept = args_kept_as_strings(&program.probes[0].block, &maps);
        assert_eq!(kept, [ValueRef::ArgStr(0)]);
    }
}
