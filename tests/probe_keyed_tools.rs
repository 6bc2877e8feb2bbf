//! The keyed state bcc's runqlat and tcplife need (issue 31 item 5), against references on the same workload:
//! runqlat's several STARTs (`sched_wakeup`, `sched_wakeup_new`, and a `sched_switch` of a still-runnable task,
//! `R` or preempted `R+`) count the preempted waits of two busy loops sharing one CPU as the kernel's
//! involuntary context switches do; tcplife's START and DONE on one event (`inet_sock_set_state`, told apart by
//! their filters) time each loopback connection as a bpftrace one-liner on the same tracepoint does, with the
//! opener's comm, pid and ports.
//! Needs root and tracefs (and bpftrace for tcplife); skips with a reason elsewhere, and fails under
//! RPROF_REQUIRE_PRIVILEGED=1.
mod common;
use common::{build_c, privileged, rprof, skip};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// runqlat as `rprof tool runqlat` runs it (docs/probe.md, Pairs by key).
const RUNQLAT_PAIR: &str = "t:sched:sched_wakeup | t:sched:sched_wakeup_new \
     | t:sched:sched_switch if prev_state == R || prev_state == \"R+\", t:sched:sched_switch";
const RUNQLAT_KEY: &str = "pid|prev_pid=next_pid";

/// tcplife: a TCP socket from SYN_SENT (connect) or SYN_RECV (accept) to CLOSE, keyed by the socket; the
/// addresses and ports from CLOSE (at SYN_SENT the local port is not chosen yet: `sport=0`), the process from
/// the START.
const TCPLIFE_PAIR: &str = "t:sock:inet_sock_set_state \
     if protocol == IPPROTO_TCP && (newstate == TCP_SYN_SENT || newstate == TCP_SYN_RECV), \
     t:sock:inet_sock_set_state(family, saddr, sport, daddr, dport, saddr_v6, daddr_v6) \
     if protocol == IPPROTO_TCP && newstate == TCP_CLOSE";

/// Check the runqlat bar: two busy loops pinned to one CPU, each preempted about every slice; the
/// pair's waits per loop (keyed by the task switched in) equal the loop's `nonvoluntary_ctxt_switches` over
/// its run within 10% (the waits also hold its first run after fork, from `sched_wakeup_new`, and the
/// preemptions before its first and after its last read of /proc).
#[test]
fn runqlat_counts_preempted_waits() {
    if !privileged("runqlat_counts_preempted_waits") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "preempted.c", &["-O2"]);
    let args = [
        "probe",
        "--json",
        "--pair",
        RUNQLAT_PAIR,
        "--key",
        RUNQLAT_KEY,
        "--by",
        "done.next_pid",
        "--top",
        "100000",
        "--",
        bin.to_str().unwrap(),
        "0",
        "1500",
    ];
    let out = rprof().args(args).output().expect("run rprof");
    common::assert_success(&out, &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = json_report(&stdout);
    let loops: Vec<(String, u64)> = stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.strip_prefix("loop ")?.split_whitespace().collect();
            Some((f[0].to_string(), f[1].parse().ok()?))
        })
        .collect();
    assert_eq!(loops.len(), 2, "{stdout}");
    for (pid, switches) in loops {
        assert!(switches >= 100, "loop {pid}: only {switches} preemptions");
        let waits = report["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["key"].as_str() == Some(pid.as_str()))
            .and_then(|f| f["paired"].as_u64())
            .unwrap_or_else(|| panic!("no row for loop {pid} in {report}"));
        let diff = waits.abs_diff(switches) as f64;
        assert!(
            diff <= switches as f64 * 0.10,
            "loop {pid}: {waits} waits counted against {switches} involuntary switches ({})",
            report["keyed"]
        );
    }
}

/// The JSON report of a probe run (the last line of stdout that is a JSON object).
fn json_report(stdout: &str) -> serde_json::Value {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON report in:\n{stdout}"));
    serde_json::from_str(line).expect("the report is JSON")
}

