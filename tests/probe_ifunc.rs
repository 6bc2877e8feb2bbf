//! IFUNC symbols (`strlen`, `memcpy`): listed and probed at the implementation the dynamic linker picks on this
//! CPU, named by the IFUNC, and counted exactly as bpftrace counts that implementation (bpftrace itself probes
//! an IFUNC at its resolver, which runs once or twice).
mod common;
use common::{build_c, privileged, rprof_ok, skip};
use std::path::{Path, PathBuf};
use std::process::Command;

const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";

/// The `-l` line of the target named `name` (its first column).
fn listed<'a>(listing: &'a str, name: &str) -> Option<&'a str> {
    listing.lines().find(|l| l.split('\t').next() == Some(name))
}

/// The fixture, built through the PLT (`-fno-builtin`: strlen is called, not folded or inlined).
fn fixture() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "ifunc_calls.c", &["-O2", "-fno-builtin"]);
    (dir, bin)
}

/// The fixture's own count of rounds (`rounds N`), from its stdout.
fn rounds(out: &str) -> u64 {
    out.lines()
        .find_map(|l| l.strip_prefix("rounds "))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no rounds line in {out}"))
}

/// Check that `-l` lists the IFUNCs a glob matches (by their own names, not their resolvers'), at what the
/// helper says they resolve to, and that memcpy and memmove, which resolve to one implementation here, are
/// one row naming both.
#[test]
fn ifuncs_listed_by_name() {
    if !Path::new(LIBC).exists() {
        return skip(
            "ifuncs_listed_by_name",
            "no /usr/lib/x86_64-linux-gnu/libc.so.6",
        );
    }
    let list = rprof_ok(&["probe", "-l", "c:str*"]);
    for name in ["strlen", "strnlen", "strchrnul", "strcasecmp", "strstr"] {
        assert!(listed(&list, name).is_some(), "{name} missing:\n{list}");
    }
    assert!(
        !list
            .lines()
            .any(|l| l.split('\t').next().unwrap().ends_with("_ifunc")),
        "a resolver is listed:\n{list}"
    );
    // strnlen sits where the dynamic linker resolves it, in a process of its own.
    let helper = rprof_ok(&["__resolve-ifuncs", LIBC, "strnlen", "memcpy", "memmove"]);
    let addr = |name: &str| {
        helper
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}\t")))
            .map(str::to_string)
            .unwrap()
    };
    let strnlen = rprof_ok(&["probe", "-l", "c:strnlen"]);
    let line = listed(&strnlen, "strnlen").expect("strnlen listed");
    let at = u64::from_str_radix(addr("strnlen").trim_start_matches("0x"), 16).unwrap();
    let (_, probed) = line.split_once("(addr 0x").unwrap();
    let probed = u64::from_str_radix(probed.split(')').next().unwrap(), 16).unwrap();
    // The probe sits at the function or a few instructions in (placement skips what it can emulate).
    assert!((at..at + 32).contains(&probed), "{line} vs {at:#x}");
    if addr("memcpy") == addr("memmove") {
        let mem = rprof_ok(&["probe", "-l", "c:memmove"]);
        assert!(listed(&mem, "memmove/memcpy").is_some(), "{mem}");
    }
}

/// Check that `--count c:strlen` counts the calls of the implementation strlen resolves to on this CPU, as
/// bpftrace counts them on that implementation by its own name: the fixture's calls plus the same few that
/// libc makes itself.
#[test]
fn strlen_counted_as_bpftrace_counts_its_implementation() {
    if !privileged("strlen_counted_as_bpftrace") || !Path::new(LIBC).exists() {
        return;
    }
    let (_dir, bin) = fixture();
    let b = bin.to_str().unwrap();
    let out = rprof_ok(&["probe", "--count", "c:strlen", "--", b, "30"]);
    let n = rounds(&out);
    let counted: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("strlen "))
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or_else(|| panic!("no strlen row:\n{out}"));
    assert!(n > 1000, "{out}");
    let list = rprof_ok(&["probe", "-l", "c:strlen"]);
    let line = listed(&list, "strlen").expect("strlen listed");
    let implementation = line
        .split("aliases: ")
        .nth(1)
        .and_then(|a| a.split(", ").find(|n| n.starts_with("__strlen_")))
        .unwrap_or_else(|| panic!("no __strlen_* alias: {line}"))
        .to_string();
    if Command::new("bpftrace").arg("--version").output().is_err() {
        return skip("strlen_counted_as_bpftrace", "bpftrace is not installed");
    }
    let prog = format!("uprobe:{LIBC}:{implementation} /pid == cpid/ {{ @n = count(); }}");
    let bt = Command::new("bpftrace")
        .args(["-e", &prog, "-c", &format!("{b} 30")])
        .output()
        .expect("run bpftrace");
    let text = String::from_utf8_lossy(&bt.stdout);
    assert!(
        bt.status.success(),
        "bpftrace: {text}{}",
        String::from_utf8_lossy(&bt.stderr)
    );
    let m = rounds(&text);
    let reference: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("@n: "))
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count from bpftrace: {text}"));
    // Both runs: one call per round, plus libc's own (the same few in both).
    assert!(
        counted >= n && reference >= m,
        "{counted} of {n}, {reference} of {m}"
    );
    assert_eq!(
        counted - n,
        reference - m,
        "rprof {counted} for {n} rounds, bpftrace {reference} for {m} rounds on {implementation}"
    );
}
