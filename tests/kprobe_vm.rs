//! Kernel function timing with kprobes, proven on a real kernel under QEMU (issue #5).
//!
//! This machine's kernel has no kprobes, so `tests/vm/run.sh` boots a stock Debian 6.1 kernel under QEMU TCG with an
//! initramfs holding a static rprof, and runs `tests/vm/scenario.sh` inside. The scenario prints one
//! `RPROF-VM-RESULT name=STEP status=pass|fail secs=S detail=...` line per step on the serial console; this test
//! parses them and requires every step to pass. Needs root and network to the Debian mirror (first run only).
mod common;
use std::process::Command;
use std::time::Instant;

/// The steps scenario.sh runs, in order. A step missing from the console output counts as failed.
const STEPS: &[&str] = &[
    "vm_kprobes",
    "rprof_binary",
    "open_count",
    "glob",
    "stale_cleanup",
    "record_kernel",
    "kernel_args",
    "event_probes",
    "bt_vfscount",
    "bt_vfsstat",
    "bt_capable",
    "bt_biolatency",
    "bt_biostacks",
    "bt_swapin",
    "bt_xfsdist",
];

/// The VM may use this many times the CPU time its boot took. The boot (the same kernel and initramfs on every run)
/// calibrates this host's TCG speed; CPU time, unlike wall time, does not grow when the host is loaded. `run.sh`
/// stops qemu past this bound (and a guest idle for 60 s); this test checks the figures it prints. Measured on this
/// 2-core host beside two busy loops and seven builds (load average ~10), every step passing: boot 6.2-6.8 s of
/// qemu CPU, the whole run 14.8x (92 s of CPU in 308 s of wall time) and 16.7x (114 s in 261 s) that, where a
/// wall-clock bound of 150 s failed. The six `bt_*` steps (bpftrace's kprobe tools) added ~35% to the scenario: 11.7x
/// on a 2-core host shared with five builds (load average 12), where the steps before them took 8.8x; the bound
/// keeps the same margin over the loaded figure (16.7x then, ~23x now).
const CPU_RATIO: f64 = 35.0;

/// qemu's CPU seconds, from run.sh's `RPROF-VM-CPU boot=B total=T limit=L ratio=R` line: (boot, total).
fn vm_cpu(stdout: &str) -> Option<(f64, f64)> {
    let line = stdout
        .lines()
        .find_map(|l| l.find("RPROF-VM-CPU ").map(|i| &l[i..]))?;
    let num = |key: &str| field(line, key, false)?.parse::<f64>().ok();
    Some((num("boot")?, num("total")?))
}

/// One `RPROF-VM-RESULT` line from the VM's console.
#[derive(Debug, PartialEq)]
struct StepResult {
    name: String,
    passed: bool,
    detail: String,
}

/// The value of `key=` in `line`: up to the next space, or to the end of the line for the last key (`detail`).
fn field<'a>(line: &'a str, key: &str, last: bool) -> Option<&'a str> {
    let start = line.find(&format!(" {key}="))? + key.len() + 2;
    let rest = &line[start..];
    Some(if last {
        rest
    } else {
        rest.split(' ').next().unwrap_or("")
    })
}

