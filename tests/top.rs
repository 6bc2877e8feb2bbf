//! `rprof top`: a busy fixture's hot function at the top of its table within two refreshes, as perf top
//! --stdio shows it on the same process; and the terminal UI under tmux, quit with `q` and the terminal
//! restored.
mod common;

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CLEAR: &str = "\x1b[H\x1b[2J";

/// The spinner, started with a CPU budget far above what the test needs (it is killed at the end), once it
/// has said it runs.
fn spinner(dir: &std::path::Path) -> Child {
    let bin = common::build_c(dir, "top_spin.c", &["-O2", "-g", "-fno-omit-frame-pointer"]);
    let mut child = Command::new(bin)
        .arg("600000")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(
        common::read_line(child.stdout.as_mut().unwrap()).trim(),
        "ready"
    );
    child
}

/// The tables of a --stdio output, each as (header, rows), rows as (percent, the rest of the line).
fn screens(text: &str) -> Vec<(String, Vec<(f64, String)>)> {
    text.split(CLEAR)
        .filter(|s| s.contains("PerfTop:"))
        .map(|s| {
            let mut lines = s.lines().filter(|l| !l.trim().is_empty());
            let header = lines.next().unwrap_or_default().to_string();
            let rows = lines
                .filter_map(|l| {
                    let (pct, rest) = l.trim().split_once("%  ")?;
                    Some((
                        pct.parse().ok()?,
                        rest.split_whitespace().collect::<Vec<_>>().join(" "),
                    ))
                })
                .collect();
            (header, rows)
        })
        .collect()
}

/// perf top --stdio on `pid` until it has printed `tables` tables with rows, or 60 s passed (its standard
/// input held open: at end of input perf top shows its key menu instead).
fn perf_top(pid: u32, tables: usize) -> String {
    let mut perf = Command::new("perf")
        .args(["top", "--stdio", "-d", "1", "-p", &pid.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = perf.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let mut buf = [0u8; 4096];
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let Ok(n) = out.read(&mut buf) else { break };
            if n == 0 {
                break;
            }
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
            if screens(&text).iter().filter(|s| !s.1.is_empty()).count() > tables {
                break;
            }
        }
        text
    });
    let text = reader.join().unwrap();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(perf.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    );
    drop(perf.stdin.take());
    let _ = perf.wait();
    text
}

