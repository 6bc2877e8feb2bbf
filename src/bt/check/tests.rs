//! The checker on programs, with a fake source of tracepoint fields.
use super::*;
use crate::bt::parser::parse;

/// Two tracepoints with the fields their format files give on 6.x.
pub(crate) struct Fake;

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
            ("syscalls", "sys_enter_execve") => Some(vec![
                f("__syscall_nr", "int", 4, true),
                f("filename", "const char *", 8, false),
                f("argv", "const char *const *", 8, false),
                f("envp", "const char *const *", 8, false),
            ]),
            ("sched", "sched_switch") => Some(vec![
                f("prev_comm", "char[16]", 16, true),
                f("prev_pid", "pid_t", 4, true),
                f("prev_state", "long", 8, true),
                f("next_comm", "char[16]", 16, true),
                f("next_pid", "pid_t", 4, true),
            ]),
            _ => None,
        }
    }

    fn expand(&self, category: &str, event: &str) -> Vec<(String, String)> {
        let all = [
            ("syscalls", "sys_enter_openat"),
            ("syscalls", "sys_enter_execve"),
            ("sched", "sched_switch"),
        ];
        let m = |glob: &str, s: &str| {
            glob == "*" || glob == s || glob.strip_suffix('*').is_some_and(|p| s.starts_with(p))
        };
        all.iter()
            .filter(|(c, e)| m(category, c) && m(event, e))
            .map(|(c, e)| (c.to_string(), e.to_string()))
            .collect()
    }
}

pub(crate) fn env(kprobes: bool) -> Env<'static> {
    Env {
        kernel: Kernel {
            kprobes,
            hardware_pmu: false,
        },
        tracepoints: &Fake,
        params: vec!["1234".into(), "99".into(), "5".into()],
        has_child: false,
        unsafe_ok: false,
        strlen: 64,
    }
}

/// The first error line of `src`, or "" when it checks.
fn first_error(src: &str, kprobes: bool) -> String {
    let parsed = parse(src);
    let program = parsed
        .program
        .unwrap_or_else(|| panic!("{src}: {:?}", parsed.errors));
    let checked = check(&program, &env(kprobes));
    let text = crate::bt::diag::render_all(&checked.diagnostics, "stdin", src);
    text.lines()
        .find(|l| l.contains("ERROR"))
        .unwrap_or("")
        .to_string()
}

/// Check that well-formed programs check clean: maps of any keys, aggregations, printf, casts, tracepoint fields.
#[test]
fn good_programs() {
    for src in [
        r#"tracepoint:syscalls:sys_enter_openat { printf("PID %d: %s is opening: %s\n", pid, comm, str(args->filename)); }"#,
        "tracepoint:sched:sched_switch /args->next_comm == \"x\"/ { $pid = args->next_pid; $ts = @ts[$pid]; if ($ts) { $us = (nsecs - $ts) / 1000; @h = hist($us); if (((uint64)$us) >= ((uint64)@t)) { printf(\"%d\\n\", $us); } delete(@ts[$pid]); } } BEGIN { @t = 1; } tracepoint:sched:sched_switch { @ts[args->prev_pid] = nsecs; } END { print(@h); }",
        "profile:hz:$2 /pid == $1/ { @k[kstack] = count(); @u[ustack(5)] = count(); } interval:s:$3 { print(@k); clear(@k); exit(); }",
        "BEGIN { @x[comm, pid] = sum(1); @y = lhist(5, 0, 100, 10); @s = stats(2); @a = avg(3); @m = max(4); $i = 0; $i += 2; $i++; @c++; @q = $i > 1 ? 1 : 2; }",
        "uprobe:/bin/bash:readline { printf(\"%s\\n\", str(arg0)); @[usym(reg(\"ip\"))] = count(); }",
        "uretprobe:/bin/bash:readline { @r = hist(retval); }",
        "#include <linux/sched.h>\ntracepoint:sched:sched_switch { if (args->prev_state == TASK_RUNNING) { @x = 1; } }",
        "#define N 7\nBEGIN { @x = N; }",
        "tracepoint:sched:sched_* { @[probe] = count(); }",
    ] {
        assert_eq!(first_error(src, false), "", "{src}");
    }
}

