//! bpftrace's own tools (Debian's /usr/sbin/*.bt) run unchanged by `rprof bt` and by bpftrace at the same time,
//! on a workload whose events are known (fixtures/bt_tools.c, dd, bash...): the same header lines, and for the
//! workload's own events the same lines, keys and counts (system-wide events of other processes aside);
//! sampled counts within physical bounds, runqlat's histogram quantiles within one bucket.
mod common;
use common::{build_c, loopdev::LoopDevice, privileged, rprof};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A tracer in the background: its stdout and stderr gathered apart.
struct Running {
    child: Child,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Start `cmd` and wait (at most 60 s) until its stdout has a line holding `ready` (a tool's BEGIN line,
    /// printed once its probes are attached, by bpftrace as by rprof).
    fn start(cmd: &mut Command, ready: &str) -> Running {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the tracer");
        let gather = |s: Box<dyn Read + Send>, to: &Arc<Mutex<String>>| {
            let to = Arc::clone(to);
            std::thread::spawn(move || {
                for line in BufReader::new(s).lines().map_while(Result::ok) {
                    let mut o = to.lock().unwrap();
                    o.push_str(&line);
                    o.push('\n');
                }
            })
        };
        let (out, err) = (Arc::default(), Arc::default());
        let readers = vec![
            gather(Box::new(child.stdout.take().unwrap()), &out),
            gather(Box::new(child.stderr.take().unwrap()), &err),
        ];
        let r = Running {
            child,
            out,
            err,
            readers,
        };
        let since = Instant::now();
        while !r.out.lock().unwrap().contains(ready) {
            let ended = since.elapsed() > Duration::from_secs(60);
            assert!(!ended, "{cmd:?} never printed `{ready}`: {}", r.err());
            std::thread::sleep(Duration::from_millis(20));
        }
        r
    }

    fn err(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    /// SIGINT (Ctrl-C), as a user ends a tool; SIGKILL after 30 s. Its stdout and its standard error.
    fn stop(mut self) -> (String, String) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let since = Instant::now();
        while self.child.try_wait().ok().flatten().is_none() {
            if since.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let out = self.out.lock().unwrap().clone();
        (out, self.err())
    }
}

/// Run `rprof bt RFILE` and `bpftrace BFILE` together, both attached before `work` runs and stopped a second
/// after it ends: (rprof's stdout, bpftrace's stdout). Their standard errors (lost events, warnings) go to the
/// test's output, which a failing test shows.
fn both(rfile: &str, bfile: &str, ready: &str, work: impl FnOnce()) -> (String, String) {
    let mine = Running::start(rprof().args(["bt", rfile]), ready);
    let theirs = Running::start(Command::new("bpftrace").arg(bfile), ready);
    work();
    std::thread::sleep(Duration::from_secs(1));
    let ((m, mine_err), (t, theirs_err)) = (mine.stop(), theirs.stop());
    println!("rprof bt {rfile}, standard error:\n{mine_err}\nbpftrace {bfile}, standard error:\n{theirs_err}");
    assert!(!m.is_empty(), "rprof bt {rfile}: {mine_err}");
    assert!(!t.is_empty(), "bpftrace {bfile}: {theirs_err}");
    (m, t)
}

/// `both` for a tool run unchanged by each.
fn tool(name: &str, ready: &str, work: impl FnOnce()) -> (String, String) {
    let file = format!("/usr/sbin/{name}.bt");
    both(&file, &file, ready, work)
}

/// The first `n` lines (the header: "Attaching N probes...", then BEGIN's lines).
fn head(text: &str, n: usize) -> Vec<&str> {
    text.lines().take(n).collect()
}

/// The lines whose field `at` (0-based, by white space) is `key`, each without the fields in `drop` (times).
fn lines_of(text: &str, at: usize, key: &str, drop: &[usize]) -> Vec<String> {
    text.lines()
        .filter(|l| l.split_whitespace().nth(at) == Some(key))
        .map(|l| {
            let fields = l.split_whitespace().enumerate();
            let kept = fields.filter(|(i, _)| !drop.contains(i)).map(|(_, f)| f);
            kept.collect::<Vec<_>>().join(" ")
        })
        .collect()
}

/// Run fixtures/bt_tools.c in `mode` (its binary in `dir`); its pid.
fn fixture(dir: &Path, args: &[&str]) -> u32 {
    let bin = dir.join("bt_tools");
    if !bin.exists() {
        build_c(dir, "bt_tools.c", &["-O2"]);
    }
    let mut child = Command::new(&bin).args(args).spawn().unwrap();
    assert!(child.wait().unwrap().success(), "bt_tools {args:?}");
    child.id()
}

/// A line per call of a fixture mode, both tools: header lines equal, the fixture's lines equal (TIME aside:
/// field 0 where `timed`, and a second apart at most). The fixture's lines.
fn compare_fixture_lines(
    name: &str,
    ready: &str,
    header: usize,
    mode: &str,
    timed: bool,
) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    build_c(dir.path(), "bt_tools.c", &["-O2"]);
    let mut pid = 0;
    let d = dir.path().to_str().unwrap().to_string();
    let (mine, theirs) = tool(name, ready, || pid = fixture(dir.path(), &[mode, &d]));
    assert_eq!(
        head(&mine, header),
        head(&theirs, header),
        "{mine}\n{theirs}"
    );
    let (at, drop): (usize, &[usize]) = if timed { (1, &[0]) } else { (0, &[]) };
    let pid = pid.to_string();
    let m = lines_of(&mine, at, &pid, drop);
    assert_eq!(m, lines_of(&theirs, at, &pid, drop), "{mine}\n{theirs}");
    if timed {
        assert_times_close(&mine, &theirs, &pid);
    }
    m
}

/// The TIME column (`HH:MM:SS`) of the fixture's lines is a second apart at most (each prints when it handles
/// the event; a second may turn in between).
fn assert_times_close(mine: &str, theirs: &str, pid: &str) {
    let secs = |text: &str| -> Vec<i64> {
        text.lines()
            .filter(|l| l.split_whitespace().nth(1) == Some(pid))
            .map(|l| {
                let t: Vec<i64> = l[..8].split(':').map(|x| x.parse().unwrap()).collect();
                t[0] * 3600 + t[1] * 60 + t[2]
            })
            .collect()
    };
    for (m, t) in secs(mine).iter().zip(secs(theirs)) {
        assert!(
            (m - t).rem_euclid(86400) <= 1 || (t - m).rem_euclid(86400) <= 1,
            "{mine}\n{theirs}"
        );
    }
}

/// Check killsnoop.bt: the fixture's three kill(2) calls, their signal, target and result, as bpftrace prints.
#[test]
fn killsnoop_as_bpftrace() {
    if !privileged("killsnoop_as_bpftrace") {
        return;
    }
    let lines = compare_fixture_lines("killsnoop", "RESULT", 3, "kill", true);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[1].ends_with("bt_tools 0 999999 -3"), "{lines:?}");
}

