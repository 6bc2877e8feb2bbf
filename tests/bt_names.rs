//! `rprof bt`'s `usym()`/`ksym()` and USDT probes against bpftrace 0.17 on the same fixtures: names of a
//! function pointer passed to a uprobe and of an hrtimer's kernel function, USDT arguments (`PATH:PROVIDER:NAME`
//! and `PATH:NAME`), `-p PID` (the one process whose USDT probes fire), `-l`'s USDT listing, and `reg()` at a
//! uprobe.
mod common;
use common::tools::{bpftrace, rprof_bt};
use common::tracer::Tracer;
use common::{build_c, privileged, rprof};
use std::io::Write;
use std::process::{Child, Command, Stdio};

/// The lines of `text` that start with `prefix`.
fn lines_with<'t>(text: &'t str, prefix: &str) -> Vec<&'t str> {
    text.lines().filter(|l| l.starts_with(prefix)).collect()
}

/// Check that `usym(arg0)` names the function pointer a uprobe's function is passed and `ksym(args->function)`
/// the kernel function of an hrtimer, as bpftrace names them: the fixture's 6 calls alternate `twice` and
/// `thrice`, and its 6 sleeps and its last one arm `hrtimer_wakeup` 7 times. bpftrace names the map's `usym`
/// keys when it prints them, after the command exited: it prints their addresses, which rprof, naming them at
/// the event, does not.
#[test]
fn usym_and_ksym_name_what_bpftrace_names() {
    if !privileged("usym_and_ksym_name_what_bpftrace_names") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "bt_names.c", &["-O2"]);
    let program = format!(
        "uprobe:{0}:apply {{ printf(\"fn %s\\n\", usym(arg0)); @u[usym(arg0)] = count(); }} \
         tracepoint:timer:hrtimer_start /pid == cpid/ {{ @k[ksym(args->function)] = count(); }}",
        bin.display()
    );
    // The fixture lingers a second after its calls: bpftrace names printf's usym() while the process lives.
    let cmd = format!("{} 6 1000", bin.display());
    let mine = rprof_bt(&["-e", &program, "-c", &cmd]);
    let theirs = bpftrace(&["-e", &program, "-c", &cmd]);
    let calls = ["twice", "thrice"].repeat(3);
    let calls: Vec<String> = calls.iter().map(|f| format!("fn {f}")).collect();
    assert_eq!(lines_with(&mine, "fn "), calls, "{mine}");
    assert_eq!(lines_with(&theirs, "fn "), calls, "{theirs}");
    let wakeups = "@k[hrtimer_wakeup]: 7";
    assert_eq!(lines_with(&mine, "@k[hrtimer_wakeup]"), [wakeups], "{mine}");
    assert_eq!(
        lines_with(&theirs, "@k[hrtimer_wakeup]"),
        [wakeups],
        "{theirs}"
    );
    // Equal counts: bpftrace's order among them is its hash map's; compared sorted.
    let mut names = lines_with(&mine, "@u[");
    names.sort();
    assert_eq!(names, ["@u[thrice]: 3", "@u[twice]: 3"], "{mine}");
    // bpftrace's keys: the same two counts, by address (`@u[0x55d0c3a7d2c0]: 3`).
    let theirs_u = lines_with(&theirs, "@u[");
    assert_eq!(theirs_u.len(), 2, "{theirs}");
    assert!(
        theirs_u
            .iter()
            .all(|l| l.starts_with("@u[0x") && l.ends_with("]: 3")),
        "{theirs}"
    );
}

