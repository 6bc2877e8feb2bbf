//! `rprof tool`'s columns as bcc prints them, each against a reference on the same workload: execsnoop's
//! PCOMM PID PPID RET ARGS (the argv a shell passed, bpftrace's parent pid) and syscount -P's PID COMM COUNT
//! (`strace -ff`'s calls per process). Needs root, tracefs and uprobes; skips with a reason elsewhere, and
//! fails under RPROF_REQUIRE_PRIVILEGED=1.
mod common;
use common::privileged;
use common::tools::{have, rprof_tool_bg, tool};
use common::tracer::bpftrace_bg;
use std::process::Command;

/// Check syscount -P (bcc's PID COMM COUNT) against `strace -ff`'s calls per process on a shell that runs a
/// shell that runs `ls -R`, in one execution: rprof counts the strace run, so both see the same calls (two
/// runs of a shell differ by a call now and then: a wait interrupted by SIGCHLD under load, 299 against 298).
/// The processes compared are those strace saw from their fork (the inner shell and `ls`): the one strace
/// starts itself shows only from its execve, while its calls before it (strace's child setup) are the
/// process's too. A row per process under the name it has last, with strace's count of that process's calls.
#[test]
fn syscount_per_process_names_each_as_strace_counts() {
    let test = "syscount_per_process_names_each_as_strace_counts";
    if !privileged(test) || !have(test, "strace") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out_prefix = dir.path().join("t");
    let out_prefix = out_prefix.to_str().unwrap();
    let cmd = [
        "strace",
        "-ff",
        "-o",
        out_prefix,
        "/bin/sh",
        "-c",
        "/bin/sh -c 'ls -R /usr/share/doc/bash > /dev/null; exit 0'; exit 0",
    ];
    let mut args = vec!["syscount", "-P", "--"];
    args.extend(cmd);
    let (out, _) = tool(&args);
    assert!(out.contains(" PID COMM "), "{out}");
    // Each traced process's file (`t.PID`): one line per call (exit_group's `= ?` too), named by its last exec.
    let mut theirs: Vec<(u32, String, u64)> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            let pid: u32 = name.strip_prefix("t.").unwrap().parse().unwrap();
            let text = std::fs::read_to_string(e.path()).unwrap();
            // The process strace started: seen from its execve on only.
            if text.starts_with("execve(") {
                return None;
            }
            let calls = text
                .lines()
                .filter(|l| !l.starts_with("+++") && !l.starts_with("---"))
                .count() as u64;
            let exec = text
                .lines()
                .rfind(|l| l.starts_with("execve(\"") && l.ends_with("= 0"))
                .unwrap_or("execve(\"sh\"");
            let path = exec.split('"').nth(1).unwrap();
            Some((pid, path.rsplit('/').next().unwrap().to_string(), calls))
        })
        .collect();
    theirs.sort();
    let traced: Vec<u32> = theirs.iter().map(|t| t.0).collect();
    let names: Vec<&str> = theirs.iter().map(|t| t.1.as_str()).collect();
    assert_eq!(
        names.len(),
        2,
        "the inner shell and ls, seen from their forks: {theirs:?}"
    );
    assert!(names.contains(&"sh") && names.contains(&"ls"), "{theirs:?}");
    let mut mine: Vec<(u32, String, u64)> = out
        .lines()
        .filter(|l| l.starts_with("raw_syscalls:sys_enter "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let pid: u32 = f[1].parse().unwrap();
            (
                pid,
                f[2].to_string(),
                f[3].replace(',', "").parse().unwrap(),
            )
        })
        .filter(|(pid, _, _)| traced.contains(pid))
        .collect();
    mine.sort();
    assert_eq!(mine, theirs, "rprof:\n{out}");
}

/// Check execsnoop's default lines (bcc's PCOMM PID PPID RET ARGS) against what a shell passed and against
/// bpftrace's sched_process_exec with `curtask->real_parent->tgid` in the same run, system-wide: a dynamically
/// linked program's whole argv, a static one's path (it never starts in ld.so), and the shell's pid as PPID.
#[test]
fn execsnoop_default_shows_argv_and_ppid() {
    let test = "execsnoop_default_shows_argv_and_ppid";
    if !privileged(test) || !have(test, "bpftrace") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dynamic = dir.path().join("rpx-dyn");
    std::fs::copy("/bin/true", &dynamic).unwrap();
    let built = common::build_c(dir.path(), "exec_true.c", &["-static", "-O1"]);
    let stat = dir.path().join("rpx-static");
    std::fs::rename(built, &stat).unwrap();
    let (d, s) = (dynamic.to_str().unwrap(), stat.to_str().unwrap());
    let pidfile = dir.path().join("shell.pid");
    let script = format!(
        "echo $$ > {}; {d} one 'two words' three; {s} four five",
        pidfile.display()
    );
    let mine = rprof_tool_bg(&["execsnoop"]);
    let theirs = bpftrace_bg(
        "tracepoint:sched:sched_process_exec { printf(\"EXEC %d %d %s\\n\", pid, \
         curtask->real_parent->tgid, str(args->filename)); }",
    );
    Command::new("/bin/sh")
        .args(["-c", &script])
        .status()
        .unwrap();
    let (mine, theirs) = (mine.stop(), theirs.stop());
    let shell = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .to_string();
    assert!(
        mine.contains("PCOMM                PID    PPID RET ARGS"),
        "{mine}"
    );
    // PCOMM PID PPID RET ARGS...
    let row = |comm: &str| -> Vec<String> {
        let rows: Vec<&str> = mine.lines().filter(|l| l.starts_with(comm)).collect();
        assert_eq!(rows.len(), 1, "one exec of {comm}:\n{mine}");
        rows[0].split_whitespace().map(str::to_string).collect()
    };
    let (dr, sr) = (row("rpx-dyn "), row("rpx-static "));
    assert_eq!(
        dr[2..],
        [&shell, "0", d, "one", "two", "words", "three"],
        "{mine}"
    );
    assert_eq!(
        sr[2..],
        [&shell, "0", s],
        "the static program's path:\n{mine}"
    );
    for (r, path) in [(&dr, d), (&sr, s)] {
        let bt = format!("EXEC {} {} {path}", r[1], r[2]);
        assert!(
            theirs.lines().any(|l| l == bt),
            "bpftrace has no `{bt}`:\n{theirs}"
        );
    }
}
