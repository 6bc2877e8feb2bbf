//! The runtime on programs checked with a fake tracepoint source, fed events built by hand. Expected texts
//! are what bpftrace 0.17 printed on this machine for the same BEGIN programs (`bpftrace -e '...'`, its
//! `Attaching 1 probe...` line left out: the session prints that), or, for tracepoint programs, what
//! bpftrace prints for the same hits by its rules (checked on BEGIN programs of the same statements).
mod events;
mod funcs;
mod ints;

use super::*;
use crate::bt::check::{Env, Kernel, TpField, TracepointFields};
use crate::bt::print::OutputFormat;
use crate::bt::Front;

/// The tracepoints the tests use, with the fields their format files give on 6.x.
struct Fake;

impl TracepointFields for Fake {
    fn fields(&self, category: &str, event: &str) -> Option<Vec<TpField>> {
        let f = |name: &str, decl: &str, size: usize, signed: bool| TpField {
            name: name.into(),
            decl: decl.into(),
            size,
            signed,
        };
        match (category, event) {
            ("syscalls", "sys_enter_openat") => Some(vec![
                f("__syscall_nr", "int", 4, true),
                f("dfd", "int", 8, false),
                f("filename", "const char *", 8, false),
                f("flags", "int", 8, false),
            ]),
            ("syscalls", "sys_enter_write") => Some(vec![
                f("__syscall_nr", "int", 4, true),
                f("fd", "unsigned int", 8, false),
                f("buf", "const char *", 8, false),
                f("count", "size_t", 8, false),
            ]),
            ("sched", "sched_switch") => Some(vec![
                f("prev_comm", "char prev_comm[16]", 16, true),
                f("prev_pid", "pid_t", 4, true),
                f("prev_prio", "int", 4, true),
                f("prev_state", "long", 8, true),
                f("next_comm", "char next_comm[16]", 16, true),
                f("next_pid", "pid_t", 4, true),
                f("next_prio", "int", 4, true),
            ]),
            ("sched", "sched_wakeup") => Some(vec![
                f("comm", "char comm[16]", 16, true),
                f("pid", "pid_t", 4, true),
                f("prio", "int", 4, true),
                f("target_cpu", "int", 4, true),
            ]),
            _ => None,
        }
    }

    fn expand(&self, category: &str, event: &str) -> Vec<(String, String)> {
        match self.fields(category, event) {
            Some(_) => vec![(category.to_string(), event.to_string())],
            None => Vec::new(),
        }
    }
}

/// Parse and check `src` with positional parameters `params`; panics with bpftrace's error text.
fn front(src: &str, params: &[&str]) -> Front {
    let env = Env {
        kernel: Kernel {
            kprobes: false,
            hardware_pmu: false,
        },
        tracepoints: &Fake,
        params: params.iter().map(|p| p.to_string()).collect(),
        has_child: false,
        unsafe_ok: true,
        strlen: 64,
    };
    crate::bt::front(src, "stdin", &env).unwrap_or_else(|e| panic!("{src}:\n{e}"))
}

fn options(params: &[&str], format: OutputFormat) -> Options {
    Options {
        params: params.iter().map(|p| p.to_string()).collect(),
        strlen: 64,
        map_keys_max: 4096,
        format,
        cpid: None,
        unsafe_ok: true,
    }
}

/// Standard output and error of a whole run: BEGIN, then `steps` (given the runtime and an Io), then END.
fn run_with(
    src: &str,
    params: &[&str],
    format: OutputFormat,
    steps: &dyn Fn(&mut Runtime<'_>, &mut Io<'_>),
) -> (String, String) {
    let f = front(src, params);
    let mut rt = Runtime::new(&f.program, &f.checked, options(params, format));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    {
        let mut io = Io {
            out: &mut out,
            err: &mut err,
        };
        let flow = rt.begin(1_000, &mut io);
        if flow == Flow::Continue {
            steps(&mut rt, &mut io);
        }
        rt.end(9_000_000_000, &mut io);
    }
    (
        String::from_utf8(out).expect("utf-8"),
        String::from_utf8(err).expect("utf-8"),
    )
}

/// The standard output of a BEGIN-only program.
fn begin(src: &str) -> String {
    begin_with(src, &[])
}

fn begin_with(src: &str, params: &[&str]) -> String {
    run_with(src, params, OutputFormat::Text, &|_, _| {}).0
}

