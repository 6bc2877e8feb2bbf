//! The reader on live interpreters (no perf: `process_vm_readv` only): each installed CPython runs
//! fixtures/py_work.py, and its threads' Python stacks are read as a sample's would be.
use super::{detect, Detected, PyStack, Runtime};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The interpreters of this machine's image (Debian's, pyenv's builds with symbols).
const PYTHONS: [&str; 4] = [
    "/usr/bin/python3.11",
    "/root/.pyenv/versions/3.11.7/bin/python3.11",
    "/root/.pyenv/versions/3.12.1/bin/python3.12",
    "/root/.pyenv/versions/3.13.0/bin/python3.13",
];

/// Kills the fixture when dropped (a failed assertion included).
struct Fixture(Child);

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(python: &str, mode: &str) -> Fixture {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/py_work.py");
    started(python, Command::new(python).args([script, mode, "30"]))
}

/// Run `source` (`python -S -c`: no `site`, whose `.pth` files may import `threading`), which prints "ready".
fn start_source(python: &str, source: &str) -> Fixture {
    let mut cmd = Command::new(python);
    started(python, cmd.args(["-S", "-c", source]).stdin(Stdio::piped()))
}

/// Start `cmd` and wait for the "ready" line it prints.
fn started(python: &str, cmd: &mut Command) -> Fixture {
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("start python");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "{python}: the fixture did not start");
    Fixture(child)
}

fn runtime(python: &str, pid: u32) -> Box<Runtime> {
    match detect(pid) {
        Detected::Python(r) => r,
        Detected::Unsupported(v) => panic!("{python}: not read: {v}"),
        Detected::NotPython => panic!("{python}: not found to be CPython"),
    }
}

/// Read `tid`'s stack until `done` holds for its frame names (leaf first), for at most 10 s.
fn read_until(r: &mut Runtime, tid: u32, done: impl Fn(&[&str]) -> bool) -> (PyStack, Vec<String>) {
    let start = Instant::now();
    loop {
        let stack = r.stack(tid, None);
        let names: Vec<String> = stack
            .as_ref()
            .map(|s| s.frames.iter().map(|f| f.name.to_string()).collect())
            .unwrap_or_default();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        match stack {
            Ok(stack) if done(&refs) => return (stack, names),
            Ok(_) => {}
            Err(e) => eprintln!("thread {tid}: {e}"),
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "thread {tid}: {names:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Check `py_work.py nested` on each interpreter: the main thread's stack is `inner`, `middle`, `outer`, `main`,
/// `<module>` (leaf first) with py_work.py's lines, one evaluator call running them all (only `<module>`'s
/// frame is an entry frame: Python-to-Python calls do not recurse in C).
#[test]
fn nested_stacks_of_each_version() {
    for python in PYTHONS {
        if !std::path::Path::new(python).exists() {
            eprintln!("SKIP nested_stacks_of_each_version: {python} is not installed");
            continue;
        }
        let fixture = start(python, "nested");
        let pid = fixture.0.id();
        let mut r = runtime(python, pid);
        // In inner's loop (lines 70-71), not at its first line (68), which a read just after "ready" can catch.
        let (stack, names) = read_until(&mut r, pid, |n| {
            n.first()
                .is_some_and(|f| f.starts_with("inner (py_work.py:7"))
        });
        let want = [
            "inner (py_work.py:7",
            "middle (py_work.py:76)",
            "outer (py_work.py:80)",
            "main (py_work.py:",
            "<module> (py_work.py:",
        ];
        assert_eq!(names.len(), want.len(), "{python}: {names:?}");
        for (name, want) in names.iter().zip(want) {
            assert!(name.starts_with(want), "{python}: {names:?}");
        }
        let entries: Vec<bool> = stack.frames.iter().map(|f| f.entry).collect();
        assert_eq!(
            entries,
            [false, false, false, false, true],
            "{python}: {names:?}"
        );
        assert_ne!(stack.current_frame, 0);
    }
}

/// Check `py_work.py threads` on each interpreter: each of the two threads' stacks holds its own function
/// (`spin_alpha`, `spin_beta`) and not the other's, under `Thread._bootstrap`, and its `threading` name.
#[test]
fn threads_of_each_version() {
    for python in PYTHONS {
        if !std::path::Path::new(python).exists() {
            eprintln!("SKIP threads_of_each_version: {python} is not installed");
            continue;
        }
        let fixture = start(python, "threads");
        let pid = fixture.0.id();
        let mut r = runtime(python, pid);
        let has = |names: &[&str], f: &str| names.iter().any(|n| n.starts_with(&format!("{f} (")));
        let start = Instant::now();
        let mut found = Vec::new();
        while found.len() < 2 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{python}: threads {found:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
            found.clear();
            let tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
                .unwrap()
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .filter(|&t| t != pid)
                .collect();
            for tid in tids {
                let (stack, names) =
                    read_until(&mut r, tid, |n| has(n, "spin_alpha") || has(n, "spin_beta"));
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                assert!(
                    !(has(&refs, "spin_alpha") && has(&refs, "spin_beta")),
                    "{python}: {names:?}"
                );
                assert!(
                    names.last().unwrap().starts_with("Thread._bootstrap ("),
                    "{python}: {names:?}"
                );
                let f = if has(&refs, "spin_alpha") {
                    "spin_alpha"
                } else {
                    "spin_beta"
                };
                assert_eq!(r.thread_name(&stack).as_deref(), Some(f), "{python}");
                found.push(f);
            }
        }
        found.sort();
        assert_eq!(found, ["spin_alpha", "spin_beta"], "{python}");
    }
}

/// Check the main thread's name on each interpreter, as py-spy gives it: `MainThread` when the script imported
/// `threading`, the name it was renamed to (`boss`), and none when it did not import `threading` (the script
/// checks that nothing else did), then `MainThread` once it imports `threading` late (a look that found no
/// `threading` is not taken for good).
#[test]
fn main_thread_name_of_each_version() {
    let cases = [
        (
            "import threading, time\nprint('ready', flush=True)\ntime.sleep(30)",
            Some("MainThread"),
        ),
        (
            "import threading, time\nthreading.current_thread().name = 'boss'\nprint('ready', flush=True)\n\
             time.sleep(30)",
            Some("boss"),
        ),
        (
            "import sys, time\nprint('threading' in sys.modules or 'ready', flush=True)\ntime.sleep(30)",
            None,
        ),
    ];
    for python in PYTHONS {
        if !std::path::Path::new(python).exists() {
            eprintln!("SKIP main_thread_name_of_each_version: {python} is not installed");
            continue;
        }
        for (source, want) in cases {
            let fixture = start_source(python, source);
            let mut r = runtime(python, fixture.0.id());
            assert_eq!(r.main_thread_name().as_deref(), want, "{python}: {source}");
        }
        let mut fixture = start_source(
            python,
            "import sys, time\nprint('threading' in sys.modules or 'ready', flush=True)\nsys.stdin.readline()\n\
             import threading\ntime.sleep(30)",
        );
        let mut r = runtime(python, fixture.0.id());
        assert_eq!(r.main_thread_name(), None, "{python}: before the import");
        assert_eq!(r.main_thread_name(), None, "{python}: before the import");
        let mut stdin = fixture.0.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
        let start = Instant::now();
        let mut name = None;
        while name.is_none() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
            name = r.main_thread_name();
        }
        assert_eq!(
            name.as_deref(),
            Some("MainThread"),
            "{python}: after the import"
        );
    }
}
