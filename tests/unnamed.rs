//! Code without a name (issue 25 and 26): each cause on a fixture made for it (a stripped binary, a binary
//! rebuilt or deleted after recording, JIT code without a perf map), listed in the table by its address or
//! its unwind-table range (never as one `[unknown]` row for a whole module), folded as `[module]`, and named
//! with its share and its fix in report's closing verdict; the verdict's precision and DWARF lines on real
//! recordings; and Debian's stripped perl.
mod common;
use common::*;
use rprof::symbols::{elf_info, function_symbols, DebugSources};
use std::path::{Path, PathBuf};
use std::process::Command;

/// CPU time the fixture runs for, in milliseconds (its own CPU time: about 1,500 samples at -F 999).
const CPU_MS: &str = "1500";

/// Build `fixtures/unnamed.c` (-O2 -g) into `dir`: (the binary, a copy of it with its symbols).
fn build(dir: &Path, flags: &[&str]) -> (PathBuf, PathBuf) {
    let mut all = vec!["-O2", "-g", "-fno-omit-frame-pointer"];
    all.extend_from_slice(flags);
    let bin = build_c(dir, "unnamed.c", &all);
    let full = dir.join("unnamed.full");
    std::fs::copy(&bin, &full).unwrap();
    (bin, full)
}

/// Strip `bin` of its symbols and DWARF (`strip`, which keeps `.eh_frame`).
fn strip(bin: &Path) {
    let st = Command::new("strip").arg(bin).status().expect("run strip");
    assert!(st.success(), "strip {}", bin.display());
}

/// Record `bin ARGS` (-F 999 -g) into `dir/NAME`.
fn record(dir: &Path, name: &str, bin: &Path, args: &[&str]) -> String {
    let mut all = vec!["-F", "999", "-g", "--", bin.to_str().unwrap()];
    all.extend_from_slice(args);
    record_to(dir, name, &all)
}

/// The table's rows: (self %, object, symbol).
fn rows(table: &str) -> Vec<(f64, String, String)> {
    table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let share = words.next()?.trim_end_matches('%').parse().ok()?;
            let _total = words.next()?;
            let _comm = words.next()?;
            let object = words.next()?.to_string();
            let _kind = words.next()?;
            Some((share, object, words.collect::<Vec<_>>().join(" ")))
        })
        .collect()
}

/// The share (0..1) of samples whose leaf frame is `leaf`, and the samples.
fn leaf_share(folded: &str, leaf: &str) -> (f64, u64) {
    let stacks = parse_folded(folded);
    share_of(&stacks, |_| true, |f| f.last().is_some_and(|l| l == leaf))
}

/// The percentage that starts the verdict line containing `what`.
fn verdict_share(stderr: &str, what: &str) -> f64 {
    let line = stderr
        .lines()
        .find(|l| l.contains(what))
        .unwrap_or_else(|| panic!("no verdict line with `{what}`:\n{stderr}"));
    let text = line.trim_start_matches("rprof report: ");
    text.split('%').next().unwrap().parse().unwrap()
}

/// An unnamed row of module `module`: `module+0xOFF` (one address) or `module+0xA..0xB` (one address) or
/// `module+0xA..0xB (N addresses)`; returns (start, end, addresses).
fn unnamed_row(module: &str, symbol: &str) -> Option<(u64, u64, u32)> {
    let rest = symbol.strip_prefix(module)?.strip_prefix("+0x")?;
    let (span, count) = match rest.split_once(" (") {
        Some((span, count)) => (span, count.strip_suffix(" addresses)")?.parse().ok()?),
        None => (rest, 1),
    };
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    match span.split_once("..") {
        Some((a, b)) => Some((hex(a)?, hex(b)?, count)),
        None => Some((hex(span)?, hex(span)? + 1, count)),
    }
}

/// Check report's precision line: the widest 95% binomial interval of the table's top 5 rows, for the
/// samples taken.
fn check_precision(table: &str, rows: &[(f64, String, String)], stderr: &str) {
    let n: f64 = table
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("# ")?.split(' ').next()?.parse().ok())
        .unwrap();
    let widest = rows
        .iter()
        .take(5)
        .map(|(s, _, _)| 1.96 * ((s / 100.0) * (1.0 - s / 100.0) / n).sqrt() * 100.0)
        .fold(0.0, f64::max);
    let line = stderr.lines().find(|l| l.contains("precision:")).unwrap();
    let stated: f64 = line
        .split('±')
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((stated - widest).abs() < 0.11, "{line} vs ±{widest:.2}");
}

