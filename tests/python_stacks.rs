//! Python frames in rprof's profiles, against py-spy (PyPI's, installed by .ci/install) on the same run of the
//! same process: fixtures/py_work.py runs Python functions for amounts of their own CPU time.
mod common;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

const PY_SPY: &str = "/opt/rprof-tests/py-spy/bin/py-spy";
const DEBIAN_PYTHON: &str = "/usr/bin/python3.11";
const PYENV_PYTHON: &str = "/root/.pyenv/versions/3.11.7/bin/python3.11";
/// pyenv's builds of 3.12 (read by a table, as 3.11) and 3.13 (read by the offsets it carries).
const PYENV_312: &str = "/root/.pyenv/versions/3.12.1/bin/python3.12";
const PYENV_313: &str = "/root/.pyenv/versions/3.13.0/bin/python3.13";
/// The four functions of `py_work.py four`, and their parts of each round's CPU time (of 10).
const FOUR: [(&str, f64); 4] = [
    ("sort_data", 4.0),
    ("py_loop", 3.0),
    ("parse_json", 2.0),
    ("regex_scan", 1.0),
];

fn fixture() -> String {
    common::fixtures()
        .join("py_work.py")
        .to_string_lossy()
        .into_owned()
}

/// Start `python py_work.py MODE SECONDS` and wait until it says it runs.
/// `rprof record --call-graph dwarf -F HZ` of the fixture's `mode` for `seconds` under `python`, into `dir`:
/// the recording's path and rprof's stderr.
fn record_dwarf(dir: &Path, hz: &str, python: &str, mode: &str, seconds: &str) -> (String, String) {
    let data = dir.join("py.data").to_str().unwrap().to_string();
    let fixture = fixture();
    let args = [
        "record",
        "--call-graph",
        "dwarf",
        "-F",
        hz,
        "-o",
        &data,
        "--",
    ];
    let (_, stderr) =
        common::rprof_ok_stderr(&[&args[..], &[python, &fixture, mode, seconds]].concat());
    (data, stderr)
}

fn start(python: &str, mode: &str, seconds: &str) -> Child {
    let mut child = Command::new(python)
        .args([&fixture(), mode, seconds])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start python");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "the fixture did not start");
    child
}

/// Folded stacks (`a;b;c COUNT`) as (frames, count).
fn folded(text: &str) -> Vec<(Vec<String>, u64)> {
    text.lines()
        .filter_map(|l| {
            let (stack, n) = l.rsplit_once(' ')?;
            Some((
                stack.split(';').map(str::to_string).collect(),
                n.parse().ok()?,
            ))
        })
        .collect()
}

/// Each function's share (%) of the stacks that hold a Python frame: the stacks with a frame of it (`NAME (`),
/// and how many such stacks there are.
fn shares(stacks: &[(Vec<String>, u64)]) -> (BTreeMap<&'static str, f64>, u64) {
    let python: Vec<&(Vec<String>, u64)> = stacks
        .iter()
        .filter(|(s, _)| s.iter().any(|f| f.starts_with("<module> (")))
        .collect();
    let total: u64 = python.iter().map(|(_, n)| n).sum();
    let share = |name: &str| {
        let prefix = format!("{name} (");
        let n: u64 = python
            .iter()
            .filter(|(s, _)| s.iter().any(|f| f.starts_with(&prefix)))
            .map(|(_, n)| n)
            .sum();
        100.0 * n as f64 / total.max(1) as f64
    };
    (FOUR.iter().map(|&(f, _)| (f, share(f))).collect(), total)
}

/// Whether py-spy is installed (else skip).
fn have_py_spy(test: &str) -> bool {
    if Path::new(PY_SPY).exists() {
        return true;
    }
    common::skip(
        test,
        "py-spy is not installed (bash tools/pyspy/install.sh)",
    );
    false
}

