//! The engine choices of [`plan`], one test each.
use super::*;
use crate::addr::{ElfAddr, FileOffset};
use crate::probe::spec::code::analyze;
use crate::probe::spec::fetch::{Fetch, FetchType};
use crate::probe::target::Target;

const BIN: &str = "/opt/app/bin";
const LIBC: &str = "/lib/libc.so.6";

fn user(path: &str, off: u64) -> Target {
    Target {
        name: format!("f{off:x}"),
        aliases: Vec::new(),
        kind: TargetKind::User {
            path: path.into(),
            addr: ElfAddr(off),
            offset: FileOffset(off),
        },
        fetches: Vec::new(),
        code: None,
        go: None,
        syscall_sites: Vec::new(),
        filter: None,
    }
}

fn with_arg0(mut t: Target) -> Target {
    let ty = FetchType::Int {
        size: 8,
        signed: true,
    };
    t.fetches = vec![Fetch::new("arg0", "v0".into(), "%di", ty, false)];
    t
}

fn targets(list: Vec<Target>) -> Targets {
    Targets::new(list)
}

/// A kernel with the ring and the uprobe PMU, libc mapped by 3 other processes, the binary by none.
fn caps() -> Capabilities {
    Capabilities {
        uprobe_pmu: true,
        ring: true,
        sharing: vec![
            Sharing {
                path: BIN.into(),
                others: 0,
            },
            Sharing {
                path: LIBC.into(),
                others: 3,
            },
        ],
        calibration_sites: vec![
            (ProbeClass::Emulated, "/usr/bin/rprof".into(), 0x1200),
            (ProbeClass::SingleStepped, "/usr/bin/rprof".into(), 0x1234),
        ],
        emulates: Emulates::for_kernel(6, 18),
        event_probes: false,
        own_tasks: Vec::new(),
        task_fields: Default::default(),
    }
}

fn opts() -> ProbeOptions {
    ProbeOptions::default()
}

fn sources(p: &Plan) -> Vec<&Source> {
    p.events.iter().map(|e| &e.source).collect()
}

/// Check that `--count` on user functions reads counters on uprobe PMU probes: one event per target, no
/// tracefs probe at all, and the calibration counts on the PMU too.
#[test]
fn count_uses_pmu_counters() {
    let t = targets(vec![user(BIN, 0x10), user(BIN, 0x20)]);
    let o = ProbeOptions {
        count_only: true,
        ..opts()
    };
    let p = plan("rprof_1", &t, &o, &caps());
    assert_eq!(p.mode, Mode::Counters);
    assert!(p.defs.is_empty(), "{:?}", p.defs);
    assert_eq!(p.events.len(), 2);
    assert!(matches!(
        p.events[0].source,
        Source::Counter(Attach::Pmu { offset: 0x10, .. })
    ));
    assert_eq!(p.probe_points(), 2);
    // The targets' code was not read: their probes count as single-stepped, the class calibrated.
    let cal = p.calibration.unwrap();
    assert_eq!(
        (cal.method, cal.pmu, cal.timed),
        (Method::Counter, true, false)
    );
    assert_eq!(cal.sites.len(), 1);
    assert_eq!(
        (cal.sites[0].class, cal.sites[0].offset),
        (ProbeClass::SingleStepped, 0x1234)
    );
    assert!(cal.sites[0].events.is_empty());
}

/// Check that `--count` without the uprobe PMU counts on tracefs probes: entries only, without the `sp` fetch,
/// and a calibration entry probe without fetch arguments.
#[test]
fn count_without_pmu_uses_tracefs_counters() {
    let t = targets(vec![user(BIN, 0x10)]);
    let o = ProbeOptions {
        count_only: true,
        ..opts()
    };
    let c = Capabilities {
        uprobe_pmu: false,
        ..caps()
    };
    let p = plan("rprof_1", &t, &o, &c);
    assert_eq!(sources(&p), vec![&Source::Counter(Attach::Tracefs)]);
    let lines: Vec<String> = p.defs.iter().map(ProbeDef::line).collect();
    assert_eq!(
        lines,
        vec![
            "p:rprof_1/u0 /opt/app/bin:0x10",
            "p:rprof_1/cal_s /usr/bin/rprof:0x1234"
        ]
    );
}