/// Check that a stripped binary's code is listed by the unwind tables' ranges (each the range of the function
/// the symbol table of an unstripped copy gives, with its share of the CPU split), folded as `[unnamed]`, and
/// that the verdict names the cause with the folded share; and that the precision line's interval is the
/// binomial one of the top rows.
#[test]
fn stripped_code_by_range_and_cause() {
    if !privileged("stripped_code_by_range_and_cause") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (bin, full) = build(dir.path(), &[]);
    strip(&bin);
    let data = record(dir.path(), "stripped.data", &bin, &[CPU_MS]);
    let (table, stderr) = rprof_ok_stderr(&["report", "-i", &data]);
    let folded = rprof_ok(&["report", "-i", &data, "--folded", "-q"]);
    let (share, samples) = leaf_share(&folded, "[unnamed]");
    eprintln!(
        "{samples} samples, {:.1}% in [unnamed]\n{table}\n{stderr}",
        share * 100.0
    );
    assert!(samples >= 500, "too few samples ({samples})");
    assert!(
        share >= 0.8,
        "the CPU is in the fixture's own code: {share}"
    );
    assert!(!folded.contains("[unknown] ("), "{folded}");
    let stated = verdict_share(&stderr, "in unnamed have no symbol");
    assert!((stated - share * 100.0).abs() < 0.11, "{stated} vs {share}");
    assert!(stderr
        .contains("the binary is stripped and no debug file was found; install its debug package"));
    // The functions' ranges, from the unstripped copy, as file offsets.
    let layout = elf_info(&full).unwrap().layout;
    let symbols = function_symbols(&full, &DebugSources::none()).unwrap();
    let range = |name: &str| {
        // GCC may clone them (`unnamed_hot_a.constprop.0`).
        let s = symbols.iter().find(|s| s.name.starts_with(name)).unwrap();
        let start = layout.file_offset(s.addr).unwrap().0;
        (start, start + s.size)
    };
    let rows = rows(&table);
    let row_share = |name: &str| -> f64 {
        let (start, end) = range(name);
        let found: Vec<f64> = rows
            .iter()
            .filter(|(_, object, symbol)| {
                object == "unnamed"
                    && unnamed_row("unnamed", symbol).is_some_and(|r| (r.0, r.1) == (start, end))
            })
            .map(|(share, _, _)| *share)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "one row for {name} {start:#x}..{end:#x}:\n{table}"
        );
        found[0]
    };
    let (a, b) = (row_share("unnamed_hot_a"), row_share("unnamed_hot_b"));
    let split = a / (a + b);
    assert!(
        (0.55..=0.78).contains(&split),
        "hot_a's share of the loops is about 2/3: {a} {b}"
    );
    for (_, object, symbol) in &rows {
        // A PLT stub is named from the dynamic relocations, which stripping keeps (as perf names it): a sample
        // can land in `clock_gettime@plt`, which the fixture calls to read its CPU time.
        if object == "unnamed" && !symbol.ends_with("@plt") {
            let (_, _, count) = unnamed_row("unnamed", symbol)
                .unwrap_or_else(|| panic!("`{symbol}` is an address or a range"));
            assert!(count >= 1);
        }
    }
    check_precision(&table, &rows, &stderr);
}