/// Check setuids.bt: setuid, setfsuid and setresuid, their arguments and results.
#[test]
fn setuids_as_bpftrace() {
    if !privileged("setuids_as_bpftrace") {
        return;
    }
    let lines = compare_fixture_lines("setuids", "ARGS (RET)", 3, "ids", true);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines[2].contains("setresuid ruid=-1 euid=-1 suid=-1 (0)"),
        "{lines:?}"
    );
}

/// Check statsnoop.bt: statfs and statx of a path that exists (ERR 0) and of one that does not (ENOENT, 2), the
/// path read at the entry.
#[test]
fn statsnoop_as_bpftrace() {
    if !privileged("statsnoop_as_bpftrace") {
        return;
    }
    let lines = compare_fixture_lines("statsnoop", "PATH", 3, "stat", false);
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(
        lines[1].ends_with("bt_tools 2 /nonexistent-bt-tools"),
        "{lines:?}"
    );
    assert!(lines[2].ends_with("bt_tools 0 /etc/passwd"), "{lines:?}");
}

/// Check syncsnoop.bt: each sync call by its tracepoint's name (`probe`).
#[test]
fn syncsnoop_as_bpftrace() {
    if !privileged("syncsnoop_as_bpftrace") {
        return;
    }
    let lines = compare_fixture_lines("syncsnoop", "EVENT", 3, "sync", true);
    let calls = ["fsync", "fdatasync", "syncfs", "sync_file_range", "msync"];
    assert_eq!(lines.len(), calls.len(), "{lines:?}");
    for (l, c) in lines.iter().zip(calls) {
        assert!(
            l.ends_with(&format!("tracepoint:syscalls:sys_enter_{c}")),
            "{lines:?}"
        );
    }
}

