//! `rprof bt` running programs against bpftrace 0.17 on the same workload in the same test: the issue's
//! programs and bpftrace's own tools, on commands whose events are known (`-c`), compared exactly for the
//! command's own events and within physical bounds for sampled ones.
mod common;
use common::tools::{bpftrace, rprof_bt};
use common::{privileged, rprof};

/// Check that the write-count program gives bpftrace's output byte for byte on dd's 100 writes (and its
/// closing message), counted by the command's own name.
#[test]
fn write_counts_by_comm_equal_bpftrace() {
    if !privileged("write_counts_by_comm_equal_bpftrace") {
        return;
    }
    let program = "tracepoint:syscalls:sys_enter_write /comm == \"dd\"/ \
                   { @write_counts[comm] = count(); @write_bytes[comm] = sum(args->count); }";
    let cmd = "/bin/dd if=/dev/zero of=/dev/null bs=1k count=100 status=none";
    let mine = rprof_bt(&["-e", program, "-c", cmd]);
    let theirs = bpftrace(&["-e", program, "-c", cmd]);
    assert_eq!(mine, theirs);
    assert!(mine.contains("@write_counts[dd]: 100\n"), "{mine}");
}

/// Check that bpftrace's opensnoop.bt lists every open of a command as bpftrace does: the same lines (PID
/// aside), paths read at the entry and results at the exit.
#[test]
fn opensnoop_bt_lists_what_bpftrace_lists() {
    if !privileged("opensnoop_bt_lists_what_bpftrace_lists") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    // `a` is empty: cat writes nothing to the stdout it shares with the tool. A byte of it (a file `x` with no
    // newline, as before) landed at the start of whichever line the tool printed next (`x31113  cat 3 0
    // /etc/ld.so.cache`, seen in 3 of 8 runs of this binary on a loaded host), hiding that line from the
    // comparison, in rprof's output or bpftrace's.
    std::fs::write(&a, "").unwrap();
    let cmd = format!("/bin/cat {} {}", a.display(), b.display());
    // The lines of the cat that opened this test's file: opensnoop is system-wide, and other programs (other
    // tests, a build) may run cat meanwhile.
    let a_path = a.display().to_string();
    let lines = |text: &str| -> Vec<String> {
        let pid = text
            .lines()
            .find(|l| l.contains(" cat ") && l.ends_with(&a_path))
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or_else(|| panic!("no open of {a_path} by cat in:\n{text}"));
        text.lines()
            .filter(|l| l.contains(" cat ") && l.split_whitespace().next() == Some(pid))
            .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
            .collect()
    };
    let mine_text = rprof_bt(&["/usr/sbin/opensnoop.bt", "-c", &cmd]);
    let theirs_text = bpftrace(&["/usr/sbin/opensnoop.bt", "-c", &cmd]);
    let (mine, theirs) = (lines(&mine_text), lines(&theirs_text));
    assert_eq!(
        mine, theirs,
        "rprof's output:\n{mine_text}\nbpftrace's output:\n{theirs_text}"
    );
    assert!(
        mine.contains(&format!("cat 3 0 {}", a.display())),
        "{mine:?}"
    );
    assert!(
        mine.contains(&format!("cat -1 2 {}", b.display())),
        "{mine:?}"
    );
}

/// Check that the offcpu program (sched_switch twice, stacks in maps, a histogram) counts each of a command's
/// sleeps, as bpftrace's run of the same command does: each of the 20 sleeps switches out at `clock_nanosleep`
/// at least once, and at most once more for each time the command was preempted (on a busy host a preemption
/// inside clock_nanosleep has its stack too: 21 in 2 runs of 12 beside two busy loops; and a sleep preempted
/// before it blocks for longer than it sleeps never blocks: its one switch is the preemption). The command
/// prints its involuntary switches (getrusage). At least 20 off-CPU spans last 16 ms or more (each sleep lasts
/// 20 ms; a wakeup may wait longer for a CPU, so the bucket of each span is not fixed, but its floor is).
#[test]
fn offcpu_program_sees_each_sleep() {
    if !privileged("offcpu_program_sees_each_sleep") {
        return;
    }
    let program = "tracepoint:sched:sched_switch /args->prev_pid == cpid/ { @ts = nsecs; @uu = ustack; } \
        tracepoint:sched:sched_switch /args->next_pid == cpid/ { $t = @ts; \
          if ($t) { $us = (nsecs - $t) / 1000; @off = hist($us); @u[@uu] = count(); delete(@ts); delete(@uu); } }";
    // bpftrace splits -c's command at spaces (no shell quoting): the script is a file.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("sleeps.py");
    std::fs::write(
        &script,
        "import resource, time\nfor i in range(20): time.sleep(0.02)\n\
         print('\\npreempted', resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw, flush=True)\n",
    )
    .unwrap();
    let cmd = format!("/usr/bin/python3 {}", script.display());
    let cmd = cmd.as_str();
    let mine = rprof_bt(&["-e", program, "-c", cmd]);
    let theirs = bpftrace(&["-e", program, "-c", cmd]);
    // bpftrace names the frames when it prints, after the command exited: its stacks are addresses.
    for (who, text) in [("bpftrace", &theirs), ("rprof", &mine)] {
        let preempted: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("preempted "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| {
                panic!("{who}: the command's line of preemptions is missing: {text}")
            });
        let top = stack_counts(text)
            .into_iter()
            .max_by_key(|(_, n)| *n)
            .map_or(0, |(_, n)| n);
        // bpftrace's programs sometimes do not run for a switch on a loaded host (seen: 19 of 20 sleeps, 19
        // long spans, with no other BPF user in the test binary): said, not counted against rprof, which has
        // no BPF; rprof's own count is held to the bounds.
        if who == "bpftrace" && (top < 20 || spans_from_16ms(text) < 20) {
            eprintln!("offcpu_program_sees_each_sleep: bpftrace lost switches ({top} at the sleeps' stack, {} long spans): compared for rprof only", spans_from_16ms(text));
            continue;
        }
        assert!(
            (20..=20 + preempted).contains(&top),
            "{who}: {top} switches at the sleeps' stack, {preempted} preemptions: {text}"
        );
        assert!(spans_from_16ms(text) >= 20, "{who}: {text}");
    }
    let top = stack_counts(&mine).into_iter().max_by_key(|(_, n)| *n);
    assert!(top.unwrap().0.starts_with("clock_nanosleep"), "{mine}");
}

