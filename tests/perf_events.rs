//! The event layer and `rprof stat` against perf on the same workloads, in the same test: attrs as perf builds
//! them, software events sampled with stacks and counted (`fixtures/perf_events.c` touches N pages, sleeps N
//! times, moves between CPUs N times), perf stat's rows, intervals and CSV, and the unprivileged fallback.
mod common;

use common::{
    assert_success, csv_count, parse_folded, perf_events_fixture as fixture, perf_tool, privileged,
    rprof, skip, KillOnDrop,
};
use std::process::{Command, Output};

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run the command")
}

/// `rprof stat ARGS`: (stdout, stderr), asserting success.
fn rprof_stat(args: &[&str]) -> (String, String) {
    let out = run(rprof().arg("stat").args(args));
    assert_success(&out, args);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (text(&out.stdout), text(&out.stderr))
}

/// `perf stat ARGS`: (stdout, stderr).
fn perf_stat(args: &[&str]) -> (String, String) {
    let out = run(Command::new("perf").arg("stat").args(args));
    assert!(out.status.success(), "perf stat {args:?}: {out:?}");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (text(&out.stdout), text(&out.stderr))
}

/// Two busy loops (the machine has two CPUs) until dropped.
fn busy_loops() -> Vec<KillOnDrop> {
    (0..2)
        .map(|_| {
            KillOnDrop(
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()
                    .unwrap(),
            )
        })
        .collect()
}

/// The attr fields perf printed for `event` (`perf stat -vv -e EVENT -- true` prints the attr it tried even
/// where the open fails): (type, config, [exclude_user, exclude_kernel, exclude_hv, exclude_guest,
/// precise_ip]); absent fields are 0.
fn perf_attr(event: &str) -> (u32, u64, [u64; 5]) {
    let (_, err) = perf_stat(&["-vv", "-e", event, "--", "true"]);
    let field = |key: &str| {
        err.lines()
            .filter_map(|l| l.trim().strip_prefix(key).map(str::trim))
            .find(|v| !v.is_empty() && v.split_whitespace().count() == 1)
            .map(|v| match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).unwrap(),
                None => v.parse().unwrap(),
            })
            .unwrap_or(0)
    };
    let keys = [
        "exclude_user ",
        "exclude_kernel ",
        "exclude_hv ",
        "exclude_guest ",
        "precise_ip ",
    ];
    (field("type ") as u32, field("config "), keys.map(field))
}

