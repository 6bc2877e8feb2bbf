//! bcc's multi-tools with bcc's arguments (`rprof tool funccount|funclatency|stackcount|trace|argdist`), on
//! fixtures/bcc_multi.c, whose modes make a known number of calls with known arguments: the counts, values
//! and stacks printed are those. Also every bcc line of docs/tools.md through `--recipe` (no root needed),
//! and a kernel form on a kernel without kprobes.
//! Needs root, tracefs and uprobes for the runs; skips with a reason elsewhere, and fails under
//! RPROF_REQUIRE_PRIVILEGED=1.
mod common;
use common::{build_c, privileged, rprof};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The fixture, built into `dir`.
fn fixture(dir: &Path) -> PathBuf {
    build_c(
        dir,
        "bcc_multi.c",
        &["-O1", "-g", "-fno-omit-frame-pointer"],
    )
}

/// `rprof tool ARGS`, asserting success: (stdout, stderr).
fn run_tool(args: &[&str]) -> (String, String) {
    let out = rprof().arg("tool").args(args).output().expect("run rprof");
    common::assert_success(&out, args);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (text(&out.stdout), text(&out.stderr))
}

/// The number after `name` on the line whose first word is `name` (`strlen   7`).
fn count_of(out: &str, name: &str) -> Option<u64> {
    out.lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        (w.first() == Some(&name)).then(|| w.last()?.parse().ok())?
    })
}

/// Check every bcc line of docs/tools.md: `--recipe` prints the probe command (no root needed).
#[test]
fn bcc_lines_print_their_recipes() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["funccount", "-i", "1", "tcp_send*"],
            "rprof probe --count 'kprobe:tcp_send*' -i 1",
        ),
        (
            &["funccount", "-p", "185", "vfs_*"],
            "rprof probe --count 'kprobe:vfs_*' -p 185",
        ),
        (&["funccount", "c:str*"], "rprof probe --count 'c:str*'"),
        (
            &["stackcount", "submit_bio"],
            "rprof probe --count -g kprobe:submit_bio",
        ),
        (
            &["stackcount", "t:block:block_rq_insert"],
            "rprof probe --count -g t:block:block_rq_insert",
        ),
        (
            &["funclatency", "-p", "181", "-u", "vfs_read"],
            "rprof probe kprobe:vfs_read --hist --hist-only --hist-unit us -p 181",
        ),
        (
            &["funclatency", "-u", "c:getaddrinfo"],
            "rprof probe c:getaddrinfo --hist --hist-only --hist-unit us",
        ),
        (
            &["argdist", "-p", "181", "-C", "p:c:write(int fd):int:fd"],
            "rprof probe --count 'c:write(arg0:s32)' --by arg0 -p 181",
        ),
        (
            &[
                "argdist",
                "-H",
                "p::tcp_sendmsg(struct sock *sk, struct msghdr *msg, size_t size):u32:size",
            ],
            "rprof probe --count 'kprobe:tcp_sendmsg(arg2:u32)' --hist=arg2 --hist-only",
        ),
        (
            &[
                "argdist",
                "-C",
                "p::tcp_sendmsg(struct sock *sk, struct msghdr *msg, size_t size):u32:size",
            ],
            "rprof probe --count 'kprobe:tcp_sendmsg(arg2:u32)' --by arg2",
        ),
        (
            &["trace", "do_sys_open \"%s\", arg2"],
            "rprof probe --count 'kprobe:do_sys_open(arg1:str)' --trace-format",
        ),
        (
            &["trace", "r::do_sys_open \"ret: %d\", retval"],
            "rprof probe 'kprobe:do_sys_open ret' --trace-format",
        ),
        (
            &["trace", "-K", "do_nanosleep \"mode: %d\", arg2"],
            "rprof probe --count 'kprobe:do_nanosleep(arg1:s32)' -g",
        ),
        (
            &[
                "trace",
                "p:c:nanosleep(struct timespec *req) \"%d sec %d nsec\", req->tv_sec, req->tv_nsec",
            ],
            "rprof probe --count 'c:nanosleep(arg0->0:s32, arg0->8:s32)' --trace-format",
        ),
        (
            &["trace", "u:pthread:pthread_create \"%x\", arg1"],
            "rprof probe --count 'usdt:pthread:*:pthread_create(arg0:x32)'",
        ),
    ];
    for (args, want) in cases {
        let mut argv = args.to_vec();
        argv.push("--recipe");
        let (out, _) = run_tool(&argv);
        let got = out.lines().last().unwrap_or("");
        assert!(
            got.starts_with(want),
            "{args:?}:\n got  {got}\n want {want}..."
        );
    }
    let (out, _) = run_tool(&["trace", "u:pthread:pthread_create \"%x\", arg1", "--recipe"]);
    assert!(out.contains("# where `usdt:pthread:*:pthread_create(arg0:x32)` finds nothing: `c:pthread_create(arg0:x32)`"), "{out}");
    let (list, _) = run_tool(&["--list"]);
    for t in ["funccount", "funclatency", "stackcount", "trace", "argdist"] {
        assert!(
            list.lines().any(|l| l.starts_with(t)),
            "{t} not in --list:\n{list}"
        );
    }
}

