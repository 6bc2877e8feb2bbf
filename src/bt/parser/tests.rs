//! The parser on programs and on bpftrace's syntax errors (messages and spans as bpftrace 0.17 prints them).
use super::parse;
use crate::bt::ast::*;
use crate::bt::diag::render_all;

fn errors(src: &str) -> String {
    let parsed = parse(src);
    render_all(&parsed.errors, "stdin", src)
}

/// Check the tree of a program with several probes per block, a predicate, and every statement form.
#[test]
fn statements_and_probes() {
    let src = "t:sched:sched_switch, tracepoint:sched:sched_wakeup /args->pid > 0/ {\n\
               @x[comm, pid] = count(); $v += 2; $v++; --@c; if ($v) { delete(@x[comm, pid]); } else if (1) { } else { }\n\
               unroll(3) { @u = 1 } $t = (1, \"a\"); @t = $t.1; @s[0] = (uint64)$v; @p = *(uint32 *)arg0; }";
    let parsed = parse(src);
    assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
    let p = parsed.program.unwrap();
    assert_eq!(p.probes.len(), 1);
    let probe = &p.probes[0];
    assert_eq!(probe.attach_points[0].raw, "t:sched:sched_switch");
    assert_eq!(probe.attach_points[1].raw, "tracepoint:sched:sched_wakeup");
    assert!(probe.pred.is_some());
    assert!(matches!(
        probe.block[0].kind,
        StmtKind::AssignMap { compound: None, .. }
    ));
    assert!(matches!(
        probe.block[1].kind,
        StmtKind::AssignVar {
            compound: Some(BinOp::Plus),
            ..
        }
    ));
    assert!(matches!(
        probe.block[4].kind,
        StmtKind::If {
            otherwise: Some(_),
            ..
        }
    ));
    assert!(matches!(probe.block[5].kind, StmtKind::Unroll { .. }));
}

/// Check precedence: `*` before `+`, `+` before `<<`, comparisons before `&&`, `?:` last; `-1` a literal.
#[test]
fn precedence() {
    let p = parse("BEGIN { $x = 1 + 2 * 3 << 1 == 2 && -1 ? 4 : 5; }")
        .program
        .unwrap();
    let StmtKind::AssignVar { value, .. } = &p.probes[0].block[0].kind else {
        panic!()
    };
    let ExprKind::Ternary { cond, .. } = &value.kind else {
        panic!("{value:?}")
    };
    let ExprKind::Binop {
        op: BinOp::LAnd,
        left,
        right,
    } = &cond.kind
    else {
        panic!()
    };
    assert!(matches!(right.kind, ExprKind::Int(-1)));
    let ExprKind::Binop {
        op: BinOp::Eq,
        left,
        ..
    } = &left.kind
    else {
        panic!()
    };
    let ExprKind::Binop {
        op: BinOp::Left,
        left,
        ..
    } = &left.kind
    else {
        panic!()
    };
    let ExprKind::Binop {
        op: BinOp::Plus,
        right,
        ..
    } = &left.kind
    else {
        panic!()
    };
    assert!(matches!(right.kind, ExprKind::Binop { op: BinOp::Mul, .. }));
}

/// Check comments, `#include` lines, string escapes, hex and `_` integers, positional parameters.
#[test]
fn lexical_forms() {
    let src = "#!/usr/bin/env bpftrace\n#include <linux/sched.h>\n/* c\n */ BEGIN { // x\n printf(\"a\\tb\\\"\"); @ = 0x10 + 1_000 + $1 + $#; }";
    let p = parse(src).program.unwrap();
    assert_eq!(p.includes()[0].0, "linux/sched.h");
    let ExprKind::Call { args, .. } = &match &p.probes[0].block[0].kind {
        StmtKind::Expr(e) => e.clone(),
        _ => panic!(),
    }
    .kind
    else {
        panic!()
    };
    assert_eq!(args[0].kind, ExprKind::Str(b"a\tb\"".to_vec()));
}

