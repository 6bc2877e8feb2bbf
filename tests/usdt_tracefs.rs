//! USDT probes on the real tracefs (needs root): the offsets, semaphore offsets and fetch expressions that
//! `probe::usdt` computes are written to `uprobe_events` as they are, and the values the probes record are the
//! ones the programs are known to pass.
mod common;
use rprof::probe::usdt::{read_probes, UsdtProbe};
use rprof::tracefs::Tracefs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A tracefs group of uprobes and an instance that records them; both removed on drop.
struct Session {
    root: PathBuf,
    group: String,
    instance: PathBuf,
    events: Vec<String>,
}

impl Session {
    fn new(root: &Path, tag: &str) -> Session {
        let group = format!("rproftest_usdt_{tag}_{}", std::process::id());
        let instance = root.join("instances").join(&group);
        std::fs::create_dir(&instance).unwrap();
        Session {
            root: root.to_path_buf(),
            group,
            instance,
            events: Vec::new(),
        }
    }

    /// Add the uprobe `event` at `probe` of `path`, with its semaphore, fetching `args` (`NAME=FETCH`).
    fn add(&mut self, event: &str, path: &Path, probe: &UsdtProbe, args: &[String]) {
        let mut line = format!(
            "p:{}/{event} {}:{:#x}",
            self.group,
            path.display(),
            probe.offset
        );
        if let Some(s) = probe.semaphore {
            line.push_str(&format!("({s:#x})"));
        }
        for a in args {
            line.push(' ');
            line.push_str(a);
        }
        self.write("uprobe_events", &line);
        self.events.push(event.to_string());
        let enable = self
            .instance
            .join("events")
            .join(&self.group)
            .join(event)
            .join("enable");
        std::fs::write(enable, "1").unwrap();
    }

    fn write(&self, file: &str, line: &str) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.root.join(file))
            .unwrap();
        f.write_all(format!("{line}\n").as_bytes())
            .unwrap_or_else(|e| panic!("{file} refused `{line}`: {e}"));
    }

    /// The lines of `event` recorded from process `pid`, the part after `event: (0x…) `. The instance records
    /// every process that maps the probed file (other tests and programs on the machine may use libstdc++ or
    /// python3.11 meanwhile): a line starts with `COMM-PID [CPU]`.
    fn lines(&self, event: &str, pid: u32) -> Vec<String> {
        let text = std::fs::read_to_string(self.instance.join("trace")).unwrap();
        let marker = format!(" {event}: (");
        text.lines()
            .filter_map(|l| l.split_once(&marker))
            .filter(|(task, _)| {
                let task = task.split(" [").next().unwrap_or("").trim();
                task.rsplit_once('-').map(|(_, p)| p) == Some(pid.to_string().as_str())
            })
            .map(|(_, rest)| rest.split_once(") ").map_or("", |(_, a)| a).to_string())
            .collect()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = std::fs::write(self.instance.join("events/enable"), "0");
        let _ = std::fs::remove_dir(&self.instance);
        for e in &self.events {
            let _ = std::fs::OpenOptions::new()
                .append(true)
                .open(self.root.join("uprobe_events"))
                .and_then(|mut f| f.write_all(format!("-:{}/{e}\n", self.group).as_bytes()));
        }
    }
}

fn tracefs(test: &str) -> Option<PathBuf> {
    match Tracefs::find_or_mount() {
        Ok(t) if nix::unistd::geteuid().is_root() && t.root().join("uprobe_events").exists() => {
            Some(t.root().to_path_buf())
        }
        other => {
            let why = format!(
                "needs root and tracefs with uprobe_events ({:?})",
                other.err()
            );
            common::skip(test, &why);
            None
        }
    }
}

/// Run `cmd` to its end: its pid and its output.
fn run(cmd: &mut Command) -> (u32, Output) {
    let child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    (child.id(), child.wait_with_output().unwrap())
}

fn named<'a>(probes: &'a [UsdtProbe], name: &str) -> &'a UsdtProbe {
    probes.iter().find(|p| p.name == name).unwrap()
}

