use super::*;
use crate::bt::check::tests::{env, Fake};

fn planned(src: &str) -> BtPlan {
    let front = crate::bt::front(src, "stdin", &env(false)).expect("checks");
    plan(&front.program, &front.checked, &Fake, &["77".to_string()]).expect("plans")
}

/// Check that each attach point becomes one pattern fetching what its blocks read, typed as the format says.
#[test]
fn patterns_fetch_what_blocks_read() {
    let p = planned(
        "tracepoint:syscalls:sys_enter_openat { printf(\"%d %s %s\\n\", pid, comm, str(args->filename)); }",
    );
    assert_eq!(p.patterns(), ["t:syscalls:sys_enter_openat(filename:str)"]);
    let p = planned(
        "tracepoint:sched:sched_switch /args->prev_pid == 1234/ { @ts = nsecs; @k = kstack; } \
         tracepoint:sched:sched_switch /args->next_pid == 1234/ { @n = args->next_comm; }",
    );
    assert_eq!(
        p.patterns(),
        ["t:sched:sched_switch(prev_pid:s32, next_pid:s32, next_comm)"]
    );
    assert_eq!(p.probes[0].blocks, [0, 1]);
    assert!(p.stacks);
    assert_eq!(
        p.attached, 2,
        "each block's attach point, as bpftrace counts them"
    );
}

/// Check that a lone block's predicate goes into the kernel's filter where ftrace can evaluate it.
#[test]
fn predicates_into_the_kernel() {
    let p = planned(
        "tracepoint:sched:sched_switch /args->next_comm == \"fusion_thread\" && pid != 0 && 5 < args->prev_pid/ { @ = count(); }",
    );
    assert_eq!(
        p.patterns(),
        ["t:sched:sched_switch(next_comm, prev_pid:s32) if (next_comm == \"fusion_thread\") && (prev_pid > 5)"]
    );
    let p = planned(
        "tracepoint:syscalls:sys_enter_openat /comm == \"cat\" || pid == 5/ { @ = count(); }",
    );
    assert_eq!(p.patterns(), ["t:syscalls:sys_enter_openat"]);
}

/// Check that uprobes and uretprobes of one function share a pattern, with the return value fetched.
#[test]
fn uprobes_share_a_pattern() {
    let p = planned(
        "uprobe:/bin/bash:readline { @s[tid] = nsecs; } uretprobe:/bin/bash:readline { printf(\"%s\\n\", str(retval)); }",
    );
    assert_eq!(p.patterns(), ["uprobe:/bin/bash:readline(ret:str)"]);
    assert_eq!(
        (
            p.probes[0].blocks.clone(),
            p.probes[0].return_blocks.clone()
        ),
        (vec![0], vec![1])
    );
    assert!(p.returns);
}

/// Check that `args->argv` at `sys_enter_execve` (execsnoop.bt's `join(args->argv)`) plans a uprobe at libc's
/// `execve` reading the strings, with no block of its own and not counted as attached.
#[test]
fn execve_argv_is_read_at_libc() {
    let p =
        planned("tracepoint:syscalls:sys_enter_exec* { printf(\"%d \", pid); join(args->argv); }");
    assert_eq!(
        p.patterns(),
        [
            "t:syscalls:sys_enter_exec*(argv:u64)",
            "uprobe:libc:execve(arg1:str[16])"
        ]
    );
    assert_eq!(p.argv, Some(1));
    assert!(p.probes[1].blocks.is_empty());
    assert_eq!(p.attached, 1);
    let p = planned("tracepoint:syscalls:sys_enter_openat { @ = count(); }");
    assert_eq!(p.argv, None);
}

/// Check that `tid` goes into the kernel's filter (the event's `common_pid`), and `pid` (the process, which
/// the event does not hold) does not.
#[test]
fn tid_into_the_kernel_pid_not() {
    let p = planned("tracepoint:sched:sched_switch /tid == 42/ { @ = count(); }");
    assert_eq!(p.patterns(), ["t:sched:sched_switch if tid == 42"]);
    let p = planned("tracepoint:sched:sched_switch /pid == 42/ { @ = count(); }");
    assert_eq!(p.patterns(), ["t:sched:sched_switch"]);
}

/// Kernel functions of a kernel without XFS loaded and with `blk_account_io_start` inlined.
struct Kernel61;

impl TracepointFields for Kernel61 {
    fn fields(&self, category: &str, event: &str) -> Option<Vec<TpField>> {
        Fake.fields(category, event)
    }
    fn expand(&self, category: &str, event: &str) -> Vec<(String, String)> {
        Fake.expand(category, event)
    }
    fn kernel_function(&self, name: &str) -> bool {
        !name.starts_with("xfs_") && name != "blk_account_io_start"
    }
}

fn planned_kprobes(src: &str) -> Result<BtPlan, String> {
    let front = crate::bt::front(src, "stdin", &env(true)).expect("checks");
    plan(&front.program, &front.checked, &Kernel61, &[])
        .map_err(|d| crate::bt::diag::render_all(&d, "stdin", src))
}

