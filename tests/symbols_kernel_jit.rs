//! Kernel symbols from the live /proc/kallsyms and JIT symbols from /tmp/perf-PID.map.
mod common;
use rprof::addr::RuntimeAddr;
use rprof::symbols::{Symbolizer, SymbolizerOptions, Unnamed};

/// Check that the live /proc/kallsyms resolves `ksys_write`'s address (and a byte inside it) back to its name.
#[test]
fn kernel_resolves_ksys_write() {
    let text = std::fs::read_to_string("/proc/kallsyms").expect("read /proc/kallsyms");
    let addr = text
        .lines()
        .find_map(|line| {
            let mut f = line.split_whitespace();
            let (addr, kind, name) = (f.next()?, f.next()?, f.next()?);
            (name == "ksys_write" && kind.eq_ignore_ascii_case("t"))
                .then(|| u64::from_str_radix(addr, 16).ok())?
        })
        .expect("ksys_write in /proc/kallsyms");
    let mut symbolizer = Symbolizer::new(SymbolizerOptions::default());
    if addr == 0 {
        common::skip(
            "kernel_resolves_ksys_write",
            "kallsyms addresses are hidden (kptr_restrict); run as root",
        );
        assert_eq!(symbolizer.kernel(0), None, "hidden kallsyms gives no names");
        return;
    }
    assert_eq!(symbolizer.kernel(addr).as_deref(), Some("ksys_write"));
    assert_eq!(symbolizer.kernel(addr + 1).as_deref(), Some("ksys_write"));
    assert_eq!(symbolizer.kernel(0x1000), None, "a user-space address");
}

/// Check that a perf map is read for its pid, resolves within each entry's size, and gives None elsewhere.
#[test]
fn jit_resolves_through_perf_map() {
    // Above the kernel's pid_max, so no real process owns this map.
    let pid = 0x7fff_0000 + (std::process::id() & 0xffff);
    let path = format!("/tmp/perf-{pid}.map");
    std::fs::write(
        &path,
        "7f0000001000 40 JIT:hot_loop\n7f0000002000 10 Interpreter stub\n",
    )
    .unwrap();
    let mut symbolizer = Symbolizer::new(SymbolizerOptions::default());
    let name = |s: &mut Symbolizer, addr| s.jit(pid, RuntimeAddr(addr)).ok().map(|n| n.to_string());
    assert_eq!(
        name(&mut symbolizer, 0x7f0000001000).as_deref(),
        Some("JIT:hot_loop")
    );
    assert_eq!(
        name(&mut symbolizer, 0x7f000000103f).as_deref(),
        Some("JIT:hot_loop")
    );
    assert_eq!(name(&mut symbolizer, 0x7f0000001040), None);
    assert_eq!(
        name(&mut symbolizer, 0x7f0000002008).as_deref(),
        Some("Interpreter stub")
    );
    std::fs::remove_file(&path).unwrap();
    // Parsed once per pid: still answers after the file is gone.
    assert_eq!(
        name(&mut symbolizer, 0x7f0000001010).as_deref(),
        Some("JIT:hot_loop")
    );
    // A pid without a map.
    assert_eq!(
        symbolizer.jit(pid + 1, RuntimeAddr(0x7f0000001010)),
        Err(Unnamed::JitWithoutMap)
    );
}

/// Check that the stack resolver sends addresses in the mappings real JITs get (an anonymous executable mapping,
/// which perf records as `//anon`; memfd files; `[anon:NAME]`) to `/tmp/perf-PID.map` first, and names what the
/// map lacks by its module, `[anon]`.
#[test]
fn resolver_sends_jit_mappings_to_perf_map() {
    use rprof::process::{AddressSpaces, Mapping, TaskEvent};
    use rprof::report::StackResolver;
    use std::sync::Arc;
    let pid = 0x7ffe_0000 + (std::process::id() & 0xffff);
    let path = format!("/tmp/perf-{pid}.map");
    std::fs::write(
        &path,
        "7f0000001000 40 JIT:hot_loop\n7f0000011000 40 JIT:memfd_fn\n7f0000021000 40 JIT:named\n",
    )
    .unwrap();
    let mut spaces = AddressSpaces::new();
    for (start, name) in [
        (0x7f00_0000_1000u64, "//anon"),
        (0x7f00_0001_1000, "/memfd:jit (deleted)"),
        (0x7f00_0002_1000, "[anon:v8]"),
    ] {
        spaces.apply(TaskEvent::Mmap {
            pid,
            mapping: Mapping {
                start,
                end: start + 0x1000,
                pgoff: 0,
                path: Arc::from(name),
                file: None,
                build_id: None,
                prot: 5,
            },
        });
    }
    let mut resolver = StackResolver::new(SymbolizerOptions::default(), Default::default());
    let names = |r: &mut StackResolver, chain: &[u64]| {
        let mut ids = Vec::new();
        r.resolve_chain(pid, spaces.get(pid), false, chain, &mut ids);
        r.finish();
        let mut frames = Vec::new();
        r.expand(&ids, false, &mut frames);
        frames
            .iter()
            .map(|&id| rprof::report::folded_name(r.frame(id)))
            .collect::<Vec<_>>()
    };
    // Leaf first; the callers are return addresses (looked up one byte back).
    let got = names(
        &mut resolver,
        &[
            0x7f00_0000_1010,
            0x7f00_0001_1011,
            0x7f00_0002_1001,
            0x7f00_0000_1800,
        ],
    );
    std::fs::remove_file(&path).unwrap();
    assert_eq!(
        got,
        vec!["JIT:hot_loop", "JIT:memfd_fn", "JIT:named", "[anon]"]
    );
}

/// Check that a real JIT's samples (code in an anonymous executable mapping, named in /tmp/perf-PID.map) are
/// named from the perf map in `rprof report`, for most of its samples.
#[test]
fn report_names_real_jit_code() {
    if !common::privileged("report_names_real_jit_code") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = common::build_c(dir.path(), "jit_anon.c", &["-O1"]);
    let data = dir.path().join("jit.data");
    let data = data.to_str().unwrap();
    let out = common::rprof_ok(&[
        "record",
        "-q",
        "-o",
        data,
        "-F",
        "999",
        "--",
        bin.to_str().unwrap(),
        "500",
    ]);
    let folded = common::rprof_ok(&["report", "-i", data, "--folded"]);
    // The fixture prints the perf map it wrote.
    if let Some(map) = out.lines().find(|l| l.starts_with("/tmp/perf-")) {
        let _ = std::fs::remove_file(map);
    }
    let stacks = common::parse_folded(&folded);
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    let jit: u64 = stacks
        .iter()
        .filter(|(f, _)| f.last().is_some_and(|l| l == "JIT:hot_loop"))
        .map(|(_, n)| n)
        .sum();
    eprintln!("jit: {jit} of {total} samples named JIT:hot_loop");
    assert!(total >= 200, "too few samples ({total}):\n{folded}");
    assert!(
        jit * 100 >= total * 80,
        "only {jit} of {total} samples are JIT:hot_loop:\n{folded}"
    );
}
