//! End-to-end tests of `rprof record` + `rprof report` on real programs.
mod common;
use common::*;
use std::process::{Command, Stdio};

/// Check that the known 75/25 time split of the call tree shows in the folded stacks, with frames in order.
#[test]
fn known_time_split() {
    if !privileged("known_time_split") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "calltree.c", FP);
    let data = record_to(
        dir.path(),
        "split.data",
        &["-F", "999", "-g", "--", bin.to_str().unwrap(), "2000"],
    );
    let folded = rprof_ok(&["report", "-i", &data, "--folded", "--comm", "calltree"]);
    let stacks = parse_folded(&folded);
    let total: u64 = stacks.iter().map(|s| s.1).sum();
    // hot_a/hot_b call nothing: what sits above them in a stack is the kernel handling an interrupt or a
    // preemption while they ran, which is still their CPU time (it grows when the machine is loaded).
    let under = |seq: &[&str]| -> u64 {
        stacks
            .iter()
            .filter(|(f, _)| contains_run(f, seq))
            .map(|s| s.1)
            .sum()
    };
    let a = under(&["main", "work_a", "hot_a"]);
    let b = under(&["main", "work_b", "hot_b"]);
    assert!(total >= 500, "too few samples: {total}\n{folded}");
    let share = a as f64 * 100.0 / total as f64;
    eprintln!(
        "calltree: {total} samples, main;work_a;hot_a {a} ({share:.1}%), main;work_b;hot_b {b}"
    );
    assert!(
        (70.0..=80.0).contains(&share),
        "work_a;hot_a share {share:.1}% not 75±5\n{folded}"
    );
    assert!(
        b as f64 * 100.0 / total as f64 >= 20.0,
        "work_b;hot_b share too small\n{folded}"
    );
}

/// Check that threads created after `-p` attached are sampled, in their own functions.
#[test]
fn attach_follows_new_threads() {
    if !privileged("attach_follows_new_threads") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "threads.c", FP);
    let mut child = KillOnDrop(
        Command::new(&bin)
            .arg("0.6")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let pid = read_line(child.0.stdout.as_mut().unwrap());
    let data = dir.path().join("attach.data");
    let mut rec = KillOnDrop(
        common::rprof()
            .args(["record", "-F", "499", "-g", "-p", pid.trim(), "-o"])
            .arg(&data)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // rprof says when sampling is on; only then may the threads start.
    let started = read_line(rec.0.stderr.as_mut().unwrap());
    assert!(started.contains("sampling process"), "{started}");
    let target = nix::unistd::Pid::from_raw(pid.trim().parse().unwrap());
    nix::sys::signal::kill(target, nix::sys::signal::SIGUSR1).unwrap();
    assert!(child.0.wait().unwrap().success());
    // rprof stops by itself when the target exits.
    assert!(rec.0.wait().unwrap().success());
    let folded = rprof_ok(&["report", "-i", data.to_str().unwrap(), "--folded"]);
    let stacks = parse_folded(&folded);
    let mut tids = std::collections::BTreeSet::new();
    for f in ["thread_one", "thread_two", "thread_three", "main_spin"] {
        let n: u64 = stacks
            .iter()
            .filter(|(s, _)| s.last().is_some_and(|l| l == f))
            .map(|s| s.1)
            .sum();
        assert!(
            n >= 50,
            "{f}: only {n} samples (expected ~300 at 499 Hz over 0.6 s of CPU)\n{folded}"
        );
        tids.insert(f);
    }
    let table = rprof_ok(&["report", "-i", data.to_str().unwrap()]);
    assert!(table.contains("thread_three"), "{table}");
}

/// Check that kernel frames of the write path sit above the user frames that called write().
#[test]
fn kernel_frames_above_user() {
    if !privileged("kernel_frames_above_user") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "writeloop.c", FP);
    let data = record_to(
        dir.path(),
        "k.data",
        &["-F", "999", "-g", "--", bin.to_str().unwrap(), "1000"],
    );
    let folded = rprof_ok(&["report", "-i", &data, "--folded"]);
    let stacks = parse_folded(&folded);
    let kernel_write =
        |f: &String| f == "ksys_write" || f == "vfs_write" || f.starts_with("__x64_sys_write");
    // The syscall path: where in it a sample lands (entry, do_syscall_64 or the write itself) depends on the
    // CPU (an Intel host here has 7% in ksys_write/vfs_write, an AMD one over half), so the share is taken of
    // the whole path, and its order with the user frames is checked on every such sample.
    let syscall =
        |f: &String| f.starts_with("entry_SYSCALL_64") || f == "do_syscall_64" || kernel_write(f);
    // libc's write() keeps no frame pointer, so the walk goes from it to main (write_many's return address is
    // on the stack, not in the frame chain).
    let below = |f: &Vec<String>, kernel: &dyn Fn(&String) -> bool| {
        let user = f.iter().position(|x| x == "main");
        let kern = f.iter().position(kernel);
        matches!((user, kern), (Some(u), Some(k)) if u < k)
    };
    let total: u64 = stacks.iter().map(|s| s.1).sum();
    let in_syscall: u64 = stacks
        .iter()
        .filter(|(f, _)| f.iter().any(syscall))
        .map(|s| s.1)
        .sum();
    let ordered: u64 = stacks
        .iter()
        .filter(|(f, _)| below(f, &syscall))
        .map(|s| s.1)
        .sum();
    let deep: u64 = stacks
        .iter()
        .filter(|(f, _)| below(f, &kernel_write))
        .map(|s| s.1)
        .sum();
    assert!(
        in_syscall * 10 >= total && ordered * 100 >= in_syscall * 95 && deep > 0,
        "{ordered} of {in_syscall} samples in the write syscall path (of {total}) show main below it, \
         {deep} below ksys_write/vfs_write\n{folded}"
    );
    let table = rprof_ok(&["report", "-i", &data]);
    assert!(
        table.contains("[k] "),
        "kernel frames are marked [k]\n{table}"
    );
}