/// Check USDT probes through `rprof bt` against bpftrace on fixtures/usdt_fixture.c (5 steps): `tick`'s two
/// arguments by `PATH:PROVIDER:NAME`, `work`'s (behind a semaphore) by `PATH:NAME`, the same lines and counts.
/// `str(arg1)` at `work` is each step's key, "k0".."k4" (bpftrace 0.17 reads "": the strings' page of the
/// fixture was never touched, and BPF cannot fault it in).
#[test]
fn usdt_arguments_as_bpftrace() {
    if !privileged("usdt_arguments_as_bpftrace") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "usdt_fixture.c", &["-O2"]);
    let program = format!(
        "usdt:{0}:rprof_test:tick {{ printf(\"tick %d %d\\n\", arg0, arg1); @ticks = count(); }} \
         usdt:{0}:work {{ printf(\"work %s %d\\n\", probe, arg0); @work[str(arg1)] = count(); }}",
        bin.display()
    );
    let cmd = format!("{} 5", bin.display());
    let mine = rprof_bt(&["-e", &program, "-c", &cmd]);
    let theirs = bpftrace(&["-e", &program, "-c", &cmd]);
    let ticks: Vec<String> = [(0, 0), (1, 1), (2, 3), (3, 6), (4, 10)]
        .iter()
        .map(|(i, t)| format!("tick {i} {t}"))
        .collect();
    let work: Vec<String> = (0..5)
        .map(|i| format!("work usdt:{}:rprof_test:work {}", bin.display(), 2 * i))
        .collect();
    for (who, text) in [("rprof", &mine), ("bpftrace", &theirs)] {
        assert_eq!(lines_with(text, "tick "), ticks, "{who}: {text}");
        assert_eq!(lines_with(text, "work usdt:"), work, "{who}: {text}");
        assert_eq!(lines_with(text, "@ticks: "), ["@ticks: 5"], "{who}: {text}");
        assert!(text.contains("work fired 5 of 5"), "{who}: {text}");
    }
    let keys: Vec<String> = (0..5).map(|i| format!("@work[k{i}]: 1")).collect();
    assert_eq!(lines_with(&mine, "@work["), keys, "{mine}");
    assert_eq!(lines_with(&theirs, "@work["), ["@work[]: 5"], "{theirs}");
}

/// Check that `-l 'usdt:PATH:*'` lists the fixture's three USDT probes as bpftrace lists them, and `-lv` too.
#[test]
fn usdt_listing_as_bpftrace() {
    if !privileged("usdt_listing_as_bpftrace") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "usdt_fixture.c", &["-O2"]);
    for flag in ["-l", "-lv"] {
        let pattern = format!("usdt:{}:*", bin.display());
        let mine = rprof_bt(&[flag, &pattern]);
        let theirs = bpftrace(&[flag, &pattern]);
        assert_eq!(mine, theirs, "{flag}");
        assert_eq!(mine.lines().count(), 3, "{flag}: {mine}");
    }
}