/// Check that the fixture's probes record what it passes: `work` fires only through its semaphore (every
/// call, with 2*i and "k0".."k4"), `tick` without one, and `done` reads the global `total` through `@+`.
#[test]
fn usdt_fixture_on_tracefs() {
    let Some(root) = tracefs("usdt_fixture_on_tracefs") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bin = common::build_c(dir.path(), "usdt_fixture.c", &["-O2"]);
    let probes = read_probes(&bin).unwrap();
    let mut s = Session::new(&root, "fixture");
    let work = named(&probes, "work");
    let args = [
        format!("v={}", work.args[0].fetch().unwrap()),
        format!("key={}", work.args[1].fetch_string().unwrap()),
    ];
    s.add("work", &bin, work, &args);
    let tick = named(&probes, "tick");
    let args = [
        format!("i={}", tick.args[0].fetch().unwrap()),
        format!("t={}", tick.args[1].fetch().unwrap()),
    ];
    s.add("tick", &bin, tick, &args);
    let done = named(&probes, "done");
    s.add(
        "done",
        &bin,
        done,
        &[format!("total={}", done.args[0].fetch().unwrap())],
    );
    let (pid, out) = run(Command::new(&bin).arg("10"));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "work fired 10 of 10\n"
    );
    let want: Vec<String> = (0..10)
        .map(|i| format!("v={} key=\"k{}\"", 2 * i, i % 5))
        .collect();
    assert_eq!(s.lines("work", pid), want);
    let want: Vec<String> = (0..10)
        .map(|i| format!("i={i} t={}", (0..=i).sum::<i64>()))
        .collect();
    assert_eq!(s.lines("tick", pid), want);
    assert_eq!(s.lines("done", pid), ["total=45"]);
}

/// Check Debian's python3.11 (semaphores, string arguments) and libstdc++ (no semaphore) where present.
#[test]
fn usdt_system_binaries_on_tracefs() {
    let Some(root) = tracefs("usdt_system_binaries_on_tracefs") else {
        return;
    };
    let python = Path::new("/usr/bin/python3.11");
    if python.exists() {
        let probes = read_probes(python).unwrap();
        let p = named(&probes, "import__find__load__start");
        let mut s = Session::new(&root, "python");
        s.add(
            "imp",
            python,
            p,
            &[format!("name={}", p.args[0].fetch_string().unwrap())],
        );
        let (pid, out) = run(Command::new(python).args(["-S", "-c", "import json"]));
        assert!(out.status.success());
        let names = s.lines("imp", pid);
        for module in ["name=\"json\"", "name=\"json.decoder\""] {
            assert!(names.iter().any(|n| n == module), "{module} in {names:?}");
        }
    } else {
        // Not a missing privilege: CI's machine may lack python3.11 and still runs the rest.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED usdt python3.11: /usr/bin/python3.11 is absent"
        );
    }
    let libstdcxx = Path::new("/usr/lib/x86_64-linux-gnu/libstdc++.so.6");
    let libstdcxx = std::fs::canonicalize(libstdcxx).unwrap();
    let probes = read_probes(&libstdcxx).unwrap();
    let throw = probes
        .iter()
        .find(|p| p.provider == "libstdcxx" && p.name == "throw")
        .unwrap();
    assert_eq!(throw.semaphore, None);
    let dir = tempfile::tempdir().unwrap();
    let bin = common::build_c(dir.path(), "usdt_throw.cpp", &["-O1"]);
    let mut s = Session::new(&root, "cxx");
    let args: Vec<String> = throw
        .args
        .iter()
        .enumerate()
        .map(|(i, a)| format!("arg{i}={}", a.fetch().unwrap()))
        .collect();
    s.add("throw", &libstdcxx, throw, &args);
    let (pid, out) = run(Command::new(&bin).arg("5"));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "caught 5\n");
    let lines = s.lines("throw", pid);
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert!(lines.iter().all(|l| l.starts_with("arg0=")), "{lines:?}");
}
