//! Shared helpers for rprof's integration tests: building fixtures, running rprof, privilege checks, and
//! parsing its outputs.
#![allow(dead_code)]

pub mod loopdev;
pub mod tools;
pub mod tracer;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The fixtures directory.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Whether CI forbids skipping: RPROF_REQUIRE_PRIVILEGED=1 (set by .ci/run, which installs every tool).
pub fn require_privileged() -> bool {
    std::env::var("RPROF_REQUIRE_PRIVILEGED").as_deref() == Ok("1")
}

/// Skip `test` because the machine lacks something (root, a tool, a file): prints one `SKIPPED` line saying
/// what, or panics when RPROF_REQUIRE_PRIVILEGED=1 forbids skipping. The caller returns right after.
/// The line goes to stderr directly, not through `eprintln!`, which the test harness captures and hides for
/// tests that pass: a skip must show in `cargo test`'s output.
pub fn skip(test: &str, why: &str) {
    if require_privileged() {
        panic!("{test}: cannot run: {why}, and RPROF_REQUIRE_PRIVILEGED=1 forbids skipping");
    }
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// Whether this test may use perf_event_open and tracefs. Without root it skips (see [`skip`]).
pub fn privileged(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    skip(test, "needs root for perf_event_open and tracefs");
    false
}

/// Compile a C or C++ fixture with the system compiler into `dir`; `flags` are added to the defaults.
pub fn build_c(dir: &Path, source: &str, flags: &[&str]) -> PathBuf {
    let src = fixtures().join(source);
    let stem = Path::new(source).file_stem().unwrap().to_string_lossy();
    let out = dir.join(stem.as_ref());
    let compiler = if source.ends_with(".cpp") {
        "g++"
    } else {
        "gcc"
    };
    let st = Command::new(compiler)
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .args(flags)
        .arg("-pthread")
        .status()
        .expect("run the C compiler");
    assert!(st.success(), "{compiler} failed on {}", src.display());
    out
}

/// Compile a Rust fixture with rustc into `dir`.
pub fn build_rust(dir: &Path, source: &str, flags: &[&str]) -> PathBuf {
    let src = fixtures().join(source);
    let stem = Path::new(source)
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let out = dir.join(&stem);
    let st = Command::new("rustc")
        .arg("--edition=2021")
        .arg("--crate-name")
        .arg(&stem)
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .args(flags)
        .status()
        .expect("run rustc");
    assert!(st.success(), "rustc failed on {}", src.display());
    out
}

/// Frame pointers in every function. GCC 12 drops them from leaf functions at -O1 and above even with
/// -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer, which hides a leaf's caller; -O0 keeps them.
/// Build the Go program `fixtures/SOURCE` (a `main.go`) with Debian's golang-go into `dir/NAME`, with its own
/// GOCACHE and GOPATH there (GOPATH mode), asserting the build succeeds; None (after a visible skip of `test`)
/// without /usr/bin/go.
pub fn build_go(dir: &Path, source: &str, name: &str, test: &str) -> Option<PathBuf> {
    let go = Path::new("/usr/bin/go");
    if !go.exists() {
        skip(test, "no /usr/bin/go (apt-get install golang-go)");
        return None;
    }
    let bin = dir.join(name);
    let out = Command::new(go)
        .args(["build", "-o"])
        .arg(&bin)
        .arg(fixtures().join(source))
        .env("GOCACHE", dir.join("gocache"))
        .env("GOPATH", dir.join("gopath"))
        .env("GO111MODULE", "off")
        .output()
        .expect("run /usr/bin/go build");
    assert!(
        out.status.success(),
        "go build of fixtures/{source}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(bin)
}

pub const FP: &[&str] = &["-O0", "-g", "-fno-omit-frame-pointer"];

/// `rprof record -q -o DIR/NAME ARGS...`, asserting success; returns the recording's path.
pub fn record_to(dir: &Path, name: &str, args: &[&str]) -> String {
    let data = dir.join(name);
    let data = data.to_str().unwrap().to_string();
    let mut all = vec!["record", "-q", "-o", &data];
    all.extend_from_slice(args);
    rprof_ok(&all);
    data
}

/// Build the call-tree fixture with frame pointers and record it (`-F 999 -g`) into DIR/NAME while it uses MS
/// of CPU time: about MS samples, on any CPU.
pub fn record_calltree(dir: &Path, name: &str, ms: &str) -> String {
    let bin = build_c(dir, "calltree.c", FP);
    record_to(
        dir,
        name,
        &["-F", "999", "-g", "--", bin.to_str().unwrap(), ms],
    )
}

/// The build-id cache of the tests' recordings (`$PERF_BUILDID_DIR` for every rprof the tests run), under
/// the target directory, so that no test writes into the real ~/.debug; shared by the tests, and bounded by
/// [`TEST_BUILDID_CACHE_SIZE`]. A test that needs its own sets PERF_BUILDID_DIR itself.
pub fn test_buildid_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("buildid-cache")
}

/// The bound on rprof's copies in [`test_buildid_dir`].
pub const TEST_BUILDID_CACHE_SIZE: &str = "512M";

/// A command for the rprof binary under test (its build-id cache: [`test_buildid_dir`]).
pub fn rprof() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rprof"));
    cmd.env("PERF_BUILDID_DIR", test_buildid_dir())
        .env("RPROF_BUILDID_CACHE_SIZE", TEST_BUILDID_CACHE_SIZE);
    cmd
}

