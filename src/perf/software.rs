//! The kernel's software events (`PERF_TYPE_SOFTWARE`): their names as perf and bpftrace 0.17 spell them, their
//! `PERF_COUNT_SW_*` configs, and bpftrace's default sample period for each. One table, pure, for every command
//! that takes an event name (`rprof probe 'software:page-faults:100'`, `profile:hz:99`; later record and stat).
use super::Attr;
use perf_event_open_sys::bindings as sys;

/// One software event.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SoftwareEvent {
    /// perf's name (`page-faults`).
    pub name: &'static str,
    /// Other names perf or bpftrace take for it (`faults`).
    pub aliases: &'static [&'static str],
    /// Its `PERF_COUNT_SW_*` value (the attr's `config`).
    pub config: u64,
    /// bpftrace 0.17's period when a probe gives no count (`software:page-faults`: a hit every 100 faults).
    pub default_period: u64,
}

impl SoftwareEvent {
    /// A clock (`cpu-clock`, `task-clock`): it counts nanoseconds, and a hit is a sample of time, not an event
    /// of the program's.
    pub fn is_clock(&self) -> bool {
        self.config == u64::from(sys::PERF_COUNT_SW_CPU_CLOCK)
            || self.config == u64::from(sys::PERF_COUNT_SW_TASK_CLOCK)
    }

    /// The event's attr (disabled, counting: give it a [`Sample`] to sample).
    pub fn attr(&self) -> Attr {
        Attr::software(self.config)
    }
}

/// How a software event samples: so many times a second (the kernel turns this into a period for the clocks),
/// or every so many events (nanoseconds for the clocks), as perf's `-F` and `-c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sample {
    Freq(u64),
    Period(u64),
}

impl Sample {
    /// `attr` sampling this way.
    pub fn apply(self, attr: Attr) -> Attr {
        match self {
            Sample::Freq(hz) => attr.frequency(hz),
            Sample::Period(n) => attr.period(n),
        }
    }

    /// A hit per event: a counter counts exactly what samples would.
    pub fn every_event(self) -> bool {
        self == Sample::Period(1)
    }
}

const fn ev(
    name: &'static str,
    aliases: &'static [&'static str],
    config: u32,
    default_period: u64,
) -> SoftwareEvent {
    SoftwareEvent {
        name,
        aliases,
        config: config as u64,
        default_period,
    }
}

/// Every software event rprof names, with perf's aliases (`faults`, `cs`, `migrations`) and bpftrace's (`cpu`).
/// Default periods are bpftrace 0.17's (`src/probe_matcher.h`, `SW_PROBE_LIST`): `task-clock`'s 1 ns is raised
/// by the kernel to its 10 us floor for the clocks. `cgroup-switches` (Linux 5.13) is perf's, not bpftrace's.
pub const SOFTWARE_EVENTS: &[SoftwareEvent] = &[
    ev(
        "cpu-clock",
        &["cpu"],
        sys::PERF_COUNT_SW_CPU_CLOCK,
        1_000_000,
    ),
    ev("task-clock", &[], sys::PERF_COUNT_SW_TASK_CLOCK, 1),
    ev(
        "page-faults",
        &["faults"],
        sys::PERF_COUNT_SW_PAGE_FAULTS,
        100,
    ),
    ev(
        "context-switches",
        &["cs"],
        sys::PERF_COUNT_SW_CONTEXT_SWITCHES,
        1000,
    ),
    ev(
        "cpu-migrations",
        &["migrations"],
        sys::PERF_COUNT_SW_CPU_MIGRATIONS,
        1,
    ),
    ev("minor-faults", &[], sys::PERF_COUNT_SW_PAGE_FAULTS_MIN, 100),
    ev("major-faults", &[], sys::PERF_COUNT_SW_PAGE_FAULTS_MAJ, 1),
    ev(
        "alignment-faults",
        &[],
        sys::PERF_COUNT_SW_ALIGNMENT_FAULTS,
        1,
    ),
    ev(
        "emulation-faults",
        &[],
        sys::PERF_COUNT_SW_EMULATION_FAULTS,
        1,
    ),
    ev("dummy", &[], sys::PERF_COUNT_SW_DUMMY, 1),
    ev(
        "cgroup-switches",
        &[],
        sys::PERF_COUNT_SW_CGROUP_SWITCHES,
        1,
    ),
];

/// The software event named `name` or one of its aliases.
pub fn find(name: &str) -> Option<&'static SoftwareEvent> {
    SOFTWARE_EVENTS
        .iter()
        .find(|e| e.name == name || e.aliases.contains(&name))
}

/// The `cpu-clock` event (`profile:` probes sample it).
pub fn cpu_clock() -> &'static SoftwareEvent {
    &SOFTWARE_EVENTS[0]
}

