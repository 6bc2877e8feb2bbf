// What a newcomer's trial found in `rprof probe` (issue 30): the launcher's own calls, C++ overloads, and folded
// stacks mixed with the table. Included by mod.rs, so each runs on every engine of the suite.

/// Check that nothing rprof does in the launched command's process before its exec is counted: /bin/true (no
/// arguments, so no locale set up) calls neither malloc nor execve nor execv (perf stat on the same uprobes
/// and bpftrace count 0), so each count is 0, entries only and timed, and no hit is dropped as unattributed
/// either (the forked rprof had mappings rprof never saw).
#[test]
fn launcher_calls_are_not_counted() {
    if !privileged("launcher_calls_are_not_counted") {
        return;
    }
    for count_only in [true, false] {
        let mut args = vec!["probe", "c:malloc", "c:execve", "c:execv", "--csv"];
        if count_only {
            args.push("--count");
        }
        args.extend(["--", "/bin/true"]);
        let (out, err) = run_env(&args, &[("LC_ALL", "C")]);
        let counted: Vec<_> = csv_rows(&out).into_iter().filter(|r| r.1 > 0).collect();
        assert!(counted.is_empty(), "--count {count_only}: {counted:?}\n{err}");
        assert!(!err.contains("not counted"), "--count {count_only}: {err}");
    }
}

/// Check that C++ overloads are rows of their own named with their parameters, with exact counts, in the table,
/// the CSV and `-l`, while a name that is not overloaded keeps its short form; and that `-r` takes a regex on
/// the name with parameters (`\(` is not the start of values to fetch).
#[test]
fn overloads_are_named_apart() {
    if !privileged("overloads_are_named_apart") {
        return;
    }
    let f = fixtures();
    let cpp = path(&f.cpp);
    let (int, double) = ("tmpl::Klass<int>::method(int)", "tmpl::Klass<int>::method(double)");
    let patterns = ["ns::Klass::work", "tmpl::Klass<*>::method*"];
    let run = |extra: &[&str]| {
        let mut args = vec!["probe", "-x", cpp];
        args.extend(patterns);
        args.extend(extra);
        args.extend(["--", cpp, "30", "0", "300", "200"]);
        ok(&args)
    };
    let csv = run(&["--csv"]);
    let mut rows: Vec<(String, u64)> = csv_rows(&csv).into_iter().map(|r| (r.0, r.1)).collect();
    rows.sort();
    let want = [("ns::Klass::work", 30), (double, 200), (int, 300)];
    let want: Vec<(String, u64)> = want.iter().map(|&(n, c)| (n.to_string(), c)).collect();
    assert_eq!(rows, want, "{csv}");
    let table = run(&[]);
    for (name, count) in &want {
        let row = table.lines().find_map(|l| l.strip_prefix(&format!("{name} ")));
        let n = row.and_then(|r| r.split_whitespace().next());
        assert_eq!(n, Some(count.to_string().as_str()), "{name} in {table}");
    }
    let mut list = vec!["probe", "-x", cpp, "-l"];
    list.extend(patterns);
    let list = ok(&list);
    let mut names: Vec<&str> = list.lines().filter_map(|l| l.split_once('\t')).map(|(n, _)| n).collect();
    names.sort_unstable();
    assert_eq!(names, ["ns::Klass::work", double, int], "{list}");
    let out = ok(&["probe", "-x", cpp, "-r", r"method\(double\)", "--csv", "--", cpp, "0", "0", "300", "200"]);
    let rows: Vec<(String, u64)> = csv_rows(&out).into_iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(rows, [(double.to_string(), 200)], "{out}");
}

/// `-g` on func_a of the C fixture's 300 calls (its own output, which goes to the same standard output, sent
/// to /dev/null) with `extra` options: rprof's stdout and stderr.
fn stacks_of_300_calls(extra: &[&str]) -> (String, String) {
    let f = fixtures();
    let c = path(&f.c);
    let mut args = vec!["probe", "-x", c, "func_a", "-g"];
    args.extend(extra);
    args.extend(["--", "/bin/sh", "-c", r#"exec "$0" counts 300 0 >/dev/null"#, c]);
    run_env(&args, &[])
}

/// Check that with `-g --folded` standard output carries folded lines alone (`frames COUNT`, each stack ending
/// in func_a, 300 calls in all: what inferno-flamegraph reads without ignoring a line), and the table goes to
/// standard error.
#[test]
fn folded_stdout_is_only_folded_lines() {
    if !privileged("folded_stdout_is_only_folded_lines") {
        return;
    }
    let (out, err) = stacks_of_300_calls(&["--folded"]);
    let mut total = 0;
    for line in out.lines() {
        let (frames, count) = line.rsplit_once(' ').unwrap_or_else(|| panic!("not folded: {line:?}\n{out}"));
        let count: u64 = count.parse().unwrap_or_else(|_| panic!("not folded: {line:?}\n{out}"));
        assert_eq!(frames.rsplit(';').next(), Some("func_a"), "{line:?}");
        total += count;
    }
    assert_eq!(total, 300, "{out}");
    let row = err.lines().find_map(|l| l.strip_prefix("func_a "));
    assert_eq!(row.and_then(|r| r.split_whitespace().next()), Some("300"), "no table on stderr: {err}");
}

/// Check that `-g --flamegraph SVG` draws the stacks into SVG (func_a's frame, 300 calls), with the table on
/// standard output.
#[test]
fn flamegraph_is_written() {
    if !privileged("flamegraph_is_written") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("func_a.svg");
    let (out, err) = stacks_of_300_calls(&["--flamegraph", path(&svg)]);
    let text = std::fs::read_to_string(&svg).unwrap_or_else(|e| panic!("{}: {e}\n{err}", svg.display()));
    assert!(text.contains("<svg"), "{text}");
    assert!(text.contains("func_a (300 calls"), "no func_a frame of 300 calls in {text}");
    let row = out.lines().find_map(|l| l.strip_prefix("func_a "));
    assert_eq!(row.and_then(|r| r.split_whitespace().next()), Some("300"), "{out}");
}