/// Parse every `RPROF-VM-RESULT` line of the console output. Lines may carry terminal escapes before the tag and a
/// trailing carriage return, as a serial console gives them.
fn parse_results(console: &str) -> Vec<StepResult> {
    console
        .lines()
        .filter_map(|line| {
            let line = &line[line.find("RPROF-VM-RESULT ")?..];
            let line = line.trim_end_matches('\r');
            Some(StepResult {
                name: field(line, "name", false)?.to_string(),
                passed: field(line, "status", false)? == "pass",
                detail: field(line, "detail", true).unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// Check that result lines are parsed with their name, status and free-text detail, and that console noise around
/// them is ignored.
#[test]
fn parses_result_lines() {
    let console = "SeaBIOS\r\n\x1bc\x1b[?7lRPROF-VM-RESULT name=vm_kprobes status=pass secs=0.5 detail=entry_hits=5 x=1\r\n\
                   RPROF-VM-LOG name=glob | error: boom\n\
                   RPROF-VM-RESULT name=glob status=fail secs=2.2 detail=rprof probe exited 2\n";
    assert_eq!(
        parse_results(console),
        vec![
            StepResult {
                name: "vm_kprobes".into(),
                passed: true,
                detail: "entry_hits=5 x=1".into()
            },
            StepResult {
                name: "glob".into(),
                passed: false,
                detail: "rprof probe exited 2".into()
            },
        ]
    );
}

/// Check that, on a stock Debian kernel under QEMU, kprobes work in the VM and `rprof probe` counts exactly the
/// K opens of a workload with durations, expands a glob over kernel functions, removes the probes of a SIGKILLed
/// rprof, and that `rprof record -a -g` + `rprof report --folded` show kernel frames; and that the VM's CPU time
/// stays within CPU_RATIO times its boot's.
#[test]
fn kprobes_in_qemu() {
    if !nix::unistd::geteuid().is_root() {
        common::skip(
            "kprobes_in_qemu",
            "needs root (apt-get, mknod) and network to the Debian mirror",
        );
        return;
    }
    let root = env!("CARGO_MANIFEST_DIR");
    let run_sh = format!("{root}/tests/vm/run.sh");
    // The VM gets rprof built static (+crt-static, debug profile: a cold release build takes minutes on 2 cores),
    // by `run.sh build`, first. RPROF_VM_DYNAMIC=1 puts the rprof this test run already built into the VM
    // instead, with its shared libraries, which costs nothing.
    let rprof = if std::env::var("RPROF_VM_DYNAMIC").as_deref() == Ok("1") {
        env!("CARGO_BIN_EXE_rprof").to_string()
    } else {
        let start = Instant::now();
        let out = Command::new("bash")
            .args([&run_sh, "build"])
            .current_dir(root)
            .output()
            .expect("could not run bash tests/vm/run.sh build: is bash installed?");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "tests/vm/run.sh build failed ({}):\n{}{stdout}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        println!(
            "kprobe_vm static build: {:.1}s",
            start.elapsed().as_secs_f64()
        );
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("RPROF-VM-RPROF path="))
            .unwrap_or_else(|| panic!("run.sh build named no binary:\n{stdout}"))
            .to_string()
    };
    let start = Instant::now();
    let out = Command::new("bash")
        .arg(&run_sh)
        .current_dir(root)
        .env("RPROF_VM_RPROF", &rprof)
        .env("RPROF_VM_CPU_RATIO", CPU_RATIO.to_string())
        .output()
        .expect("could not run bash tests/vm/run.sh: is bash installed?");
    let elapsed = start.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);

    for line in stdout.lines().chain(stderr.lines()) {
        if let Some(i) = line.find("RPROF-VM-") {
            println!("{}", line[i..].trim_end_matches('\r'));
        }
    }
    println!("kprobe_vm VM part: {:.1}s", elapsed.as_secs_f64());
    assert!(
        out.status.success(),
        "tests/vm/run.sh failed ({}):\n{stderr}\n--- console ---\n{stdout}",
        out.status
    );

    let results = parse_results(&stdout);
    let failed: Vec<String> = STEPS
        .iter()
        .filter_map(|step| match results.iter().find(|r| r.name == *step) {
            Some(r) if r.passed => None,
            Some(r) => Some(format!("{step}: {}", r.detail)),
            None => Some(format!("{step}: no result line on the console")),
        })
        .collect();
    assert!(
        failed.is_empty(),
        "VM steps failed:\n  {}",
        failed.join("\n  ")
    );
    let (boot, total) =
        vm_cpu(&stdout).unwrap_or_else(|| panic!("run.sh printed no RPROF-VM-CPU line:\n{stdout}"));
    println!(
        "kprobe_vm qemu CPU: boot {boot:.1}s, whole run {total:.1}s ({:.1}x the boot)",
        total / boot
    );
    assert!(
        boot > 0.0 && total <= CPU_RATIO * boot,
        "the VM used {total:.1}s of CPU, over {CPU_RATIO}x the {boot:.1}s its boot took"
    );
}
