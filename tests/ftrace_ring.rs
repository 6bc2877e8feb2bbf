//! tracefs instances and the ftrace ring reader on the real kernel (needs root): a private instance records a
//! syscall tracepoint of this thread, and both the mapped and the read() path must hand back every event.
mod common;
use rprof::perf::{FtraceRings, Lost, RingMode};
use rprof::tracefs::{Instance, Tracefs, TracefsError};
use std::collections::HashMap;

const CALLS: usize = 50_000;
const BATCH: usize = 10_000;

/// Removes the instance when the test ends, pass or fail.
struct Removed(Instance);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = self.0.remove();
    }
}

/// The real tracefs with instances and the getppid tracepoint, or None after printing why the test skips.
fn tracefs(test: &str) -> Option<Tracefs> {
    if !common::privileged(test) {
        return None;
    }
    let t = match Tracefs::find_or_mount() {
        Ok(t) => t,
        Err(e) => {
            common::skip(test, &e.to_string());
            return None;
        }
    };
    if !t.instance_supported() {
        common::skip(test, "this tracefs has no instances/ directory");
        return None;
    }
    if !t.root().join("events/syscalls/sys_enter_getppid").is_dir() {
        common::skip(
            test,
            "no syscalls/sys_enter_getppid tracepoint (CONFIG_FTRACE_SYSCALLS)",
        );
        return None;
    }
    Some(t)
}

fn tid() -> u32 {
    nix::unistd::gettid().as_raw() as u32
}

fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// Whether the running kernel is at least `major.minor`.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = nix::sys::utsname::uname().unwrap();
    let release = release.release().to_string_lossy().into_owned();
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let got: (u32, u32) = (
        parts.next().and_then(|p| p.parse().ok()).unwrap_or(0),
        parts.next().and_then(|p| p.parse().ok()).unwrap_or(0),
    );
    got >= (major, minor)
}

/// A fresh instance recording sys_enter_getppid of this thread only, in the mono clock, not yet enabled.
fn instance(t: &Tracefs, name: &str) -> Removed {
    let inst = Instance::create(t, name).unwrap();
    let inst = Removed(inst);
    inst.0.set_clock("mono").unwrap();
    assert_eq!(inst.0.clock().unwrap(), "mono");
    inst.0.set_buffer_kb(2048).unwrap();
    assert!(inst.0.set_buffer_percent(0).unwrap());
    inst.0.set_event_pids(&[tid()]).unwrap();
    inst.0.set_event_fork(false).unwrap();
    inst
}

struct Seen {
    events: usize,
    per_cpu: HashMap<u32, Vec<u64>>,
    bad: Vec<String>,
}

/// Record CALLS getppid calls through `rings` and check each event; returns what was seen.
fn record(inst: &Instance, rings: &mut FtraceRings, event_id: u64) -> (Seen, u64, u64) {
    let me = tid();
    let mut seen = Seen {
        events: 0,
        per_cpu: HashMap::new(),
        bad: Vec::new(),
    };
    let mut check = |cpu: u32, ts: u64, payload: &[u8]| {
        seen.events += 1;
        seen.per_cpu.entry(cpu).or_default().push(ts);
        let common_type = u16::from_ne_bytes(payload[0..2].try_into().unwrap()) as u64;
        let common_pid = i32::from_ne_bytes(payload[4..8].try_into().unwrap());
        if (common_type != event_id || common_pid != me as i32) && seen.bad.len() < 5 {
            seen.bad.push(format!(
                "cpu {cpu} ts {ts}: type {common_type} pid {common_pid}"
            ));
        }
    };
    let start = monotonic_ns();
    inst.set_tracing_on(true).unwrap();
    for _ in 0..CALLS / BATCH {
        for _ in 0..BATCH {
            nix::unistd::getppid();
        }
        // The events are in the rings when getppid returns: one read() must drain exactly this batch.
        let n = rings.read(&mut check).unwrap();
        assert_eq!(n, BATCH, "one read() after a batch");
    }
    inst.set_tracing_on(false).unwrap();
    let end = monotonic_ns();
    assert_eq!(rings.read(&mut check).unwrap(), 0, "nothing left");
    (seen, start, end)
}