/// Check gethostlatency.bt: 5 lookups (getaddrinfo, gethostbyname, gethostbyname2), the host read at the entry
/// and printed at the return; latencies (whole ms) a millisecond apart at most.
#[test]
fn gethostlatency_as_bpftrace() {
    if !privileged("gethostlatency_as_bpftrace") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    build_c(dir.path(), "bt_tools.c", &["-O2"]);
    let mut pid = 0;
    let (mine, theirs) = tool("gethostlatency", "HOST", || {
        pid = fixture(dir.path(), &["gai"])
    });
    assert_eq!(head(&mine, 3), head(&theirs, 3), "{mine}\n{theirs}");
    let pid = pid.to_string();
    let m = lines_of(&mine, 1, &pid, &[0, 3]);
    assert_eq!(m, lines_of(&theirs, 1, &pid, &[0, 3]), "{mine}\n{theirs}");
    assert_eq!(m, vec![format!("{pid} bt_tools localhost"); 5]);
    let lat = |t: &str| -> Vec<i64> {
        let l = t
            .lines()
            .filter(|l| l.split_whitespace().nth(1) == Some(pid.as_str()));
        l.map(|l| l.split_whitespace().nth(3).unwrap().parse().unwrap())
            .collect()
    };
    for (a, b) in lat(&mine).iter().zip(lat(&theirs)) {
        assert!((a - b).abs() <= 1, "{mine}\n{theirs}");
    }
}