/// Check that exit() ends its block: the statements after it do not run (bpftrace 0.17 printed `a`, then
/// the exit preamble and the never-assigned map `@x` as an empty line).
#[test]
fn exit_ends_the_block() {
    assert_eq!(
        begin(r#"BEGIN { printf("a\n"); exit(); printf("b\n"); @x = 1; }"#),
        "a\n\n\n\n"
    );
    assert_eq!(
        begin(r#"BEGIN { exit(); } END { printf("e1\n"); exit(); printf("e2\n"); }"#),
        "e1\n\n\n"
    );
}

/// Check the issue's first golden program: a uint8 cast truncates, a keyed sum prints at exit.
#[test]
fn cast_and_sum_at_exit() {
    assert_eq!(
        begin(r#"BEGIN { $x = (uint8)300; printf("%d\n", $x); @a[1,"x"] = sum(5); exit(); }"#),
        "44\n\n\n@a[1, x]: 5\n"
    );
}

/// Check that cleared and deleted maps print as empty lines at exit, a keyless count() map keeps its value
/// through clear, and END's maps print too (bpftrace 0.17's output).
#[test]
fn cleared_maps_at_exit() {
    let out = begin(
        r#"BEGIN { @a[1] = 1; clear(@a); @b = count(); @c = 5; delete(@c); @d[2] = 3; delete(@d[2]); @e = hist(5); clear(@e); exit(); } END { printf("end\n"); @z = 1; }"#,
    );
    assert_eq!(out, "end\n\n\n\n@b: 1\n\n\n\n@z: 1\n");
}

/// Check while, continue, break and unroll.
#[test]
fn loops() {
    let out = begin(
        r#"BEGIN { $i = 0; while ($i < 5) { $i++; if ($i == 2) { continue; } if ($i == 4) { break; } printf("%d\n", $i); } unroll(3) { printf("u\n"); } exit(); }"#,
    );
    assert_eq!(out, "1\n3\nu\nu\nu\n\n\n");
}

/// Check tuples, `.N`, string comparison and strncmp.
#[test]
fn tuples_and_strings() {
    let out = begin(
        r#"BEGIN { $t = (1, "ab", (uint8)3); print($t); printf("%d %s\n", $t.0, $t.1); @t = $t; $s = "abc"; if ($s == "abc") { printf("eq\n"); } if ($s != "abd") { printf("ne\n"); } printf("%d %d\n", strncmp($s, "abd", 2), strncmp($s, "abd", 3)); exit(); }"#,
    );
    assert_eq!(out, "(1, ab, 3)\n1 ab\neq\nne\n0 1\n\n\n@t: (1, ab, 3)\n");
}

/// Check positional parameters: a number, a string through str(), `$#`, an unset one (0), str(x, n).
#[test]
fn positional_parameters() {
    let out = begin_with(
        r#"BEGIN { printf("%d %s %d %s\n", $1, str($2), $#, str($1)); $x = $1 + 1; print($x); print(str($2, 3)); print($3); @[str($2)] = count(); exit(); }"#,
        &["42", "hello"],
    );
    assert_eq!(out, "42 hello 2 42\n43\nhel\n0\n\n\n@[hello]: 1\n");
}

/// Check the aggregations' values at exit, and print(@m, top, div).
#[test]
fn aggregations_and_print_top_div() {
    let out = begin(
        r#"BEGIN { @s = sum(-5); @s2 = sum((uint8)5); @mi = min(7); @mi = min(3); @ma = max(4); @av = avg(3); @av = avg(4); @st = stats(10); @st = stats(-3); @l = lhist(15, 0, 100, 10); @l = lhist(150, 0, 100, 10); @k[1] = 5; @k[2] = 30; @k[3] = 20; print(@k, 2, 10); exit(); }"#,
    );
    let empty = " |                                                    |\n";
    let full = " |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n";
    let mut want =
        String::from("@k[3]: 2\n@k[2]: 3\n\n\n@av: 3\n\n@k[1]: 5\n@k[3]: 20\n@k[2]: 30\n@l: \n");
    want += &format!("[10, 20)               1{full}");
    for lo in (20..100).step_by(10) {
        want += &format!("{:<16}{:>8}{empty}", format!("[{lo}, {})", lo + 10), 0);
    }
    want += &format!("[100, ...)             1{full}\n");
    want += "@ma: 4\n@mi: 3\n@s: -5\n@s2: 5\n@st: count 2, average 3, total 7\n\n";
    assert_eq!(out, want);
}

/// Check `-f json`: printf, print of a map and of values, and the maps at exit (bpftrace 0.17's output).
#[test]
fn json_output() {
    let (out, _) = run_with(
        r#"BEGIN { @c["bpftrace"] = count(); @s[1, "a"] = sum(3); printf("hi %d\n", 5); print(@c); print(1); print("s"); print((1,"x")); @h = hist(5); @st = stats(4); exit(); }"#,
        &[],
        OutputFormat::Json,
        &|_, _| {},
    );
    let want = r#"{"type": "printf", "data": "hi 5\n"}
{"type": "map", "data": {"@c": {"bpftrace": 1}}}
{"type": "value", "data": 1}
{"type": "value", "data": "s"}
{"type": "value", "data": [1,"x"]}


{"type": "map", "data": {"@c": {"bpftrace": 1}}}
{"type": "hist", "data": {"@h": [{"min": 4, "max": 7, "count": 1}]}}
{"type": "map", "data": {"@s": {"1,a": 3}}}
{"type": "stats", "data": {"@st": {"count": 1, "average": 4, "total": 4}}}
"#;
    assert_eq!(out, want);
}

/// Check strerror, ntop of an integer, bswap by width, sizeof (bpftrace 0.17's output).
#[test]
fn value_functions() {
    let out = begin(
        r#"BEGIN { printf("%s %s %d %d %d\n", strerror(2), ntop(0x0100007f), bswap((uint16)0x1234), bswap(0x12345678), sizeof(uint32)); print(bswap(0x12345678)); exit(); }"#,
    );
    assert_eq!(
        out,
        "No such file or directory 127.0.0.1 13330 0 4\n8671175384462524416\n\n\n"
    );
}

/// Check `return` ends the block and an interval block's exit() ends the run, END's output shown.
#[test]
fn return_and_interval_exit() {
    let src = r#"BEGIN { printf("x\n"); return; printf("y\n"); } END { printf("z\n"); } interval:ms:100 { exit(); }"#;
    let (out, _) = run_with(src, &[], OutputFormat::Text, &|rt, io| {
        let blocks = rt.interval_blocks();
        assert_eq!(blocks, vec![(2, 100_000_000)]);
        assert_eq!(rt.run_block(blocks[0].0, 100_000_000, io), Flow::Exit);
    });
    assert_eq!(out, "x\nz\n\n\n");
}