#[test]
fn stdio_shows_the_hot_function_at_the_top_as_perf_top_does() {
    if !common::privileged("top_stdio") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut spin = spinner(dir.path());
    let pid = spin.id().to_string();
    let out = common::rprof_ok(&["top", "--stdio", "-p", &pid, "-d", "1", "--refreshes", "2"]);
    let ours = screens(&out);
    assert_eq!(ours.len(), 2, "two refreshes, two tables:\n{out}");
    for (header, _) in &ours {
        assert!(
            header.starts_with("   PerfTop:") && header.contains("[4000Hz cpu-clock]"),
            "perf top's header line: {header}"
        );
        assert!(
            header.ends_with(&format!("(target_pid: {pid})")),
            "{header}"
        );
    }
    // The spinner spends all but its clock reads (a system call a millisecond) in top_hot_spin: within two
    // refreshes it heads the table with most of the samples, whatever else the machine runs.
    let (pct, top) = ours[1]
        .1
        .first()
        .cloned()
        .expect("rows in the second table");
    assert_eq!(top, "top_spin [.] top_hot_spin", "{out}");
    assert!(pct > 50.0, "top_hot_spin has {pct}% of the samples:\n{out}");
    if common::perf_tool("top_stdio") {
        let theirs = perf_top(spin.id(), 2);
        let tables: Vec<_> = screens(&theirs)
            .into_iter()
            .filter(|s| !s.1.is_empty())
            .collect();
        let (their_pct, their_top) = tables
            .last()
            .and_then(|t| t.1.first().cloned())
            .expect("perf top printed a table");
        assert_eq!(their_top, top, "perf top:\n{theirs}\nrprof top:\n{out}");
        assert!(their_pct > 50.0, "perf top:\n{theirs}");
    }
    let _ = spin.kill();
    let _ = spin.wait();
}

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux").args(args).output().expect("run tmux");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Poll `what` every 100 ms until it is true or `limit` passed.
fn wait_until(limit: Duration, mut what: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if what() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

#[test]
fn terminal_ui_under_tmux_shows_the_hot_function_and_quits_on_q() {
    if !common::privileged("top_tui") {
        return;
    }
    if Command::new("tmux").arg("-V").output().is_err() {
        common::skip("top_tui", "tmux is not installed (apt-get install tmux)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut spin = spinner(dir.path());
    let session = format!("rprof-top-{}", std::process::id());
    let socket = ["-L", session.as_str()];
    let rprof = env!("CARGO_BIN_EXE_rprof");
    let line = format!("{rprof} top -p {} -d 1; echo top-exited-$?", spin.id());
    let run = |args: &[&str]| tmux(&[&socket[..], args].concat());
    run(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "200",
        "-y",
        "50",
        "sh",
    ]);
    run(&["send-keys", "-t", &session, &line, "Enter"]);
    let pane = || run(&["capture-pane", "-p", "-t", &session]);
    // Two refreshes are two seconds of the view; the start (the fixture's symbols read, a loaded machine)
    // gets the rest of the allowance.
    let mut seen = String::new();
    let shown = wait_until(Duration::from_secs(30), || {
        seen = pane();
        seen.lines()
            .any(|l| l.contains("top_spin") && l.contains("[.] top_hot_spin"))
    });
    let in_alternate = run(&["display-message", "-p", "-t", &session, "#{alternate_on}"]);
    run(&["send-keys", "-t", &session, "q"]);
    let mut after = String::new();
    let ended = wait_until(Duration::from_secs(30), || {
        after = pane();
        after.contains("top-exited-0")
    });
    let alternate_after = run(&["display-message", "-p", "-t", &session, "#{alternate_on}"]);
    run(&["kill-server"]);
    let _ = spin.kill();
    let _ = spin.wait();
    assert!(shown, "the hot function is not in the pane:\n{seen}");
    assert_eq!(
        in_alternate.trim(),
        "1",
        "the view uses the alternate screen"
    );
    assert!(ended, "q did not end rprof top:\n{after}");
    assert_eq!(
        alternate_after.trim(),
        "0",
        "the alternate screen is left:\n{after}"
    );
    // The shell's screen is back: the command line typed before, no table left over.
    assert!(
        after.contains(&line[..20]) && !after.contains("PerfTop:"),
        "{after}"
    );
}

/// The rows of a captured pane: each as its columns after the percentage (comm, dso, `[.]`, sym for
/// `--sort comm,dso,sym`).
fn pane_rows(pane: &str) -> Vec<Vec<String>> {
    pane.lines()
        .filter_map(|l| {
            let (pct, rest) = l.trim().split_once("%  ")?;
            pct.parse::<f64>().ok()?;
            Some(rest.split_whitespace().map(str::to_string).collect())
        })
        .collect()
}

/// The title line of a captured pane.
fn pane_title(pane: &str) -> String {
    pane.lines()
        .find(|l| l.contains("PerfTop:"))
        .unwrap_or_default()
        .to_string()
}

/// perf top's zoom keys under tmux: two spinners (one binary under two names), the row of the second
/// selected with the arrows, `d` leaves only its binary's rows with `, DSO: NAME` on the title line, `d`
/// again zooms out, `t` leaves only its process's rows with `, Thread: COMM(PID)`, Esc zooms out.
#[test]
fn terminal_ui_zooms_into_a_binary_and_a_process() {
    const TEST: &str = "top_tui_zoom";
    if !common::privileged(TEST) {
        return;
    }
    if Command::new("tmux").arg("-V").output().is_err() {
        common::skip(TEST, "tmux is not installed (apt-get install tmux)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut spin = spinner(dir.path());
    let other = dir.path().join("top_spin_b");
    std::fs::copy(dir.path().join("top_spin"), &other).unwrap();
    let mut spin_b = Command::new(&other)
        .arg("600000")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(
        common::read_line(spin_b.stdout.as_mut().unwrap()).trim(),
        "ready"
    );
    let session = format!("rprof-zoom-{}", std::process::id());
    let socket = ["-L", session.as_str()];
    let rprof = env!("CARGO_BIN_EXE_rprof");
    let line = format!(
        "{rprof} top -p {},{} -d 1 --sort comm,dso,sym; echo top-exited-$?",
        spin.id(),
        spin_b.id()
    );
    let run = |args: &[&str]| tmux(&[&socket[..], args].concat());
    run(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "200",
        "-y",
        "50",
        "sh",
    ]);
    run(&["send-keys", "-t", &session, &line, "Enter"]);
    let pane = || run(&["capture-pane", "-p", "-t", &session]);
    let key = |k: &str| run(&["send-keys", "-t", &session, k]);
    let is_row = |r: &Vec<String>, comm: &str, dso: &str| {
        r.len() == 4 && r[0] == comm && r[1] == dso && r[3] == "top_hot_spin"
    };
    let mut seen = String::new();
    let both = wait_until(Duration::from_secs(30), || {
        seen = pane();
        let rows = pane_rows(&seen);
        rows.iter().any(|r| is_row(r, "top_spin", "top_spin"))
            && rows.iter().any(|r| is_row(r, "top_spin_b", "top_spin_b"))
    });
    // The selected row is in reverse video: move it down to top_spin_b's (the selection stays on its row as
    // the order changes).
    let selected = || {
        let text = run(&["capture-pane", "-p", "-e", "-t", &session]);
        text.lines()
            .find(|l| l.contains("\x1b[7m"))
            .unwrap_or_default()
            .to_string()
    };
    let mut chosen = false;
    let mut sel = String::new();
    for _ in 0..20 {
        sel = selected();
        if sel.contains("top_spin_b") {
            chosen = true;
            break;
        }
        key("Down");
        std::thread::sleep(Duration::from_millis(200));
    }
    let only = |comm: Option<&str>, dso: Option<&str>, title: &str| {
        let mut last = String::new();
        let ok = wait_until(Duration::from_secs(10), || {
            last = pane();
            let rows = pane_rows(&last);
            pane_title(&last).ends_with(title)
                && !rows.is_empty()
                && rows.iter().all(|r| {
                    comm.is_none_or(|c| r[0] == c)
                        && dso.is_none_or(|d| r.get(1).map(String::as_str) == Some(d))
                })
        });
        (ok, last)
    };
    let zoom_binary = chosen.then(|| {
        key("d");
        let zoomed = only(None, Some("top_spin_b"), ", DSO: top_spin_b");
        // A refresh later the zoom holds.
        std::thread::sleep(Duration::from_millis(1500));
        let held = only(None, Some("top_spin_b"), ", DSO: top_spin_b");
        key("d");
        let mut out = String::new();
        let back = wait_until(Duration::from_secs(10), || {
            out = pane();
            !pane_title(&out).contains("DSO:")
                && pane_rows(&out)
                    .iter()
                    .any(|r| is_row(r, "top_spin", "top_spin"))
        });
        (zoomed, held, back, out)
    });
    let title = format!(", Thread: top_spin_b({})", spin_b.id());
    let zoom_process = chosen.then(|| {
        key("t");
        let zoomed = only(Some("top_spin_b"), None, &title);
        key("Escape");
        let mut out = String::new();
        let back = wait_until(Duration::from_secs(10), || {
            out = pane();
            !pane_title(&out).contains("Thread:")
                && pane_rows(&out)
                    .iter()
                    .any(|r| is_row(r, "top_spin", "top_spin"))
        });
        (zoomed, back, out)
    });
    key("q");
    let mut after = String::new();
    let ended = wait_until(Duration::from_secs(30), || {
        after = pane();
        after.contains("top-exited-0")
    });
    run(&["kill-server"]);
    for s in [&mut spin, &mut spin_b] {
        let _ = s.kill();
        let _ = s.wait();
    }
    assert!(both, "both spinners' rows are not in the pane:\n{seen}");
    assert!(chosen, "Down never selected top_spin_b's row: {sel:?}");
    let (zoomed, held, back, out) = zoom_binary.unwrap();
    assert!(zoomed.0, "d did not zoom into top_spin_b:\n{}", zoomed.1);
    assert!(held.0, "the zoom did not hold over a refresh:\n{}", held.1);
    assert!(back, "d again did not zoom out:\n{out}");
    let (zoomed, back, out) = zoom_process.unwrap();
    assert!(
        zoomed.0,
        "t did not zoom into top_spin_b's process:\n{}",
        zoomed.1
    );
    assert!(back, "Esc did not zoom out:\n{out}");
    assert!(ended, "q did not end rprof top:\n{after}");
}
