// Live tests of `rprof probe` on real programs built from `fixtures/` (needs root and uprobes), included by
// tests/probe_live*.rs, each of which sets ENGINE (None: rprof's own choice) for every rprof it runs.
// Without privileges they skip with a reason, unless RPROF_REQUIRE_PRIVILEGED=1 makes them fail.
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const RPROF: &str = env!("CARGO_BIN_EXE_rprof");

/// `rprof` with this suite's engine (`RPROF_PROBE_ENGINE`), or its own choice.
fn rprof_cmd() -> Command {
    let mut c = Command::new(RPROF);
    match ENGINE {
        Some(e) => c.env("RPROF_PROBE_ENGINE", e),
        None => c.env_remove("RPROF_PROBE_ENGINE"),
    };
    c
}

/// Why these tests cannot run here, if they cannot.
fn missing_privilege() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not root".into());
    }
    let t = Path::new("/sys/kernel/tracing");
    let mounted = t.join("uprobe_events").exists()
        || Command::new("mount")
            .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
            .status()
            .is_ok_and(|s| s.success());
    if !mounted || !t.join("uprobe_events").exists() {
        return Some("no tracefs with uprobe_events".into());
    }
    None
}

/// True when the test may run; otherwise it skips (see [`common::skip`]).
fn privileged(test: &str) -> bool {
    match missing_privilege() {
        None => true,
        Some(why) => {
            common::skip(test, &why);
            false
        }
    }
}

struct Fixtures {
    _dir: tempfile::TempDir,
    c: PathBuf,
    cpp: PathBuf,
    rust_legacy: PathBuf,
    rust_v0: PathBuf,
    go_marker: PathBuf,
}

fn build(cmd: &mut Command) {
    let out = cmd.output().expect("run the compiler");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The fixtures, built once per test binary into a temp dir.
fn fixtures() -> &'static Fixtures {
    static F: OnceLock<Fixtures> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let d = dir.path();
        let c = d.join("probe_fixture");
        build(
            Command::new("cc")
                .args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-o"])
                .arg(&c)
                .arg(src.join("probe_fixture.c")),
        );
        let cpp = d.join("probe_cpp");
        build(
            Command::new("c++")
                .args(["-O1", "-o"])
                .arg(&cpp)
                .arg(src.join("probe_cpp.cpp")),
        );
        let rust_legacy = d.join("probe_rust_legacy");
        build(
            Command::new("rustc")
                .args(["-O", "--crate-name", "probe_rust", "-o"])
                .arg(&rust_legacy)
                .arg(src.join("probe_rust.rs")),
        );
        let rust_v0 = d.join("probe_rust_v0");
        build(
            Command::new("rustc")
                .args([
                    "-O",
                    "--crate-name",
                    "probe_rust",
                    "-C",
                    "symbol-mangling-version=v0",
                    "-o",
                ])
                .arg(&rust_v0)
                .arg(src.join("probe_rust.rs")),
        );
        let go_marker = d.join("probe_go_marker");
        build(
            Command::new("cc")
                .arg("-o")
                .arg(&go_marker)
                .arg(src.join("probe_go_marker.c")),
        );
        Fixtures {
            _dir: dir,
            c,
            cpp,
            rust_legacy,
            rust_v0,
            go_marker,
        }
    })
}

/// The probe lines of group `rprof_<pid>` still in uprobe_events, and its tracefs instance if it is still there.
fn leftover(pid: u32) -> Vec<String> {
    let text = std::fs::read_to_string("/sys/kernel/tracing/uprobe_events").unwrap_or_default();
    let tag = format!(":rprof_{pid}/");
    let mut left: Vec<String> = text
        .lines()
        .filter(|l| l.contains(&tag))
        .map(str::to_string)
        .collect();
    let instance = format!("/sys/kernel/tracing/instances/rprof_{pid}");
    if Path::new(&instance).exists() {
        left.push(instance);
    }
    left
}