/// Check the build-id cache, as perf keeps it: `record` stores a copy of /proc/kallsyms under
/// $PERF_BUILDID_DIR and names the kernel's build id in the recording; `report` names kernel frames from that
/// copy (edited here so that its names show where they came from, and shifted as by another KASLR offset);
/// and a recording of another kernel, with no copy, gets `[unknown]` kernel frames and a warning, never the
/// running kernel's names.
#[test]
fn kernel_names_from_buildid_cache() {
    if !privileged("kernel_names_from_buildid_cache") {
        return;
    }
    let Some(build_id) = rprof::symbols::running_build_id() else {
        panic!("no kernel build id in /sys/kernel/notes");
    };
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let bin = build_c(dir.path(), "writeloop.c", FP);
    let data = dir.path().join("k.data");
    let with_cache = |args: &[&str]| rprof_ok_env("PERF_BUILDID_DIR", &cache, args);
    let data_arg = data.to_str().unwrap();
    let bin_arg = bin.to_str().unwrap();
    with_cache(&[
        "record", "-q", "-F", "999", "-g", "-o", data_arg, "--", bin_arg, "500",
    ]);

    // The copy, perf's .build-id link to it, and the kernel's entry in the recording.
    let copy = rprof::symbols::cached_kallsyms_path(&cache, &build_id);
    let text = std::fs::read_to_string(&copy).expect("record keeps a copy of kallsyms");
    assert!(text.contains(" ksys_write\n"), "the copy is kallsyms");
    let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    let link = cache.join(".build-id").join(&hex[..2]).join(&hex[2..]);
    assert!(
        link.join("kallsyms").is_file(),
        "{} links to the copy",
        link.display()
    );
    let recording = std::fs::read(&data).unwrap();
    let at: Vec<usize> = recording
        .windows(build_id.len())
        .enumerate()
        .filter(|(_, w)| *w == build_id.as_slice())
        .map(|(i, _)| i)
        .collect();
    assert!(!at.is_empty(), "the recording names the kernel's build id");

    // A copy from "another boot": every address 2 MiB higher, and the write path renamed.
    let shift = 0x20_0000u64;
    let edited: String = text
        .lines()
        .map(|line| {
            let (addr, rest) = line.split_at(16);
            let addr = u64::from_str_radix(addr, 16).unwrap();
            let addr = if addr == 0 { 0 } else { addr + shift };
            let rest = match rest {
                " T ksys_write" | " T vfs_write" => format!("{rest}_from_copy"),
                _ => rest.to_string(),
            };
            format!("{addr:016x}{rest}\n")
        })
        .collect();
    std::fs::write(&copy, edited).unwrap();
    let (folded, _) = with_cache(&["report", "-i", data_arg, "--folded"]);
    let stacks = parse_folded(&folded);
    let frames = || stacks.iter().flat_map(|(f, _)| f.iter());
    assert!(
        frames().any(|f| f == "ksys_write_from_copy" || f == "vfs_write_from_copy"),
        "kernel names come from the cached copy\n{folded}"
    );
    assert!(
        !frames().any(|f| f == "ksys_write" || f == "vfs_write"),
        "and not from /proc/kallsyms\n{folded}"
    );

    // Another kernel: no copy of its kallsyms, and not the running one.
    let mut other = recording.clone();
    for i in at {
        other[i] ^= 0xff;
    }
    let other_path = dir.path().join("other.data");
    std::fs::write(&other_path, other).unwrap();
    let (folded, stderr) = with_cache(&["report", "-i", other_path.to_str().unwrap(), "--folded"]);
    assert!(
        stderr.contains("is not the running one"),
        "a warning says why kernel frames are unknown: {stderr}"
    );
    let (table, _) = with_cache(&["report", "-i", other_path.to_str().unwrap()]);
    let named: Vec<&str> = table
        .lines()
        // Unnamed kernel code is listed by its address (`[k] 0xffffffff8123abcd`).
        .filter(|l| l.contains(" [k] ") && !l.contains(" [k] 0x"))
        .collect();
    assert!(
        named.is_empty(),
        "no kernel names are guessed: {named:?}\n{table}"
    );
    assert!(
        folded.contains(";[[kernel.kallsyms]]"),
        "kernel frames show as unknown\n{folded}"
    );
}