/// Check that timing a private binary reads the tracefs ring: its functions share one entry and one return
/// event, which fetch the stack pointer, and the calibration goes through the ring with the same probes.
#[test]
fn private_binary_uses_the_ring() {
    let t = targets(vec![user(BIN, 0x10), user(BIN, 0x20)]);
    let p = plan("rprof_1", &t, &opts(), &caps());
    assert_eq!(p.mode, Mode::Sampled);
    assert_eq!(sources(&p), vec![&Source::Ring, &Source::Ring]);
    assert_eq!(p.events[0].members.len(), 2);
    assert_eq!(p.defs[0].line(), "p:rprof_1/u0 /opt/app/bin:0x10 sp=%sp");
    assert_eq!(p.defs[1].line(), "r:rprof_1/ur0 /opt/app/bin:0x10 sp=%sp");
    let cal = p.calibration.clone().unwrap();
    assert_eq!((cal.method, cal.timed), (Method::Ring, true));
    assert_eq!(cal.sites[0].events, vec!["cal_s", "calr_s"]);
    assert_eq!(p.defs.len(), 4 + 2);
    assert_eq!(
        p.defs[5].line(),
        "r:rprof_1/calr_s /usr/bin/rprof:0x1234 sp=%sp"
    );
    assert!(p.forced_shared.is_empty());
    // Only the target maps the binary: rprof drops other tasks' hits itself, not the kernel.
    assert!(!p.ring_filter_in_kernel());
}

/// Check that a file other processes map is read through perf events (the ring's uprobe would trap in them),
/// beside the ring for the private binary.
#[test]
fn shared_file_uses_perf() {
    let t = targets(vec![user(BIN, 0x10), user(LIBC, 0x99)]);
    let p = plan("rprof_1", &t, &opts(), &caps());
    assert_eq!(
        sources(&p),
        vec![
            &Source::Ring,
            &Source::Ring,
            &Source::Perf(Attach::Tracefs),
            &Source::Perf(Attach::Tracefs)
        ]
    );
}

/// Check that `--engine tracefs` puts a shared file on the ring anyway, and says which file.
#[test]
fn forced_ring_on_a_shared_file_is_noted() {
    let t = targets(vec![user(LIBC, 0x99)]);
    let o = ProbeOptions {
        engine: EngineChoice::Tracefs,
        ..opts()
    };
    let p = plan("rprof_1", &t, &o, &caps());
    assert_eq!(sources(&p), vec![&Source::Ring, &Source::Ring]);
    assert_eq!(p.forced_shared.len(), 1);
    assert_eq!(p.forced_shared[0].others, 3);
    assert!(p.ring_filter_in_kernel());
}

/// Check that `--engine perf`, and a kernel without tracefs instances, read every event through perf, and
/// the calibration too.
#[test]
fn perf_when_asked_or_without_instances() {
    let t = targets(vec![user(BIN, 0x10)]);
    let o = ProbeOptions {
        engine: EngineChoice::Perf,
        ..opts()
    };
    let no_ring = Capabilities {
        ring: false,
        ..caps()
    };
    for p in [plan("g", &t, &o, &caps()), plan("g", &t, &opts(), &no_ring)] {
        assert!(p
            .events
            .iter()
            .all(|e| e.source == Source::Perf(Attach::Tracefs)));
        assert_eq!(p.calibration.unwrap().method, Method::Perf);
    }
}

/// Check that `-g` samples stacks through uprobe PMU probes, one per target, never through the ring; and
/// through tracefs probes with `--engine tracefs` (which then still reads them through perf).
#[test]
fn stacks_use_pmu_probes() {
    let t = targets(vec![user(BIN, 0x10), user(BIN, 0x20)]);
    let o = ProbeOptions {
        stacks: true,
        ..opts()
    };
    let p = plan("g", &t, &o, &caps());
    assert_eq!(p.events.len(), 4);
    assert!(p.events.iter().all(|e| e.pmu().is_some()));
    assert!(p.defs.is_empty());
    let forced = ProbeOptions {
        engine: EngineChoice::Tracefs,
        ..o
    };
    let p = plan("g", &t, &forced, &caps());
    assert!(p
        .events
        .iter()
        .all(|e| e.source == Source::Perf(Attach::Tracefs)));
    assert_eq!(p.events[0].members.len(), 2);
}

