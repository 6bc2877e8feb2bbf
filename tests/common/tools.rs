//! Running `rprof tool` in tests: in the foreground (its output), or system-wide in the background.
use super::tracer::Tracer;
use super::{rprof, skip};
use std::process::{Command, Stdio};

/// Run `rprof tool ARGS`, asserting success: (stdout, stderr).
pub fn tool(args: &[&str]) -> (String, String) {
    let out = rprof().arg("tool").args(args).output().expect("run rprof");
    super::assert_success(&out, args);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether a program the test compares with is installed (else the test skips, saying so).
pub fn have(test: &str, program: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        skip(test, &format!("{program} is not installed"));
    }
    found
}

/// rprof tool NAME FLAGS, system-wide, in the background.
pub fn rprof_tool_bg(args: &[&str]) -> Tracer {
    Tracer::start(rprof().arg("tool").args(args), "Ctrl-C to end")
}

/// The stdout of `rprof bt ARGS` (it must succeed).
pub fn rprof_bt(args: &[&str]) -> String {
    let out = rprof().arg("bt").args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "rprof bt {args:?}: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Held while a test's `bpftrace` runs: one at a time in a test binary. While one bpftrace reads or clears its
/// maps (a bpf(2) call), the kernel runs no BPF program on that CPU, and if the task is switched out meanwhile,
/// another bpftrace's `sched_switch` program does not run for that switch. (bpftrace alone also lost a sleep
/// under load: see bt_run's offcpu test.) rprof, with no BPF, is not affected.
static ONE_BPFTRACE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The stdout of `bpftrace ARGS` (the peer; CI installs it).
pub fn bpftrace(args: &[&str]) -> String {
    let _one = ONE_BPFTRACE.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new("bpftrace")
        .args(args)
        .output()
        .expect("bpftrace runs (.ci/install installs it)");
    assert!(
        out.status.success(),
        "bpftrace {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