/// Start `rprof probe -x C func_a -- C wait 1 0` (a fixture that waits until killed) and wait until its group
/// is in tracefs.
fn spawn_waiting_probe(f: &Fixtures, stderr: Stdio) -> std::process::Child {
    let child = rprof_cmd()
        .args([
            "probe",
            "-x",
            path(&f.c),
            "func_a",
            "--",
            path(&f.c),
            "wait",
            "1",
            "0",
        ])
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while leftover(child.id()).is_empty() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Run rprof with `args`, check that it left no probe behind, and return its output.
fn rprof(args: &[&str]) -> Output {
    rprof_cpu(args).0
}

/// [`rprof`], with the CPU time rprof and its workload used (see [`common::output_and_cpu_time`]).
fn rprof_cpu(args: &[&str]) -> (Output, Duration) {
    let child = rprof_cmd()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (out, cpu) = common::output_and_cpu_time(child);
    assert_eq!(
        leftover(pid),
        Vec::<String>::new(),
        "rprof {args:?} left probes behind"
    );
    (out, cpu)
}

fn ok(args: &[&str]) -> String {
    ok_cpu(args).0
}

/// [`ok`], with the CPU time rprof and its workload used.
fn ok_cpu(args: &[&str]) -> (String, Duration) {
    let (out, cpu) = rprof_cpu(args);
    assert!(
        out.status.success(),
        "rprof {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (String::from_utf8(out.stdout).unwrap(), cpu)
}

/// CSV rows by function name: count, total_us, self_us, avg_us, min_us, max_us (then timing_lost, not kept).
fn csv_rows(text: &str) -> Vec<(String, u64, [f64; 5])> {
    text.lines()
        .skip_while(|l| !l.starts_with("function,"))
        .skip(1)
        .filter(|l| !l.is_empty() && l.contains(','))
        .map(|l| {
            let f: Vec<&str> = l.rsplitn(8, ',').collect();
            let v = |i: usize| f[i].parse::<f64>().unwrap();
            (
                f[7].to_string(),
                f[6].parse().unwrap(),
                [v(5), v(4), v(3), v(2), v(1)],
            )
        })
        .collect()
}

fn row<'a>(rows: &'a [(String, u64, [f64; 5])], name: &str) -> &'a (String, u64, [f64; 5]) {
    rows.iter()
        .find(|r| r.0 == name)
        .unwrap_or_else(|| panic!("no row {name} in {rows:?}"))
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Check that counts are exact for two functions, and for 4 threads calling one.
#[test]
fn counts_are_exact() {
    if !privileged("counts_are_exact") {
        return;
    }
    let f = fixtures();
    let out = ok(&[
        "probe",
        "-x",
        path(&f.c),
        "func_*",
        "--csv",
        "--",
        path(&f.c),
        "counts",
        "1234",
        "567",
    ]);
    let rows = csv_rows(&out);
    assert_eq!(row(&rows, "func_a").1, 1234, "{out}");
    assert_eq!(row(&rows, "func_b").1, 567, "{out}");
    assert_eq!(rows.len(), 2);
    let out = ok(&[
        "probe",
        "-x",
        path(&f.c),
        "func_a",
        "--csv",
        "--",
        path(&f.c),
        "threads",
        "4",
        "3000",
    ]);
    assert_eq!(row(&csv_rows(&out), "func_a").1, 4 * 3000, "{out}");
}

/// Check that a 10 ms sleeper averages at least 10 ms and at most what the fixture's own clock measured around
/// the 20 calls (a busy machine wakes sleepers late, so no fixed upper bound), that the caller's TOTAL is within
/// 2% of the fixture's clock, and that TOTAL covers the sleeper while SELF excludes it.
#[test]
fn durations_are_right() {
    if !privileged("durations_are_right") {
        return;
    }
    let f = fixtures();
    let out = ok(&[
        "probe",
        "-x",
        path(&f.c),
        "outer",
        "sleeper",
        "--csv",
        "--",
        path(&f.c),
        "sleep",
        "20",
        "10",
    ]);
    let rows = csv_rows(&out);
    let s = row(&rows, "sleeper");
    let o = row(&rows, "outer");
    assert_eq!((s.1, o.1), (20, 1));
    // The fixture prints `outer_ns N`, its own clock around outer().
    let outer_us = out
        .lines()
        .find_map(|l| l.strip_prefix("outer_ns "))
        .and_then(|n| n.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no outer_ns line: {out}"))
        / 1000.0;
    assert!(
        s.2[2] >= 10_000.0 && s.2[2] * 20.0 <= outer_us,
        "sleeper avg {} us, the fixture measured {outer_us} us for 20 calls",
        s.2[2]
    );
    assert!(
        (o.2[0] - outer_us).abs() <= outer_us * 0.02,
        "outer total {} us, the fixture measured {outer_us} us",
        o.2[0]
    );
    assert!(
        o.2[0] >= s.2[0],
        "outer total {} < sleeper total {}",
        o.2[0],
        s.2[0]
    );
    assert!(
        o.2[1] < o.2[0] - s.2[0] * 0.99,
        "outer self {} should exclude sleeper {}",
        o.2[1],
        s.2[0]
    );
    assert!(o.2[1] < 5_000.0, "outer self {} us", o.2[1]);
}

/// Check that fib(20) has exactly 21891 calls and the outermost call matches the fixture's own clock.
#[test]
fn recursion_is_exact() {
    if !privileged("recursion_is_exact") {
        return;
    }
    let f = fixtures();
    let out = ok(&[
        "probe",
        "-x",
        path(&f.c),
        "fib",
        "--csv",
        "--",
        path(&f.c),
        "fib",
        "20",
    ]);
    let fib = row(&csv_rows(&out), "fib").clone();
    assert_eq!(fib.1, 21891);
    let own_ns: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("fib 6765 ns "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let max_us = fib.2[4];
    let ratio = max_us * 1000.0 / own_ns;
    assert!(
        (0.95..1.05).contains(&ratio),
        "outermost fib {max_us} us vs fixture {own_ns} ns"
    );
}

/// Check that longjmp out of probed functions counts unpaired calls and later calls still pair.
#[test]
fn longjmp_counts_unpaired() {
    if !privileged("longjmp_counts_unpaired") {
        return;
    }
    let f = fixtures();
    let out = ok(&[
        "probe",
        "-x",
        path(&f.c),
        "func_a",
        "jumper",
        "deep",
        "--json",
        "--",
        path(&f.c),
        "longjmp",
        "50",
    ]);
    let json = out.lines().find(|l| l.starts_with('{')).unwrap();
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    let funcs = v["functions"].as_array().unwrap();
    let get = |n: &str| funcs.iter().find(|f| f["function"] == n).unwrap().clone();
    assert_eq!(get("func_a")["count"], 50);
    assert_eq!(get("func_a")["paired"], 50);
    assert_eq!(get("jumper")["count"], 50);
    assert_eq!(get("jumper")["paired"], 0);
    assert_eq!(get("deep")["unpaired"], 50);
    assert_eq!(v["unpaired"], 100);
}

/// Check that C++ (`ns::Klass::*`) and Rust (`crate::module::*`, legacy and v0) give exact demangled counts.
#[test]
fn cpp_and_rust_names() {
    if !privileged("cpp_and_rust_names") {
        return;
    }
    let f = fixtures();
    let out = ok(&[
        "probe",
        "-x",
        path(&f.cpp),
        "ns::Klass::*",
        "--csv",
        "--",
        path(&f.cpp),
        "300",
        "200",
    ]);
    let rows = csv_rows(&out);
    assert_eq!(row(&rows, "ns::Klass::work").1, 300, "{out}");
    assert_eq!(row(&rows, "ns::Klass::helper").1, 200, "{out}");
    for bin in [&f.rust_legacy, &f.rust_v0] {
        let out = ok(&[
            "probe",
            "-x",
            path(bin),
            "probe_rust::module::*",
            "--csv",
            "--",
            path(bin),
            "300",
            "200",
        ]);
        let rows = csv_rows(&out);
        assert_eq!(row(&rows, "probe_rust::module::work").1, 300, "{out}");
        assert_eq!(
            row(&rows, "probe_rust::module::inner::helper").1,
            200,
            "{out}"
        );
    }
}

/// Check that `c:malloc` counts at least the fixture's mallocs.
#[test]
fn libc_malloc() {
    if !privileged("libc_malloc") {
        return;
    }
    let f = fixtures();
    let out = ok(&[
        "probe",
        "c:malloc",
        "--csv",
        "--",
        path(&f.c),
        "malloc",
        "2000",
    ]);
    let n = row(&csv_rows(&out), "malloc").1;
    assert!((2000..2100).contains(&n), "malloc count {n}");
}

/// Check that `syscall:write` counts exactly the fixture's writes, with durations.
#[test]
fn syscall_write() {
    if !privileged("syscall_write") {
        return;
    }
    let f = fixtures();
    let out = ok(&[
        "probe",
        "syscall:write",
        "--csv",
        "--",
        path(&f.c),
        "write",
        "777",
    ]);
    let r = row(&csv_rows(&out), "syscall:write").clone();
    assert_eq!(r.1, 777, "{out}");
    assert!(r.2[0] > 0.0 && r.2[3] > 0.0, "durations {:?}", r.2);
}

/// Check that a Go binary whose Go version cannot be read (so no register ABI can be assumed) gets no return
/// probes: timing counts its functions and says why, and --count works on it.
#[test]
fn go_binaries_refuse_return_probes() {
    if !privileged("go_binaries_refuse_return_probes") {
        return;
    }
    let f = fixtures();
    let out = rprof(&[
        "probe",
        "-x",
        path(&f.go_marker),
        "main_func",
        "--",
        path(&f.go_marker),
    ]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("counted, not timed") && err.contains("Go version could not be read"),
        "{err}"
    );
    let table = String::from_utf8_lossy(&out.stdout);
    let row: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("main_func"))
        .unwrap_or_else(|| panic!("{table}"))
        .split_whitespace()
        .collect();
    assert_eq!((row[1], row[2]), ("1", "-"), "{table}");
    let out = ok(&[
        "probe",
        "-x",
        path(&f.go_marker),
        "main_func",
        "--count",
        "--",
        path(&f.go_marker),
    ]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("main_func") && l.trim_end().ends_with(" 1")),
        "{out}"
    );
}

/// Check that bad input gives a one-line error, a non-zero exit, and no probes.
#[test]
fn bad_input() {
    if !privileged("bad_input") {
        return;
    }
    let f = fixtures();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["probe", "-x", path(&f.c), "xyz*", "--", "true"],
            "0 functions matched 'xyz*'",
        ),
        (
            vec!["probe", "-x", "/nonexistent/bin", "f", "--", "true"],
            "/nonexistent/bin",
        ),
        (
            vec!["probe", "-x", "/etc/hostname", "f", "--", "true"],
            "not an ELF",
        ),
        (
            vec!["probe", "t:nosuchcat:*", "-d", "1"],
            "0 tracepoints matched",
        ),
        (
            vec!["probe", "syscall:nosuchcall", "-d", "1"],
            "0 syscalls matched",
        ),
    ];
    for (args, want) in cases {
        let out = rprof(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
    // No kprobe_events on this kernel: the error names the kernel option.
    if !Path::new("/sys/kernel/tracing/kprobe_events").exists() {
        let out = rprof(&["probe", "vfs_read", "-d", "1"]);
        assert!(String::from_utf8_lossy(&out.stderr).contains("CONFIG_KPROBE_EVENTS"));
    }
}

/// Check that -l lists what would be probed and creates nothing, folding aliases.
#[test]
fn list_probes_nothing() {
    if !privileged("list_probes_nothing") {
        return;
    }
    let f = fixtures();
    let out = ok(&["probe", "-l", "-x", path(&f.c), "func_*"]);
    assert!(
        out.lines().any(|l| l.starts_with("func_a\t"))
            && out.lines().any(|l| l.starts_with("func_b\t")),
        "{out}"
    );
    // libc's malloc has aliases at the same address (__libc_malloc): one target.
    let out = ok(&["probe", "-l", "c:*malloc"]);
    let malloc = out.lines().filter(|l| l.contains("malloc")).count();
    assert!(out.lines().any(|l| l.starts_with("malloc\t")), "{out}");
    assert!(malloc >= 1);
}

/// Check that -i prints one report per interval and their counts add up to the fixture's total.
#[test]
fn interval_reports_add_up() {
    if !privileged("interval_reports_add_up") {
        return;
    }
    let f = fixtures();
    let out = ok(&[
        "probe",
        "-x",
        path(&f.c),
        "func_a",
        "-i",
        "1",
        "--csv",
        "--",
        path(&f.c),
        "spin",
        "2500",
        "20",
    ]);
    let total: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("func_a "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let reports = out.lines().filter(|l| l.starts_with("function,")).count();
    let sum: u64 = out
        .lines()
        .filter_map(|l| l.strip_prefix("func_a,"))
        .map(|l| l.split(',').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(reports, 3, "{out}");
    assert_eq!(sum, total, "{out}");
}

/// Check that -p follows a running process and -g counts its stacks (folded, with the caller).
#[test]
fn pid_and_stacks() {
    if !privileged("pid_and_stacks") {
        return;
    }
    let f = fixtures();
    let mut child = Command::new(&f.c)
        .args(["wait", "5", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let pid = line.trim().to_string();
    // With --folded, the table is on stderr and stdout is the folded stacks.
    let (out, err) = run_env(
        &["probe", "-x", path(&f.c), "func_a", "-p", &pid, "-d", "1", "-g", "--folded"],
        &[],
    );
    let _ = child.kill();
    let _ = child.wait();
    let count: u64 = err
        .lines()
        .find(|l| l.starts_with("func_a "))
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(count >= 100, "{err}");
    let folded = out
        .lines()
        .find(|l| l.contains(";func_a "))
        .unwrap_or_else(|| panic!("no folded stack: {out}"));
    assert!(folded.contains("main;func_a"), "{folded}");
}

/// Check that a SIGKILLed rprof's group is removed by the next rprof (its supervisor, which would remove it at
/// once, is SIGKILLed first).
#[test]
fn stale_group_is_removed() {
    if !privileged("stale_group_is_removed") {
        return;
    }
    let f = fixtures();
    let mut victim = spawn_waiting_probe(f, Stdio::null());
    let vpid = victim.id();
    let mut line = String::new();
    BufReader::new(victim.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let fixture_pid: i32 = line.trim().parse().unwrap();
    assert!(
        !leftover(vpid).is_empty(),
        "the victim never created its group"
    );
    let supervisor = common::probe_supervisor(vpid).expect("the victim's supervisor");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(supervisor as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    victim.kill().unwrap();
    victim.wait().unwrap();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(fixture_pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    ok(&[
        "probe",
        "-x",
        path(&f.c),
        "func_b",
        "--",
        path(&f.c),
        "counts",
        "1",
        "1",
    ]);
    assert_eq!(
        leftover(vpid),
        Vec::<String>::new(),
        "the dead rprof's group is still there"
    );
}

/// Check that SIGTERM and SIGINT end a run cleanly with a report and no probes left. The signal is sent once
/// the fixture runs under the probes (it prints its pid, then calls func_a at once), not after a span of wall
/// time, which rprof's setup can outlast on a loaded machine.
#[test]
fn signals_end_cleanly() {
    if !privileged("signals_end_cleanly") {
        return;
    }
    let f = fixtures();
    for sig in [
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGINT,
    ] {
        let mut child = spawn_waiting_probe(f, Stdio::piped());
        let pid = child.id();
        let line = common::read_line(child.stdout.as_mut().unwrap());
        assert!(line.trim().parse::<u32>().is_ok(), "fixture said: {line}");
        std::thread::sleep(Duration::from_millis(100));
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).unwrap();
        let out = child.wait_with_output().unwrap();
        // rprof ended the command with SIGTERM (after a grace for SIGINT, which only rprof got): its status.
        assert_eq!(
            out.status.code(),
            Some(128 + 15),
            "{sig}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.lines().any(|l| l.starts_with("func_a ")),
            "{sig}: {text}"
        );
        assert_eq!(leftover(pid), Vec::<String>::new(), "{sig} left probes");
    }
}

/// Check that a pattern matching every function of a real binary works, fast, and leaves nothing behind: rprof
/// and its workload use at most 2 s of CPU time (0.2 s here for bash's 1,671 functions). CPU time, not wall
/// time, which a loaded machine stretches.
#[test]
fn star_on_a_real_binary() {
    if !privileged("star_on_a_real_binary") {
        return;
    }
    let bash = Path::new("/usr/bin/bash");
    if !bash.exists() {
        common::skip("star_on_a_real_binary", "no /usr/bin/bash");
        return;
    }
    let (out, cpu) = ok_cpu(&[
        "probe",
        "-x",
        "/usr/bin/bash",
        "*",
        "--csv",
        "--",
        "/usr/bin/bash",
        "-c",
        "for i in 1 2 3; do :; done",
    ]);
    let rows = csv_rows(&out);
    eprintln!("{} functions called, {cpu:?} of CPU time", rows.len());
    assert!(rows.len() > 50, "{} functions seen", rows.len());
    assert!(
        rows.iter().any(|r| r.0 == "main" && r.1 == 1),
        "main should be called once"
    );
    assert!(cpu <= Duration::from_secs(2), "took {cpu:?} of CPU time");
}

/// Check that a 1M-call run prints the CSV header and one exact line.
#[test]
fn million_calls_csv() {
    if !privileged("million_calls_csv") {
        return;
    }
    let f = fixtures();
    let out = ok(&[
        "probe",
        "-x",
        path(&f.c),
        "func_a",
        "--csv",
        "--",
        path(&f.c),
        "counts",
        "1000000",
        "0",
    ]);
    let csv: Vec<&str> = out.lines().filter(|l| l.contains(',')).collect();
    assert_eq!(
        csv[0],
        "function,count,total_us,self_us,avg_us,min_us,max_us,timing_lost"
    );
    assert_eq!(csv.len(), 2, "{out}");
    assert!(csv[1].starts_with("func_a,1000000,"), "{}", csv[1]);
}

/// `rprof` with `args` and extra environment; returns (stdout, stderr), checking success and that nothing
/// was left behind.
fn run_env(args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let mut c = rprof_cmd();
    c.args(args).envs(env.iter().copied());
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "rprof {args:?} failed: {stderr}");
    assert_eq!(leftover(pid), Vec::<String>::new(), "rprof {args:?} left probes or its instance behind");
    (stdout, stderr)
}

/// A copy of the C fixture that no other test maps (so rprof's own choice is the tracefs ring).
fn private_copy(f: &Fixtures, dir: &Path) -> PathBuf {
    let copy = dir.join("private_fixture");
    std::fs::copy(&f.c, &copy).unwrap();
    copy
}

/// Check that the header line names the engine (the tracefs ring for a binary only the target maps, perf
/// events for libc, which every process maps, or what the suite forces), that counts stay exact, that the
/// table says how much of each duration is probe cost, and that forcing the ring onto libc warns.
#[test]
fn engine_is_named_and_probe_cost_shown() {
    if !privileged("engine_is_named_and_probe_cost_shown") {
        return;
    }
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let bin = private_copy(f, dir.path());
    let (out, err) = run_env(
        &["probe", "-x", path(&bin), "func_a", "--", path(&bin), "counts", "3000", "0"],
        &[],
    );
    let ring = ENGINE != Some("perf");
    let want = if ring { "engine: tracefs ring (" } else { "engine: perf" };
    assert!(err.contains(want), "want {want:?} in: {err}");
    let count: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("func_a "))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no func_a row: {out}"));
    assert_eq!(count, 3000, "{out}");
    assert!(out.contains("probe cost about"), "no probe cost line: {out}");

    let (out, err) = run_env(&["probe", "c:malloc", "--csv", "--", path(&f.c), "malloc", "500"], &[]);
    assert!((500..600).contains(&row(&csv_rows(&out), "malloc").1), "{out}");
    if ENGINE == Some("tracefs") {
        assert!(err.contains("engine: tracefs ring"), "{err}");
        assert!(err.contains("other processes map"), "no warning for a shared file: {err}");
    } else {
        assert!(err.contains("engine: perf"), "libc must be probed with perf events: {err}");
    }
}

/// A private copy of the C fixture for its `gate` mode: calls, a ready file, a wait for the gate file, calls.
struct Gate {
    dir: tempfile::TempDir,
    bin: PathBuf,
}

impl Gate {
    fn new() -> Gate {
        let dir = tempfile::tempdir().unwrap();
        let bin = private_copy(fixtures(), dir.path());
        Gate { dir, bin }
    }

    fn gate(&self) -> PathBuf {
        self.dir.path().join("gate")
    }

    /// Wait until the fixture has made its first calls and waits at its gate.
    fn wait_ready(&self) {
        let ready = self.dir.path().join("gate.ready");
        let started = Instant::now();
        while !ready.exists() {
            assert!(started.elapsed() < Duration::from_secs(60), "the target never reached its gate");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Run another process of the binary (2,000 calls of func_a, to completion), then open the gate.
    fn other_process_then_open(&self) {
        let other = Command::new(&self.bin).args(["counts", "2000", "0"]).output().unwrap();
        assert!(other.status.success());
        std::fs::write(self.gate(), "").unwrap();
    }
}

/// rprof's CSV `stdout` counted 3,000 calls of func_a, and its `stderr`, with the tracefs ring, says it dropped the
/// other process's 4,000 events (an entry and a return each), without it says nothing of other processes.
fn counted_without_the_other(stdout: &str, stderr: &str) {
    assert_eq!(row(&csv_rows(stdout), "func_a").1, 3000, "{stdout}\n{stderr}");
    if stderr.contains("engine: tracefs ring") {
        assert!(
            stderr.contains("note: 4000 events in 1 other process"),
            "the other process's hits are not said: {stderr}"
        );
    } else {
        assert!(!stderr.contains("other process"), "{stderr}");
    }
}

/// Check that a process started during the session from the same binary is not counted: perf events follow the
/// target's tasks only, and the tracefs ring, not filtered by task in the kernel when only the target maps the
/// file, drops the other process's hits and says how many it dropped.
#[test]
fn other_process_of_the_binary_is_not_counted() {
    if !privileged("other_process_of_the_binary_is_not_counted") {
        return;
    }
    let g = Gate::new();
    let (bin, gate) = (path(&g.bin), g.gate());
    let child = rprof_cmd()
        .args(["probe", "-x", bin, "func_a", "--csv", "--", bin, "gate", "1500", path(&gate)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    g.wait_ready();
    g.other_process_then_open();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "rprof failed: {stderr}");
    assert_eq!(leftover(pid), Vec::<String>::new(), "rprof left probes or its instance behind");
    counted_without_the_other(&stdout, &stderr);
}

/// Check the same under `-p`: the process runs 1,000 calls before rprof attaches (not counted), then, after a
/// process of the same binary has come and gone, 1,000 calls more and 1,000 in each of 2 threads it starts then
/// (counted: the ring keeps the hits of the threads it forks).
#[test]
fn other_process_is_not_counted_under_pid() {
    if !privileged("other_process_is_not_counted_under_pid") {
        return;
    }
    let g = Gate::new();
    let (bin, gate) = (path(&g.bin), g.gate());
    let mut target = Command::new(bin)
        .args(["gate", "1000", path(&gate), "2"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    g.wait_ready();
    let pid = target.id().to_string();
    let mut probe = rprof_cmd()
        .args(["probe", "-x", bin, "func_a", "--csv", "-p", &pid])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The header line says the probes are in.
    let mut stderr = BufReader::new(probe.stderr.take().unwrap());
    let mut text = String::new();
    while !text.contains("probing ") {
        assert!(stderr.read_line(&mut text).unwrap() > 0, "rprof ended before probing: {text}");
    }
    g.other_process_then_open();
    assert!(target.wait().unwrap().success());
    std::io::Read::read_to_string(&mut stderr, &mut text).unwrap();
    let out = probe.wait_with_output().unwrap();
    assert!(out.status.success(), "rprof failed: {text}");
    counted_without_the_other(&String::from_utf8_lossy(&out.stdout), &text);
}

/// Check that `--count` counts exactly (with counters unless the suite forces an engine).
#[test]
fn count_only_is_exact() {
    if !privileged("count_only_is_exact") {
        return;
    }
    let f = fixtures();
    let (out, err) = run_env(
        &["probe", "-x", path(&f.c), "func_*", "--count", "--csv", "--", path(&f.c), "counts", "2345", "678"],
        &[],
    );
    let rows = csv_rows(&out);
    assert_eq!(row(&rows, "func_a").1, 2345, "{out}");
    assert_eq!(row(&rows, "func_b").1, 678, "{out}");
    if ENGINE.is_none() {
        assert!(err.contains("engine: counters"), "{err}");
    }
}

/// Check that `--count` without the uprobe PMU (kernels before 4.17; forced with RPROF_UPROBE_PMU=0) counts
/// exactly on tracefs probes, and says so.
#[test]
fn count_without_uprobe_pmu_is_exact() {
    if !privileged("count_without_uprobe_pmu_is_exact") {
        return;
    }
    let f = fixtures();
    let (out, err) = run_env(
        &["probe", "-x", path(&f.c), "func_*", "--count", "--csv", "--", path(&f.c), "counts", "1234", "56"],
        &[("RPROF_UPROBE_PMU", "0")],
    );
    let rows = csv_rows(&out);
    assert_eq!(row(&rows, "func_a").1, 1234, "{out}");
    assert_eq!(row(&rows, "func_b").1, 56, "{out}");
    assert!(!err.contains("uprobe PMU"), "{err}");
}

/// Check that the tracefs ring read with read(2) (the path of kernels that cannot map it) counts and times
/// exactly too, and says which path it took.
#[test]
fn ring_read_fallback() {
    if !privileged("ring_read_fallback") {
        return;
    }
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let bin = private_copy(f, dir.path());
    let (out, err) = run_env(
        &["probe", "-x", path(&bin), "func_*", "--csv", "--", path(&bin), "counts", "20000", "300"],
        &[("RPROF_RING_READ", "1")],
    );
    let rows = csv_rows(&out);
    assert_eq!(row(&rows, "func_a").1, 20000, "{out}");
    assert_eq!(row(&rows, "func_b").1, 300, "{out}");
    if ENGINE != Some("perf") {
        assert!(err.contains("engine: tracefs ring (read)"), "{err}");
    }
}
include!("values.rs");
include!("newcomer.rs");