/// Check the causes of a binary rebuilt after recording (another build id) and of one deleted, with no copy
/// of the recorded build in the build-id cache (recorded with -N, reported with an empty cache): both unnamed,
/// folded `[unnamed]`, each verdict with its own cause.
#[test]
fn rebuilt_and_deleted_binaries() {
    if !privileged("rebuilt_and_deleted_binaries") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (bin, _) = build(dir.path(), &[]);
    let cache = dir.path().join("empty-cache");
    let rprof_ok_stderr = |args: &[&str]| rprof_ok_env("PERF_BUILDID_DIR", &cache, args);
    let data = dir.path().join("before.data").to_str().unwrap().to_string();
    let bin_arg = bin.to_str().unwrap();
    rprof_ok_stderr(&[
        "record", "-q", "-N", "-o", &data, "-F", "999", "-g", "--", bin_arg, CPU_MS,
    ]);
    assert!(!cache.join(".build-id").exists(), "-N keeps no copies");
    let (named, _) = rprof_ok_stderr(&["report", "-i", &data, "--folded", "-q"]);
    let stacks = parse_folded(&named);
    let (in_a, _) = share_of(
        &stacks,
        |_| true,
        |f| f.iter().any(|n| n.starts_with("unnamed_hot_a")),
    );
    assert!(in_a > 0.4, "{named}");
    // Rebuilt with other flags: another build id at the same path.
    build(dir.path(), &["-fno-inline"]);
    assert_ne!(elf_info(&bin).unwrap().build_id, None);
    let (folded, stderr) = rprof_ok_stderr(&["report", "-i", &data, "--folded"]);
    assert!(leaf_share(&folded, "[unnamed]").0 >= 0.8, "{folded}");
    assert!(
        stderr.contains("in unnamed have no symbol")
            && stderr.contains("another build than the recorded one"),
        "{stderr}"
    );
    std::fs::remove_file(&bin).unwrap();
    let (folded, stderr) = rprof_ok_stderr(&["report", "-i", &data, "--folded"]);
    assert!(leaf_share(&folded, "[unnamed]").0 >= 0.8, "{folded}");
    assert!(
        stderr.contains("the file is gone from this system"),
        "{stderr}"
    );
}

/// Check that JIT code without a perf map is unnamed with its cause, listed by address, folded as `[anon]`.
#[test]
fn jit_without_perf_map() {
    if !privileged("jit_without_perf_map") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (bin, _) = build(dir.path(), &[]);
    let data = record(dir.path(), "jit.data", &bin, &[CPU_MS, "jit"]);
    let (table, stderr) = rprof_ok_stderr(&["report", "-i", &data]);
    let folded = rprof_ok(&["report", "-i", &data, "--folded", "-q"]);
    let (share, samples) = leaf_share(&folded, "[anon]");
    assert!(
        samples >= 500 && share >= 0.8,
        "{samples} samples, {share}:\n{folded}"
    );
    assert!(
        stderr.contains("it is JIT code and the process wrote no /tmp/perf-PID.map"),
        "{stderr}"
    );
    let stated = verdict_share(&stderr, "in anon have no symbol");
    assert!((stated - share * 100.0).abs() < 0.11, "{stated} vs {share}");
    // The loop is 3 instructions: its rows are their addresses, one row each.
    let jit: Vec<String> = rows(&table)
        .into_iter()
        .filter(|r| r.1 == "anon")
        .map(|r| r.2)
        .collect();
    assert!(!jit.is_empty() && jit.len() <= 4, "{table}");
    for symbol in &jit {
        assert!(
            u64::from_str_radix(symbol.trim_start_matches("0x"), 16).is_ok(),
            "{symbol}"
        );
    }
}

