//! Hostile paths: binaries whose paths `uprobe_events` cannot parse (a space, a newline, bytes that are not
//! UTF-8, 2,400 characters) are probed exactly, and a binary replaced while it is probed keeps its counts.
mod common;
use common::{build_c, privileged, rprof};
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// `rprof probe ARGS` (asserting success): its stdout.
fn probe(args: &[&OsStr]) -> String {
    let out = rprof().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "rprof {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The count of `func` in a report table.
fn count(table: &str, func: &str) -> Option<u64> {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(func))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
}

/// A copy of `bin` at DIR/NAME/probe_fixture, where NAME is the raw bytes given.
fn copy_under(dir: &Path, name: &[u8], bin: &Path) -> PathBuf {
    let d = dir.join(OsStr::from_bytes(name));
    std::fs::create_dir_all(&d).unwrap();
    let to = d.join("probe_fixture");
    std::fs::copy(bin, &to).unwrap();
    to
}

/// Check that functions of binaries under a directory with a space, a newline, a byte that is not UTF-8, a
/// colon and parentheses, or a 2,400-character path are timed and counted exactly, on the tracefs ring and on
/// the uprobe PMU (`--count`).
#[test]
fn hostile_paths_are_probed() {
    if !privileged("hostile_paths_are_probed") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "probe_fixture.c", &["-O0", "-g"]);
    let long: Vec<u8> = std::iter::repeat_n(b"x".repeat(200), 12)
        .collect::<Vec<_>>()
        .join(&b'/');
    let names: [&[u8]; 5] = [
        b"dir with space",
        b"new\nline",
        b"bad\xff",
        b"co:lon(1)",
        &long,
    ];
    for name in names {
        let target = copy_under(dir.path(), name, &bin);
        // The command goes through a plain symlink: rprof's `-- CMD` takes text.
        let link = dir.path().join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).unwrap();
        for mode in [None, Some("--count")] {
            let mut args: Vec<&OsStr> = vec![OsStr::new("probe")];
            args.extend(mode.map(OsStr::new));
            args.extend([
                OsStr::new("-x"),
                target.as_os_str(),
                OsStr::new("func_a"),
                OsStr::new("--"),
            ]);
            args.extend([
                link.as_os_str(),
                OsStr::new("counts"),
                OsStr::new("7"),
                OsStr::new("0"),
            ]);
            let out = probe(&args);
            assert_eq!(count(&out, "func_a"), Some(7), "{name:?} {mode:?}: {out}");
        }
    }
}

/// Check that a binary replaced (a new file renamed over it, as installers and linkers do) while its running
/// process is probed keeps being probed exactly: the probes are on the inode the process runs.
#[test]
fn binary_replaced_while_probed() {
    if !privileged("binary_replaced_while_probed") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "probe_fixture.c", &["-O0", "-g"]);
    let b = bin.to_str().unwrap();
    // 100 calls of func_a, one every 10 ms.
    let mut child = rprof()
        .args(["probe", "-x", b, "func_a", "--", b, "wait", "1", "100"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut pid = String::new();
    stdout.read_line(&mut pid).unwrap();
    let new = dir.path().join("replacement");
    std::fs::copy("/bin/true", &new).unwrap();
    std::fs::rename(&new, &bin).unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(count(&rest, "func_a"), Some(100), "{rest}");
}
