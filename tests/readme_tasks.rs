//! README.md's "Common tasks" section, run: every task's command runs, and the line of output the README shows
//! for it must be in what the command prints, so the front page cannot drift from what rprof does.
//!
//! How a task is read: a `### Title`, then a ```console block whose first line is `$ COMMAND` and whose other
//! lines are output lines the README shows (`...` lines are left out). How it is run: `sh -c COMMAND` in a
//! temporary directory holding the fixtures under the names the README uses (`calltree`, `dw_calltree`,
//! `offcpu_sleep`, `probe_fixture`, `readme_overloads`, `go_timing`, built as [`build_fixtures`] says), with
//! the rprof under test first in PATH, tasks in README order (so a task may read the `rprof.data` an earlier
//! one wrote; one is recorded first if none was). Substitutions: `$(pgrep -n calltree)` becomes the pid of the
//! `calltree` this test started (another `calltree` on the machine must not be picked), and the directory's path
//! in the output becomes `.`.
//!
//! How a line is checked: the shown line, its numbers (with their unit: `1.85ms`, `74.84%`, `3,015`) taken as
//! any number and its runs of spaces as any run, must match a whole line of the output (stdout and stderr);
//! and [`TASKS`] gives, per task, the parts that the fixture makes exactly (names, stacks, call counts: never
//! timings or sample counts), which the README's line and the matching output line must both contain.
mod common;
use common::*;
use regex::Regex;
use std::path::Path;
use std::process::Command;

/// Per task (its title): the exact parts of its line (whitespace runs as one space), and its exit status.
const TASKS: &[(&str, &[&str], i32)] = &[
    (
        "Profile a running process",
        &["calltree calltree [.] hot_a"],
        0,
    ),
    (
        "Stacks of a program built without frame pointers (DWARF)",
        &["dw_calltree;_start;", ";main;work_a;hot_a "],
        0,
    ),
    (
        "Where a program waits (off-CPU)",
        &["offcpu_sleep libc.so.6 [.] clock_nanosleep"],
        0,
    ),
    ("A flame graph", &["rprof report: wrote cpu.svg ("], 0),
    ("Time a function exactly", &["func_a 1000 "], 0),
    ("A latency histogram", &["count: 40"], 0),
    ("Arguments and return values", &["twice(arg0=3) = 6"], 0),
    (
        "Every file a command opens (opensnoop)",
        &[
            "syscall:openat(filename=\"/etc/hostname\") = 3",
            "syscall:openat(filename=\"/nonexistent\") = -2 ENOENT",
        ],
        1,
    ),
    (
        "The stacks that reach a function",
        &["__libc_start_call_main;main;func_b 20"],
        0,
    ),
    ("Go functions", &["main.sleeper 40 "], 0),
    ("C++ overloads", &["ns::scale(double) 5 "], 0),
    ("Export to pprof or the Firefox Profiler", &[" hot_a"], 0),
    (
        "Compare two runs",
        &["calltree;__libc_start_call_main;main;work_a;hot_a "],
        0,
    ),
    (
        "The hot lines of a function",
        &["Source code of hot_a in calltree for cpu-clock ("],
        0,
    ),
    (
        "What a bad-input message means",
        &["rprof: 0 functions matched 'nosuch_func' in ./probe_fixture"],
        1,
    ),
];

/// A task of the README: its title, its command, the output lines it shows.
#[derive(Debug)]
struct Task {
    title: String,
    command: String,
    shown: Vec<String>,
}

/// The tasks of README.md's "Common tasks" section, in order.
fn readme_tasks() -> Vec<Task> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme
        .find("\n## Common tasks\n")
        .expect("README.md has a Common tasks section");
    let section = &readme[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let mut tasks = Vec::new();
    for part in section.split("\n### ").skip(1) {
        let title = part.lines().next().unwrap().trim().to_string();
        let Some(at) = part.find("```console\n") else {
            panic!("task `{title}` has no ```console block");
        };
        let block = &part[at + "```console\n".len()..];
        let block = &block[..block.find("```").expect("the block ends")];
        let mut lines = block.lines();
        let mut command = lines
            .next()
            .unwrap()
            .strip_prefix("$ ")
            .expect("`$ COMMAND` first")
            .to_string();
        let mut rest: Vec<&str> = lines.collect();
        while command.ends_with('\\') {
            command.pop();
            command.push_str(rest.remove(0));
        }
        let shown: Vec<String> = rest
            .into_iter()
            .filter(|l| l.trim() != "...")
            .map(str::to_string)
            .collect();
        assert!(!shown.is_empty(), "task `{title}` shows no output line");
        tasks.push(Task {
            title,
            command,
            shown,
        });
    }
    tasks
}