/// Check that kprobes and kretprobes become probe's `kprobe:` patterns, a kretprobe's blocks running at the
/// function's return, with the arguments and return value fetched, and wildcards left to probe.
#[test]
fn kprobes_plan_as_kernel_functions() {
    let p = planned_kprobes(
        "kprobe:vfs_read { @s[tid] = arg2; } kretprobe:vfs_read /@s[tid]/ { @r = hist(retval); }",
    )
    .unwrap();
    assert_eq!(p.patterns(), ["kprobe:vfs_read(arg2:u64, ret:u64)"]);
    assert_eq!(p.probes[0].blocks, [0]);
    assert_eq!(p.probes[0].return_blocks, [1]);
    assert!(p.returns);
    let p = planned_kprobes("kprobe:vfs_* { @[func] = count(); }").unwrap();
    assert_eq!(p.patterns(), ["kprobe:vfs_*"]);
    assert!(
        !p.returns,
        "entries only: probe counts without return probes"
    );
}

/// Check that a kernel function this kernel lacks is skipped with bpftrace's warning where its block has other
/// attach points (biolatency.bt names each kernel version's function), and is an error where it is alone.
#[test]
fn missing_kernel_functions_skipped_as_bpftrace_does() {
    let p = planned_kprobes(
        "kprobe:blk_account_io_start, kprobe:__blk_account_io_start { @start[arg0] = nsecs; }",
    )
    .unwrap();
    assert_eq!(p.patterns(), ["kprobe:__blk_account_io_start(arg0:u64)"]);
    assert_eq!(
        p.warnings,
        ["WARNING: Unable to attach probe: kprobe:blk_account_io_start. Skipping."]
    );
    let p =
        planned_kprobes("kprobe:xfs_file_open, kretprobe:xfs_file_open { @ = count(); }").unwrap();
    assert!(p.probes.is_empty() && p.warnings.len() == 2, "{p:?}");
    let err = planned_kprobes("kprobe:xfs_file_open { @ = count(); }").unwrap_err();
    assert!(
        err.contains("ERROR: Error attaching probe: 'kprobe:xfs_file_open'"),
        "{err}"
    );
    let err = planned_kprobes("kprobe:vfs_read+4 { @ = count(); }").unwrap_err();
    assert!(err.contains("kprobe offsets"), "{err}");
}

/// Check that a `pid == N` every probe's blocks test (literal, `$1`, `cpid`, either side, any top-level
/// conjunct) makes the probes per-process, and that one block without it, an `||`, or two processes keep them
/// system-wide.
#[test]
fn pid_on_every_probe_opens_per_process_events() {
    let only = |src: &str| planned(src).only;
    assert_eq!(
        only("tracepoint:sched:sched_switch /pid == 42/ { @[comm] = count(); }"),
        Some(OnlyProcess::Pid(42))
    );
    assert_eq!(
        only("tracepoint:sched:sched_switch /args->prev_pid > 5 && $1 == pid/ { @ = count(); }"),
        Some(OnlyProcess::Pid(77))
    );
    assert_eq!(
        only(
            "BEGIN { @x = 1; } tracepoint:sched:sched_switch /pid == 42/ { @ = count(); } \
              tracepoint:syscalls:sys_enter_openat /pid == 42 && tid != 3/ { @w = count(); } END { print(@x); }"
        ),
        Some(OnlyProcess::Pid(42))
    );
    assert_eq!(
        only(
            "tracepoint:sched:sched_switch /pid == 42/ { @ = count(); } \
              tracepoint:syscalls:sys_enter_openat { @w = count(); }"
        ),
        None
    );
    assert_eq!(
        only(
            "tracepoint:sched:sched_switch /pid == 42/ { @ = count(); } \
              tracepoint:syscalls:sys_enter_openat /pid == 43/ { @w = count(); }"
        ),
        None
    );
    assert_eq!(
        only("tracepoint:sched:sched_switch /pid == 42 || tid == 5/ { @ = count(); }"),
        None
    );
    assert_eq!(
        only("tracepoint:sched:sched_switch /pid != 42/ { @ = count(); }"),
        None
    );
    assert_eq!(only("BEGIN { printf(\"%d\\n\", pid); }"), None);
    assert_eq!(OnlyProcess::Pid(42).text(), "pid == 42");
}

/// Check that `reg()` is fetched as a register where the probe fires, as bpftrace reads it: at a uprobe's entry
/// (`%ip`: the probed address), at its return (`%ip@ret`, apart from the entry's), from a profile: sample; never
/// in the kernel's filter; and refused at interval probes and for `orig_ax` at sampled ones.
#[test]
fn registers_fetched_where_probes_fire() {
    let p = planned(
        "uprobe:/bin/bash:readline /reg(\"ip\") > 0/ { printf(\"%lx\\n\", reg(\"ip\")); } \
         uretprobe:/bin/bash:readline { printf(\"%lx %lx\\n\", reg(\"ip\"), reg(\"sp\")); }",
    );
    assert_eq!(
        p.patterns(),
        ["uprobe:/bin/bash:readline(%ip:u64, %ip@ret:u64, %sp@ret:u64)"]
    );
    let p = planned("profile:hz:99 { @[reg(\"ip\")] = count(); }");
    assert_eq!(p.patterns(), ["profile:hz:99(%ip:u64)"]);
    for (src, what) in [
        ("interval:s:1 { print(reg(\"ip\")); }", "interval"),
        (
            "profile:hz:99 { @[reg(\"orig_ax\")] = count(); }",
            "orig_ax",
        ),
    ] {
        let front = crate::bt::front(src, "stdin", &env(false)).expect("checks");
        let errors = plan(&front.program, &front.checked, &Fake, &[]).expect_err(src);
        assert!(
            errors[0].message.contains(what),
            "{src}: {:?}",
            errors[0].message
        );
    }
}
