//! Process context (comm, pid, tid) on probe events, filters evaluated in the kernel, and rprof never tracing
//! itself (issue 31), on a fixture whose processes have known names and pids: a parent, short-lived children
//! that rename themselves, and a child that execs under another name.
mod common;
use common::*;
use std::collections::HashMap;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The fixture and its hard link `ctxexec` (the same file, so the same uprobes, under the name an exec gives).
fn fixture() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "ctx_procs.c", &["-O1"]);
    let link = dir.path().join("ctxexec");
    std::fs::hard_link(&bin, &link).unwrap();
    (dir, bin, link)
}

/// The pids the fixture printed: its own (the first `pid` line), its renamed children's, its exec'd child's.
fn pids(out: &str) -> (u32, Vec<u32>, u32) {
    let of = |tag: &str| -> Vec<u32> {
        out.lines()
            .filter_map(|l| l.strip_prefix(tag)?.trim().parse().ok())
            .collect()
    };
    (of("pid ")[0], of("kid "), of("exec ")[0])
}

/// CSV `--by` rows: (value, count) of function f.
fn by_rows(csv: &str) -> HashMap<String, u64> {
    csv.lines()
        .filter_map(|l| {
            let mut w = l.split(',');
            let (f, v, n) = (w.next()?, w.next()?, w.next()?.parse().ok()?);
            (f == "f").then(|| (v.to_string(), n))
        })
        .collect()
}

/// Check that `--trace` lines, `--by comm`, `--by pid` and JSON name each call's process as the kernel named it
/// then: the parent, children that lived well under a millisecond and renamed themselves, and an exec'd child
/// under its new name.
#[test]
fn context_of_short_lived_and_execd_processes() {
    if !privileged("context_of_short_lived_and_execd_processes") {
        return;
    }
    let (_dir, bin, link) = fixture();
    let (b, l) = (bin.to_str().unwrap(), link.to_str().unwrap());
    let run = ["--", b, "200", "3", l];
    let mut args = vec!["probe", "-x", b, "f", "--trace", "--trace-rate", "100000"];
    args.extend(run);
    let out = rprof_ok(&args);
    let (parent, kids, exec) = pids(&out);
    assert_eq!(kids.len(), 3, "{out}");
    let mut seen: HashMap<(String, u32, u32), u64> = HashMap::new();
    for l in out.lines().filter(|l| l.trim_end().ends_with("f()")) {
        let w: Vec<&str> = l.split_whitespace().collect();
        *seen
            .entry((
                w[1].to_string(),
                w[2].parse().unwrap(),
                w[3].parse().unwrap(),
            ))
            .or_default() += 1;
    }
    let mut want = HashMap::from([
        (("ctx_procs".to_string(), parent, parent), 200),
        (("ctxexec".to_string(), exec, exec), 3),
    ]);
    for &k in &kids {
        want.insert(("ctxkid".to_string(), k, k), 1);
    }
    assert_eq!(seen, want, "{out}");
    for (by, rows) in [
        (
            "comm",
            vec![
                ("ctx_procs".to_string(), 200),
                ("ctxkid".into(), 3),
                ("ctxexec".into(), 3),
            ],
        ),
        ("pid", vec![]),
    ] {
        let mut args = vec!["probe", "-x", b, "f", "--by", by, "--csv"];
        args.extend(run);
        let out = rprof_ok(&args);
        let got = by_rows(&out);
        let want: HashMap<String, u64> = match by {
            "pid" => {
                let (parent, kids, exec) = pids(&out);
                let mut m = HashMap::from([(parent.to_string(), 200), (exec.to_string(), 3)]);
                m.extend(kids.iter().map(|k| (k.to_string(), 1)));
                m
            }
            _ => rows.into_iter().collect(),
        };
        assert_eq!(got, want, "--by {by}: {out}");
    }
    let mut args = vec!["probe", "-x", b, "f", "--by", "comm", "--json"];
    args.extend(run);
    let out = rprof_ok(&args);
    for name in ["\"ctx_procs\"", "\"ctxkid\"", "\"ctxexec\""] {
        assert!(out.contains(name), "{name} in {out}");
    }
}

