// Arguments, return values, slow calls, callers and traces (issue 14), on the suite's engine. Included by
// mod.rs, so each runs on rprof's own engine choice, on perf events and on the tracefs ring.

/// The CSV rows of a `--by` report: (function, value) -> count.
fn keyed_counts(csv: &str) -> std::collections::HashMap<(String, String), u64> {
    csv_rows(csv)
        .into_iter()
        .filter_map(|(name, count, _)| {
            let (f, k) = name.split_once(',')?;
            Some(((f.to_string(), k.to_string()), count))
        })
        .collect()
}

/// Check that `--by arg0` on c:malloc counts each allocation size exactly: the fixture allocates 64..71 bytes,
/// 1,000 times each.
#[test]
fn by_arg0_counts_malloc_sizes_exactly() {
    if !privileged("by_arg0_counts_malloc_sizes_exactly") {
        return;
    }
    let f = fixtures();
    for count_only in [false, true] {
        let mut args = vec!["probe", "c:malloc", "--by", "arg0", "--top", "20", "--csv"];
        if count_only {
            args.push("--count");
        }
        args.extend(["--", path(&f.c), "malloc", "8000"]);
        let out = ok(&args);
        assert!(out.lines().any(|l| l == "function,arg0,count,total_us,self_us,avg_us,min_us,max_us,timing_lost"), "{out}");
        let rows = keyed_counts(&out);
        for size in 64..72 {
            let n = rows.get(&("malloc".to_string(), size.to_string()));
            assert_eq!(n, Some(&1000), "--count {count_only}: size {size} in {rows:?}");
        }
    }
}

/// Check that `ret` is fetched at the return: `twice(i)` returns 2i for i in 0..1000, so the log2 histogram of
/// `ret` has 1 value in [0,1] and [2,3], then 2, 4, ... 256 in the buckets up to [512,1023], and 488 in
/// [1024,2047].
#[test]
fn ret_histogram_matches() {
    if !privileged("ret_histogram_matches") {
        return;
    }
    let f = fixtures();
    let out = ok(&["probe", "-x", path(&f.c), "twice ret", "--hist", "ret", "--", path(&f.c), "twice", "1000"]);
    let mut expected = std::collections::BTreeMap::new();
    for i in 0..1000u64 {
        let v = 2 * i;
        let bucket = if v == 0 { 1 } else { 64 - v.leading_zeros() };
        *expected.entry(bucket).or_insert(0u64) += 1;
    }
    let mut got = std::collections::BTreeMap::new();
    let hist = out.split("Function = twice, ret").nth(1).expect(&out);
    for line in hist.lines() {
        // `      1024 -> 2047       : 488      |*****|`
        let Some((range, rest)) = line.split_once(" : ") else { continue };
        let Some((low, _)) = range.trim().split_once(" -> ") else { continue };
        let low: u64 = low.trim().parse().unwrap();
        let n: u64 = rest.split_whitespace().next().unwrap().parse().unwrap();
        let bucket = if low == 0 { 1 } else { 64 - low.leading_zeros() };
        if n > 0 {
            got.insert(bucket, n);
        }
    }
    assert_eq!(got, expected, "{out}");
    assert!(out.contains("twice        1000") || csv_free_count(&out, "twice") == 1000, "{out}");
}