/// Run the whole check with the mapped reader (when the kernel maps) or the read() reader.
fn exactly_every_event(test: &str, force_read: bool) {
    let Some(t) = tracefs(test) else { return };
    let name = format!(
        "rprof_test_{}_{}",
        std::process::id(),
        if force_read { "read" } else { "map" }
    );
    let inst = instance(&t, &name);
    assert!(t.instances().unwrap().contains(&name));
    let event_id = t.event_id("syscalls", "sys_enter_getppid").unwrap();
    inst.0.set_tracing_on(false).unwrap();
    inst.0
        .enable_event("syscalls", "sys_enter_getppid", true)
        .unwrap();
    let mut rings = FtraceRings::open(inst.0.path(), force_read).unwrap();
    eprintln!("{test}: ring modes {:?}", rings.modes());
    let expected = if !force_read && kernel_at_least(6, 10) {
        RingMode::Mapped
    } else {
        RingMode::Read
    };
    assert_eq!(rings.mode(), expected, "{:?}", rings.modes());
    assert_eq!(rings.fds().len(), rings.cpus().len());

    let (seen, start, end) = record(&inst.0, &mut rings, event_id);
    assert!(seen.bad.is_empty(), "foreign events: {:?}", seen.bad);
    assert_eq!(
        seen.events,
        CALLS,
        "events per CPU: {:?}",
        seen.per_cpu
            .iter()
            .map(|(c, v)| (c, v.len()))
            .collect::<Vec<_>>()
    );
    for (cpu, ts) in &seen.per_cpu {
        assert!(
            ts.windows(2).all(|w| w[0] <= w[1]),
            "cpu {cpu}: timestamps go back"
        );
        // The mono trace clock is CLOCK_MONOTONIC.
        assert!(
            start <= ts[0] && *ts.last().unwrap() <= end,
            "cpu {cpu}: events at {}..{} outside the calls' window {start}..{end}",
            ts[0],
            ts.last().unwrap()
        );
    }
    assert_eq!(rings.lost(), Lost::default());
    for cpu in rings.cpus() {
        let stats = inst.0.cpu_stats(cpu).unwrap();
        assert_eq!(
            (stats.overrun, stats.dropped_events),
            (0, 0),
            "cpu {cpu}: {stats:?}"
        );
    }

    // An open ring keeps the instance busy: removal fails and says what to do.
    let err = inst.0.remove().unwrap_err();
    assert!(matches!(err, TracefsError::InstanceRemove { .. }), "{err}");
    assert!(err.to_string().contains(&name), "{err}");
    drop(rings);
    inst.0.remove().unwrap();
    assert!(!inst.0.path().exists());
    assert!(!t.instances().unwrap().contains(&name));
}

/// Check that the mapped reader (Linux 6.10+) hands back exactly every getppid event of this thread, with its
/// id, pid and mono timestamps in order, and nothing lost.
#[test]
fn mapped_reader_sees_every_event() {
    exactly_every_event("mapped_reader_sees_every_event", false);
}

/// Check the same with the read() reader.
#[test]
fn read_reader_sees_every_event() {
    exactly_every_event("read_reader_sees_every_event", true);
}

/// Check that an instance with an enabled event that recorded data is removed, and that creating an existing
/// instance or opening a missing one fails with errors naming it.
#[test]
fn remove_with_enabled_event() {
    let test = "remove_with_enabled_event";
    let Some(t) = tracefs(test) else { return };
    let name = format!("rprof_test_{}_enabled", std::process::id());
    let inst = instance(&t, &name);
    inst.0
        .enable_event("syscalls", "sys_enter_getppid", true)
        .unwrap();
    for _ in 0..100 {
        nix::unistd::getppid();
    }
    let entries: u64 = (0..64)
        .filter_map(|cpu| inst.0.cpu_stats(cpu).ok())
        .map(|s| s.entries)
        .sum();
    assert!(entries >= 100, "the event recorded ({entries} entries)");
    let again = Instance::create(&t, &name).unwrap_err();
    assert!(
        matches!(again, TracefsError::InstanceExists { .. }),
        "{again}"
    );
    assert!(Instance::open_existing(&t, &name).is_ok());
    inst.0.remove().unwrap();
    assert!(!inst.0.path().exists());
    let gone = Instance::open_existing(&t, &name).unwrap_err();
    assert!(
        matches!(gone, TracefsError::NoSuchInstance { .. }),
        "{gone}"
    );
}

