//! `rprof bt`'s `reg()` where bpftrace 0.17 reads it besides uprobe entries, against bpftrace on the same
//! fixtures: at a uretprobe (the registers at the return: `ax` the return value, `ip` the return address in
//! the caller) and at `profile:hz` (the registers of the context the sample interrupted).
mod common;
use common::tools::{bpftrace, rprof_bt};
use common::{build_c, privileged};
use std::path::Path;
use std::process::Command;

/// The lines of `text` that start with `prefix`.
fn lines_with<'t>(text: &'t str, prefix: &str) -> Vec<&'t str> {
    text.lines().filter(|l| l.starts_with(prefix)).collect()
}

/// The address and size of function `name` in `bin` (`nm -S`; a binary built without PIE).
fn symbol_range(bin: &Path, name: &str) -> (u64, u64) {
    let nm = Command::new("nm")
        .arg("-S")
        .arg(bin)
        .output()
        .expect("run nm");
    let symbols = String::from_utf8_lossy(&nm.stdout);
    symbols
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[..] {
                [addr, size, "t" | "T", n] if n == name => Some((
                    u64::from_str_radix(addr, 16).ok()?,
                    u64::from_str_radix(size, 16).ok()?,
                )),
                _ => None,
            }
        })
        .unwrap_or_else(|| panic!("no {name} in nm -S's output:\n{symbols}"))
}

/// Check that at a uretprobe `reg("ax")` is the return value (`retval`), `reg("ip")` the return address (inside
/// `main`, the caller) and `reg("sp")` the stack after the return, while the uprobe's `reg("ip")` stays the
/// probed function's address, on each of the fixture's 6 calls (`apply` returns 0 3 4 9 8 15), for both tools.
#[test]
fn registers_at_returns_as_bpftrace() {
    if !privileged("registers_at_returns_as_bpftrace") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "bt_names.c", &["-O2", "-no-pie"]);
    let (main, size) = symbol_range(&bin, "main");
    let program = format!(
        "uprobe:{0}:apply {{ @sp[tid] = reg(\"sp\"); printf(\"entry %s\\n\", usym(reg(\"ip\"))); }} \
         uretprobe:{0}:apply {{ printf(\"ret %d ax %d in-main %d sp+8 %d\\n\", retval, reg(\"ax\"), \
         reg(\"ip\") >= {main} && reg(\"ip\") < {end}, reg(\"sp\") == @sp[tid] + 8); }} \
         END {{ clear(@sp); }}",
        bin.display(),
        end = main + size,
    );
    // The fixture lingers a second after its calls: bpftrace names printf's usym() while the process lives.
    let cmd = format!("{} 6 1000", bin.display());
    let mine = rprof_bt(&["-e", &program, "-c", &cmd]);
    let theirs = bpftrace(&["-e", &program, "-c", &cmd]);
    let returns: Vec<String> = [0, 3, 4, 9, 8, 15]
        .iter()
        .map(|r| format!("ret {r} ax {r} in-main 1 sp+8 1"))
        .collect();
    for text in [&mine, &theirs] {
        assert_eq!(lines_with(text, "entry "), ["entry apply"; 6], "{text}");
        assert_eq!(lines_with(text, "ret "), returns, "{text}");
    }
}

/// The samples whose `reg("ip")` fell inside and outside `[lo, hi)` (`@in[1]`, `@in[0]`) in a tool's output.
fn inside_outside(text: &str) -> (u64, u64) {
    let count = |key: &str| {
        lines_with(text, key)
            .first()
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (count("@in[1]: "), count("@in[0]: "))
}

/// Check that at `profile:hz` `reg("ip")` is where the sample interrupted the fixture: fixtures/profile_shares.c
/// spends its CPU time in `burn`'s loop (and the clock reads it makes), so most samples of its 1,000 ms land in
/// `burn`. Both tools sample the same work at 999 Hz (about 1,000 samples each); their shares inside `burn`
/// agree within 4 standard deviations of the two binomial shares, and are a majority.
#[test]
fn registers_at_profile_as_bpftrace() {
    if !privileged("registers_at_profile_as_bpftrace") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "profile_shares.c", &["-O2", "-no-pie"]);
    let (burn, size) = symbol_range(&bin, "burn");
    let program = format!(
        "profile:hz:999 /pid == cpid/ {{ @in[reg(\"ip\") >= {burn} && reg(\"ip\") < {end}] = count(); }}",
        end = burn + size,
    );
    let cmd = format!("{} 1000", bin.display());
    let mine = inside_outside(&rprof_bt(&["-e", &program, "-c", &cmd]));
    let theirs = inside_outside(&bpftrace(&["-e", &program, "-c", &cmd]));
    let share = |(i, o): (u64, u64)| (i as f64 / (i + o).max(1) as f64, (i + o) as f64);
    let ((p1, n1), (p2, n2)) = (share(mine), share(theirs));
    assert!(
        n1 >= 500.0 && n2 >= 500.0,
        "about 1,000 samples each: rprof {mine:?}, bpftrace {theirs:?}"
    );
    let p = (p1 * n1 + p2 * n2) / (n1 + n2);
    let sigma = (p * (1.0 - p) * (1.0 / n1 + 1.0 / n2)).sqrt();
    assert!(
        (p1 - p2).abs() <= 4.0 * sigma + 0.01,
        "share in burn: rprof {p1:.3} {mine:?}, bpftrace {p2:.3} {theirs:?} (4 sigma {:.3})",
        4.0 * sigma
    );
    assert!(p1 > 0.5 && p2 > 0.5, "rprof {mine:?}, bpftrace {theirs:?}");
}
