//! The build-id cache of user binaries (issue 41 item 5): `record` keeps a copy of each binary its samples are
//! in, in perf's layout (`DIR/PATH/<build id>/elf` and `DIR/.build-id/xx/rest`), so that `report` names a
//! recording's code after the binary was rebuilt; `perf report` reads rprof's copies and `rprof report` reads
//! perf's; rprof's copies are bounded, and only they are ever evicted. Every test has its own cache directory.
mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// CPU time the fixture runs for, in milliseconds of its own CPU time (about 600 samples at -F 999).
const CPU_MS: &str = "600";

/// Build the call-tree fixture (75% of its time in hot_a, 25% in hot_b) into `dir/calltree` with frame
/// pointers and `extra` flags.
fn build(dir: &Path, extra: &[&str]) -> PathBuf {
    let mut flags = FP.to_vec();
    flags.extend_from_slice(extra);
    std::fs::create_dir_all(dir).unwrap();
    build_c(dir, "calltree.c", &flags)
}

/// The build id of `bin`, in hex.
fn build_id(bin: &Path) -> String {
    let id = rprof::symbols::elf_info(bin)
        .unwrap()
        .build_id
        .expect("the fixture has a build id");
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// rprof with `env` set (PERF_BUILDID_DIR removed unless set there), asserting success: (stdout, stderr).
fn rprof_with(env: &[(&str, &Path)], args: &[&str]) -> (String, String) {
    let mut cmd = rprof();
    cmd.env_remove("PERF_BUILDID_DIR");
    for (key, value) in env {
        cmd.env(key, value);
    }
    let out = cmd.args(args).output().expect("run rprof");
    assert_success(&out, args);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Run perf with `args` (and `env`), asserting success; returns stdout.
fn perf(env: &[(&str, &Path)], args: &[&str]) -> String {
    let mut cmd = Command::new("perf");
    cmd.env_remove("PERF_BUILDID_DIR");
    for (key, value) in env {
        cmd.env(key, value);
    }
    let out = cmd.args(args).output().expect("run perf");
    assert!(
        out.status.success(),
        "perf {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The self share (percent) of each symbol in a table sorted by symbol (`rprof report --sort sym` or `perf
/// report --stdio --no-children --sort sym`): the first column and the name after `[.]`.
fn shares(table: &str) -> Vec<(String, f64)> {
    table
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let share = l
                .split_whitespace()
                .next()?
                .strip_suffix('%')?
                .parse()
                .ok()?;
            let (_, name) = l.split_once("[.] ")?;
            Some((name.trim().to_string(), share))
        })
        .collect()
}

/// The share of `name` in `shares` (0 when it has no row).
fn share(shares: &[(String, f64)], name: &str) -> f64 {
    shares.iter().filter(|(n, _)| n == name).map(|s| s.1).sum()
}

/// perf report's symbol table of `data`, with the build-id cache `dir` (`perf --buildid-dir`).
fn perf_shares(data: &str, dir: &Path) -> Vec<(String, f64)> {
    let dir = dir.to_str().unwrap();
    shares(&perf(
        &[],
        &[
            "--buildid-dir",
            dir,
            "report",
            "-i",
            data,
            "--stdio",
            "-q",
            "--no-children",
            "-g",
            "none",
            "--sort",
            "sym",
        ],
    ))
}

/// Check that hot_a and hot_b hold the fixture's 75/25 split of `table` (to ±5 points, the sampling error of
/// 600 samples and the kernel's share).
fn assert_split(shares: &[(String, f64)], what: &str) {
    let (a, b) = (share(shares, "hot_a"), share(shares, "hot_b"));
    assert!(
        (70.0..=80.0).contains(&a) && (20.0..=30.0).contains(&b),
        "{what}: hot_a {a}%, hot_b {b}%: {shares:?}"
    );
}

/// Check that a recording names its samples after the binary was rebuilt at the same path (another build id),
/// from the copy `record` kept in the build-id cache (`$HOME/.debug` here): the same stacks and function shares
/// as before the rebuild, in `rprof report` and in `perf report` on rprof's recording with rprof's cache, while
/// both leave them unnamed with an empty cache. Only binaries with samples are copied: a library of the test's
/// own, mapped but never run (no constructor, no IFUNC: libm, which the test used before, runs its IFUNC
/// resolvers at the start, and a sample landed there once under load), is not.
#[test]
fn rebuilt_binary_named_from_rprofs_cache() {
    if !privileged("rebuilt_binary_named_from_rprofs_cache")
        || !perf_tool("rebuilt_binary_named_from_rprofs_cache")
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let cache = home.join(".debug");
    let empty = tmp.path().join("empty");
    // The library nobody calls: linked in (and mapped), never run.
    let lib_src = tmp.path().join("unused.c");
    std::fs::write(&lib_src, "int rprof_unused(int x) { return x + 1; }\n").unwrap();
    let st = std::process::Command::new("gcc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(tmp.path().join("librprof_unused.so"))
        .arg(&lib_src)
        .status()
        .unwrap();
    assert!(st.success(), "gcc -shared failed");
    let lib_dir = tmp.path().to_str().unwrap();
    let bin = build(
        tmp.path(),
        &[
            "-Wl,--no-as-needed",
            &format!("-L{lib_dir}"),
            &format!("-Wl,-rpath,{lib_dir}"),
            "-lrprof_unused",
        ],
    );
    let old_id = build_id(&bin);
    let data = tmp.path().join("r.data").to_str().unwrap().to_string();
    let bin_arg = bin.to_str().unwrap();
    let at_home = |args: &[&str]| rprof_with(&[("HOME", &home)], args).0;
    let with_empty = |args: &[&str]| rprof_with(&[("PERF_BUILDID_DIR", &empty)], args).0;
    at_home(&[
        "record", "-q", "-F", "999", "-g", "-o", &data, "--", bin_arg, CPU_MS,
    ]);

    // perf's layout: the copy under the binary's path and build id, and the link to it.
    let copy = cache
        .join(bin.strip_prefix("/").unwrap())
        .join(&old_id)
        .join("elf");
    assert_eq!(
        std::fs::read(&copy).expect("record keeps a copy of the sampled binary"),
        std::fs::read(&bin).unwrap()
    );
    let link = cache
        .join(".build-id")
        .join(&old_id[..2])
        .join(&old_id[2..]);
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        Path::new("../..")
            .join(bin.strip_prefix("/").unwrap())
            .join(&old_id)
    );
    let listed = perf(&[], &["buildid-list", "-i", &data]);
    assert!(
        listed.contains("librprof_unused.so"),
        "the unused library is mapped: {listed}"
    );
    let copied: Vec<String> = walk(&cache)
        .into_iter()
        .map(|p| p.display().to_string())
        .filter(|p| p.ends_with("/elf"))
        .collect();
    assert!(
        !copied.iter().any(|p| p.contains("librprof_unused.so")),
        "the unused library has no samples, so no copy: {copied:?}"
    );

    let folded = at_home(&["report", "-i", &data, "--folded"]);
    let table = shares(&at_home(&["report", "-i", &data, "--sort", "sym"]));
    assert_split(&table, "rprof before the rebuild");
    let perf_before = perf_shares(&data, &cache);
    assert_split(&perf_before, "perf before the rebuild");

    build(tmp.path(), &["-Wl,--no-as-needed", "-lm", "-O1"]);
    assert_ne!(build_id(&bin), old_id, "the rebuild changed the build id");
    assert_eq!(
        at_home(&["report", "-i", &data, "--folded"]),
        folded,
        "the same stacks after the rebuild"
    );
    let after = shares(&at_home(&["report", "-i", &data, "--sort", "sym"]));
    assert_eq!(after, table, "the same shares after the rebuild");
    let unnamed = shares(&with_empty(&["report", "-i", &data, "--sort", "sym"]));
    assert_eq!(
        share(&unnamed, "hot_a") + share(&unnamed, "hot_b"),
        0.0,
        "without the copy, the rebuilt binary names nothing: {unnamed:?}"
    );

    let perf_after = perf_shares(&data, &cache);
    assert_eq!(perf_after, perf_before, "perf names them from rprof's copy");
    for f in ["hot_a", "hot_b"] {
        let (theirs, ours) = (share(&perf_after, f), share(&after, f));
        assert!(
            (theirs - ours).abs() <= 0.011,
            "{f}: perf {theirs}%, rprof {ours}% of the same samples"
        );
    }
    let perf_unnamed = perf_shares(&data, &empty);
    assert_eq!(
        share(&perf_unnamed, "hot_a") + share(&perf_unnamed, "hot_b"),
        0.0,
        "perf without the copy names nothing of the rebuilt binary: {perf_unnamed:?}"
    );
}

/// Check that `rprof report` names a perf recording's samples after the binary was rebuilt, from the copy
/// `perf record` kept in its build-id cache (`perf --buildid-dir DIR`, `PERF_BUILDID_DIR=DIR` for rprof): the
/// shares perf report gives, and nothing named with an empty cache.
#[test]
fn rebuilt_binary_named_from_perfs_cache() {
    if !privileged("rebuilt_binary_named_from_perfs_cache")
        || !perf_tool("rebuilt_binary_named_from_perfs_cache")
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("perf-cache");
    let empty = tmp.path().join("empty");
    let bin = build(tmp.path(), &[]);
    let old_id = build_id(&bin);
    let data = tmp.path().join("p.data").to_str().unwrap().to_string();
    let cache_arg = cache.to_str().unwrap();
    let bin_arg = bin.to_str().unwrap();
    perf(
        &[],
        &[
            "--buildid-dir",
            cache_arg,
            "record",
            "-q",
            "-F",
            "999",
            "-g",
            "-o",
            &data,
            "--",
            bin_arg,
            CPU_MS,
        ],
    );
    assert!(
        cache
            .join(".build-id")
            .join(&old_id[..2])
            .join(&old_id[2..])
            .join("elf")
            .is_file(),
        "perf keeps a copy"
    );
    build(tmp.path(), &["-O1"]);
    assert_ne!(build_id(&bin), old_id, "the rebuild changed the build id");
    let theirs = perf_shares(&data, &cache);
    assert_split(&theirs, "perf after the rebuild");
    let report = |dir: &Path| {
        let args = ["report", "-i", &data, "--sort", "sym"];
        shares(&rprof_with(&[("PERF_BUILDID_DIR", dir)], &args).0)
    };
    let ours = report(&cache);
    for f in ["hot_a", "hot_b"] {
        let (t, o) = (share(&theirs, f), share(&ours, f));
        assert!(
            (t - o).abs() <= 0.011,
            "{f}: perf {t}%, rprof {o}% of perf's samples"
        );
    }
    let unnamed = report(&empty);
    assert_eq!(
        share(&unnamed, "hot_a") + share(&unnamed, "hot_b"),
        0.0,
        "without perf's copy, nothing named: {unnamed:?}"
    );
}

/// Every file under `dir` (recursively, symlinks not followed), sorted.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let kind = e.file_type().unwrap();
            match kind.is_dir() {
                true => todo.push(e.path()),
                false => out.push(e.path()),
            }
        }
    }
    out.sort();
    out
}