/// Check bcc's flags that rprof cannot honour: one line saying so, and a usage error (exit status 2).
#[test]
fn unsupported_flags_say_so() {
    let out = rprof()
        .args(["tool", "trace", "-M", "3", "c:open"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("-M is not supported") && err.lines().count() == 1,
        "{err}"
    );
}

/// Check a kernel form on a kernel without kprobes: one line naming CONFIG_KPROBE_EVENTS, a failure.
#[test]
fn kernel_forms_need_kprobes() {
    if !privileged("kernel_forms_need_kprobes") {
        return;
    }
    if Path::new("/sys/kernel/tracing/kprobe_events").exists()
        || Path::new("/sys/kernel/debug/tracing/kprobe_events").exists()
    {
        common::skip(
            "kernel_forms_need_kprobes",
            "this kernel has kprobes (tests/kprobe_vm.rs runs them)",
        );
        return;
    }
    let out = rprof()
        .args(["tool", "funccount", "-d", "1", "vfs_*"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("CONFIG_KPROBE_EVENTS") && err.lines().count() == 1,
        "{err}"
    );
}

/// Check `funccount 'c:str*' -- fixture str 7`: strlen counted 7 times.
#[test]
fn funccount_counts_a_librarys_calls() {
    if !privileged("funccount_counts_a_librarys_calls") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path());
    let (out, _) = run_tool(&[
        "funccount",
        "c:str*",
        "--",
        bin.to_str().unwrap(),
        "str",
        "7",
    ]);
    assert!(
        out.lines().next().unwrap_or("").starts_with("FUNC"),
        "{out}"
    );
    assert_eq!(count_of(&out, "strlen"), Some(7), "{out}");
}

/// Check `funccount -p PID 'c:strlen'` on a running process that then calls strlen 11 times.
#[test]
fn funccount_follows_a_pid() {
    if !privileged("funccount_follows_a_pid") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path());
    let mut target = Command::new(&bin)
        .args(["wait-str", "11"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = target.id().to_string();
    let mut tracer = rprof()
        .args(["tool", "funccount", "-p", &pid, "-d", "30", "c:strlen"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(tracer.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("Ctrl-C to end") {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "rprof ended before it started"
        );
    }
    target.stdin.take().unwrap().write_all(b"go").unwrap();
    assert!(target.wait().unwrap().success());
    let out: Output = tracer.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(count_of(&text, "strlen"), Some(11), "{text}");
}

/// Check `funclatency -u c:getaddrinfo`: a histogram in usecs of the fixture's 3 lookups.
#[test]
fn funclatency_times_each_call() {
    if !privileged("funclatency_times_each_call") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path());
    let (out, _) = run_tool(&[
        "funclatency",
        "-u",
        "c:getaddrinfo",
        "--",
        bin.to_str().unwrap(),
        "gai",
    ]);
    assert!(
        out.contains("     usecs               : count     distribution"),
        "{out}"
    );
    let avg = out
        .lines()
        .find(|l| l.starts_with("avg = "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        avg.ends_with("count: 3") && avg.contains(" usecs, total: "),
        "{out}"
    );
    let in_buckets: u64 = out
        .lines()
        .filter(|l| l.contains(" -> "))
        .map(|l| {
            l.split(':')
                .nth(1)
                .unwrap()
                .split('|')
                .next()
                .unwrap()
                .trim()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(in_buckets, 3, "{out}");
}

/// Check `trace 'u:pthread:pthread_create "%x", arg1'`: Debian's glibc has no USDT notes, so the function is
/// probed; each line has bcc's columns and the pthread_t address the fixture printed (low 32 bits).
#[test]
fn trace_prints_the_first_argument() {
    if !privileged("trace_prints_the_first_argument") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path());
    let (out, err) = run_tool(&[
        "trace",
        "u:pthread:pthread_create \"%x\", arg1",
        "--",
        bin.to_str().unwrap(),
        "threads",
    ]);
    let mut printed: Vec<String> = out
        .lines()
        .filter_map(|l| l.strip_prefix("thread "))
        .map(|a| format!("0x{a}"))
        .collect();
    let header = out
        .lines()
        .find(|l| l.starts_with("PID"))
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["PID", "TID", "COMM", "FUNC", "arg1"]
    );
    let mut traced: Vec<String> = out
        .lines()
        .filter(|l| l.split_whitespace().nth(3) == Some("pthread_create"))
        .map(|l| l.split_whitespace().last().unwrap().to_string())
        .collect();
    printed.sort();
    traced.sort();
    assert_eq!(printed.len(), 3, "{out}");
    assert_eq!(traced, printed, "{out}\n{err}");
}

/// Check trace with a C signature: `req->tv_sec` and `req->tv_nsec` of nanosleep's timespec, {0, 1234}, twice.
#[test]
fn trace_reads_struct_members_by_name() {
    if !privileged("trace_reads_struct_members_by_name") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path());
    let probe = "p:c:nanosleep(struct timespec *req) \"%d sec %d nsec\", req->tv_sec, req->tv_nsec";
    let (out, _) = run_tool(&["trace", probe, "--", bin.to_str().unwrap(), "sleep"]);
    let lines: Vec<&str> = out.lines().filter(|l| l.contains(" nanosleep ")).collect();
    assert_eq!(lines.len(), 2, "{out}");
    for l in lines {
        assert!(l.ends_with("nanosleep        0 sec 1234 nsec"), "{l}");
    }
}

/// Check `argdist -C 'p:c:write(int fd):int:fd'`: 5 calls on fd 1, 3 on fd 2, 2 on fd 7.
#[test]
fn argdist_counts_each_value() {
    if !privileged("argdist_counts_each_value") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path());
    let (out, _) = run_tool(&[
        "argdist",
        "-C",
        "p:c:write(int fd):int:fd",
        "--",
        bin.to_str().unwrap(),
        "write",
    ]);
    let mut rows: Vec<(String, u64)> = out
        .lines()
        .filter(|l| l.starts_with("write "))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[1].to_string(), w[2].parse().unwrap())
        })
        .collect();
    rows.sort();
    assert_eq!(
        rows,
        [
            ("1".to_string(), 5),
            ("2".to_string(), 3),
            ("7".to_string(), 2)
        ],
        "{out}"
    );
}

/// Check `stackcount -f 'p:FIXTURE:leaf'`: one folded stack through caller_of_leaf, 9 times.
#[test]
fn stackcount_folds_the_callers() {
    if !privileged("stackcount_folds_the_callers") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path());
    let path = bin.to_str().unwrap();
    let (out, _) = run_tool(&[
        "stackcount",
        "-f",
        &format!("p:{path}:leaf"),
        "--",
        path,
        "stack",
    ]);
    let stacks = common::parse_folded(&out);
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    assert_eq!(total, 9, "{out}");
    assert!(
        stacks
            .iter()
            .all(|(frames, _)| common::contains_run(frames, &["main", "caller_of_leaf", "leaf"])),
        "{out}"
    );
}
