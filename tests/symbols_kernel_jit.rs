//! Kernel symbols from the live /proc/kallsyms and JIT symbols from /tmp/perf-PID.map.
mod common;
use rprof::addr::RuntimeAddr;
use rprof::symbols::{Symbolizer, SymbolizerOptions};

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
    let name = |s: &mut Symbolizer, addr| s.jit(pid, RuntimeAddr(addr)).map(|n| n.to_string());
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
    assert_eq!(symbolizer.jit(pid + 1, RuntimeAddr(0x7f0000001010)), None);
}
