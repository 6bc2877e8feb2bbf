//! Typed values of tracepoints and syscalls against references on the same workload: addresses as text and
//! TCP states by name on loopback connections (against bpftrace), a failed open's error by name (against
//! strace), signals by name; and a tracepoint of the shared syscall events (`raw_syscalls`) split by a value.
mod common;
use common::tracer::{bpftrace_bg, Tracer};
use common::{assert_success, privileged, rprof, skip};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A Python client and server that make one TCP connection on 127.0.0.1 and one on ::1, and close both; it
/// prints the listener's and the client's port of each (`PORTS 41234 52345`).
const LOOPBACK: &str = "import socket\n\
for fam, host in ((socket.AF_INET, '127.0.0.1'), (socket.AF_INET6, '::1')):\n\
\x20   s = socket.socket(fam); s.bind((host, 0)); s.listen(1)\n\
\x20   c = socket.socket(fam); c.connect((host, s.getsockname()[1]))\n\
\x20   print('PORTS', s.getsockname()[1], c.getsockname()[1], flush=True)\n\
\x20   a, _ = s.accept(); c.close(); a.close(); s.close()\n";

/// TCP states by number (include/net/tcp_states.h), to compare rprof's names with bpftrace's numbers.
const TCP_STATES: [&str; 13] = [
    "",
    "TCP_ESTABLISHED",
    "TCP_SYN_SENT",
    "TCP_SYN_RECV",
    "TCP_FIN_WAIT1",
    "TCP_FIN_WAIT2",
    "TCP_TIME_WAIT",
    "TCP_CLOSE",
    "TCP_CLOSE_WAIT",
    "TCP_LAST_ACK",
    "TCP_LISTEN",
    "TCP_CLOSING",
    "TCP_NEW_SYN_RECV",
];

/// One state change: old and new state (names), source and destination addresses, v4 and v6 fields.
type Change = [String; 6];