/// Check that fetched values make `--count` sample (counters carry no values), and that a target with values
/// gets events of its own (one event holds points with identical fetch arguments only).
#[test]
fn values_need_samples() {
    let t = targets(vec![
        with_arg0(user(BIN, 0x10)),
        user(BIN, 0x20),
        user(BIN, 0x30),
    ]);
    let o = ProbeOptions {
        count_only: true,
        ..opts()
    };
    let p = plan("g", &t, &o, &caps());
    assert_eq!(p.mode, Mode::Sampled);
    let members: Vec<usize> = p.events.iter().map(|e| e.members.len()).collect();
    assert_eq!(members, vec![1, 2]);
    assert_eq!(p.defs[0].line(), "p:g/u0 /opt/app/bin:0x10 v0=%di:s64");
}

/// Check the events of syscalls, tracepoints and kernel functions, with and without returns.
#[test]
fn kernel_events() {
    let t = targets(vec![
        Target {
            kind: TargetKind::Syscall {
                name: "openat".into(),
            },
            ..user(BIN, 0)
        },
        Target {
            kind: TargetKind::Tracepoint {
                category: "sched".into(),
                event: "sched_switch".into(),
            },
            ..user(BIN, 0)
        },
        Target {
            kind: TargetKind::Kernel {
                symbol: "vfs_read".into(),
            },
            ..user(BIN, 0)
        },
    ]);
    let names = |p: &Plan| -> Vec<String> {
        p.events
            .iter()
            .map(|e| format!("{}/{}", e.group, e.event))
            .collect()
    };
    let p = plan("g", &t, &opts(), &caps());
    assert_eq!(
        names(&p),
        vec![
            "syscalls/sys_enter_openat",
            "syscalls/sys_exit_openat",
            "sched/sched_switch",
            "g/k2",
            "g/kr2"
        ]
    );
    assert!(p.events.iter().all(|e| e.ring()));
    // Every task hits these: the kernel filters the ring by task.
    assert!(p.ring_filter_in_kernel());
    let o = ProbeOptions {
        count_only: true,
        ..opts()
    };
    let p = plan("g", &t, &o, &caps());
    assert_eq!(
        names(&p),
        vec!["syscalls/sys_enter_openat", "sched/sched_switch", "g/k2"]
    );
    assert!(p
        .events
        .iter()
        .all(|e| e.source == Source::Counter(Attach::Tracefs)));
}

/// Check that user functions of one binary are grouped [`POINTS_PER_EVENT`] to an event.
#[test]
fn many_functions_share_few_events() {
    let n = POINTS_PER_EVENT + 10;
    let t = targets((0..n as u64).map(|i| user(BIN, 0x1000 + 16 * i)).collect());
    let p = plan("g", &t, &opts(), &caps());
    let members: Vec<usize> = p.events.iter().map(|e| e.members.len()).collect();
    assert_eq!(members, vec![POINTS_PER_EVENT, POINTS_PER_EVENT, 10, 10]);
    assert_eq!(p.defs.len(), 2 * n + 2);
}

/// Check that without rprof's own calibration function, nothing is calibrated.
#[test]
fn no_calibration_site() {
    let t = targets(vec![user(BIN, 0x10)]);
    let c = Capabilities {
        calibration_sites: Vec::new(),
        ..caps()
    };
    let p = plan("g", &t, &opts(), &c);
    assert!(p.calibration.is_none());
    assert_eq!(p.defs.len(), 2);
}

/// Check that `--count` on more than [`MAX_COUNTERS`] functions counts from shared events read through the ring
/// (their teardown costs one grace period per event, not one per function).
#[test]
fn many_counted_functions_share_sampled_events() {
    let n = MAX_COUNTERS + 1;
    let t = targets((0..n as u64).map(|i| user(BIN, 0x1000 + 16 * i)).collect());
    let o = ProbeOptions {
        count_only: true,
        ..opts()
    };
    let p = plan("g", &t, &o, &caps());
    assert_eq!(p.mode, Mode::Sampled);
    assert_eq!(sources(&p), vec![&Source::Ring]);
    assert_eq!(p.events[0].members.len(), n);
    assert_eq!(p.defs[0].line(), "p:g/u0 /opt/app/bin:0x1000");
}