/// Check that `[vdso]` frames are named, from the build-id cache's copy of the vDSO that `record` keeps (edited
/// here so that its name shows where it came from), and that a recording of another vDSO with no copy gets
/// `[[vdso]]` (unnamed code of the `[vdso]` module), never the running vDSO's names.
#[test]
fn vdso_frames_from_buildid_cache() {
    if !privileged("vdso_frames_from_buildid_cache") {
        return;
    }
    let (image, build_id) = rprof::symbols::running_vdso().expect("this process has a vDSO");
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let bin = build_c(dir.path(), "vdso_clock.c", FP);
    let data = dir.path().join("v.data");
    let with_cache = |args: &[&str]| rprof_ok_env("PERF_BUILDID_DIR", &cache, args).0;
    let data_arg = data.to_str().unwrap();
    with_cache(&[
        "record",
        "-q",
        "-F",
        "999",
        "-g",
        "-o",
        data_arg,
        "--",
        bin.to_str().unwrap(),
        "500",
    ]);
    // Samples by leaf: the vDSO's named code (its exported `__vdso_*` functions) and its unnamed code.
    let leaves = |folded: &str, leaf: &dyn Fn(&str) -> bool| -> u64 {
        parse_folded(folded)
            .iter()
            .filter(|(f, _)| f.last().is_some_and(|l| leaf(l)))
            .map(|s| s.1)
            .sum()
    };
    let in_vdso = |l: &str| l == "[[vdso]]" || l.starts_with("__vdso_");

    let copy = rprof::symbols::cached_vdso_path(&cache, &build_id);
    assert_eq!(
        std::fs::read(&copy).expect("record keeps a copy of the vDSO"),
        image
    );
    let folded = with_cache(&["report", "-i", data_arg, "--folded"]);
    let total = leaves(&folded, &|_| true);
    let vdso = leaves(&folded, &in_vdso);
    let named = leaves(&folded, &|l| l == "__vdso_clock_gettime");
    // The loop's time is the clock's read, in the vDSO: perf shows about 90% of this fixture's samples there
    // with the TSC as clocksource. How much is named depends on the clocksource: with kvm-clock the read is
    // the vDSO's own function, which it does not export (perf leaves it unnamed too: `[vdso] 0x79b`), 37% of
    // the samples named, 41% not.
    assert!(
        vdso * 2 >= total && named * 5 >= total,
        "{vdso} of {total} samples in the vDSO, {named} in __vdso_clock_gettime\n{folded}"
    );
    // Unnamed vDSO code is code no exported symbol covers: never a function the copy names.
    let table = with_cache(&["report", "-i", data_arg]);
    let layout = rprof::symbols::elf_info(&copy).unwrap().layout;
    let exported: Vec<(u64, u64)> =
        rprof::symbols::function_symbols(&copy, &rprof::symbols::DebugSources::none())
            .unwrap()
            .iter()
            .filter_map(|s| {
                let start = layout.file_offset(s.addr)?.0;
                Some((start, start + s.size.max(1)))
            })
            .collect();
    assert!(!exported.is_empty(), "the vDSO exports functions");
    let hex = |s: &str| u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap();
    for row in table.lines().filter(|l| l.contains(" [vdso] ")) {
        let Some(span) = row.split("[.] [vdso]+0x").nth(1) else {
            continue;
        };
        let span = span.split(" (").next().unwrap();
        let (a, b) = match span.split_once("..") {
            Some((a, b)) => (hex(a), hex(b)),
            None => (hex(span), hex(span) + 1),
        };
        assert!(
            !exported.iter().any(|&(s, e)| a < e && s < b),
            "unnamed vDSO code {a:#x}..{b:#x} lies in an exported function\n{table}"
        );
    }

    // The copy is what names them: rename the function in the copy's string table.
    let renamed = image
        .windows(b"__vdso_clock_gettime\0".len())
        .position(|w| w == b"__vdso_clock_gettime\0")
        .expect("the vDSO exports __vdso_clock_gettime");
    let mut edited = image.clone();
    edited[renamed..renamed + 20].copy_from_slice(b"__vdso_clock_fromcpy");
    std::fs::write(&copy, &edited).unwrap();
    let folded = with_cache(&["report", "-i", data_arg, "--folded"]);
    assert_eq!(
        leaves(&folded, &|l| l == "__vdso_clock_fromcpy"),
        named,
        "names come from the cached copy\n{folded}"
    );

    // Another vDSO (its build id changed in the recording) with no copy: unknown, not the running one's names.
    let mut other = std::fs::read(&data).unwrap();
    let at = other
        .windows(build_id.len())
        .position(|w| w == build_id.as_slice())
        .expect("the recording names the vDSO's build id");
    other[at] ^= 0xff;
    let other_path = dir.path().join("other.data");
    std::fs::write(&other_path, other).unwrap();
    let folded = with_cache(&["report", "-i", other_path.to_str().unwrap(), "--folded"]);
    assert_eq!(
        leaves(&folded, &|l| l == "[[vdso]]"),
        vdso,
        "frames of an unknown vDSO stay unknown\n{folded}"
    );
}