/// Whitespace runs as one space.
fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A whole-line pattern for a shown line: its numbers (with a unit) as any number, its spaces as any run.
fn pattern(line: &str) -> Regex {
    const NUMBER: &str = r"[0-9]+(?:[.,][0-9]+)*(?:ns|us|µs|ms|s)?";
    let number = Regex::new(NUMBER).unwrap();
    let tokens: Vec<String> = line
        .split_whitespace()
        .map(|token| {
            let mut out = String::new();
            let mut last = 0;
            for m in number.find_iter(token) {
                out.push_str(&regex::escape(&token[last..m.start()]));
                out.push_str(NUMBER);
                last = m.end();
            }
            out.push_str(&regex::escape(&token[last..]));
            out
        })
        .collect();
    Regex::new(&format!(r"^\s*{}\s*$", tokens.join(r"\s+"))).unwrap()
}

/// Build the fixtures into `dir` under the README's names; false (after a skip) when Go is missing.
fn build_fixtures(dir: &Path) -> bool {
    build_c(dir, "calltree.c", FP);
    build_c(dir, "dw_calltree.c", &["-O2", "-g", "-fomit-frame-pointer"]);
    build_c(dir, "offcpu_sleep.c", FP);
    build_c(dir, "probe_fixture.c", FP);
    build_c(dir, "readme_overloads.cpp", &["-O0", "-g"]);
    build_go(dir, "go_timing/main.go", "go_timing", "readme_common_tasks").is_some()
}

/// Run `command` with `sh -c` in `dir`, the rprof under test first in PATH (at most 5 minutes); its exit
/// status and its stdout and stderr, `dir`'s path written `.`.
fn run(dir: &Path, command: &str) -> (i32, String) {
    let bin = Path::new(env!("CARGO_BIN_EXE_rprof")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("timeout")
        .args(["300", "sh", "-c", command])
        .current_dir(dir)
        .env("PATH", path)
        .env("PERF_BUILDID_DIR", test_buildid_dir())
        .env("RPROF_BUILDID_CACHE_SIZE", TEST_BUILDID_CACHE_SIZE)
        .env("GOCACHE", dir.join("gocache"))
        .output()
        .expect("run sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = text.replace(&format!("{}/", dir.display()), "./");
    (out.status.code().unwrap_or(-1), text)
}

/// Check one task's output against its shown lines and exact parts.
fn check(task: &Task, exact: &[&str], status: i32, got: i32, output: &str) {
    let title = &task.title;
    assert_eq!(
        got, status,
        "task `{title}`: `{}` exited {got}:\n{output}",
        task.command
    );
    let mut matching = Vec::new();
    for line in &task.shown {
        let re = pattern(line);
        let found: Vec<&str> = output.lines().filter(|l| re.is_match(l)).collect();
        assert!(
            !found.is_empty(),
            "task `{title}`: no line of the output has the shape of the README's `{line}`:\n{output}"
        );
        matching.extend(found.into_iter().map(collapse));
    }
    for part in exact {
        assert!(
            task.shown.iter().any(|l| collapse(l).contains(part)),
            "task `{title}`: the README's line does not show `{part}` (update the README or TASKS)"
        );
        assert!(
            matching.iter().any(|l| l.contains(part)),
            "task `{title}`: no matching output line has `{part}`: {matching:?}\n{output}"
        );
    }
}

/// Check every command of README.md's Common tasks section on the fixtures (see the module doc).
#[test]
fn readme_common_tasks() {
    if !privileged("readme_common_tasks") {
        return;
    }
    let tasks = readme_tasks();
    let titles: Vec<&str> = tasks.iter().map(|t| t.title.as_str()).collect();
    let known: Vec<&str> = TASKS.iter().map(|t| t.0).collect();
    assert_eq!(
        titles, known,
        "README.md's tasks and this test's TASKS differ"
    );
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let go = build_fixtures(dir);
    let calltree = std::process::Command::new(dir.join("calltree"))
        .arg("1000000")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let calltree = KillOnDrop(calltree);
    for (task, (_, exact, status)) in tasks.iter().zip(TASKS) {
        if !go && (task.command.contains("go_timing") || task.command.contains("go tool")) {
            continue;
        }
        if !dir.join("rprof.data").exists() && task.command.starts_with("rprof report") {
            let bin = dir.join("calltree");
            record_to(
                dir,
                "rprof.data",
                &["-g", "--", bin.to_str().unwrap(), "1000"],
            );
        }
        let command = task
            .command
            .replace("$(pgrep -n calltree)", &calltree.0.id().to_string());
        let (got, output) = run(dir, &command);
        eprintln!("$ {command}\n{output}");
        check(task, exact, *status, got, &output);
    }
}