/// Run rprof with `args`, asserting success; returns stdout.
pub fn rprof_ok(args: &[&str]) -> String {
    let out = rprof().args(args).output().expect("run rprof");
    assert_success(&out, args);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn assert_success(out: &Output, what: &[&str]) {
    assert!(
        out.status.success(),
        "rprof {:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        what,
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Parse folded stacks: (frames outermost first, with the command as the first element, count).
pub fn parse_folded(text: &str) -> Vec<(Vec<String>, u64)> {
    text.lines()
        .filter_map(|l| {
            let (stack, count) = l.rsplit_once(' ')?;
            Some((
                stack.split(';').map(str::to_string).collect(),
                count.parse().ok()?,
            ))
        })
        .collect()
}

/// Whether `frames` contains `seq` as a contiguous run.
pub fn contains_run(frames: &[String], seq: &[&str]) -> bool {
    frames
        .windows(seq.len())
        .any(|w| w.iter().zip(seq).all(|(a, b)| a == b))
}

/// A child process that is killed when the test ends, pass or fail.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Read one line from a child's pipe.
pub fn read_line(r: &mut impl std::io::Read) -> String {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while let Ok(1) = r.read(&mut byte) {
        if byte[0] == b'\n' {
            break;
        }
        line.push(byte[0]);
    }
    String::from_utf8_lossy(&line).into_owned()
}

/// Whether the `perf` tool runs here. Without it the test skips (see [`skip`]).
pub fn perf_tool(test: &str) -> bool {
    let ok = Command::new("perf")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip(
            test,
            "the perf tool is not installed (apt-get install linux-perf)",
        );
    }
    ok
}

/// Run rprof with `args` and the environment variable `key` set to `value`, asserting success; returns
/// (stdout, stderr).
pub fn rprof_ok_env(key: &str, value: &Path, args: &[&str]) -> (String, String) {
    let out = rprof()
        .env(key, value)
        .args(args)
        .output()
        .expect("run rprof");
    assert_success(&out, args);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Run rprof with `args`, asserting success; returns (stdout, stderr).
pub fn rprof_ok_stderr(args: &[&str]) -> (String, String) {
    let out = rprof().args(args).output().expect("run rprof");
    assert_success(&out, args);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Among the stacks for which `select` holds, the share (0..=1) of samples for which `full` holds, and the
/// number of samples selected.
pub fn share_of(
    stacks: &[(Vec<String>, u64)],
    select: impl Fn(&[String]) -> bool,
    full: impl Fn(&[String]) -> bool,
) -> (f64, u64) {
    let mut selected = 0;
    let mut good = 0;
    for (frames, count) in stacks {
        if select(frames) {
            selected += count;
            if full(frames) {
                good += count;
            }
        }
    }
    (good as f64 / selected.max(1) as f64, selected)
}

/// A process's resident set size in KiB, from /proc/PID/status (None once it is gone).
pub fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// CPU time (user + system) a process has used so far, from /proc/PID/stat (None once it is gone).
pub fn cpu_time(pid: u32) -> Option<std::time::Duration> {
    stat_cpu_time(pid, 2)
}

/// The sum of the first `n` CPU time fields of /proc/PID/stat: utime, stime, then cutime and cstime (the
/// children it waited for).
fn stat_cpu_time(pid: u32, n: usize) -> Option<std::time::Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15, cutime 16,
    // cstime 17.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let mut ticks = 0;
    for field in fields.get(11..11 + n)? {
        ticks += field.parse::<u64>().ok()?;
    }
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as u64;
    Some(std::time::Duration::from_millis(ticks * 1000 / hz))
}

/// Wait for `child` (spawned with its stdout and stderr piped) to end, as `wait_with_output` does: its output,
/// and the CPU time (user + system) it and the children it waited for used, read from its zombie before it is
/// reaped. CPU time, unlike wall time, is the same on a loaded machine.
pub fn output_and_cpu_time(mut child: std::process::Child) -> (Output, std::time::Duration) {
    use nix::sys::wait::{waitid, Id, WaitPidFlag};
    use std::io::Read;
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        let mut stdout = Vec::new();
        out.read_to_end(&mut stdout).map(|_| stdout)
    });
    let mut stderr = Vec::new();
    err.read_to_end(&mut stderr)
        .expect("read the command's stderr");
    let stdout = reader.join().unwrap().expect("read the command's stdout");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT)
        .expect("wait for the command");
    let cpu = stat_cpu_time(child.id(), 4).expect("the command's zombie");
    let status = child.wait().expect("reap the command");
    let output = Output {
        status,
        stdout,
        stderr,
    };
    (output, cpu)
}