/// Check syntax errors against bpftrace 0.17's output on this machine (the text it printed, recorded).
#[test]
fn syntax_errors_as_bpftrace() {
    let cases = [
        ("BEGIN { printf(\"hi\" }", "stdin:1:21-22: ERROR: syntax error, unexpected }, expecting ) or \",\"\nBEGIN { printf(\"hi\" }\n                    ~\n"),
        ("BEGIN { /* abc ", "stdin:1:9-16: ERROR: end of file during comment\nBEGIN { /* abc \n        ~~~~~~~\nstdin:1:9-16: ERROR: syntax error, unexpected end of file, expecting }\nBEGIN { /* abc \n        ~~~~~~~\n"),
        ("BEGIN { foo(1); }", "stdin:1:9-12: ERROR: Unknown function: foo\nBEGIN { foo(1); }\n        ~~~\n"),
        ("BEGIN { \"abc }", "stdin:1:9-15: ERROR: unterminated string\nBEGIN { \"abc }\n        ~~~~~~\nstdin:1:9-15: ERROR: syntax error, unexpected end of file, expecting }\nBEGIN { \"abc }\n        ~~~~~~\n"),
        ("BEGIN", "stdin:1:1-6: ERROR: unexpected end of file, expected {\nBEGIN\n~~~~~\n"),
        ("BEGIN {", "stdin:1:7-8: ERROR: syntax error, unexpected end of file, expecting }\nBEGIN {\n      ~\n"),
        ("BEGIN { @x = 1 @y = 2 }", "stdin:1:16-18: ERROR: syntax error, unexpected map, expecting }\nBEGIN { @x = 1 @y = 2 }\n               ~~\n"),
        ("BEGIN { @x = ; }", "stdin:1:14-15: ERROR: syntax error, unexpected ;\nBEGIN { @x = ; }\n             ~\n"),
        ("BEGIN { if (1) { }; }", "stdin:1:18-20: ERROR: syntax error, unexpected ;, expecting }\nBEGIN { if (1) { }; }\n                 ~~\n"),
        ("BEGIN { @x[1 = 2; }", "stdin:1:14-15: ERROR: syntax error, unexpected =, expecting ] or \",\"\nBEGIN { @x[1 = 2; }\n             ~\n"),
        ("BEGIN { $x = (1 + 2; }", "stdin:1:19-21: ERROR: syntax error, unexpected ;, expecting ) or \",\"\nBEGIN { $x = (1 + 2; }\n                  ~~\n"),
        ("BEGIN { 1 = 2; }", "stdin:1:11-12: ERROR: syntax error, unexpected =, expecting }\nBEGIN { 1 = 2; }\n          ~\n"),
        ("BEGIN { @x = 1; } }", "stdin:1:19-20: ERROR: syntax error, unexpected }, expecting {\nBEGIN { @x = 1; } }\n                  ~\n"),
        ("BEGIN /pid == 1 { }", "stdin:1:17-18: ERROR: syntax error, unexpected {, expecting end predicate\nBEGIN /pid == 1 { }\n                ~\n"),
        ("BEGIN { if 1 { } }", "stdin:1:12-13: ERROR: syntax error, unexpected integer, expecting (\nBEGIN { if 1 { } }\n           ~\n"),
        ("BEGIN { $a = 1 ? 2:3; }", "stdin:1:18-21: ERROR: syntax error, unexpected path, expecting :\nBEGIN { $a = 1 ? 2:3; }\n                 ~~~\n"),
        ("BEGIN { $a = (x) + 1; }", "stdin:1:18-19: ERROR: syntax error, unexpected +\nBEGIN { $a = (x) + 1; }\n                 ~\n"),
        ("BEGIN { print(1)) }", "stdin:1:9-18: ERROR: syntax error, unexpected ), expecting }\nBEGIN { print(1)) }\n        ~~~~~~~~~\n"),
        ("BEGIN { x++; }", "stdin:1:9-10: ERROR: The ++ operator must be applied to a map or variable\nBEGIN { x++; }\n        ~\n"),
        ("BEGIN { ++x; }", "stdin:1:9-11: ERROR: The ++ operator must be applied to a map or variable\nBEGIN { ++x; }\n        ~~\n"),
        ("BEGIN { $t = (1,2); $t.0 = 3; }", "stdin:1:21-29: ERROR: Tuples are immutable once created. Consider creating a new tuple and assigning it instead.\nBEGIN { $t = (1,2); $t.0 = 3; }\n                    ~~~~~~~~\n"),
        ("BEGIN { @x = 1 } END", "stdin:1:17-21: ERROR: unexpected end of file, expected {\nBEGIN { @x = 1 } END\n                ~~~~\n"),
        ("BEGIN { unroll(x) { } }", "stdin:1:9-17: ERROR: syntax error, unexpected identifier, expecting $# or - or positional parameter or integer\nBEGIN { unroll(x) { } }\n        ~~~~~~~~\n"),
        ("BEGIN { else { } }", "stdin:1:9-13: ERROR: syntax error, unexpected else, expecting }\nBEGIN { else { } }\n        ~~~~\n"),
        ("BEGIN { if (1) { } else }", "stdin:1:25-26: ERROR: syntax error, unexpected }, expecting { or if\nBEGIN { if (1) { } else }\n                        ~\n"),
        ("BEGIN { @ = count(); } +", "stdin:1:23-25: ERROR: unexpected end of file, expected {\nBEGIN { @ = count(); } +\n                      ~~\n"),
        ("BEGIN { @x = -; }", "stdin:1:14-16: ERROR: syntax error, unexpected ;\nBEGIN { @x = -; }\n             ~~\n"),
    ];
    for (src, want) in cases {
        assert_eq!(errors(src), want, "{src}");
    }
}