/// The entries of rprof's ledger in cache `dir`: the paths of the files rprof added, relative to `dir`.
fn ledger(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join(".rprof-added"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| Some(l.splitn(4, ' ').nth(3)?.to_string()))
        .collect()
}

/// Check the bound on rprof's copies in a cache that perf filled first: a recording whose binary does not fit
/// beside rprof's older copy evicts that copy (with its `.build-id` link) and never one of perf's files; a
/// binary larger than the bound is not copied, with a warning naming --buildid-cache-size, and evicts
/// nothing; -N copies nothing. Static fixtures, so that each recording's only binary is its own.
#[test]
fn buildid_cache_bound_evicts_only_rprofs_copies() {
    if !privileged("buildid_cache_bound_evicts_only_rprofs_copies")
        || !perf_tool("buildid_cache_bound_evicts_only_rprofs_copies")
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let cache_arg = cache.to_str().unwrap();
    // Four builds, each with its own build id (another alignment): perf records the first, rprof the others.
    let bins: Vec<PathBuf> = ["a", "b", "c", "d"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let align = format!("-falign-functions={}", 16 << i);
            build(&tmp.path().join(name), &["-static", &align])
        })
        .collect();
    let data = |name: &str| tmp.path().join(name).to_str().unwrap().to_string();
    let bin_arg = |i: usize| bins[i].to_str().unwrap().to_string();
    perf(
        &[],
        &[
            "--buildid-dir",
            cache_arg,
            "record",
            "-q",
            "-F",
            "999",
            "-o",
            &data("a.data"),
            "--",
            &bin_arg(0),
            "300",
        ],
    );
    let snapshot = |files: &[PathBuf]| -> Vec<(PathBuf, Vec<u8>)> {
        files
            .iter()
            .map(|p| (p.clone(), std::fs::read(p).unwrap_or_default()))
            .collect()
    };
    let perfs = walk(&cache);
    let perfs_before = snapshot(&perfs);
    assert!(
        perfs.iter().any(|p| p.ends_with("elf")),
        "perf copied its binary: {perfs:?}"
    );
    let copy_of = |i: usize| {
        let id = build_id(&bins[i]);
        cache
            .join(bins[i].strip_prefix("/").unwrap())
            .join(&id)
            .join("elf")
    };
    let link_of = |i: usize| {
        let id = build_id(&bins[i]);
        cache.join(".build-id").join(&id[..2]).join(&id[2..])
    };
    let size = |i: usize| std::fs::metadata(&bins[i]).unwrap().len();
    let record = |i: usize, extra: &[&str]| {
        let out = data(&format!("{i}.data"));
        let bin = bin_arg(i);
        let mut args = vec!["record", "-q", "-F", "999", "-o", &out];
        args.extend_from_slice(extra);
        args.extend(["--", &bin, "300"]);
        rprof_with(&[("PERF_BUILDID_DIR", &cache)], &args).1
    };

    // b fits; then c fits beside nothing else of rprof's: b goes.
    let bound = (size(1) + size(2) - 1).to_string();
    record(1, &["--buildid-cache-size", &bound]);
    assert!(copy_of(1).is_file() && link_of(1).join("elf").is_file());
    let rprofs = ledger(&cache);
    assert!(rprofs
        .iter()
        .any(|p| p.ends_with(&format!("{}/elf", build_id(&bins[1])))));
    let others: u64 = rprofs
        .iter()
        .filter(|p| !p.contains("/b/calltree/"))
        .map(|p| std::fs::metadata(cache.join(p)).unwrap().len())
        .sum();
    let bound = (others + size(1) + size(2) - 1).to_string();
    record(2, &["--buildid-cache-size", &bound]);
    assert!(copy_of(2).is_file(), "c copied");
    assert!(
        !copy_of(1).exists(),
        "b, rprof's least recently used copy, evicted"
    );
    assert!(
        std::fs::symlink_metadata(link_of(1)).is_err(),
        "with its .build-id link"
    );
    assert!(!ledger(&cache).iter().any(|p| p.contains("/b/calltree/")));
    assert_eq!(snapshot(&perfs), perfs_before, "perf's files untouched");

    // d is larger than the whole bound: not copied, and nothing evicted for it.
    let stderr = record(3, &["--buildid-cache-size", "1K"]);
    assert!(
        stderr.contains("not copied into the build-id cache")
            && stderr.contains("--buildid-cache-size"),
        "{stderr}"
    );
    assert!(!copy_of(3).exists());
    assert!(copy_of(2).is_file(), "c kept");
    // -N: no copy.
    let before = walk(&cache);
    record(3, &["-N"]);
    assert_eq!(walk(&cache), before, "-N adds nothing");
    assert_eq!(snapshot(&perfs), perfs_before, "perf's files untouched");
}