/// Check bashreadline.bt: each line an interactive bash reads, by bash's pid.
#[test]
fn bashreadline_as_bpftrace() {
    if !privileged("bashreadline_as_bpftrace") {
        return;
    }
    let mut pid = 0;
    let (mine, theirs) = tool("bashreadline", "COMMAND", || {
        let mut bash = Command::new("/bin/bash")
            .args(["--norc", "--noprofile", "-i"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        pid = bash.id();
        let mut stdin = bash.stdin.take().unwrap();
        std::io::Write::write_all(&mut stdin, b"echo one\necho two three\nexit\n").unwrap();
        drop(stdin);
        bash.wait().unwrap();
    });
    assert_eq!(head(&mine, 3), head(&theirs, 3), "{mine}\n{theirs}");
    let pid = pid.to_string();
    let m = lines_of(&mine, 1, &pid, &[0]);
    assert_eq!(m, lines_of(&theirs, 1, &pid, &[0]), "{mine}\n{theirs}");
    let want = ["echo one", "echo two three", "exit"].map(|c| format!("{pid} {c}"));
    assert_eq!(m, want);
}

/// Check execsnoop.bt: each exec of a shell command line, with its arguments (`join(args->argv)`).
#[test]
fn execsnoop_as_bpftrace() {
    if !privileged("execsnoop_as_bpftrace") {
        return;
    }
    let script = "/bin/echo bt-tools-exec 1 2 >/dev/null; /bin/true bt-tools-exec x y z; exit 0";
    let (mine, theirs) = tool("execsnoop", "ARGS", || {
        let st = Command::new("/bin/sh")
            .args(["-c", script])
            .status()
            .unwrap();
        assert!(st.success());
    });
    assert_eq!(head(&mine, 2), head(&theirs, 2), "{mine}\n{theirs}");
    // TIME(ms) is the time since each tool started: they started apart.
    let execs = |text: &str| -> Vec<String> {
        let l = text.lines().filter(|l| l.contains("bt-tools-exec"));
        l.map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
            .collect()
    };
    let m = execs(&mine);
    assert_eq!(m, execs(&theirs), "{mine}\n{theirs}");
    assert_eq!(m.len(), 3, "{m:?}");
    assert!(m[1].ends_with(" /bin/echo bt-tools-exec 1 2"), "{m:?}");
    assert!(m[2].ends_with(" /bin/true bt-tools-exec x y z"), "{m:?}");
}

/// Check syscount.bt: a process making 100,000 getppid(2) calls is counted exactly alike by both, under its
/// name among the top 10 processes, and getppid (110) among the top 10 syscalls.
#[test]
fn syscount_as_bpftrace() {
    if !privileged("syscount_as_bpftrace") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Its own name: other tests run getppid_n at the same time.
    let bin = dir.path().join("bt_syscount_n");
    std::fs::rename(build_c(dir.path(), "getppid_n.c", &["-O2"]), &bin).unwrap();
    // Paced at 100,000 calls a second (its nanosleeps count too, ~100): rprof reads the events in user space,
    // and an unpaced loop beside a loaded host's other work (a whole-suite run) overflowed its rings (96,057
    // counted of 100,000 while bpftrace, counting in the kernel, had them all).
    let (mine, theirs) = tool("syscount", "Counting syscalls", || {
        let st = Command::new(&bin)
            .args(["100000", "100000"])
            .status()
            .unwrap();
        assert!(st.success());
    });
    assert_eq!(head(&mine, 2), head(&theirs, 2), "{mine}\n{theirs}");
    let value = |text: &str, key: &str| -> u64 {
        let line = text.lines().find(|l| l.starts_with(key));
        let v = line.and_then(|l| l.rsplit(' ').next()?.parse().ok());
        v.unwrap_or_else(|| panic!("no {key}: {text}"))
    };
    let n = value(&mine, "@process[bt_syscount_n]: ");
    assert_eq!(
        n,
        value(&theirs, "@process[bt_syscount_n]: "),
        "{mine}\n{theirs}"
    );
    // The 100,000 calls and the program's start (ld.so, libc) and exit.
    assert!((100_000..101_000).contains(&n), "{mine}");
    assert!(value(&mine, "@syscall[110]: ") >= 100_000, "{mine}");
    assert!(value(&theirs, "@syscall[110]: ") >= 100_000, "{theirs}");
}

/// Check pidpersec.bt: 50 forks of a shell loop are among each tool's per-second counts, printed as bpftrace
/// prints them, and END's `clear(@)` leaves `@: 0`.
#[test]
fn pidpersec_as_bpftrace() {
    if !privileged("pidpersec_as_bpftrace") {
        return;
    }
    let (mine, theirs) = tool("pidpersec", "Tracing new processes", || {
        let forks = "for i in $(seq 50); do /bin/true; done";
        assert!(Command::new("/bin/sh")
            .args(["-c", forks])
            .status()
            .unwrap()
            .success());
        std::thread::sleep(Duration::from_millis(1500));
    });
    assert_eq!(head(&mine, 2), head(&theirs, 2), "{mine}\n{theirs}");
    let total = |text: &str| -> u64 {
        let counts = text.lines().filter_map(|l| {
            let (time, n) = l.split_once(" PIDs/sec: @: ")?;
            assert_eq!(time.len(), 8, "{l}");
            n.parse::<u64>().ok()
        });
        counts.sum()
    };
    assert!(total(&mine) >= 50, "{mine}");
    assert!(total(&theirs) >= 50, "{theirs}");
    assert!(mine.ends_with("\n\n\n@: 0\n"), "{mine:?}");
    assert!(theirs.ends_with("\n\n\n@: 0\n"), "{theirs:?}");
}

/// Check cpuwalk.bt: a spinner pinned to one CPU for 1 s of its CPU time is sampled on that CPU at 99 Hz by
/// each (at least 85 samples: 99 per second of the CPU's busy time, with timer slack), and the histogram
/// prints as bpftrace prints it.
#[test]
fn cpuwalk_as_bpftrace() {
    if !privileged("cpuwalk_as_bpftrace") {
        return;
    }
    let cpu = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    let spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass\n";
    let (mine, theirs) = tool("cpuwalk", "Sampling CPU", || {
        let st = Command::new("taskset")
            .args(["-c", &cpu.to_string(), "python3", "-c", spin])
            .status()
            .unwrap();
        assert!(st.success());
    });
    assert_eq!(head(&mine, 2), head(&theirs, 2), "{mine}\n{theirs}");
    let label = format!("[{cpu}, {})", cpu + 1);
    for out in [&mine, &theirs] {
        let line = out.lines().find(|l| l.starts_with(&label));
        let n: u64 = line
            .and_then(|l| l.split_whitespace().nth(2)?.parse().ok())
            .unwrap_or(0);
        assert!(n >= 85, "{n} samples on CPU {cpu}:\n{out}");
        assert!(out.contains("\n@cpu: \n"), "{out}");
    }
}

/// One map's lines in bpftrace's output (`@[dd]: ` to its empty line).
fn map_block(text: &str, key: &str) -> Vec<String> {
    let lines = text
        .lines()
        .skip_while(|l| *l != key)
        .take_while(|l| !l.is_empty());
    lines.map(str::to_string).collect()
}

/// Check bitesize.bt: 64 direct 4 KB writes to a loop device by a dd named for the test, one histogram of their
/// sizes, equal in both.
#[test]
fn bitesize_as_bpftrace() {
    if !privileged("bitesize_as_bpftrace") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dd = dir.path().join("bitesize_dd");
    std::fs::copy("/bin/dd", &dd).unwrap();
    let loopdev = match LoopDevice::new() {
        Ok(d) => d,
        Err(e) => return common::skip("bitesize_as_bpftrace", &e),
    };
    let of = format!("of={}", loopdev.dev);
    let (mine, theirs) = tool("bitesize", "Tracing block device I/O", || {
        let args = [
            "if=/dev/zero",
            &of,
            "bs=4k",
            "count=64",
            "oflag=direct",
            "status=none",
        ];
        assert!(Command::new(&dd).args(args).status().unwrap().success());
    });
    assert_eq!(head(&mine, 2), head(&theirs, 2), "{mine}\n{theirs}");
    let m = map_block(&mine, "@[bitesize_dd]: ");
    assert_eq!(
        m,
        map_block(&theirs, "@[bitesize_dd]: "),
        "{mine}\n{theirs}"
    );
    let at = m.iter().find(|l| l.starts_with("[4K, 8K)"));
    let n: u64 = at
        .and_then(|l| l.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or(0);
    assert!(n >= 64, "{m:?}");
}

/// Check writeback.bt: a file written and `sync`ed starts the flusher's writeback of its device, reason `sync`:
/// the same device, pages and reason in both, latencies a millisecond apart at most.
#[test]
fn writeback_as_bpftrace() {
    if !privileged("writeback_as_bpftrace") {
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let file = dir.path().join("dirty");
    let (mine, theirs) = tool("writeback", "REASON", || {
        std::fs::write(&file, vec![7u8; 8 << 20]).unwrap();
        assert!(Command::new("sync").status().unwrap().success());
    });
    assert_eq!(head(&mine, 3), head(&theirs, 3), "{mine}\n{theirs}");
    let syncs = |text: &str| -> Vec<(String, f64)> {
        let l = text
            .lines()
            .filter(|l| l.split_whitespace().nth(3) == Some("sync"));
        l.map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[1..4].join(" "), f[4].parse().unwrap())
        })
        .collect()
    };
    let (m, t) = (syncs(&mine), syncs(&theirs));
    assert!(!m.is_empty(), "{mine}");
    let keys = |v: &[(String, f64)]| v.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
    assert_eq!(keys(&m), keys(&t), "{mine}\n{theirs}");
    for (a, b) in m.iter().zip(&t) {
        assert!((a.1 - b.1).abs() <= 1.0, "{mine}\n{theirs}");
    }
}

/// The bucket (its index from the first line) holding quantile `q` of a histogram's counts.
fn quantile_bucket(hist: &[(String, u64)], q: f64) -> usize {
    let total: u64 = hist.iter().map(|b| b.1).sum();
    let mut seen = 0;
    for (i, (_, n)) in hist.iter().enumerate() {
        seen += n;
        if seen as f64 >= q * total as f64 {
            return i;
        }
    }
    hist.len()
}

/// A `hist` map's buckets: (label, count).
fn buckets(text: &str, map: &str) -> Vec<(String, u64)> {
    let block = map_block(text, map);
    let rows = block.iter().skip(1).filter_map(|l| {
        let (label, rest) = l.split_at(l.find([')', ']'])? + 1);
        Some((
            label.to_string(),
            rest.split_whitespace().next()?.parse().ok()?,
        ))
    });
    rows.collect()
}

/// Check runqlat.bt, run unchanged (TASK_RUNNING from rprof's table), against bpftrace running it with
/// `#define TASK_RUNNING 0` for its `#include` (it cannot compile the include here: no kernel headers): a
/// fixture's 1,000 sleeps that wait in the run queue behind two busy loops on one CPU are in each histogram,
/// and the median and 90th percentile of the waits from 256 us up fall within one bucket of bpftrace's.
#[test]
fn runqlat_as_bpftrace_with_its_define() {
    if !privileged("runqlat_as_bpftrace_with_its_define") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "runqueue.c", &["-O2"]);
    let text = std::fs::read_to_string("/usr/sbin/runqlat.bt").unwrap();
    assert!(text.contains("#include <linux/sched.h>"));
    let defined = dir.path().join("runqlat.bt");
    std::fs::write(
        &defined,
        text.replace("#include <linux/sched.h>", "#define TASK_RUNNING 0"),
    )
    .unwrap();
    let cpu = (std::thread::available_parallelism().map_or(1, |n| n.get()) - 1).to_string();
    let ready = "Tracing CPU scheduler";
    let (mine, theirs) = both(
        "/usr/sbin/runqlat.bt",
        defined.to_str().unwrap(),
        ready,
        || {
            let out = Command::new(&bin)
                .args([cpu.as_str(), "1000", "10"])
                .output()
                .unwrap();
            assert!(out.status.success());
        },
    );
    assert_eq!(head(&mine, 2), head(&theirs, 2), "{mine}\n{theirs}");
    let (m, t) = (buckets(&mine, "@usecs: "), buckets(&theirs, "@usecs: "));
    for h in [&m, &t] {
        assert!(
            h.iter().map(|b| b.1).sum::<u64>() >= 1000,
            "{mine}\n{theirs}"
        );
    }
    // The fixture's waits (a time slice of the busy loops: milliseconds) against the other processes' (mostly
    // microseconds, and which of them each tool sees differs: each sees the other start and end): the
    // quantiles of the waits from 256 us up, where the fixture's are most.
    let slow = |h: &[(String, u64)]| -> Vec<(String, u64)> {
        h.iter()
            .filter(|b| log2_bucket(&b.0) >= 9)
            .cloned()
            .collect()
    };
    let (m, t) = (slow(&m), slow(&t));
    let label = |h: &[(String, u64)], q: f64| h.get(quantile_bucket(h, q)).map(|b| b.0.clone());
    for q in [0.5, 0.9] {
        let (a, b) = (label(&m, q).unwrap(), label(&t, q).unwrap());
        let apart = log2_bucket(&a).abs_diff(log2_bucket(&b));
        assert!(apart <= 1, "q{q}: {a} vs {b}\n{mine}\n{theirs}");
    }
}

/// A log2 histogram label's bucket number: `[0]` 0, `[1]` 1, `[2, 4)` 2, `[4K, 8K)` 13; `(..., 0)` -1.
fn log2_bucket(label: &str) -> i64 {
    let inner = label.trim_start_matches(['[', '(']);
    let first = inner.split([',', ']', ')']).next().unwrap_or("").trim();
    let (num, mult) = match first.chars().last() {
        Some('K') => (&first[..first.len() - 1], 1u64 << 10),
        Some('M') => (&first[..first.len() - 1], 1 << 20),
        Some('G') => (&first[..first.len() - 1], 1 << 30),
        _ => (first, 1),
    };
    match num.parse::<u64>() {
        Ok(n) => i64::from(64 - (n * mult).leading_zeros()),
        Err(_) => -1,
    }
}