fn output(c: &mut Command, what: &[&str]) -> (String, String) {
    let out = c.output().expect("run rprof");
    assert_success(&out, what);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `rprof probe ARGS` on `engine` (None: rprof's choice): stdout and stderr.
fn probe(args: &[&str], engine: Option<&str>) -> (String, String) {
    let mut c = rprof();
    c.arg("probe").args(args);
    match engine {
        Some(e) => c.env("RPROF_PROBE_ENGINE", e),
        None => c.env_remove("RPROF_PROBE_ENGINE"),
    };
    output(&mut c, args)
}

/// The `NAME=VALUE` pairs of a `--trace` line's `EVENT(...)`.
fn trace_values(line: &str, event: &str) -> Option<BTreeMap<String, String>> {
    let inner = line.split_once(&format!("{event}("))?.1;
    let inner = &inner[..inner.rfind(')')?];
    Some(
        inner
            .split(", ")
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn python() -> Option<&'static str> {
    ["/usr/bin/python3", "/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

/// The loopback workload of `test`: python3 and LOOPBACK written to a script in a fresh temporary directory (kept
/// while the returned TempDir lives); None after a visible skip without root or python3.
fn loopback(test: &str) -> Option<(tempfile::TempDir, &'static str, PathBuf)> {
    if !privileged(test) {
        return None;
    }
    let Some(python) = python() else {
        skip(test, "python3 is not installed");
        return None;
    };
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("loopback.py");
    std::fs::write(&script, LOOPBACK).unwrap();
    Some((dir, python, script))
}

/// The ports the loopback script printed (`PORTS LISTENER CLIENT` per connection).
fn script_ports(out: &str) -> Vec<String> {
    let ports: Vec<String> = out
        .lines()
        .filter_map(|l| l.strip_prefix("PORTS "))
        .flat_map(|l| l.split_whitespace().map(String::from))
        .collect();
    assert_eq!(ports.len(), 4, "the script's ports: {out}");
    ports
}

/// bpftrace's state changes in its output `out` (lines `T OLD NEW SADDR DADDR SADDR6 DADDR6 SPORT DPORT`) of
/// the connections on `ports`, states mapped to names.
fn bpftrace_changes(out: &str, ports: &[String]) -> Vec<Change> {
    let mut changes: Vec<Change> = out
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.strip_prefix("T ")?.split_whitespace().collect();
            if !ports.iter().any(|p| p == w[6] || p == w[7]) {
                return None;
            }
            let state = |s: &str| TCP_STATES[s.parse::<usize>().unwrap()].to_string();
            Some([
                state(w[0]),
                state(w[1]),
                w[2].into(),
                w[3].into(),
                w[4].into(),
                w[5].into(),
            ])
        })
        .collect();
    changes.sort();
    changes
}

/// Check that `t:sock:inet_sock_set_state --trace` shows every field of loopback connections on 127.0.0.1
/// and ::1 as the kernel's print format types them: addresses as text (not `daddr=16777343`, and IPv6 not
/// `0`), states and families by name; and that the state changes equal bpftrace's (ntop of the same fields),
/// on both engines. rprof and bpftrace trace the whole system at the same time while the script runs once,
/// and both keep the changes of the script's ports: a change made in softirq context is charged to whichever
/// task the CPU was running (ksoftirqd under load), so a filter by the script's pid would keep a different
/// subset in each run.
#[test]
fn socket_states_and_addresses() {
    let Some((_dir, python, script)) = loopback("socket_states_and_addresses") else {
        return;
    };
    let ev = "sock:inet_sock_set_state";
    let have_bpftrace = Command::new("bpftrace").arg("--version").output().is_ok();
    for engine in [None, Some("perf")] {
        // bpftrace starts first and stops last: its window holds rprof's.
        let theirs = have_bpftrace.then(|| {
            bpftrace_bg(
                "tracepoint:sock:inet_sock_set_state { printf(\"T %d %d %s %s %s %s %d %d\\n\", \
                 args->oldstate, args->newstate, ntop(args->saddr), ntop(args->daddr), ntop(args->saddr_v6), \
                 ntop(args->daddr_v6), args->sport, args->dport); }",
            )
        });
        let mut cmd = rprof();
        cmd.args(["probe", "t:sock:inet_sock_set_state", "--trace"]);
        match engine {
            Some(e) => cmd.env("RPROF_PROBE_ENGINE", e),
            None => cmd.env_remove("RPROF_PROBE_ENGINE"),
        };
        let ours = Tracer::start(&mut cmd, "Ctrl-C to end");
        let run = Command::new(python).arg(&script).output().unwrap();
        assert!(run.status.success(), "{run:?}");
        let ports = script_ports(&String::from_utf8_lossy(&run.stdout));
        let out = ours.stop();
        let reference = theirs.map(|t| bpftrace_changes(&t.stop(), &ports));
        let lines: Vec<BTreeMap<String, String>> = out
            .lines()
            .filter_map(|l| trace_values(l, ev))
            .filter(|v| ports.contains(&v["sport"]) || ports.contains(&v["dport"]))
            .collect();
        // Both connections: a listener, a connect, an accept and the closes of each side.
        let on = |family: &str, new: &str| {
            lines
                .iter()
                .filter(|v| v["family"] == family && v["newstate"] == new)
                .count()
        };
        for family in ["AF_INET", "AF_INET6"] {
            for state in [
                "TCP_LISTEN",
                "TCP_SYN_SENT",
                "TCP_SYN_RECV",
                "TCP_ESTABLISHED",
            ] {
                assert!(
                    on(family, state) >= 1,
                    "{family} {state} ({engine:?}): {out}"
                );
            }
        }
        let v4 = lines
            .iter()
            .find(|v| v["newstate"] == "TCP_SYN_SENT" && v["family"] == "AF_INET");
        let v4 = v4.unwrap();
        assert_eq!(
            (v4["saddr"].as_str(), v4["daddr"].as_str()),
            ("127.0.0.1", "127.0.0.1")
        );
        assert_eq!(v4["daddr_v6"], "::ffff:127.0.0.1", "{v4:?}");
        let v6 = lines
            .iter()
            .find(|v| v["newstate"] == "TCP_SYN_SENT" && v["family"] == "AF_INET6");
        let v6 = v6.unwrap();
        assert_eq!(
            (v6["saddr_v6"].as_str(), v6["daddr_v6"].as_str()),
            ("::1", "::1")
        );
        assert_eq!(v6["protocol"], "IPPROTO_TCP");
        if let Some(want) = &reference {
            let mut got: Vec<Change> = lines
                .iter()
                .map(|v| {
                    [
                        "oldstate", "newstate", "saddr", "daddr", "saddr_v6", "daddr_v6",
                    ]
                    .map(|k| v[k].clone())
                })
                .collect();
            got.sort();
            assert_eq!(&got, want, "rprof ({engine:?}) against bpftrace");
        }
    }
    if !have_bpftrace {
        skip(
            "socket_states_and_addresses (bpftrace part)",
            "bpftrace is not installed",
        );
    }
}

/// Check that a filter takes an enum value by the name the event's print format gives it
/// (`newstate == TCP_SYN_SENT`), puts it into the kernel as the number, and keeps exactly the connects of the
/// loopback script (one on 127.0.0.1, one on ::1), on both engines; a name the format does not have is an error
/// that lists the names it has.
#[test]
fn filter_by_enum_name() {
    let Some((_dir, python, script)) = loopback("filter_by_enum_name") else {
        return;
    };
    let script_s = script.to_str().unwrap();
    let spec = "t:sock:inet_sock_set_state(family, newstate) if newstate == TCP_SYN_SENT";
    for engine in [None, Some("perf")] {
        let (out, _) = probe(&[spec, "--trace", "--", python, script_s], engine);
        let lines: Vec<BTreeMap<String, String>> = out
            .lines()
            .filter_map(|l| trace_values(l, "sock:inet_sock_set_state"))
            .collect();
        let families: Vec<&str> = lines.iter().map(|v| v["family"].as_str()).collect();
        assert_eq!(families, ["AF_INET", "AF_INET6"], "({engine:?}) {out}");
        assert!(
            lines.iter().all(|v| v["newstate"] == "TCP_SYN_SENT"),
            "{out}"
        );
    }
    let (listed, _) = probe(&[spec, "-l"], None);
    assert!(listed.contains("newstate == 2"), "{listed}");
    let out = rprof()
        .args([
            "probe",
            "t:sock:inet_sock_set_state if newstate == TCP_NOSUCH",
            "-l",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("`TCP_NOSUCH` is not a name of `newstate`'s values")
            && err.contains("TCP_SYN_SENT"),
        "{err}"
    );
}

/// strace's openat results of `cmd`: (path, error name or "ok").
fn strace_opens(cmd: &[&str]) -> Vec<(String, String)> {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("strace.txt");
    let st = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=openat", "-o"])
        .arg(&log)
        .args(cmd)
        .status()
        .expect("run strace");
    assert!(!st.success(), "strace {cmd:?}: the open should fail");
    let text = std::fs::read_to_string(log).unwrap();
    let mut opens: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| {
            let path = l.split_once("openat(")?.1.split('"').nth(1)?.to_string();
            let ret = l.rsplit_once(" = ")?.1;
            let result = match ret.strip_prefix("-1 ") {
                Some(e) => e.split_whitespace().next()?.to_string(),
                None => "ok".to_string(),
            };
            Some((path, result))
        })
        .collect();
    opens.sort();
    opens
}

/// Check that a failed open shows its error by name as strace does (`= -2 ENOENT`), with the raw number
/// beside the name in `--trace-out`'s JSON, and that the opens of `cat` of a missing file and their results
/// equal strace's.
#[test]
fn failed_open_shows_its_errno() {
    if !privileged("failed_open_shows_its_errno") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-file");
    let missing = missing.to_str().unwrap();
    let json = dir.path().join("trace.json");
    let cmd = ["/bin/cat", missing];
    let spec = "syscall:openat(filename:str) ret";
    let mut args = vec![spec, "--trace", "--trace-out", json.to_str().unwrap(), "--"];
    args.extend(cmd);
    // rprof exits with cat's status (1: the file is missing).
    let run = rprof().arg("probe").args(&args).output().unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "rprof {args:?}: {err}");
    let want = format!("filename=\"{missing}\") = -2 ENOENT");
    assert!(out.lines().any(|l| l.ends_with(&want)), "{want} in {out}");
    let trace = std::fs::read_to_string(&json).unwrap();
    assert!(
        trace.contains("\"ret\":\"-2 ENOENT\"") && trace.contains("\"ret_raw\":-2"),
        "{trace}"
    );
    let have_strace = Command::new("strace").arg("-V").output().is_ok();
    if !have_strace {
        skip(
            "failed_open_shows_its_errno (strace part)",
            "strace is not installed",
        );
        return;
    }
    let got: Vec<(String, String)> = out
        .lines()
        .filter_map(|l| {
            let v = trace_values(l, "syscall:openat")?;
            let path = v.get("filename")?.trim_matches('"').to_string();
            let ret = l.rsplit_once(" = ")?.1;
            let result = match ret.split_once(' ') {
                Some((_, name)) => name.to_string(),
                None => "ok".to_string(),
            };
            Some((path, result))
        })
        .collect();
    // rprof shows strings up to 96 characters (then `...`): compare the first 90.
    let cut = |v: Vec<(String, String)>| -> Vec<(String, String)> {
        let mut v: Vec<_> = v
            .into_iter()
            .map(|(p, r)| (p.chars().take(90).collect(), r))
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        cut(got),
        cut(strace_opens(&cmd)),
        "rprof against strace -e trace=openat"
    );
}

/// Check that signals show by name: kill's `sig` (SIGKILL, and 0 as a number) and signal_generate's (to the
/// pid killed; its comm may still be the shell's if the kill comes before the exec).
#[test]
fn signals_by_name() {
    if !privileged("signals_by_name") {
        return;
    }
    let script = "sleep 30 & kill -0 $!; kill -KILL $!; wait";
    let args = [
        "syscall:kill(pid, sig) ret",
        "t:signal:signal_generate",
        "--trace",
        "--",
        "sh",
        "-c",
        script,
    ];
    let (out, _) = probe(&args, None);
    let kills: Vec<BTreeMap<String, String>> = out
        .lines()
        .filter_map(|l| trace_values(l, "syscall:kill"))
        .collect();
    let sigs: Vec<&str> = kills.iter().map(|v| v["sig"].as_str()).collect();
    assert_eq!(sigs, ["0", "SIGKILL"], "{out}");
    let generated = out
        .lines()
        .filter_map(|l| trace_values(l, "signal:signal_generate"))
        .any(|v| v["sig"] == "SIGKILL" && v["pid"] == kills[1]["pid"]);
    assert!(
        generated,
        "signal_generate of SIGKILL to the killed pid in {out}"
    );
}

/// `--csv` rows `EVENT,KEY,COUNT,...`: KEY -> COUNT.
fn keyed(csv: &str) -> BTreeMap<String, u64> {
    csv.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some((f.get(1)?.to_string(), f.get(2)?.parse().ok()?))
        })
        .collect()
}