/// `@u`'s stacks as (first frame, count): `@u[\n    clock_nanosleep+35\n]: 20` is `("clock_nanosleep+35", 20)`.
fn stack_counts(text: &str) -> Vec<(String, u64)> {
    text.split("@u[")
        .skip(1)
        .filter_map(|entry| {
            let first = entry.split_whitespace().next()?.to_string();
            let n = entry
                .split("]: ")
                .nth(1)?
                .lines()
                .next()?
                .trim()
                .parse()
                .ok()?;
            Some((first, n))
        })
        .collect()
}

/// The spans in `@off`'s histogram buckets from `[16K, 32K)` up (microseconds).
fn spans_from_16ms(text: &str) -> u64 {
    let from_16k = [
        "[16K,", "[32K,", "[64K,", "[128K,", "[256K,", "[512K,", "[1M,",
    ];
    text.lines()
        .filter(|l| from_16k.iter().any(|b| l.starts_with(b)))
        .filter_map(|l| {
            l.split(')')
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Check that `profile:hz:99` samples a spinning command about 99 times a second of its CPU, within the
/// binomial spread of a shared CPU: oncpu.bt's shape, with a predicate on the command.
#[test]
fn profile_samples_a_spinner_at_its_rate() {
    if !privileged("profile_samples_a_spinner_at_its_rate") {
        return;
    }
    let program = "profile:hz:99 /pid == cpid/ { @n = count(); @k[ustack(1)] = count(); }";
    // The spinner runs for 1 s of its own CPU and says how long that took on the wall clock.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("spin.py");
    let spin = "import time\nw = time.monotonic()\nt = time.process_time()\n\
                while time.process_time() - t < 1.0: pass\n\
                print('spun cpu=%.3f wall=%.3f' % (time.process_time() - t, time.monotonic() - w))\n";
    std::fs::write(&script, spin).unwrap();
    let cmd = format!("/usr/bin/python3 {}", script.display());
    let cmd = cmd.as_str();
    let out = rprof_bt(&["-e", program, "-c", cmd]);
    let n: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("@n: "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let (cpu, wall) = out
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix("spun cpu=")?;
            let (cpu, wall) = rest.split_once(" wall=")?;
            Some((cpu.parse::<f64>().ok()?, wall.parse::<f64>().ok()?))
        })
        .expect("the spinner's line");
    // Each CPU's 99 Hz clock fires every 10.1 ms of wall time and samples whoever runs: over the spinner's
    // wall time W, 99 W ticks, each on the spinner with p = CPU / W. Expected 99 CPU (plus python's start and
    // end, under 0.25 s); binomial spread sqrt(99 W p (1 - p)), zero when it had the CPU to itself.
    let p = (cpu / wall).min(1.0);
    let sd = (99.0 * wall * p * (1.0 - p)).sqrt();
    let (low, high) = (
        99.0 * cpu - 4.0 * sd - 5.0,
        99.0 * (cpu + 0.25) + 4.0 * sd + 5.0,
    );
    assert!(
        (low..=high).contains(&(n as f64)),
        "{n} samples, not in [{low:.0}, {high:.0}] for {cpu:.3} s of CPU over {wall:.3} s\n{out}"
    );
}

/// Check that a program whose attach point cannot run here is refused in bpftrace's error format, nothing
/// attached, exit 1.
#[test]
fn unrunnable_probes_are_refused() {
    let out = rprof()
        .args(["bt", "-e", "watchpoint:0x1000:8:rw { @ = count(); }"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("stdin:1:"), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("Attaching"));
}