/// Check that C++ and Rust names come out demangled.
#[test]
fn demangled_names() {
    if !privileged("demangled_names") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cpp = build_c(dir.path(), "klass.cpp", FP);
    let data = record_to(
        dir.path(),
        "cpp.data",
        &["-F", "499", "-g", "--", cpp.to_str().unwrap(), "500"],
    );
    let folded = rprof_ok(&["report", "-i", &data, "--folded"]);
    assert!(folded.contains(";main;ns::Klass::method("), "{folded}");
    let rs = build_rust(
        dir.path(),
        "rustmod.rs",
        &["-C", "opt-level=1", "-C", "force-frame-pointers=yes", "-g"],
    );
    let data = record_to(
        dir.path(),
        "rs.data",
        &["-F", "499", "-g", "--", rs.to_str().unwrap(), "500"],
    );
    let folded = rprof_ok(&["report", "-i", &data, "--folded"]);
    let in_function = parse_folded(&folded)
        .iter()
        .filter(|(f, _)| contains_run(f, &["rustmod::main", "rustmod::module::function"]))
        .map(|s| s.1)
        .sum::<u64>();
    assert!(in_function >= 20, "{folded}");
    assert!(!folded.contains("_ZN"), "mangled names leaked\n{folded}");
}

/// Check that a stripped binary symbolizes through its debug file under a .build-id directory, and that
/// without the debug file its frames are [unknown], never wrong.
#[test]
fn stripped_binary_uses_build_id_debug_file() {
    if !privileged("stripped_binary_uses_build_id_debug_file") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(
        dir.path(),
        "calltree.c",
        &[FP, &["-Wl,--build-id"]].concat(),
    );
    let info = rprof::symbols::elf_info(&bin).unwrap();
    let id: String = info
        .build_id
        .expect("gcc wrote a build id")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let debug_root = dir.path().join("debug");
    let debug_file = debug_root
        .join(".build-id")
        .join(&id[..2])
        .join(format!("{}.debug", &id[2..]));
    std::fs::create_dir_all(debug_file.parent().unwrap()).unwrap();
    let st = Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&bin)
        .arg(&debug_file)
        .status()
        .unwrap();
    assert!(st.success());
    let st = Command::new("strip")
        .arg("--strip-all")
        .arg(&bin)
        .status()
        .unwrap();
    assert!(st.success());
    let data = record_to(
        dir.path(),
        "s.data",
        &["-F", "499", "-g", "--", bin.to_str().unwrap(), "500"],
    );
    let with = rprof_ok(&[
        "report",
        "-i",
        &data,
        "--folded",
        "--debug-dir",
        debug_root.to_str().unwrap(),
    ]);
    assert!(with.contains(";main;work_a;hot_a "), "{with}");
    let without = rprof_ok(&[
        "report",
        "-i",
        &data,
        "--folded",
        "--debug-dir",
        "/nonexistent",
    ]);
    assert!(!without.contains("hot_a"), "{without}");
    assert!(without.contains(";[calltree]"), "{without}");
}

/// Check that an SVG flame graph is written in-process and names the hot function.
#[test]
fn flamegraph_svg() {
    if !privileged("flamegraph_svg") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "calltree.c", FP);
    let data = record_to(
        dir.path(),
        "f.data",
        &["-F", "499", "-g", "--", bin.to_str().unwrap(), "500"],
    );
    let svg = dir.path().join("out.svg");
    rprof_ok(&["report", "-i", &data, "--flamegraph", svg.to_str().unwrap()]);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.starts_with("<?xml") && text.contains("hot_a"),
        "bad svg"
    );
}