/// Fill a tiny buffer with `event` (from `call`) without reading, so that most events are overwritten; returns
/// (events seen, lost reported by the reader, overrun from the stats files). `extra` events come from this thread's
/// own tracefs writes.
fn overwrite(
    test: &str,
    force_read: bool,
    (event, extra): (&str, u64),
    mut call: impl FnMut(),
) -> (usize, Lost, u64) {
    let t = Tracefs::find_or_mount().unwrap();
    let mode = if force_read { "read" } else { "map" };
    let name = format!("rprof_test_{}_{event}_{mode}", std::process::id());
    let inst = instance(&t, &name);
    inst.0.set_buffer_kb(8).unwrap();
    inst.0.set_tracing_on(false).unwrap();
    inst.0.enable_event("syscalls", event, true).unwrap();
    let mut rings = FtraceRings::open(inst.0.path(), force_read).unwrap();
    inst.0.set_tracing_on(true).unwrap();
    for _ in 0..CALLS {
        call();
    }
    inst.0.set_tracing_on(false).unwrap();
    let mut seen = 0;
    while rings.read(|_, _, _| seen += 1).unwrap() > 0 {}
    let overrun = rings
        .cpus()
        .iter()
        .map(|&c| inst.0.cpu_stats(c).unwrap().overrun)
        .sum();
    eprintln!(
        "{test} {event}: seen {seen}, {:?}, stats overrun {overrun}",
        rings.lost()
    );
    assert!(overrun > 0 && seen > 0);
    assert_eq!(
        seen as u64 + overrun,
        CALLS as u64 + extra,
        "read + overwritten = written"
    );
    (seen, rings.lost(), overrun)
}

/// Overwrite runs with a 16-byte event (getppid: 255 fill a page exactly, leaving no room for the lost count)
/// and a 44-byte one (write: 92 per page leave 32 bytes, where the kernel stores the count).
fn overwrites(test: &str, force_read: bool) -> Option<[(usize, Lost, u64); 2]> {
    tracefs(test)?;
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .unwrap();
    let full = overwrite(test, force_read, ("sys_enter_getppid", 0), || {
        nix::unistd::getppid();
    });
    // The write that turns tracing_on off is recorded too.
    let room = overwrite(test, force_read, ("sys_enter_write", 1), || {
        nix::unistd::write(&null, b"x").unwrap();
    });
    Some([full, room])
}

/// Check that events overwritten in a full buffer are reported by the mapped reader: exactly, from the meta
/// page, and counted on the pages when they have room for the count.
#[test]
fn mapped_reader_counts_overwritten_events() {
    let test = "mapped_reader_counts_overwritten_events";
    let Some([full, room]) = overwrites(test, false) else {
        return;
    };
    assert_eq!(full.1.overrun, full.2);
    assert!(full.1.unknown > 0 && full.1.events < full.2, "{:?}", full.1);
    assert_eq!(room.1.overrun, room.2);
    assert_eq!((room.1.events, room.1.unknown), (room.2, 0), "{:?}", room.1);
}

/// Check that the read() reader reports the lost counts the kernel stores on pages, and that it could not when
/// the pages were full.
#[test]
fn read_reader_counts_overwritten_events() {
    let test = "read_reader_counts_overwritten_events";
    let Some([full, room]) = overwrites(test, true) else {
        return;
    };
    assert!(full.1.unknown > 0 && full.1.events < full.2, "{:?}", full.1);
    assert_eq!(full.1.overrun, 0, "read rings have no meta page");
    assert_eq!((room.1.events, room.1.unknown), (room.2, 0), "{:?}", room.1);
}
