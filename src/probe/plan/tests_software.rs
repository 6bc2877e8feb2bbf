//! The plan of software events (`profile:hz:99`, `software:page-faults:1`): perf events of their own, counted
//! only where a counter counts exactly what the hits would be.
use super::*;
use crate::perf::software::{self, Sample};
use crate::probe::target::Target;

fn soft(name: &str, sample: Sample) -> Target {
    Target {
        name: name.into(),
        aliases: Vec::new(),
        kind: TargetKind::Software {
            event: software::find(name).unwrap(),
            sample,
        },
        fetches: Vec::new(),
        code: None,
        go: None,
        syscall_sites: Vec::new(),
        filter: None,
    }
}

fn caps() -> Capabilities {
    Capabilities {
        ring: true,
        uprobe_pmu: true,
        own_tasks: vec![42],
        ..Capabilities::default()
    }
}

/// Check that a profile target is one sampled perf event on the software event, with no tracefs probe, no
/// kernel filter (not even the one keeping rprof's threads out, which a software event would refuse) and no
/// calibration, with `--count` too: a clock's counter counts nanoseconds, not samples.
#[test]
fn profile_is_sampled_software_event() {
    let t = Targets::new(vec![soft("cpu-clock", Sample::Freq(99))]);
    for count_only in [false, true] {
        let o = ProbeOptions {
            count_only,
            ..ProbeOptions::default()
        };
        let p = plan("rprof_1", &t, &o, &caps());
        assert_eq!(p.mode, Mode::Sampled);
        assert!(p.defs.is_empty() && p.calibration.is_none());
        let [e] = p.events.as_slice() else {
            panic!("{:?}", p.events)
        };
        assert_eq!(
            e.software().map(|(ev, s)| (ev.name, s)),
            Some(("cpu-clock", Sample::Freq(99)))
        );
        assert_eq!(
            (e.role, e.filter.as_deref(), e.in_tracefs()),
            (Role::Hit, None, false)
        );
        assert_eq!(e.members, vec![TargetId::new(0)]);
    }
}

/// Check that `--count` counts a software event with a counter where every event is a hit
/// (`software:page-faults:1`), and samples it where a hit is every 100 events.
#[test]
fn count_uses_counters_for_every_event() {
    let o = ProbeOptions {
        count_only: true,
        ..ProbeOptions::default()
    };
    let every = Targets::new(vec![soft("page-faults", Sample::Period(1))]);
    let p = plan("rprof_1", &every, &o, &caps());
    assert_eq!(p.mode, Mode::Counters);
    assert!(matches!(
        p.events[0].source,
        Source::Counter(Attach::Software { .. })
    ));
    let hundred = Targets::new(vec![soft("page-faults", Sample::Period(100))]);
    let p = plan("rprof_1", &hundred, &o, &caps());
    assert_eq!(p.mode, Mode::Sampled);
    assert!(matches!(
        p.events[0].source,
        Source::Perf(Attach::Software { .. })
    ));
}