/// A user target at 0x1000 whose code is `bytes`.
fn coded(bytes: &[u8]) -> Target {
    Target {
        code: Some(analyze(0x1000, bytes, &[], false)),
        ..user(BIN, 0x1000)
    }
}

fn placed(t: &Target) -> (u64, ProbeClass, String) {
    let p = place(t, false, Emulates::for_kernel(6, 18)).unwrap();
    (p.offset, p.class, p.why)
}

/// libc's free: `test %rdi,%rdi; je ...`.
const FREE: [u8; 9] = [0x48, 0x85, 0xff, 0x0f, 0x84, 0xbf, 0x00, 0x00, 0x00];

/// Check that libc's `free` is probed on its `je` at +3 (emulated), past the `test`, even when `arg0` (rdi) is
/// fetched: `test` writes no register; and that the probe definitions carry the placed offset.
#[test]
fn free_is_probed_at_its_je() {
    let t = with_arg0(coded(&FREE));
    assert_eq!(
        placed(&t),
        (3, ProbeClass::Emulated, "je: emulated; skipped test".into())
    );
    let p = plan("g", &targets(vec![t]), &opts(), &caps());
    assert_eq!(
        p.defs[0].line(),
        "p:g/u0 /opt/app/bin:0x1003 sp=%sp v0=%di:s64"
    );
}

/// Check that a CET function (`endbr64; push %rbp`) is probed on its push at +4, and on a kernel without push
/// emulation stays at +0 (the push moves the stack).
#[test]
fn endbr64_is_skipped() {
    let t = coded(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5]);
    assert_eq!(placed(&t).0, 4);
    let old = place(&t, false, Emulates::for_kernel(5, 10)).unwrap();
    assert_eq!((old.offset, old.class), (0, ProbeClass::SingleStepped));
}

/// Check that a function whose first instructions move the stack before anything emulated stays at +0, as
/// does every function with `--at-entry`.
#[test]
fn stack_moves_and_at_entry_stay_at_zero() {
    // sub $0x18,%rsp; test %rdi,%rdi; je
    let t = coded(&[0x48, 0x83, 0xec, 0x18, 0x48, 0x85, 0xff, 0x74, 0x02]);
    let (offset, class, why) = placed(&t);
    assert_eq!((offset, class), (0, ProbeClass::SingleStepped));
    assert!(why.contains("moves the stack"), "{why}");
    let free = coded(&FREE);
    let p = place(&free, true, Emulates::default()).unwrap();
    assert_eq!((p.offset, p.class), (0, ProbeClass::SingleStepped));
}

/// Check that a loop back to +3 keeps the probe at +0 (on the `je` at +3, each turn would fire the entry).
#[test]
fn loop_back_keeps_zero() {
    // +0 test %rdi,%rdi; +3 je +9; +5 dec %rdi; +8 ... jmp back to +3
    let body = [
        0x48, 0x85, 0xff, 0x74, 0x05, 0x48, 0xff, 0xcf, 0xeb, 0xf9, 0xc3,
    ];
    let (offset, _, why) = placed(&coded(&body));
    assert_eq!(offset, 0, "{why}");
    assert!(why.contains("lands on +0x3"), "{why}");
}

/// Check that an instruction that writes a fetched argument register is never skipped: `mov %rsi,%rdi; je`
/// moves with nothing fetched, stays at +0 when arg0 (rdi) is fetched.
#[test]
fn fetched_register_writes_keep_zero() {
    let body = [0x48, 0x89, 0xf7, 0x74, 0x00];
    assert_eq!(placed(&coded(&body)).0, 3);
    let (offset, _, why) = placed(&with_arg0(coded(&body)));
    assert_eq!(offset, 0);
    assert!(why.contains("writes a fetched register"), "{why}");
}

