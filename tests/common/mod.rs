//! Shared helpers for rprof's integration tests: building fixtures, running rprof, privilege checks, and
//! parsing its outputs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The fixtures directory.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Whether this test may use perf_event_open and tracefs. Without root it skips (printing why), unless
/// RPROF_REQUIRE_PRIVILEGED=1, where a skip is a failure.
pub fn privileged(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    let why = format!("{test}: skipped: needs root for perf_event_open and tracefs");
    if std::env::var("RPROF_REQUIRE_PRIVILEGED").as_deref() == Ok("1") {
        panic!("{why}, and RPROF_REQUIRE_PRIVILEGED=1 forbids skipping");
    }
    eprintln!("{why}");
    false
}

/// Compile a C or C++ fixture with the system compiler into `dir`; `flags` are added to the defaults.
pub fn build_c(dir: &Path, source: &str, flags: &[&str]) -> PathBuf {
    let src = fixtures().join(source);
    let stem = Path::new(source).file_stem().unwrap().to_string_lossy();
    let out = dir.join(format!(
        "{stem}{}",
        flags.join("").replace(['-', '=', ' ', ','], "_")
    ));
    let compiler = if source.ends_with(".cpp") {
        "g++"
    } else {
        "gcc"
    };
    let st = Command::new(compiler)
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .args(flags)
        .arg("-pthread")
        .status()
        .expect("run the C compiler");
    assert!(st.success(), "{compiler} failed on {}", src.display());
    out
}

/// Compile a Rust fixture with rustc into `dir`.
pub fn build_rust(dir: &Path, source: &str, flags: &[&str]) -> PathBuf {
    let src = fixtures().join(source);
    let stem = Path::new(source)
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let out = dir.join(&stem);
    let st = Command::new("rustc")
        .arg("--edition=2021")
        .arg("--crate-name")
        .arg(&stem)
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .args(flags)
        .status()
        .expect("run rustc");
    assert!(st.success(), "rustc failed on {}", src.display());
    out
}

/// A command for the rprof binary under test.
pub fn rprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rprof"))
}

/// Run rprof with `args`, asserting success; returns stdout.
pub fn rprof_ok(args: &[&str]) -> String {
    let out = rprof().args(args).output().expect("run rprof");
    assert_success(&out, args);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn assert_success(out: &Output, what: &[&str]) {
    assert!(
        out.status.success(),
        "rprof {:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        what,
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Parse folded stacks: (frames outermost first, with the command as the first element, count).
pub fn parse_folded(text: &str) -> Vec<(Vec<String>, u64)> {
    text.lines()
        .filter_map(|l| {
            let (stack, count) = l.rsplit_once(' ')?;
            Some((
                stack.split(';').map(str::to_string).collect(),
                count.parse().ok()?,
            ))
        })
        .collect()
}

/// Whether `frames` contains `seq` as a contiguous run.
pub fn contains_run(frames: &[String], seq: &[&str]) -> bool {
    frames
        .windows(seq.len())
        .any(|w| w.iter().zip(seq).all(|(a, b)| a == b))
}