/// The count of f in a `--count` report, and the events rprof says reached the rings (RPROF_DEBUG_COST).
fn counted(out: &str, err: &str) -> (u64, u64) {
    let count = out
        .lines()
        .find_map(|l| {
            l.strip_prefix("f ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no row for f: {out}"));
    let read = err
        .lines()
        .find_map(|l| {
            l.strip_prefix("rprof: ")?
                .split(" probe events read")
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no delivered line: {err}"));
    (count, read)
}

/// Check that `f if arg0 < 100` over f(i) for i in 0..300,100 counts exactly 100, on the tracefs ring and on
/// perf events, and that the 300,000 calls it rejects never reach a ring (the kernel filters them: the ring's
/// own counters and rprof's reads say 100); and that a part only rprof can evaluate (`pid`) is evaluated there.
#[test]
fn filter_runs_in_the_kernel() {
    if !privileged("filter_runs_in_the_kernel") {
        return;
    }
    let (_dir, bin, _) = fixture();
    let b = bin.to_str().unwrap();
    for engine in ["tracefs", "perf"] {
        for (filter, want) in [
            ("f if arg0 < 100", 100),
            ("f if pid != 1 && arg0 >= 300050", 50),
        ] {
            let args = [
                "probe", "--count", "--engine", engine, "-x", b, filter, "--", b, "300100", "0",
                "-",
            ];
            let out = rprof()
                .args(args)
                .env("RPROF_DEBUG_COST", "1")
                .output()
                .unwrap();
            assert_success(&out, &args);
            let (stdout, stderr) = (
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            );
            assert_eq!(
                counted(&stdout, &stderr),
                (want, want),
                "{engine} {filter}: {stdout}{stderr}"
            );
            if engine == "tracefs" {
                assert!(
                    stderr.contains(&format!("counters: {want} written")),
                    "{stderr}"
                );
            }
        }
    }
    let out = rprof_ok(&[
        "probe",
        "-l",
        "-x",
        b,
        "f if pid != 1 && arg0 >= 5 && comm ~ \"ctx*\"",
    ]);
    assert!(
        out.contains("filter in the kernel: v0 >= 5 && comm ~ \"ctx*\"; in rprof: pid != 1"),
        "{out}"
    );
}

/// Start rprof system-wide with `args`, run `work` once it is probing, then stop it (SIGINT): its stdout.
fn system_wide(args: &[&str], work: impl FnOnce()) -> String {
    let mut child = rprof()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 512];
    while !seen.contains("Ctrl-C to end") {
        let n = err.read(&mut buf).unwrap();
        assert!(n > 0, "rprof ended: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    work();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Check that `comm == "ctxkid"` system-wide counts only the renamed children's calls (in the kernel, on
/// counters), and that no row of a system-wide syscall count is rprof's own process.
#[test]
fn comm_filter_system_wide_and_never_itself() {
    if !privileged("comm_filter_system_wide_and_never_itself") {
        return;
    }
    let (_dir, bin, _) = fixture();
    let b = bin.to_str().unwrap();
    let run = || {
        let st = Command::new(&bin)
            .args(["200", "3", "-"])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
    };
    let out = system_wide(
        &["probe", "--count", "-x", b, "f if comm == \"ctxkid\""],
        run,
    );
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["f", "3"]),
        "{out}"
    );
    let mut child = rprof()
        .args([
            "probe",
            "--count",
            "syscall:ioctl",
            "syscall:ppoll",
            "syscall:read",
            "syscall:epoll_wait",
        ])
        .args(["syscall:write", "--by", "pid", "--csv", "-d", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let me = child.id().to_string();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(child.wait().unwrap().success());
    for l in out.lines() {
        assert_ne!(
            l.split(',').nth(1),
            Some(me.as_str()),
            "rprof's own row: {out}"
        );
    }
}