/// Check that probes on tasks (a command, `-p`), which follow new threads with `inherit`, never use the uprobe
/// PMU, counted or sampled: the kernel would read the probe's path in each new thread's memory, and its clone
/// would fail (EFAULT).
#[test]
fn tasks_never_use_pmu_probes() {
    use crate::probe::TaskTarget;
    let t = targets(vec![user(BIN, 0x10)]);
    for target in [
        TaskTarget::Pid(1),
        TaskTarget::Command(crate::perf::Command::find(&["x"], None)),
    ] {
        for stacks in [false, true] {
            let o = ProbeOptions {
                count_only: !stacks,
                stacks,
                target: target.clone(),
                ..opts()
            };
            let p = plan("t", &t, &o, &caps());
            assert!(
                p.events.iter().all(|e| e.pmu().is_none()),
                "{target:?} stacks={stacks}: {:?}",
                p.events
            );
            assert!(p.calibration.is_none_or(|c| !c.pmu));
        }
    }
}

/// `sys_enter_openat`'s format as this kernel writes it.
const OPENAT: &str = "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
    \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
    \tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n\
    \tfield:int dfd;\toffset:16;\tsize:8;\tsigned:0;\n\
    \tfield:const char * filename;\toffset:24;\tsize:8;\tsigned:0;\n";

/// Check where a filter on a syscall's string runs: on `sys_enter_openat` as `filename.ustring` (the kernel
/// reads the process's string), and its part on the string alone on the uprobes at libc's `syscall`
/// instructions that read it, for the syscall and for its tracepoint alike; on an event probe that read the
/// string, as its own field.
#[test]
fn string_filters_run_in_the_kernel() {
    use crate::probe::spec::filter::parse;
    use crate::probe::spec::filters::TargetFilter;
    let format = crate::tracefs::parse_format(OPENAT);
    let expr = parse("filename ~ \"/etc*\" && pid == 3 && dfd == 3").unwrap();
    let dfd = crate::probe::value::ValueKind::Int {
        size: 4,
        signed: true,
    };
    let fetches = vec![
        Fetch::user_string("filename", "filename", Some(1)),
        Fetch::field("dfd", "dfd", dfd, false),
    ];
    let filter = TargetFilter::place(expr, &fetches, &format);
    assert_eq!(filter.user, Some(parse("pid == 3").unwrap()));
    let of = |kind| Target {
        kind,
        fetches: fetches.clone(),
        syscall_sites: vec![(LIBC.into(), vec![0x100, 0x200])],
        filter: Some(filter.clone()),
        ..user(BIN, 0)
    };
    let syscall = of(TargetKind::Syscall {
        name: "openat".into(),
    });
    let tracepoint = of(TargetKind::Tracepoint {
        category: "syscalls".into(),
        event: "sys_enter_openat".into(),
    });
    let filters = |p: &Plan| -> Vec<(String, Role, Option<String>)> {
        let e = p.events.iter();
        e.map(|e| (format!("{}/{}", e.group, e.event), e.role, e.filter.clone()))
            .collect()
    };
    let ustring = Some("filename.ustring ~ \"/etc*\" && dfd == 3".to_string());
    let site = Some("filename ~ \"/etc*\"".to_string());
    let p = plan("g", &targets(vec![syscall.clone()]), &opts(), &caps());
    assert_eq!(
        filters(&p),
        vec![
            (
                "syscalls/sys_enter_openat".into(),
                Role::Entry,
                ustring.clone()
            ),
            ("g/y0".into(), Role::Value, site.clone()),
            ("syscalls/sys_exit_openat".into(), Role::Return, None),
        ]
    );
    assert_eq!(p.defs.len(), 2, "a uprobe at each syscall instruction");
    let p = plan("g", &targets(vec![tracepoint]), &opts(), &caps());
    assert_eq!(
        filters(&p),
        vec![
            ("g/y0".into(), Role::Value, site.clone()),
            ("syscalls/sys_enter_openat".into(), Role::Hit, ustring),
        ]
    );
    let probes = Capabilities {
        event_probes: true,
        ..caps()
    };
    let p = plan("g", &targets(vec![syscall]), &opts(), &probes);
    assert_eq!(
        filters(&p)[0],
        (
            "g/y0".into(),
            Role::Entry,
            Some("filename ~ \"/etc*\" && dfd == 3".into())
        )
    );
}