/// The COUNT column of a function's row in a table.
fn csv_free_count(table: &str, name: &str) -> u64 {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Check that `--min-duration 5ms` lists exactly the slow calls, each with its argument: `work(i, ms)` sleeps
/// 1 ms, and 10 ms when i is a multiple of 10. A loaded machine can stretch a 1 ms sleep past 5 ms, so the
/// calls that are slow by the fixture's own clock are the truth. The fixture times each call inside work and
/// around it, with the probes' clock (CLOCK_MONOTONIC); the probes fire between the two readings, so a probed
/// duration lies between the two times: every call that took 5 ms inside is listed, none that took under 5 ms
/// around is (1 us of slack for the clocks' granularity).
#[test]
fn min_duration_lists_exactly_the_slow_calls() {
    if !privileged("min_duration_lists_exactly_the_slow_calls") {
        return;
    }
    let f = fixtures();
    let out = ok(&["probe", "-x", path(&f.c), "work(arg0, arg1)", "--min-duration", "5ms", "--", path(&f.c), "slow", "60"]);
    // (call, ns around it, ns inside it)
    let took: Vec<(u64, u64, u64)> = out
        .lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix("took ")?.split_whitespace();
            let mut next = || w.next()?.parse().ok();
            Some((next()?, next()?, next()?))
        })
        .collect();
    let listed: Vec<(u64, u64)> = out
        .lines()
        .filter_map(|l| {
            let call = l.split("work(arg0=").nth(1)?;
            let (a0, rest) = call.split_once(", arg1=")?;
            let a1 = rest.trim_end_matches(')');
            Some((a0.parse().unwrap(), a1.parse().unwrap()))
        })
        .collect();
    // The ten-millisecond calls, each with its argument.
    for i in (0..60).step_by(10) {
        assert!(listed.contains(&(i, 10)), "work({i}, 10) not listed: {out}");
    }
    for (i, _, inside) in &took {
        let shown = listed.iter().any(|(a, _)| a == i);
        if *inside >= 5_001_000 {
            assert!(shown, "call {i} took {inside} ns inside and is not listed: {out}");
        }
    }
    for (i, ms) in &listed {
        assert_eq!(*ms, if i % 10 == 0 { 10 } else { 1 }, "{out}");
        let around = took.iter().find(|(a, _, _)| a == i).map_or(0, |t| t.1);
        assert!(around >= 4_999_000, "call {i} is listed but took {around} ns around it: {out}");
    }
    let header = format!("SLOW CALLS (at least 5.00ms): {} of 60 calls", listed.len());
    assert!(out.contains(&header), "{header}: {out}");
    // Each listed duration is at least what the call slept.
    for l in out.lines().filter(|l| l.contains("work(arg0=")) {
        // TIME COMM PID TID DURATION CALL
        let dur = l.split_whitespace().nth(4).unwrap();
        let ms: f64 = dur.trim_end_matches("ms").parse().unwrap_or(0.0);
        assert!(dur.ends_with("ms") && ms >= 1.0, "{l}");
    }
}

/// Check that `--trace` prints one line per call with its values, every call without `--trace-rate` (3,000
/// calls in well under a second), and that `--trace-rate` holds the rest back with a count in the trace itself
/// and a warning at the end.
#[test]
fn trace_lines_and_rate_limit() {
    if !privileged("trace_lines_and_rate_limit") {
        return;
    }
    let f = fixtures();
    let out = ok(&["probe", "-x", path(&f.c), "twice(arg0) ret", "--trace", "--", path(&f.c), "twice", "3000"]);
    // (arg0, ret) of each line; the fixture's own output may follow a line's end without a newline.
    let calls: std::collections::HashSet<(u64, u64)> = out
        .lines()
        .filter_map(|l| {
            let (arg, rest) = l.split_once("  twice(arg0=")?.1.split_once(") = ")?;
            let ret: String = rest.chars().take_while(char::is_ascii_digit).collect();
            Some((arg.parse().ok()?, ret.parse().ok()?))
        })
        .collect();
    for i in 0..3000 {
        assert!(calls.contains(&(i, 2 * i)), "twice(arg0={i}) = {} in {out}", 2 * i);
    }
    assert!(!out.contains("not shown"), "{out}");
    let args = ["probe", "-x", path(&f.c), "twice(arg0)", "--trace", "--trace-rate", "5", "--", path(&f.c), "twice", "2000"];
    let (run, _) = rprof_cpu(&args);
    assert!(run.status.success(), "rprof {args:?}");
    let (out, err) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    let lines = out.lines().filter(|l| l.contains("twice(arg0=")).count();
    // `--- N calls not shown here (over --trace-rate 5 lines per second) ---`
    let more: u64 = out
        .lines()
        .filter_map(|l| l.strip_prefix("--- ")?.strip_suffix(" lines per second) ---"))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    // At most 5 lines per second of the run; every other call is counted, in the trace and at the end.
    assert!((5..2000).contains(&lines), "{lines} lines: {out}");
    assert_eq!(lines as u64 + more, 2000, "{out}");
    let warned = format!("warning: --trace did not print {more} calls (over --trace-rate 5");
    assert!(err.contains(&warned), "{warned} in {err}");
}

/// Check that `--callers` splits fib's calls by caller: main calls it once, fib itself all other times.
#[test]
fn callers_split_rows() {
    if !privileged("callers_split_rows") {
        return;
    }
    let f = fixtures();
    let out = ok(&["probe", "-x", path(&f.c), "fib", "--callers", "--csv", "--", path(&f.c), "fib", "12"]);
    let rows = keyed_counts(&out);
    // fib(12) makes 465 calls.
    assert_eq!(rows.get(&("fib".into(), "main".into())), Some(&1), "{out}");
    assert_eq!(rows.get(&("fib".into(), "fib".into())), Some(&464), "{out}");
}