/// Check the DWARF line of record's verdict: the deepest complete stack the unwinder read, against the copy
/// size, and the advice that a smaller copy would do for this shallow program.
#[test]
fn dwarf_verdict_deepest_stack() {
    if !privileged("dwarf_verdict_deepest_stack") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (bin, _) = build(dir.path(), &[]);
    let out = rprof()
        .args(["record", "-o"])
        .arg(dir.path().join("dw.data"))
        .args(["-F", "999", "--call-graph", "dwarf,65528", "--"])
        .arg(&bin)
        .arg(CPU_MS)
        .output()
        .unwrap();
    assert_success(&out, &["record"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("DWARF-unwound"))
        .unwrap();
    let deepest: u64 = line
        .split("the deepest complete stack used ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .map(|n| n.replace(',', "").parse().unwrap())
        .unwrap();
    // main and two small functions above libc's start: a few hundred bytes, far under the copy.
    assert!((64..=8192).contains(&deepest), "{line}");
    assert!(
        line.contains("would do, and copy less per sample"),
        "{line}"
    );
    let precision = stderr.lines().find(|l| l.contains("precision:")).unwrap();
    assert!(precision.contains("samples"), "{precision}");
}

/// Check on Debian's stripped /usr/bin/perl running a regex loop (sized by its own CPU time) that no table
/// row stands for more than one address unless it says how many: every unnamed perl row is one address, or a
/// range of the unwind tables whose count is the distinct addresses `rprof script` shows in it.
#[test]
fn stripped_perl_rows() {
    if !privileged("stripped_perl_rows") {
        return;
    }
    let perl = Path::new("/usr/bin/perl");
    if !perl.exists() {
        return skip(
            "stripped_perl_rows",
            "no /usr/bin/perl (apt-get install perl)",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let script = "my $s = join '', map { chr(97 + $_ % 3) } 1 .. 2000; my $n = 0; \
                  while ((times)[0] < 1.5) { $n++ while $s =~ /(?:a|b)+?c/g } print qq($n\\n);";
    let data = record(dir.path(), "perl.data", perl, &["-e", script]);
    let table = rprof_ok(&["report", "-i", &data, "-q"]);
    let rows = rows(&table);
    let perl_rows: Vec<&(f64, String, String)> = rows.iter().filter(|r| r.1 == "perl").collect();
    let unnamed: Vec<(u64, u64, u32)> = perl_rows
        .iter()
        .filter_map(|r| unnamed_row("perl", &r.2))
        .collect();
    let unnamed_share: f64 = perl_rows
        .iter()
        .filter(|r| unnamed_row("perl", &r.2).is_some())
        .map(|r| r.0)
        .sum();
    eprintln!(
        "{} perl rows, {} unnamed ({unnamed_share:.1}%)",
        perl_rows.len(),
        unnamed.len()
    );
    assert!(!rows.iter().any(|r| r.2 == "[unknown]"), "{table}");
    assert!(
        unnamed_share >= 5.0,
        "perl's static code takes CPU: {unnamed_share}\n{table}"
    );
    // The distinct looked-up offsets of perl frames in `rprof script`: the first user frame (the sampled IP)
    // exactly, the callers (return addresses) one byte back.
    let text = rprof_ok(&["script", "-i", &data, "-F", "ip,dso"]);
    let mut looked_up = std::collections::BTreeSet::new();
    let mut exact = true;
    for line in text.lines() {
        // Frame lines start with a tab; the sample's header line (empty here) and the blank line end a stack.
        if !line.starts_with('\t') {
            exact = true;
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.last() == Some(&"([kernel.kallsyms])") {
            continue;
        }
        if words.last() == Some(&"(/usr/bin/perl)") {
            let addr = u64::from_str_radix(words[0], 16).unwrap();
            looked_up.insert(if exact { addr } else { addr - 1 });
        }
        exact = false;
    }
    for (start, end, count) in unnamed {
        let inside = looked_up.range(start..end).count() as u32;
        assert_eq!(
            inside, count,
            "perl+{start:#x}..{end:#x} says {count} addresses"
        );
    }
}

/// Check that annotate's list of the hottest functions (in its error for a name that matches nothing) names a
/// stripped binary's code as report's table does (`unnamed+0xA..0xB`, its range without the count of
/// addresses), with the table's self share, never as `[unknown]`.
#[test]
fn annotate_lists_unnamed_code_as_the_table() {
    if !privileged("annotate_lists_unnamed_code_as_the_table") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (bin, _) = build(dir.path(), &[]);
    strip(&bin);
    let data = record(dir.path(), "stripped.data", &bin, &["600"]);
    let table = rprof_ok(&["report", "-i", &data, "-q"]);
    let out = rprof()
        .args(["annotate", "-i", &data, "no_such_function"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("{err}\n{table}");
    assert!(!err.contains("[unknown]"), "{err}");
    let top: Vec<(f64, String)> = rows(&table)
        .into_iter()
        .filter(|r| r.1 == "unnamed" && unnamed_row("unnamed", &r.2).is_some())
        .map(|(share, _, symbol)| (share, symbol.split(" (").next().unwrap().to_string()))
        .take(2)
        .collect();
    assert!(top.iter().map(|r| r.0).sum::<f64>() >= 50.0, "{table}");
    for (share, range) in &top {
        let at = err
            .find(&format!("{range} (unnamed, "))
            .unwrap_or_else(|| panic!("{range} is not listed: {err}"));
        let listed: f64 = err[at..]
            .split(", ")
            .nth(1)
            .and_then(|s| s.split('%').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no share for {range}: {err}"));
        assert!(
            (listed - share).abs() <= 0.06,
            "{range}: {listed}% listed, {share}% in the table"
        );
    }
}