/// Check that the tracepoint `raw_syscalls:sys_enter` (the events rprof reads many syscalls from) split by its
/// `id` has rows, on both engines: one `execve` (59) and one `exit_group` (231) for `/bin/true`, and as many
/// calls in all as the tracepoint counts without the split.
#[test]
fn raw_syscalls_by_id() {
    if !privileged("raw_syscalls_by_id") {
        return;
    }
    for engine in [None, Some("perf")] {
        let by = [
            "t:raw_syscalls:sys_enter(id)",
            "--by",
            "id",
            "--top",
            "1000",
            "--csv",
            "--",
            "/bin/true",
        ];
        let rows = keyed(&probe(&by, engine).0);
        assert_eq!(
            (rows.get("59"), rows.get("231")),
            (Some(&1), Some(&1)),
            "{engine:?}: {rows:?}"
        );
        let all = ["t:raw_syscalls:sys_enter", "--csv", "--", "/bin/true"];
        let (out, _) = probe(&all, engine);
        let total: u64 = out
            .lines()
            .nth(1)
            .and_then(|l| l.split(',').nth(1)?.parse().ok())
            .unwrap();
        assert_eq!(
            rows.values().sum::<u64>(),
            total,
            "{engine:?}: {rows:?} against {out}"
        );
    }
}
