//! perf's hardware (`PERF_TYPE_HARDWARE`), cache (`PERF_TYPE_HW_CACHE`) and raw (`rNNNN`) events: their names
//! as perf spells them and the configs perf builds for them (checked against `perf stat -vv -e EVENT`). They
//! need the CPU's PMU, which a virtual machine without PMU passthrough lacks.
use perf_event_open_sys::bindings as sys;

/// The generic hardware events: perf's name, its aliases, the `PERF_COUNT_HW_*` config.
pub const HARDWARE_EVENTS: &[(&str, &[&str], u32)] = &[
    ("cpu-cycles", &["cycles"], sys::PERF_COUNT_HW_CPU_CYCLES),
    ("instructions", &[], sys::PERF_COUNT_HW_INSTRUCTIONS),
    ("cache-references", &[], sys::PERF_COUNT_HW_CACHE_REFERENCES),
    ("cache-misses", &[], sys::PERF_COUNT_HW_CACHE_MISSES),
    (
        "branch-instructions",
        &["branches"],
        sys::PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
    ),
    ("branch-misses", &[], sys::PERF_COUNT_HW_BRANCH_MISSES),
    ("bus-cycles", &[], sys::PERF_COUNT_HW_BUS_CYCLES),
    (
        "stalled-cycles-frontend",
        &["idle-cycles-frontend"],
        sys::PERF_COUNT_HW_STALLED_CYCLES_FRONTEND,
    ),
    (
        "stalled-cycles-backend",
        &["idle-cycles-backend"],
        sys::PERF_COUNT_HW_STALLED_CYCLES_BACKEND,
    ),
    ("ref-cycles", &[], sys::PERF_COUNT_HW_REF_CPU_CYCLES),
];

/// The caches of `PERF_TYPE_HW_CACHE` events, in config order, with perf's other spellings.
const CACHES: &[&[&str]] = &[
    &["L1-dcache", "l1-d", "l1d", "L1-data"],
    &["L1-icache", "l1-i", "l1i", "L1-instruction"],
    &["LLC", "L2"],
    &["dTLB", "d-tlb", "Data-TLB"],
    &["iTLB", "i-tlb", "Instruction-TLB"],
    &["branch", "branches", "bpu", "btb", "bpc"],
    &["node"],
];

/// The operations, in config order (`<< 8`).
const OPS: &[&[&str]] = &[
    &["load", "loads", "read"],
    &["store", "stores", "write"],
    &[
        "prefetch",
        "prefetches",
        "speculative-read",
        "speculative-load",
    ],
];

/// The results, in config order (`<< 16`); no result means accesses.
const RESULTS: &[&[&str]] = &[&["refs", "Reference", "ops", "access"], &["misses", "miss"]];

/// The config of hardware event `name` (or an alias).
pub fn hardware(name: &str) -> Option<u64> {
    HARDWARE_EVENTS
        .iter()
        .find(|(n, a, _)| *n == name || a.contains(&name))
        .map(|&(_, _, c)| u64::from(c))
}

/// The config of cache event `name` (`L1-dcache-load-misses`, `LLC-loads`, `dTLB-load-misses`), as perf
/// parses it: CACHE-OP[-RESULT], case-insensitive; `CACHE-OPs` alone is the accesses.
pub fn cache(name: &str) -> Option<u64> {
    let lower = name.to_ascii_lowercase();
    let find = |table: &[&[&str]], word: &str| {
        table
            .iter()
            .position(|names| names.iter().any(|n| n.eq_ignore_ascii_case(word)))
    };
    // The cache's own name may hold a dash (`L1-dcache`): try each split point.
    for (i, _) in lower.match_indices('-') {
        let Some(cache) = find(CACHES, &lower[..i]) else {
            continue;
        };
        let rest: Vec<&str> = lower[i + 1..].split('-').collect();
        let (op, result) = match rest.as_slice() {
            [op] => (find(OPS, op)?, 0),
            [op, result] => (find(OPS, op)?, find(RESULTS, result)?),
            _ => return None,
        };
        return Some(cache as u64 | (op as u64) << 8 | (result as u64) << 16);
    }
    None
}

/// The cache events `rprof list` shows, as perf lists them (`L1-dcache-loads`, `L1-dcache-load-misses`, ...).
pub fn cache_names() -> Vec<String> {
    let mut out = Vec::new();
    for cache in CACHES {
        for op in OPS {
            out.push(format!("{}-{}", cache[0], op[1]));
            out.push(format!("{}-{}-misses", cache[0], op[0]));
        }
    }
    out
}

/// The config of a raw event `rNNNN` (hex), as perf's `r1a8`.
pub fn raw(name: &str) -> Option<u64> {
    let hex = name.strip_prefix('r')?;
    if hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// Whether this machine has a CPU PMU (`/sys/bus/event_source/devices/cpu`, or a hybrid machine's `cpu_core`).
pub fn pmu_present() -> bool {
    let devices = std::path::Path::new("/sys/bus/event_source/devices");
    ["cpu", "cpu_core", "cpu_atom", "armv8_pmuv3_0"]
        .iter()
        .any(|d| devices.join(d).exists())
}

/// The one line for a hardware event on a machine without a PMU.
pub fn pmu_missing(name: &str) -> String {
    format!(
        "{name}: this machine has no hardware PMU (no /sys/bus/event_source/devices/cpu: a virtual machine \
         without PMU passthrough?), so hardware and cache events cannot be counted; use cpu-clock or \
         task-clock (software events) instead"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check perf's configs for generic, cache and raw names (as `perf stat -vv` printed them).
    #[test]
    fn configs() {
        assert_eq!(hardware("cycles"), Some(0));
        assert_eq!(hardware("branches"), Some(4));
        assert_eq!(hardware("ref-cycles"), Some(9));
        assert_eq!(cache("L1-dcache-load-misses"), Some(0x10000));
        assert_eq!(cache("LLC-load-misses"), Some(0x10002));
        assert_eq!(cache("dTLB-loads"), Some(0x3));
        assert_eq!(cache("l1d-stores"), Some(0x100));
        assert_eq!(cache("branch-load-misses"), Some(0x10005));
        assert_eq!(cache("L1-dcache"), None);
        assert_eq!(raw("r1a8"), Some(0x1a8));
        assert_eq!(raw("rx"), None);
        assert_eq!(raw("r"), None);
        for name in cache_names() {
            assert!(cache(&name).is_some(), "{name}");
        }
    }
}