/// A child killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free TCP port on the loopback.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `python3 -m http.server` on `addr`, once it answers.
fn http_server(addr: &str, port: u16, dir: &std::path::Path) -> Killed {
    let child = Command::new("python3")
        .args(["-m", "http.server", "--bind", addr, &port.to_string()])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run python3 -m http.server");
    let server = Killed(child);
    let target = match addr.contains(':') {
        true => format!("[{addr}]:{port}"),
        false => format!("{addr}:{port}"),
    };
    for _ in 0..100 {
        if std::net::TcpStream::connect(&target).is_ok() {
            return server;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the HTTP server on {target} did not start");
}

/// One lifespan as each tool saw it: (local port, remote port) -> ns.
type Spans = HashMap<(u16, u16), u64>;

/// Check the tcplife bar: curl's connections to a local HTTP server on 127.0.0.1 and ::1, timed by
/// rprof's recipe and by a bpftrace one-liner on the same tracepoint at the same time: every socket's lifespan
/// equals bpftrace's within 10% or 50 us; the client sockets name curl, with its pid and ports, the server's
/// (born in softirq) no process.
#[test]
fn tcplife_matches_bpftrace() {
    if !privileged("tcplife_matches_bpftrace") {
        return;
    }
    if Command::new("bpftrace").arg("--version").output().is_err() {
        skip("tcplife_matches_bpftrace", "bpftrace is not installed");
        return;
    }
    if Command::new("curl").arg("--version").output().is_err() {
        skip("tcplife_matches_bpftrace", "curl is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), "hello\n").unwrap();
    let (p4, p6) = (free_port(), free_port());
    let _s4 = http_server("127.0.0.1", p4, dir.path());
    let _s6 = http_server("::1", p6, dir.path());
    let script = "tracepoint:sock:inet_sock_set_state \
        /args->protocol == 6 && (args->newstate == 2 || args->newstate == 3)/ { @b[args->skaddr] = nsecs; } \
        tracepoint:sock:inet_sock_set_state /args->protocol == 6 && args->newstate == 7 && @b[args->skaddr]/ \
        { printf(\"span %d %d %lld\\n\", args->sport, args->dport, nsecs - @b[args->skaddr]); \
        delete(@b[args->skaddr]); }";
    let mut bt = Killed(
        Command::new("bpftrace")
            .args(["-e", script])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run bpftrace"),
    );
    let mut bt_out = BufReader::new(bt.0.stdout.take().unwrap());
    let mut line = String::new();
    bt_out.read_line(&mut line).unwrap();
    assert!(line.starts_with("Attaching"), "bpftrace said: {line}");
    let trace = dir.path().join("tcplife.json");
    let workload = format!(
        "for i in 1 2 3 4 5 6 7 8 9 10; do curl -s http://127.0.0.1:{p4}/ >/dev/null; \
         curl -s -g 'http://[::1]:{p6}/' >/dev/null; done; sleep 0.2"
    );
    let args = [
        "probe",
        "--pair",
        TCPLIFE_PAIR,
        "--key",
        "skaddr",
        "--trace-out",
        trace.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &workload,
    ];
    let out = rprof().args(args).output().expect("run rprof");
    common::assert_success(&out, &args);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(bt.0.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let mut reference = Spans::new();
    for l in bt_out.lines().map_while(Result::ok) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if let ["span", sport, dport, ns] = f.as_slice() {
            let key = (sport.parse().unwrap(), dport.parse().unwrap());
            reference.insert(key, ns.parse().unwrap());
        }
    }
    let text = std::fs::read_to_string(&trace).unwrap();
    let events: Vec<serde_json::Value> = serde_json::from_str(&text).expect("the trace is JSON");
    let mut seen = 0;
    let mut curl_sockets = 0;
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let a = &e["args"];
        let port = |n: &str| a[n].as_u64().unwrap_or_else(|| panic!("no {n} in {e}")) as u16;
        let (sport, dport) = (port("sport"), port("dport"));
        if ![p4, p6].contains(&sport) && ![p4, p6].contains(&dport) {
            continue;
        }
        seen += 1;
        let ns = (e["dur"].as_f64().unwrap() * 1e3) as u64;
        let theirs = *reference
            .get(&(sport, dport))
            .unwrap_or_else(|| panic!("bpftrace has no socket {sport}->{dport}: {reference:?}"));
        let diff = ns.abs_diff(theirs) as f64;
        assert!(
            diff <= 50_000.0 || diff <= theirs as f64 * 0.10,
            "socket {sport}->{dport}: {ns} ns against bpftrace's {theirs} ns"
        );
        // The client's socket: born in curl's connect(), named by it; the server's, born in softirq: none.
        if [p4, p6].contains(&dport) {
            assert_eq!(a["comm"].as_str(), Some("curl"), "{e}");
            assert!(a["pid"].as_u64().is_some(), "{e}");
            let v6 = dport == p6;
            let addr = if v6 { &a["daddr_v6"] } else { &a["daddr"] };
            let want = if v6 { "::1" } else { "127.0.0.1" };
            assert_eq!(addr.as_str(), Some(want), "{e}");
            curl_sockets += 1;
        } else {
            assert!(
                a.get("comm").is_none(),
                "a server socket has no opener: {e}"
            );
        }
    }
    // 20 connections, each a client and a server socket.
    assert_eq!(seen, 40, "{text}");
    assert_eq!(curl_sockets, 20);
}