/// Check bpftrace's messages for type errors, map misuse and misplaced functions.
#[test]
fn bpftrace_messages() {
    let cases = [
        (r#"BEGIN { printf("%d\n", "x"); }"#, "stdin:1:9-28: ERROR: printf: %d specifier expects a value of type integer (string supplied)"),
        (r#"BEGIN { @x = 1; @x = "s"; }"#, "stdin:1:17-19: ERROR: Type mismatch for @x: trying to assign value of type 'string[2]' when map already contains a value of type 'int64"),
        (r#"BEGIN { @x[1] = 1; @x["a"] = 2; }"#, "stdin:1:20-27: ERROR: Argument mismatch for @x: trying to access with arguments: [string[2]] when map expects arguments: [unsigned int64]"),
        (r#"BEGIN { $x = 1 + "a"; }"#, "stdin:1:14-21: ERROR: Type mismatch for '+': comparing 'int64' with 'string[2]'"),
        ("BEGIN { @ = count(1); }", "stdin:1:13-21: ERROR: count() requires no arguments (1 provided)"),
        ("BEGIN { x }", "stdin:1:9-10: ERROR: Unknown identifier: 'x'"),
        ("BEGIN { hist(1); }", "stdin:1:9-16: ERROR: hist() should be directly assigned to a map"),
        ("BEGIN { @x = 1 } END { print(@y); }", "stdin:1:24-32: ERROR: Undefined map: @y"),
        ("BEGIN { $x; }", "stdin:1:9-11: ERROR: Undefined or undeclared variable: $x"),
        (r#"BEGIN { printf("%d\n", retval); }"#, "stdin:1:24-30: ERROR: The retval builtin can only be used with 'kretprobe' and 'uretprobe' and 'kfunc' probes"),
        ("uprobe:/bin/bash { }", "stdin:1:1-17: ERROR: uprobe probe type requires 2 arguments"),
        ("BEGIN { @a = lhist(1, 0, 10); }", "stdin:1:14-29: ERROR: lhist() requires 4 arguments (3 provided)"),
        (r#"BEGIN { @s = sum("a") }"#, "stdin:1:14-22: ERROR: sum() only supports integer arguments (string provided)"),
        ("BEGIN { @s = str(comm) }", "stdin:1:14-23: ERROR: str() expects an integer or a pointer type as first argument (string[16] provided)"),
        ("i:s:1 { print(args->x); }", "stdin:1:9-19: ERROR: The args builtin can only be used with tracepoint/kfunc/uprobeprobes (interval used here)"),
        ("tracepoint:syscalls:sys_enter_nope { }", "stdin:1:1-35: ERROR: tracepoint not found: syscalls:sys_enter_nope"),
        ("tracepoint:syscalls:sys_enter_openat { print(args->nope); }", "stdin:1:40-56: ERROR: Struct/union of type 'struct _tracepoint_syscalls_sys_enter_openat' does not contain a field named 'nope'"),
        ("tracepoint:syscalls:sys_enter_openat { print(args.filename); }", "stdin:1:40-51: ERROR: Can not access field 'filename' on type '(ctx) struct _tracepoint_syscalls_sys_enter_openat *'. Try dereferencing it first, or using '->'"),
        ("BEGIN { @x = count(); @x = 1; }", "stdin:1:23-25: ERROR: Type mismatch for @x: trying to assign value of type 'int64' when map already contains a value of type 'count"),
        ("BEGIN { $x = 1; $x = \"a\"; }", "stdin:1:20-21: ERROR: Type mismatch for $x: trying to assign value of type 'string[2]' when variable already contains a value of type 'int64'"),
        ("BEGIN { @x[1] = 1; @x[1,2] = 2; }", "stdin:1:20-27: ERROR: Argument mismatch for @x: trying to access with arguments: [unsigned int64, unsigned int64] when map expects arguments: [unsigned int64]"),
        ("BEGIN { @x[1] = 1; print(@x[1]); }", "stdin:1:20-32: ERROR: The map passed to print() should not be indexed by a key"),
        ("BEGIN { printf(\"%s %d\\n\", comm); }", "stdin:1:9-32: ERROR: printf: Not enough arguments for format string (1 supplied, 2 expected)"),
    ];
    for (src, want) in cases {
        assert_eq!(first_error(src, false), want, "{src}");
    }
}

/// Check that what this machine cannot run is refused, naming the construct and what would give it.
#[test]
fn refusals() {
    let e = first_error("kprobe:do_nanosleep { @ = count(); }", false);
    assert!(
        e.starts_with("stdin:1:1-20: ERROR: kprobe:do_nanosleep needs kprobes"),
        "{e}"
    );
    assert!(e.contains("CONFIG_KPROBE_EVENTS"));
    assert_eq!(
        first_error("kprobe:do_nanosleep { @ = count(); }", true),
        ""
    );
    assert!(first_error("kretprobe:vfs_read { @ = hist(retval); }", true).is_empty());
    for (src, what) in [
        (
            "BEGIN { print(curtask); }",
            "curtask is the kernel's task_struct",
        ),
        ("BEGIN { print(kptr(1)); }", "kptr() marks kernel memory"),
        ("BEGIN { print(kaddr(\"jiffies\")); }", "kaddr()"),
        ("BEGIN { $x = *(uint64*)0; }", "reads kernel memory here"),
        (
            "BEGIN { @x = (struct task_struct *)1; }",
            "casting to 'struct task_struct *'",
        ),
        ("kfunc:vfs_read { }", "kfunc probes are BPF programs"),
        ("hardware:cycles:100 { }", "needs a hardware PMU"),
        ("BEGIN { print(ctx); }", "ctx is a BPF program's context"),
    ] {
        let e = first_error(src, true);
        assert!(e.contains(what), "{src}: {e}");
    }
}