/// A Python 3.11 (Debian's, built with USDT probes) waiting for a line on stdin, then calling
/// `gc.collect(i % 3)` for i in 0..n with automatic collection off, then exiting.
fn python_collector(n: u32) -> Child {
    let script = "import gc, sys\ngc.disable()\nsys.stdin.readline()\n\
                  for i in range(int(sys.argv[1])): gc.collect(i % 3)\n";
    Command::new("/usr/bin/python3.11")
        .args(["-c", script, &n.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("run /usr/bin/python3.11")
}

/// Check `-p PID` as bpftrace 0.17 means it: the USDT probes of that process alone fire. Two Pythons collect
/// garbage, 7 times (generations 0,1,2,0,1,2,0) and 5 times; `rprof bt -p` and `bpftrace -p` on the first
/// count its `gc__start` by generation at the same time: 3 and 2 (and generation 2's, with the collections
/// of its exit), the same for both, none of the second's.
#[test]
fn usdt_of_one_process_with_p() {
    if !privileged("usdt_of_one_process_with_p") {
        return;
    }
    let mut target = python_collector(7);
    let mut other = python_collector(5);
    let pid = target.id().to_string();
    let program = "BEGIN { printf(\"ready\\n\"); } \
                   usdt:/usr/bin/python3.11:python:gc__start { @gen[arg0] = count(); }";
    let mine = Tracer::start(rprof().args(["bt", "-p", &pid, "-e", program]), "ready");
    let theirs = Tracer::start(
        Command::new("bpftrace").args(["-p", &pid, "-e", program]),
        "ready",
    );
    for p in [&mut target, &mut other] {
        p.stdin.take().unwrap().write_all(b"go\n").unwrap();
    }
    assert!(target.wait().unwrap().success());
    assert!(other.wait().unwrap().success());
    let (mine, theirs) = (mine.stop(), theirs.stop());
    let counts = |text: &str| -> Vec<String> {
        lines_with(text, "@gen[")
            .into_iter()
            .map(String::from)
            .collect()
    };
    assert_eq!(counts(&mine), counts(&theirs), "{mine}\n{theirs}");
    let mine = counts(&mine);
    assert!(mine.contains(&"@gen[0]: 3".to_string()), "{mine:?}");
    assert!(mine.contains(&"@gen[1]: 2".to_string()), "{mine:?}");
}

/// Check that a uprobe of a function its binary lacks, beside probes that exist, is left out as bpftrace 0.17
/// leaves it out, without refusing the program (threadsnoop.bt's and sslsnoop.bt's case here): the same output,
/// its attach points not counted, the existing probe counting the fixture's 6 calls; and sslsnoop.bt's
/// "Attaching N probes..." line as bpftrace's (11 here: 7 of its libcrypto functions are not exported).
#[test]
fn missing_uprobe_functions_skipped_as_bpftrace() {
    if !privileged("missing_uprobe_functions_skipped_as_bpftrace") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "bt_names.c", &["-O2"]);
    let program = format!(
        "BEGIN {{ printf(\"hi\\n\"); }} \
         uprobe:{0}:no_such_function, uprobe:{0}:apply {{ @calls = count(); }} \
         uretprobe:{0}:no_such_function {{ @returns = count(); }}",
        bin.display()
    );
    let cmd = format!("{} 6 0", bin.display());
    let mine = rprof_bt(&["-e", &program, "-c", &cmd]);
    let theirs = bpftrace(&["-e", &program, "-c", &cmd]);
    let without_command = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| !l.starts_with("applied "))
            .map(String::from)
            .collect()
    };
    assert_eq!(without_command(&mine), without_command(&theirs));
    assert!(mine.starts_with("Attaching 2 probes...\nhi\n"), "{mine}");
    assert!(mine.contains("@calls: 6\n"), "{mine}");
    let first = |t: &str| t.lines().next().unwrap_or("").to_string();
    let ssl = ["/usr/sbin/sslsnoop.bt", "-c", "/bin/true"];
    assert_eq!(first(&rprof_bt(&ssl)), first(&bpftrace(&ssl)));
}

/// Check that `reg()` at a uprobe reads the registers as bpftrace reads them (it read 0 before): in a binary
/// built without PIE, `reg("ip")` is `apply`'s address as `nm` gives it, `usym()` of it names `apply`, and
/// `reg("di")` is `arg0` (the first argument's register), on each of the fixture's 6 calls, for both tools.
#[test]
fn registers_read_as_bpftrace() {
    if !privileged("registers_read_as_bpftrace") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "bt_names.c", &["-O2", "-no-pie"]);
    let nm = Command::new("nm").arg(&bin).output().expect("run nm");
    let symbols = String::from_utf8_lossy(&nm.stdout);
    let addr = symbols
        .lines()
        .find_map(|l| l.strip_suffix(" T apply"))
        .and_then(|a| u64::from_str_radix(a, 16).ok())
        .unwrap_or_else(|| panic!("no apply in nm's output:\n{symbols}"));
    let program = format!(
        "uprobe:{}:apply {{ printf(\"ip %lx %s di %d\\n\", reg(\"ip\"), usym(reg(\"ip\")), reg(\"di\") == arg0); }}",
        bin.display()
    );
    // The fixture lingers a second after its calls: bpftrace names printf's usym() while the process lives.
    let cmd = format!("{} 6 1000", bin.display());
    let mine = rprof_bt(&["-e", &program, "-c", &cmd]);
    let theirs = bpftrace(&["-e", &program, "-c", &cmd]);
    let expected = vec![format!("ip {addr:x} apply di 1"); 6];
    assert_eq!(lines_with(&mine, "ip "), expected, "{mine}");
    assert_eq!(lines_with(&theirs, "ip "), expected, "{theirs}");
}