/// Check every event's attr (type, config, the modifiers' bits) against the one perf builds for it: software
/// events and their aliases, hardware, cache and raw events, with `:u`, `:k`, `:uk`, `:p`, `:ppp`.
#[test]
fn attrs_match_perf() {
    if !perf_tool("attrs_match_perf") {
        return;
    }
    let events = [
        "cpu-clock",
        "task-clock",
        "page-faults",
        "faults",
        "minor-faults",
        "major-faults",
        "cs",
        "context-switches:u",
        "migrations:k",
        "alignment-faults",
        "emulation-faults",
        "dummy",
        "cycles",
        "cycles:k",
        "cycles:u",
        "cycles:p",
        "cycles:ppp",
        "instructions:uk",
        "branches",
        "branch-misses:u",
        "cache-references",
        "cache-misses",
        "ref-cycles",
        "L1-dcache-load-misses",
        "L1-icache-loads",
        "LLC-load-misses",
        "dTLB-loads",
        "iTLB-load-misses",
        "branch-load-misses",
        "r1a8",
        "r1a8:k",
        "page-faults:pp",
    ];
    for name in events {
        let ours = rprof::events::parse(&rprof::events::EventSpec::new(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .attr()
            .unwrap_or_else(|| panic!("{name}: no attr"))
            .event_fields();
        assert_eq!(ours, perf_attr(name), "{name}: rprof's attr vs perf's");
    }
}

/// Check that `record -e page-faults -c 1 -g` puts the fixture's N page faults in the function that touches
/// the pages (with its caller), and that `stat -e page-faults` counts what `perf stat` counts of the same
/// program (N plus its start, within 1% + 20 of perf's: the start's faults vary with the loader's work).
#[test]
fn page_faults_sampled_and_counted_as_perf() {
    const TEST: &str = "page_faults_sampled_and_counted_as_perf";
    if !privileged(TEST) || !perf_tool(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path());
    let b = bin.to_str().unwrap();
    const PAGES: u64 = 3000;
    let data = dir.path().join("pf.data");
    let args = [
        "record",
        "-q",
        "-e",
        "page-faults",
        "-c",
        "1",
        "-g",
        "-o",
        data.to_str().unwrap(),
        "--",
        b,
        "touch",
        "3000",
    ];
    assert_success(&run(rprof().args(args)), &args);
    let out = run(rprof().args(["report", "-i", data.to_str().unwrap(), "--folded"]));
    let folded = parse_folded(&String::from_utf8_lossy(&out.stdout));
    let in_touch: u64 = folded
        .iter()
        .filter(|(f, _)| common::contains_run(f, &["main", "pe_touch_pages"]))
        .map(|(_, n)| n)
        .sum();
    assert!(
        (PAGES..=PAGES + 20).contains(&in_touch),
        "{in_touch} faults in pe_touch_pages: {folded:?}"
    );
    let (_, ours) = rprof_stat(&["-x,", "-e", "page-faults", "--", b, "touch", "3000"]);
    let (_, perfs) = perf_stat(&["-x,", "-e", "page-faults", "--", b, "touch", "3000"]);
    let (ours, perfs) = (
        csv_count(&ours, "page-faults"),
        csv_count(&perfs, "page-faults"),
    );
    assert!(
        ours >= PAGES && perfs >= PAGES,
        "rprof {ours}, perf {perfs}"
    );
    assert!(
        ours.abs_diff(perfs) <= perfs / 100 + 20,
        "rprof {ours} vs perf {perfs}"
    );
}

/// Check `stat -e cs` on a fixture that sleeps N times: at least N, and the switches /proc/self/status shows
/// between the fixture's first and last reading, plus at most 2 before its first one (after exec, rprof's
/// own wake-up as the exec closes its status pipe can preempt the fixture once); perf stat on the same
/// fixture within the same bounds. Idle and beside two busy loops (preemptions add to both sides).
#[test]
fn context_switches_match_proc_status() {
    const TEST: &str = "context_switches_match_proc_status";
    if !privileged(TEST) || !perf_tool(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path());
    let b = bin.to_str().unwrap();
    const N: u64 = 200;
    for busy in [false, true] {
        let _loops = busy.then(busy_loops);
        for (who, (out, err)) in [
            (
                "rprof",
                rprof_stat(&["-x,", "-e", "cs", "--", b, "sleep", "200"]),
            ),
            (
                "perf",
                perf_stat(&["-x,", "-e", "cs", "--", b, "sleep", "200"]),
            ),
        ] {
            let cs = csv_count(&err, "cs");
            let w: Vec<u64> = out
                .split_whitespace()
                .skip(1)
                .map(|w| w.parse().unwrap())
                .collect();
            let between = w[1] - w[0];
            assert!(
                between >= N && cs >= N,
                "{who}: {cs} switches, status {w:?}"
            );
            assert!(
                (between..=between + 2).contains(&cs),
                "{who} (busy {busy}): {cs} vs status {w:?}"
            );
        }
    }
}

/// Check that `stat -e migrations` counts a fixture's N moves between CPU 0 and CPU 1 (sched_setaffinity;
/// the first may find it on CPU 0 already), as perf stat does; pinned, the load balancer cannot add more.
#[test]
fn migrations_counted_as_perf() {
    const TEST: &str = "migrations_counted_as_perf";
    if !privileged(TEST) || !perf_tool(TEST) {
        return;
    }
    if rprof::perf::online_cpus().unwrap().len() < 2 {
        return skip(TEST, "needs two CPUs");
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path());
    let b = bin.to_str().unwrap();
    let (_, ours) = rprof_stat(&["-x,", "-e", "migrations", "--", b, "migrate", "100"]);
    let (_, perfs) = perf_stat(&["-x,", "-e", "migrations", "--", b, "migrate", "100"]);
    for (who, text) in [("rprof", &ours), ("perf", &perfs)] {
        let n = csv_count(text, "migrations");
        assert!(
            (99..=102).contains(&n),
            "{who}: {n} migrations for 100 moves"
        );
    }
}

/// A line with its numbers as `N` and its rates' prefixes dropped (`K/sec` as `/sec`): what perf's layout
/// fixes whatever the counts.
fn shape(line: &str) -> String {
    let re = regex::Regex::new(r"[0-9]+(\.[0-9]+)?").unwrap();
    let s = re
        .replace_all(line, "N")
        .replace("K/sec", "/sec")
        .replace("M/sec", "/sec");
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Check that two outputs of stat have the same lines, numbers aside, each as wide as the other's.
fn same_layout(ours: &str, perfs: &str) {
    let lines = |t: &str| t.lines().map(str::to_string).collect::<Vec<_>>();
    let (ours_l, perf_l) = (lines(ours), lines(perfs));
    assert_eq!(ours_l.len(), perf_l.len(), "rprof:\n{ours}\nperf:\n{perfs}");
    for (o, p) in ours_l.iter().zip(&perf_l) {
        assert_eq!(shape(o), shape(p), "rprof:\n{ours}\nperf:\n{perfs}");
        let fixed = !p.contains("seconds");
        assert!(!fixed || o.len() == p.len(), "widths differ:\n{o:?}\n{p:?}");
    }
}

/// Check that `rprof stat -- CMD` without -e prints perf stat's rows, line for line: the same events and
/// metrics in the same order, every line as long as perf's (the columns fixed), `<not supported>` rows
/// for the PMU's events; `--detailed` as perf's `-d`; and `-x,` the same fields.
#[test]
fn default_rows_as_perf() {
    const TEST: &str = "default_rows_as_perf";
    if !privileged(TEST) || !perf_tool(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path());
    let b = bin.to_str().unwrap();
    let cmd = [b, "touch", "500"];
    let mut args = vec!["--"];
    args.extend(cmd);
    let (_, ours) = rprof_stat(&args);
    let (_, perfs) = perf_stat(&args);
    same_layout(&ours, &perfs);
    // perf's -d is rprof's --detailed (rprof's -d is a duration, and without a number one line says so).
    let detailed = |flag: &'static str| [flag, "--", b, "touch", "500"];
    same_layout(
        &rprof_stat(&detailed("--detailed")).1,
        &perf_stat(&detailed("-d")).1,
    );
    let d = run(rprof().arg("stat").args(detailed("-d")));
    let said = String::from_utf8_lossy(&d.stderr);
    assert!(
        d.status.code() == Some(2) && said.lines().count() == 1 && said.contains("--detailed"),
        "{said}"
    );
    assert!(ours.contains("msec task-clock") && ours.contains("CPUs utilized"));
    assert!(
        ours.contains("<not supported>      cycles")
            == perfs.contains("<not supported>      cycles")
    );
    let mut csv = vec!["-x,", "--"];
    csv.extend(cmd);
    let fields = |t: &str| -> Vec<(String, String, usize)> {
        t.lines()
            .map(|l| l.split(',').collect::<Vec<_>>())
            .map(|f| (f[1].to_string(), f[2].to_string(), f.len()))
            .collect()
    };
    assert_eq!(fields(&rprof_stat(&csv).1), fields(&perf_stat(&csv).1));
}

/// Check `stat -I 500 -a -- sleep 2.2`: perf's header, 4 whole intervals and the partial last one (5
/// timestamps, the last between 2.2 and 2.5 s), each with perf's rows, as perf prints them on the same command.
#[test]
fn intervals_as_perf() {
    const TEST: &str = "intervals_as_perf";
    if !privileged(TEST) || !perf_tool(TEST) {
        return;
    }
    let args = [
        "-I",
        "500",
        "-a",
        "-e",
        "cs,cpu-clock",
        "--",
        "sleep",
        "2.2",
    ];
    let (_, ours) = rprof_stat(&args);
    let (_, perfs) = perf_stat(&args);
    let stamps = |t: &str| -> Vec<f64> {
        let mut s: Vec<f64> = t
            .lines()
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .collect();
        s.dedup();
        s
    };
    let (o, p) = (stamps(&ours), stamps(&perfs));
    assert_eq!(o.len(), 5, "{ours}");
    assert!(
        (2.2..2.5).contains(&o[4]) && (0.45..0.6).contains(&o[0]),
        "{o:?}"
    );
    // perf's ticks drift under load (each timed from the last print): 4 or 5 of them before sleep ends.
    assert!((4..=5).contains(&p.len()), "perf: {perfs}");
    assert_eq!(ours.lines().next(), perfs.lines().next());
    assert_eq!(ours.lines().count(), 1 + 2 * o.len(), "{ours}");
    assert_eq!(perfs.lines().count(), 1 + 2 * p.len(), "{perfs}");
    let row_shapes = |t: &str| -> Vec<String> { t.lines().skip(1).take(2).map(shape).collect() };
    assert_eq!(row_shapes(&ours), row_shapes(&perfs));
}

/// Check that `stat -r 3 -x,` has perf's noise column (`NN.NN%` after the event's name, on every row, the
/// `<not supported>` ones included) with perf stat's fields on the same command in the same test, and that
/// the fixture's page faults (a fixed 500 touched pages a run, plus its start) vary by little: under 5%.
#[test]
fn repeat_csv_noise_column_as_perf() {
    const TEST: &str = "repeat_csv_noise_column_as_perf";
    if !privileged(TEST) || !perf_tool(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path());
    let args = [
        "-r",
        "3",
        "-x,",
        "--",
        bin.to_str().unwrap(),
        "touch",
        "500",
    ];
    let (_, ours) = rprof_stat(&args);
    let (_, perfs) = perf_stat(&args);
    // The event, whether the noise column is there, the number of fields; and the values' form (no
    // decimals for a count, two for the clock's msec).
    let fields = |t: &str| -> Vec<(String, bool, usize, bool)> {
        t.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.split(',').collect::<Vec<_>>())
            .map(|f| {
                (
                    f[2].to_string(),
                    f[3].ends_with('%'),
                    f.len(),
                    f[0].contains('.'),
                )
            })
            .collect()
    };
    assert_eq!(
        fields(&ours),
        fields(&perfs),
        "rprof:\n{ours}\nperf:\n{perfs}"
    );
    let noise = ours
        .lines()
        .find(|l| l.contains(",page-faults,"))
        .and_then(|l| {
            l.split(',')
                .nth(3)?
                .trim_end_matches('%')
                .parse::<f64>()
                .ok()
        })
        .unwrap_or_else(|| panic!("no page-faults noise in:\n{ours}"));
    assert!(noise < 5.0, "{ours}");
}

/// The task-clock milliseconds of stat's `-x, -I` lines (`TIME,COUNT,msec,task-clock,...`), summed over the
/// intervals (`<not counted>`: the thread did not run in it).
fn interval_task_clock(text: &str) -> f64 {
    text.lines()
        .map(|l| l.split(',').map(str::trim).collect::<Vec<_>>())
        .filter(|f| f.get(3) == Some(&"task-clock"))
        .map(|f| f[1].parse::<f64>().unwrap_or(0.0))
        .sum()
}

/// A `stat -x, -I 100 -e task-clock -t TID` (rprof's or perf's), its standard error read in the background;
/// returned once it has printed its first interval, so that its counter counts.
struct Counting {
    child: KillOnDrop,
    lines: std::sync::mpsc::Receiver<String>,
    text: String,
}

impl Counting {
    fn start(mut cmd: Command, tid: &str) -> Counting {
        cmd.args(["stat", "-x,", "-I", "100", "-e", "task-clock", "-t", tid])
            .stderr(std::process::Stdio::piped());
        let mut child = KillOnDrop(cmd.spawn().expect("start stat"));
        let err = std::io::BufReader::new(child.0.stderr.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in std::io::BufRead::lines(err).map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let mut c = Counting {
            child,
            lines,
            text: String::new(),
        };
        while !c.text.contains(",task-clock,") {
            let l = c.lines.recv_timeout(std::time::Duration::from_secs(60));
            c.text += &l.expect("stat printed an interval within 60 s");
            c.text.push('\n');
        }
        c
    }

    /// The task-clock milliseconds of the whole count, once the stat has ended (its thread gone).
    fn finish(mut self) -> (f64, String) {
        assert!(self.child.0.wait().unwrap().success(), "{}", self.text);
        for l in self.lines.iter() {
            self.text += &l;
            self.text.push('\n');
        }
        (interval_task_clock(&self.text), self.text)
    }
}

/// A thread's CPU time in /proc/PID/task/TID/stat (utime + stime, in clock ticks), in milliseconds, and the
/// tick's length.
fn thread_cpu_ms(pid: &str, tid: &str) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let getconf = run(Command::new("getconf").arg("CLK_TCK"));
    let hz: f64 = String::from_utf8_lossy(&getconf.stdout)
        .trim()
        .parse()
        .unwrap();
    (ticks as f64 * 1e3 / hz, 1e3 / hz)
}

/// Check that `stat -t TID` counts that thread only: of a fixture's two threads, the busy one's task-clock is
/// its own CPU time in /proc (the 500 ms it spins, within the two ticks that /proc's utime and stime each
/// truncate: the reading before is of a thread that has barely run, so the delta can only come out smaller;
/// task-clock itself leaves out the context-switch path, microseconds a switch), the sleeping one's near zero (it sleeps throughout: under 5 ms, and 0 ticks in /proc), and perf
/// stat -t on the busy thread in the same run counts what rprof counts (within 2 ms: both count the same
/// nanoseconds from before the spin to the thread's end). Each stat counts in intervals (-I 100) so that the
/// test knows when it counts (its first interval printed) before the thread starts its work.
#[test]
fn stat_thread_counts_that_thread_only() {
    const TEST: &str = "stat_thread_counts_that_thread_only";
    if !privileged(TEST) || !perf_tool(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let inc = format!("-I{}", common::fixtures().display());
    let bin = common::build_c(dir.path(), "stat_threads.c", &["-O1", &inc]);
    let mut fixture = KillOnDrop(
        Command::new(&bin)
            .arg("500")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stdout = fixture.0.stdout.take().unwrap();
    let ids = common::read_line(&mut stdout);
    let [pid, busy, sleeper]: [&str; 3] = ids
        .split_whitespace()
        .collect::<Vec<_>>()
        .try_into()
        .unwrap_or_else(|_| panic!("PID BUSY SLEEPER: {ids}"));
    let ours_busy = Counting::start(rprof(), busy);
    let ours_sleeper = Counting::start(rprof(), sleeper);
    let perfs_busy = Counting::start(Command::new("perf"), busy);
    let (busy_before, tick) = thread_cpu_ms(pid, busy);
    let (sleeper_before, _) = thread_cpu_ms(pid, sleeper);
    let mut stdin = fixture.0.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, b"go\n").unwrap();
    assert_eq!(common::read_line(&mut stdout).trim(), "done");
    let busy_ms = thread_cpu_ms(pid, busy).0 - busy_before;
    let sleeper_ms = thread_cpu_ms(pid, sleeper).0 - sleeper_before;
    drop(stdin);
    assert!(fixture.0.wait().unwrap().success());
    let (ours, ours_text) = ours_busy.finish();
    let (quiet, quiet_text) = ours_sleeper.finish();
    let (perfs, perf_text) = perfs_busy.finish();
    let all = format!("rprof -t {busy}:\n{ours_text}\nrprof -t {sleeper}:\n{quiet_text}\nperf -t {busy}:\n{perf_text}\n/proc: busy {busy_ms} ms, sleeper {sleeper_ms} ms");
    eprintln!(
        "stat -t: busy {ours:.2} ms (perf {perfs:.2}, /proc {busy_ms}), sleeper {quiet:.3} ms (/proc {sleeper_ms})"
    );
    assert!(busy_ms >= 500.0 - 2.0 * tick, "{all}");
    assert!((ours - busy_ms).abs() <= 2.0 * tick + 2.0, "{all}");
    assert!(sleeper_ms == 0.0 && quiet < 5.0, "{all}");
    assert!((ours - perfs).abs() <= 2.0, "{all}");
}