/// One run of `py_work.py four` sampled at once by py-spy (`--nonblocking -r 99 -f raw`) and by `rprof record
/// -g -F 99 -p PID`: each function's share of the Python samples in rprof's folded report is within 5 points of
/// py-spy's, each tool has at least 3,000 samples, and the shares follow the fixture's CPU parts.
fn four_functions_match_py_spy(test: &str, python: &str) {
    if !common::privileged(test) || !have_py_spy(test) {
        return;
    }
    if !Path::new(python).exists() {
        common::skip(test, &format!("{python} is not installed"));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // 3,000 samples at 99 Hz of CPU time are 30.3 s of it.
    let mut target = start(python, "four", "33");
    let pid = target.id().to_string();
    let spy_out = dir.path().join("spy.txt");
    let spy = Command::new(PY_SPY)
        .args(["record", "--nonblocking", "-r", "99", "-f", "raw", "-o"])
        .arg(&spy_out)
        .args(["-p", &pid])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start py-spy");
    let data = dir.path().join("py.data");
    let data = data.to_str().unwrap();
    let (_, stderr) =
        common::rprof_ok_stderr(&["record", "-g", "-F", "99", "-p", &pid, "-o", data]);
    let spy = spy.wait_with_output().unwrap();
    target.wait().unwrap();
    assert!(
        spy.status.success(),
        "py-spy failed ({}): {}",
        spy.status,
        String::from_utf8_lossy(&spy.stderr)
    );
    assert!(
        stderr.contains("rprof record: python: 1 CPython processes"),
        "{stderr}"
    );
    let spy_stacks = folded(&std::fs::read_to_string(&spy_out).unwrap());
    let rprof_stacks = folded(&common::rprof_ok(&["report", "-i", data, "--folded"]));
    let (want, spy_n) = shares(&spy_stacks);
    let (got, rprof_n) = shares(&rprof_stacks);
    eprintln!("{python}: py-spy {spy_n} samples {want:?}; rprof {rprof_n} samples {got:?}");
    assert!(
        spy_n >= 3000 && rprof_n >= 3000,
        "too few samples: py-spy {spy_n}, rprof {rprof_n}\n{stderr}"
    );
    for (f, part) in FOUR {
        assert!(
            (got[f] - want[f]).abs() <= 5.0,
            "{f}: rprof {:.1}% py-spy {:.1}%\n{stderr}",
            got[f],
            want[f]
        );
        // The fixture's parts, loosely (each function's loop also calls thread_time).
        assert!(
            (got[f] - part * 10.0).abs() <= 8.0,
            "{f}: {:.1}% of the CPU, {part} parts of 10",
            got[f]
        );
    }
}

#[test]
fn four_functions_match_py_spy_debian() {
    four_functions_match_py_spy("four_functions_match_py_spy_debian", DEBIAN_PYTHON);
}

#[test]
fn four_functions_match_py_spy_pyenv() {
    four_functions_match_py_spy("four_functions_match_py_spy_pyenv", PYENV_PYTHON);
}

#[test]
fn four_functions_match_py_spy_312() {
    four_functions_match_py_spy("four_functions_match_py_spy_312", PYENV_312);
}

#[test]
fn four_functions_match_py_spy_313() {
    four_functions_match_py_spy("four_functions_match_py_spy_313", PYENV_313);
}

/// `--call-graph dwarf` on Debian's python3.11 (no frame pointers): whole mixed stacks. In each sample of
/// json's C scanner (`_json...so`) whose native unwind reached the `_PyEval_EvalFrameDefault` that called it and
/// whose Python stack was read while the thread still ran the sampled frame (or deeper), the scanner sits under
/// `parse_json`'s frames, in call order from `<module>`: every such sample, no tolerance. The others are the
/// samples whose Python stack was read after the thread had returned from the sampled frame (rprof marks their
/// innermost Python frame's address, `...c`, which `rprof script` prints): their Python stack is the one the
/// thread ran at the read, which may be a later function's (here: `regex_scan`, which follows `parse_json` in
/// each round). `report --folded` agrees, and `go tool pprof -top` of the pprof export names the functions.
#[test]
fn dwarf_mixed_stacks() {
    let test = "dwarf_mixed_stacks";
    if !common::privileged(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (data, stderr) = record_dwarf(dir.path(), "199", DEBIAN_PYTHON, "four", "5");
    let data = data.as_str();
    for line in stderr.lines().filter(|l| l.contains("python: ")) {
        eprintln!("{line}");
    }
    let script = common::rprof_ok(&["script", "-i", data]);
    let (mut json, mut late, mut unreached, mut wrong) = (0, 0, 0, Vec::new());
    let mut late_wrong = 0;
    for sample in script.split("\n\n") {
        // Leaf first: (address, name) of each frame.
        let frames: Vec<(u64, &str)> = sample
            .lines()
            .skip(1)
            .filter_map(|l| {
                let (addr, name) = l.trim().split_once(' ')?;
                Some((u64::from_str_radix(addr, 16).ok()?, name))
            })
            .collect();
        if !frames.iter().any(|(_, f)| f.contains("_json.cpython")) {
            continue;
        }
        let names: Vec<&str> = frames.iter().rev().map(|(_, f)| *f).collect();
        if setup_encoder(&names) {
            continue;
        }
        json += 1;
        let python = |f: &str| f.ends_with("([python])");
        let first_py = frames.iter().position(|(_, f)| python(f));
        let is_late = first_py.is_some_and(|i| frames[i].0 & 0xf == 0xc);
        // The native unwind reached the evaluator: native frames go on after the Python frames.
        let last_py = frames.iter().rposition(|(_, f)| python(f));
        if last_py.is_none_or(|i| i + 1 == frames.len()) {
            unreached += 1;
            continue;
        }
        let placed = under_parse_json(&names);
        late += is_late as u64;
        match (placed, is_late) {
            (true, _) => {}
            (false, true) => late_wrong += 1,
            (false, false) => wrong.push(sample.to_string()),
        }
    }
    eprintln!(
        "json's scanner: {json} samples, {unreached} with the native unwind short of the evaluator, {late} \
         read after the sampled frame returned ({late_wrong} of them under another function)"
    );
    // parse_json has 2 parts of 10 of 5 s at 199 Hz (~200 samples); most of it is in the scanner.
    assert!(json >= 40, "{json} samples in json's scanner\n{stderr}");
    assert!(
        unreached * 20 <= json,
        "the native unwind fell short of the evaluator in {unreached} of {json}\n{stderr}"
    );
    assert!(
        wrong.is_empty(),
        "json's scanner under another Python stack in {} of {json} samples read in time:\n{}\n{stderr}",
        wrong.len(),
        wrong.join("\n\n")
    );
    // The folded report: the same samples, the misplaced ones at most those read late.
    let stacks = folded(&common::rprof_ok(&["report", "-i", data, "--folded"]));
    let (mut folded_json, mut folded_placed) = (0, 0);
    for (stack, n) in &stacks {
        let names: Vec<&str> = stack.iter().map(String::as_str).collect();
        if stack.iter().any(|f| f.contains("_json.cpython")) && !setup_encoder(&names) {
            folded_json += n;
            folded_placed += under_parse_json(&names) as u64 * n;
        }
    }
    assert_eq!(folded_json, json, "folded and script disagree");
    assert!(
        folded_json - folded_placed <= late_wrong + unreached,
        "folded: {folded_placed} of {folded_json} under parse_json; {late_wrong} read late elsewhere"
    );
    let pprof = dir.path().join("py.pb.gz");
    common::rprof_ok(&["report", "-i", data, "--pprof", pprof.to_str().unwrap()]);
    let out = Command::new("go")
        .args(["tool", "pprof", "-top"])
        .arg(&pprof)
        .output()
        .expect("run go tool pprof");
    let top = String::from_utf8_lossy(&out.stdout);
    for (f, _) in FOUR {
        assert!(
            top.contains(&format!("{f} (py_work.py:")),
            "pprof -top lacks {f}:\n{top}"
        );
    }
}

/// Whether a stack (root first) is json's C encoder building the fixture's document at its start
/// (`DOC = json.dumps(...)`, py_work.py:16, before any of the four functions runs): `_json`'s other C code,
/// rightly under `dumps`, not the scanner that `json.loads` runs under `parse_json`.
fn setup_encoder(stack: &[&str]) -> bool {
    stack
        .iter()
        .any(|f| f.starts_with("<module> (py_work.py:16)"))
        && stack.iter().any(|f| f.starts_with("dumps ("))
}

/// Whether a stack (root first; frames as `name (...)`) with json's scanner has it under `parse_json`'s Python
/// frames in call order from `<module>`, and no other of the four functions.
fn under_parse_json(stack: &[&str]) -> bool {
    let order = ["<module> (", "main (", "four (", "parse_json (", "spend ("];
    let Some(scanner) = stack.iter().position(|f| f.contains("_json.cpython")) else {
        return false;
    };
    let at: Vec<Option<usize>> = order
        .iter()
        .map(|o| stack.iter().position(|f| f.starts_with(o)))
        .collect();
    let other = FOUR
        .iter()
        .filter(|(f, _)| *f != "parse_json")
        .any(|(o, _)| stack.iter().any(|f| f.starts_with(&format!("{o} ("))));
    at.iter().all(Option::is_some)
        && at.windows(2).all(|w| w[0] < w[1])
        && at[4] < Some(scanner)
        && !other
}

/// Two Python threads in different functions: each thread's samples carry its own function, never the other's
/// (a stack read for the sampled thread only, as the sample arrives), and the thread's `threading` name as its
/// comm (`rprof script`'s first column), as py-spy names threads; the main thread's (in `spin_main` meanwhile)
/// carry `MainThread` (`threading._main_thread`'s name), in `script` and as the root of `report --folded`.
#[test]
fn threads_carry_their_own_functions() {
    threads_carry_their_own("threads_carry_their_own_functions", DEBIAN_PYTHON);
}

/// The same on 3.12 and 3.13 (pyenv's builds).
#[test]
fn threads_carry_their_own_functions_312_313() {
    for python in [PYENV_312, PYENV_313] {
        if !Path::new(python).exists() {
            common::skip(
                "threads_carry_their_own_functions_312_313",
                &format!("{python} is not installed"),
            );
            continue;
        }
        threads_carry_their_own("threads_carry_their_own_functions_312_313", python);
    }
}

fn threads_carry_their_own(test: &str, python: &str) {
    if !common::privileged(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("py.data");
    let data = data.to_str().unwrap();
    let fixture = fixture();
    common::rprof_ok_stderr(&[
        "record", "-g", "-F", "99", "-o", data, "--", python, &fixture, "threads", "3",
    ]);
    let script = common::rprof_ok(&["script", "-i", data]);
    // tid -> (samples with spin_alpha, with spin_beta, with spin_main)
    let mut by_tid: HashMap<u32, (u64, u64, u64)> = HashMap::new();
    let mut misnamed = Vec::new();
    for sample in script.split("\n\n") {
        let mut lines = sample.lines();
        let Some(head) = lines.next() else { continue };
        let mut fields = head.split_whitespace();
        let comm = fields.next().unwrap_or_default();
        let Some(tid) = fields.next().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let body: String = lines.collect::<Vec<_>>().join("\n");
        let e = by_tid.entry(tid).or_default();
        let (alpha, beta) = (body.contains("spin_alpha ("), body.contains("spin_beta ("));
        let main = body.contains("spin_main (");
        e.0 += alpha as u64;
        e.1 += beta as u64;
        e.2 += main as u64;
        // The fixture names each thread after its function (threading.Thread(name=...)): a sample that ran
        // it is of the thread of that name; spin_main runs in the main thread, after `import threading`.
        if (alpha && comm != "spin_alpha")
            || (beta && comm != "spin_beta")
            || (main && comm != "MainThread")
        {
            misnamed.push(head.to_string());
        }
    }
    assert!(
        misnamed.is_empty(),
        "threads not named by threading: {misnamed:?}"
    );
    type Counts<'a> = Vec<(&'a u32, &'a (u64, u64, u64))>;
    let alpha: Counts = by_tid.iter().filter(|(_, c)| c.0 > 0).collect();
    let beta: Counts = by_tid.iter().filter(|(_, c)| c.1 > 0).collect();
    let main: Counts = by_tid.iter().filter(|(_, c)| c.2 > 0).collect();
    assert_eq!(
        (alpha.len(), beta.len(), main.len()),
        (1, 1, 1),
        "threads: {by_tid:?}"
    );
    assert_ne!(alpha[0].0, beta[0].0, "one thread ran both: {by_tid:?}");
    assert!(
        main[0].0 != alpha[0].0 && main[0].0 != beta[0].0,
        "the main thread ran a thread's function: {by_tid:?}"
    );
    // 3 s of each thread's CPU at 99 Hz: about 297 samples each; 1 s of the main thread's: about 99.
    assert!(
        alpha[0].1 .0 >= 150 && beta[0].1 .1 >= 150 && main[0].1 .2 >= 50,
        "{python}: {by_tid:?}"
    );
    // report --folded: the comm is each stack's root.
    let stacks = folded(&common::rprof_ok(&["report", "-i", data, "--folded"]));
    let main_roots: Vec<&str> = stacks
        .iter()
        .filter(|(s, _)| s.iter().any(|f| f.starts_with("spin_main (")))
        .map(|(s, _)| s[0].as_str())
        .collect();
    assert!(!main_roots.is_empty(), "{python}: no spin_main stack");
    assert!(
        main_roots.iter().all(|r| *r == "MainThread"),
        "{python}: spin_main's stacks under {main_roots:?}"
    );
}

/// 3.12 and 3.13 (pyenv's builds, no frame pointers) with `--call-graph dwarf` on `py_work.py nested`: `record`
/// names the process and its version, the samples of `inner` carry `<module>`, `main`, `outer`, `middle`,
/// `inner` in call order, put in the native stack where the evaluator ran them (native frames on the root side),
/// with no evaluator frame left among them. On 3.12 the stack copies hold the thread's `_PyCFrame` (its offsets
/// right): `inner` runs one frame for the whole run, so nearly every read is of the sampled frame. On 3.13 (no
/// `_PyCFrame`) the verdict says the timing is not measurable, for every sample with a stack copy.
#[test]
fn newer_versions_dwarf_stacks() {
    let test = "newer_versions_dwarf_stacks";
    if !common::privileged(test) {
        return;
    }
    for (python, version) in [(PYENV_312, "3.12.1"), (PYENV_313, "3.13.0")] {
        if !Path::new(python).exists() {
            common::skip(test, &format!("{python} is not installed"));
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let (data, stderr) = record_dwarf(dir.path(), "99", python, "nested", "2");
        let data = data.as_str();
        assert!(
            stderr.contains("python: 1 CPython processes: ")
                && stderr.contains(&format!("({version})")),
            "{stderr}"
        );
        assert!(!stderr.contains("cannot read"), "{stderr}");
        let stacks = folded(&common::rprof_ok(&["report", "-i", data, "--folded"]));
        let order = ["<module> (", "main (", "outer (", "middle (", "inner ("];
        let (mut inner, mut in_order, mut placed) = (0, 0, 0);
        for (stack, n) in &stacks {
            let Some(leaf_py) = stack.iter().position(|f| f.starts_with("inner (")) else {
                continue;
            };
            inner += n;
            let at: Vec<Option<usize>> = order
                .iter()
                .map(|o| stack.iter().position(|f| f.starts_with(o)))
                .collect();
            let root_py = at[0].unwrap_or(0);
            let eval_among = stack[root_py..leaf_py]
                .iter()
                .any(|f| f == "_PyEval_EvalFrameDefault");
            if at.windows(2).all(|w| w[0].is_some() && w[0] < w[1]) && !eval_among {
                in_order += n;
            }
            // Native frames (the comm, then e.g. `Py_RunMain`) before the first Python frame.
            placed += (root_py > 1) as u64 * n;
        }
        let total: u64 = stacks.iter().map(|(_, n)| n).sum();
        eprintln!(
            "{version}: {total} samples, {inner} in inner, {in_order} in order, {placed} placed"
        );
        // 2 s of CPU at 99 Hz, nearly all in inner.
        assert!(
            inner >= 100 && inner * 10 >= total * 8,
            "{version}: {inner} of {total}\n{stderr}"
        );
        assert_eq!(
            in_order, inner,
            "{version}: Python frames out of order\n{stderr}"
        );
        assert!(
            placed * 10 >= inner * 9,
            "{version}: {placed} of {inner} placed\n{stderr}"
        );
        if version.starts_with("3.12") {
            let timing = stderr
                .lines()
                .find(|l| l.contains("python: timing, from"))
                .unwrap_or_else(|| {
                    panic!("{version}: no timing line (no stack copy held the _PyCFrame)\n{stderr}")
                });
            eprintln!("{version}: {timing}");
            let checked: u64 = figure(timing, "from ");
            let same: u64 = figure(timing, "_PyCFrame: ");
            assert!(
                checked * 10 >= inner * 8 && same * 10 >= checked * 9,
                "{timing}"
            );
        } else {
            // 3.13 has no _PyCFrame: the verdict says the timing is not measurable, and claims none.
            let line = stderr
                .lines()
                .find(|l| l.contains("python: timing not measurable on 3.13 ("))
                .unwrap_or_else(|| panic!("{version}: no line on the timing\n{stderr}"));
            eprintln!("{version}: {line}");
            assert!(figure(line, "3.13 (") >= inner, "{line}");
            assert!(!stderr.contains("python: timing, from"), "{stderr}");
        }
    }
}

/// The number after `after` in `line`.
fn figure(line: &str, after: &str) -> u64 {
    let rest = &line[line.find(after).expect(after) + after.len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}