/// Wait until process `pid` has used `work` more CPU time than it had at the call: sizes a sampling window by
/// work done rather than by wall time, so a busy machine gets the same number of samples, only later. Panics
/// after 120 s of wall time or if the process ends first.
pub fn wait_for_cpu(pid: u32, work: std::time::Duration) {
    let start = cpu_time(pid).expect("the process is running");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let used = cpu_time(pid).expect("the process is still running");
        if used >= start + work {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} used only {:?} of CPU in 120 s",
            used - start
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The one child process of `pid` (a recorder's workload), waiting up to 30 s for it to appear.
pub fn only_child(pid: u32) -> u32 {
    let path = format!("/proc/{pid}/task/{pid}/children");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if let Some(child) = text.split_whitespace().next() {
            return child.parse().expect("a pid");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} started no child in 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The probe supervisor rprof process `pid` started (`rprof __probe-supervisor ...`), waiting up to 10 s for it.
pub fn probe_supervisor(pid: u32) -> Option<u32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        for child in children.split_whitespace() {
            let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
            if cmdline.split(|&b| b == 0).nth(1) == Some(b"__probe-supervisor") {
                return child.parse().ok();
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    None
}

/// A temporary directory that any user can write to (for tests that run rprof as another uid).
pub fn world_writable_tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    dir
}

/// A duration as rprof prints it (`812ns`, `10.23us`, `10.02ms`, `1.500s`) in ns.
pub fn duration_ns(text: &str) -> f64 {
    let (num, unit) = text.split_at(text.find(|c: char| c.is_ascii_alphabetic()).unwrap());
    let v: f64 = num.parse().unwrap();
    v * match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => panic!("unit {unit}"),
    }
}

/// Decode an OTLP profiles request with PyPI's opentelemetry-proto (tools/otlp/decode.py, installed by
/// tools/otlp/install.sh): its JSON summary, or None (after [`skip`]) when the decoder is not installed.
pub fn otlp_decode(test: &str, path: &Path) -> Option<serde_json::Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(root.join("tools/otlp/decode.py"))
        .arg(path)
        .env("PYTHONPATH", "/opt/rprof-tests/otlp-proto")
        .output()
        .expect("python3 runs");
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("No module named 'opentelemetry'") || err.contains("No module named 'google'") {
        skip(
            test,
            "opentelemetry-proto is not installed (bash tools/otlp/install.sh)",
        );
        return None;
    }
    assert!(out.status.success(), "decode.py {}: {err}", path.display());
    Some(serde_json::from_slice(&out.stdout).expect("decode.py prints JSON"))
}

/// Run `cmd` (its stdin fed from `stdin` on a thread), asserting success; returns its stdout.
pub fn run_with_stdin(cmd: &mut Command, stdin: Option<&[u8]>) -> String {
    let mut child = cmd
        .stdin(if stdin.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let feeder = stdin.map(|bytes| {
        let mut pipe = child.stdin.take().unwrap();
        let bytes = bytes.to_vec();
        std::thread::spawn(move || std::io::Write::write_all(&mut pipe, &bytes))
    });
    let out = child.wait_with_output().unwrap();
    if let Some(feeder) = feeder {
        feeder.join().unwrap().unwrap();
    }
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// fixtures/perf_events.c (software events: touch, sleep, migrate, spin), with a frame in every function.
pub fn perf_events_fixture(dir: &Path) -> PathBuf {
    let inc = format!("-I{}", fixtures().display());
    build_c(
        dir,
        "perf_events.c",
        &["-O0", "-fno-omit-frame-pointer", &inc],
    )
}

/// The count of event `name` in stat's `-x,` output (`COUNT,UNIT,NAME,...`).
pub fn csv_count(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f.get(2) == Some(&name)).then(|| f[0].parse().ok())?
        })
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}