/// How `event` samples, in words: `99 Hz of CPU time`, `a sample every 10ms of CPU time`, `a hit every 100
/// events`, `a hit per event`.
pub fn rate_text(event: &SoftwareEvent, sample: Sample) -> String {
    let what = if event.is_clock() {
        "of CPU time"
    } else {
        "events"
    };
    match (sample, event.is_clock()) {
        (Sample::Freq(hz), true) => format!("{hz} Hz {what}"),
        (Sample::Freq(hz), false) => format!("{hz} hits a second"),
        (Sample::Period(1), false) => "a hit per event".to_string(),
        (Sample::Period(ns), true) => format!("a sample every {} {what}", clock_period(ns)),
        (Sample::Period(n), false) => format!("a hit every {n} {what}"),
    }
}

/// A clock's period in the largest unit that divides it: `10ms`, `250us`, `1500ns`.
fn clock_period(ns: u64) -> String {
    for (unit, per) in [("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)] {
        if ns.is_multiple_of(per) {
            return format!("{}{unit}", ns / per);
        }
    }
    format!("{ns}ns")
}

/// Every name the table takes, for error messages: `cpu-clock (cpu), task-clock, ...`.
pub fn names() -> String {
    SOFTWARE_EVENTS
        .iter()
        .map(|e| match e.aliases {
            [] => e.name.to_string(),
            a => format!("{} ({})", e.name, a.join(", ")),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `perf stat -vv -e NAME -- true` printed as the attr's `type` and `config` on this machine (perf
    /// 6.1, Debian 12; perf omits a zero config, so cpu-clock's line is missing: 0). `cpu` is bpftrace's alias,
    /// which perf does not take.
    const PERF_SAID: &[(&str, u64)] = &[
        ("cpu-clock", 0x0),
        ("task-clock", 0x1),
        ("page-faults", 0x2),
        ("faults", 0x2),
        ("context-switches", 0x3),
        ("cs", 0x3),
        ("cpu-migrations", 0x4),
        ("migrations", 0x4),
        ("minor-faults", 0x5),
        ("major-faults", 0x6),
        ("alignment-faults", 0x7),
        ("emulation-faults", 0x8),
        ("dummy", 0x9),
        ("cgroup-switches", 0xb),
    ];

    /// Check that every name and alias has the config perf uses for it, and bpftrace's own alias `cpu` too.
    #[test]
    fn names_have_perfs_configs() {
        for &(name, config) in PERF_SAID {
            assert_eq!(find(name).map(|e| e.config), Some(config), "{name}");
        }
        assert_eq!(find("cpu").unwrap().name, "cpu-clock");
        assert!(find("cycles").is_none() && find("").is_none());
        let mut configs: Vec<u64> = SOFTWARE_EVENTS.iter().map(|e| e.config).collect();
        configs.dedup();
        assert_eq!(configs.len(), SOFTWARE_EVENTS.len(), "one row per config");
    }

    /// Check bpftrace 0.17's default counts (`SW_PROBE_LIST`) and which events are clocks.
    #[test]
    fn bpftrace_default_periods() {
        let period = |n| find(n).unwrap().default_period;
        assert_eq!(period("page-faults"), 100);
        assert_eq!(period("minor-faults"), 100);
        assert_eq!(period("major-faults"), 1);
        assert_eq!(period("cs"), 1000);
        assert_eq!(period("cpu-clock"), 1_000_000);
        assert_eq!(period("task-clock"), 1);
        assert!(find("task-clock").unwrap().is_clock() && cpu_clock().is_clock());
        assert!(!find("faults").unwrap().is_clock());
        assert_eq!(
            rate_text(cpu_clock(), Sample::Freq(99)),
            "99 Hz of CPU time"
        );
        assert_eq!(
            rate_text(cpu_clock(), Sample::Period(10_000_000)),
            "a sample every 10ms of CPU time"
        );
        let faults = find("faults").unwrap();
        assert_eq!(rate_text(faults, Sample::Period(1)), "a hit per event");
        assert_eq!(
            rate_text(faults, Sample::Period(100)),
            "a hit every 100 events"
        );
        assert!(names().starts_with("cpu-clock (cpu), task-clock, page-faults (faults)"));
    }

    /// Check the table against perf itself where it is installed: `perf stat -vv -e NAME` prints the attr it
    /// opens (type 1, the config; a zero config is not printed).
    #[test]
    fn table_matches_installed_perf() {
        let run = |name: &str| {
            std::process::Command::new("perf")
                .args(["stat", "-vv", "-e", name, "--", "true"])
                .output()
                .ok()
        };
        let Some(first) = run("page-faults").filter(|o| o.status.success()) else {
            eprintln!("skipped: perf is not installed or cannot count here");
            return;
        };
        drop(first);
        for &(name, _) in PERF_SAID {
            let out = run(name).expect("perf ran once");
            let text = String::from_utf8_lossy(&out.stderr);
            let field = |key: &str| {
                text.lines()
                    .filter_map(|l| l.trim().strip_prefix(key))
                    .map(str::trim)
                    .next()
                    .map(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap())
            };
            assert_eq!(field("type "), Some(1), "{name}: {text}");
            let want = find(name).unwrap().config;
            assert_eq!(field("config ").unwrap_or(0), want, "{name}: {text}");
            assert_eq!(find(name).unwrap().attr().raw.config, want);
        }
    }
}
