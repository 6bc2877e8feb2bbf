//! The probe's own cost per call, measured once at start on a function of rprof's own binary with the same
//! kind of probe and engine as the targets, so the summary can say how much of each duration is the probe
//! (`durations include about 2.10us of probe cost per call`).
use super::events::pmu_sample_bits;
use super::group::{Role, SP_FETCH};
use super::live::PerfParse;
use super::ring::RingEngine;
use crate::perf::attr::sample;
use crate::perf::{Attr, EventSet, PerfEvent, Refused, UprobePmu};
use crate::tracefs::{ProbeDef, ProbeLocation, Tracefs};
use std::time::Instant;

/// The function whose calls are timed with and without its probes.
#[inline(never)]
pub fn calibration_target(x: u64) -> u64 {
    std::hint::black_box(x.wrapping_mul(31) ^ 7)
}

/// Calls per timed batch, and batches (the fastest batch counts: the others were interrupted).
const CALLS: u64 = 1000;
const BATCHES: usize = 3;

/// The calibration probes of a session (none when rprof's own function could not be found).
pub(super) struct Calibration {
    pub(super) defs: Vec<ProbeDef>,
    group: String,
    /// Probes of the uprobe PMU (counters, `-g`): the PMU and the calibration function's file and offset (no
    /// tracefs probe).
    pmu: Option<(UprobePmu, std::path::PathBuf, u64)>,
    /// Entry and return probes (else entries only).
    timed: bool,
}

/// Event names of the calibration probes.
const ENTRY: &str = "cal";
const RETURN: &str = "calr";

/// The probes on [`calibration_target`] in rprof's own executable: an entry (and a return when `timed`), with
/// the fetch arguments of the targets' probes.
pub(super) fn plan(
    group: &str,
    count_only: bool,
    counters: bool,
    pmu: Option<UprobePmu>,
) -> Calibration {
    let timed = !count_only;
    let none = Calibration {
        defs: Vec::new(),
        group: group.to_string(),
        pmu: None,
        timed,
    };
    let Some((path, offset)) =
        own_file_offset(calibration_target as fn(u64) -> u64 as usize as u64)
    else {
        return none;
    };
    if let Some(pmu) = pmu {
        return Calibration {
            pmu: Some((pmu, path, offset)),
            ..none
        };
    }
    let fetch = if counters || !timed {
        Vec::new()
    } else {
        vec![SP_FETCH.to_string()]
    };
    let def = |event: &str, is_return| ProbeDef {
        group: group.to_string(),
        event: event.to_string(),
        is_return,
        location: ProbeLocation::User {
            path: path.clone(),
            offset,
            ref_ctr: None,
        },
        fetch: fetch.clone(),
    };
    let mut defs = vec![def(ENTRY, false)];
    if timed {
        defs.push(def(RETURN, true));
    }
    Calibration {
        defs,
        group: group.to_string(),
        pmu: None,
        timed,
    }
}

/// The file and file offset of an address of rprof's own code, from /proc/self/maps: what a uprobe on it needs,
/// without reading the symbol table (which takes seconds for a large binary on a slow machine).
fn own_file_offset(addr: u64) -> Option<(std::path::PathBuf, u64)> {
    let maps = crate::process::maps(std::process::id() as i32).ok()?;
    let m = maps
        .iter()
        .find(|m| m.exec && m.start <= addr && addr < m.end)
        .filter(|m| m.path.starts_with('/') && !m.path.ends_with(" (deleted)"))?;
    Some((m.path.clone().into(), addr - m.start + m.offset))
}

/// The cost of one call with a uprobe PMU entry probe (and return probe when `timed`) on this thread, with the
/// sample layout of the session's PMU events (less the stack).
fn measure_pmu(pmu: &UprobePmu, path: &std::path::Path, offset: u64, timed: bool) -> Option<u64> {
    let roles: &[Role] = if timed {
        &[Role::Entry, Role::Return]
    } else {
        &[Role::Entry]
    };
    let specs: Vec<(Attr, ())> = roles
        .iter()
        .filter_map(|&role| {
            let attr = pmu.attr(path, offset, role == Role::Return)?;
            let attr = attr
                .sample_type(pmu_sample_bits(false, role))
                .regs_user(1 << crate::perf::attr::regs::SP)
                .clock_monotonic();
            Some((attr, ()))
        })
        .collect();
    let tid = nix::unistd::gettid().as_raw();
    let cpus = crate::perf::online_cpus().ok()?;
    difference(
        || {
            let set = EventSet::open(&specs, &cpus, &[tid], 128, &mut |_, _| Refused::Fail).ok()?;
            set.enable().ok()?;
            Some(set)
        },
        drop,
    )
}

/// The fastest of [`BATCHES`] batches of [`CALLS`] calls, in ns per call.
fn per_call() -> f64 {
    let mut best = f64::MAX;
    for _ in 0..BATCHES {
        let t = Instant::now();
        let mut x = 1u64;
        for _ in 0..CALLS {
            x = calibration_target(x);
        }
        std::hint::black_box(x);
        best = best.min(t.elapsed().as_nanos() as f64 / CALLS as f64);
    }
    best
}

/// Time the calls unprobed, then with the probes `on` sets up (and whatever it returns keeps alive); the
/// difference. (Opening a perf event on a uprobe already installs its breakpoint, enabled or not, so the bare
/// calls are timed before anything is opened.)
fn difference<G>(on: impl FnOnce() -> Option<G>, off: impl FnOnce(G)) -> Option<u64> {
    let bare = per_call();
    let guard = on()?;
    let probed = per_call();
    off(guard);
    if std::env::var_os("RPROF_DEBUG_COST").is_some() {
        eprintln!("rprof: calibration: {bare:.1} ns per call bare, {probed:.1} probed");
    }
    Some((probed - bare).max(0.0) as u64)
}

impl Calibration {
    fn ids(&self, tracefs: &Tracefs) -> Vec<u64> {
        self.defs
            .iter()
            .filter_map(|d| tracefs.event_id(&self.group, &d.event).ok())
            .collect()
    }

    /// `--count`: the cost of one counted call (a counter on this thread).
    pub(super) fn measure_counter(&self, tracefs: &Tracefs) -> Option<u64> {
        let attr = match &self.pmu {
            Some((pmu, path, offset)) => pmu.attr(path, *offset, false)?,
            None => Attr::tracepoint(*self.ids(tracefs).first()?),
        };
        difference(
            || {
                let ev = PerfEvent::open(&attr.period(0), 0, -1).ok()?;
                ev.enable().ok()?;
                Some(ev)
            },
            drop,
        )
    }

    /// The cost of one call with entry and return probes through the tracefs ring (before its tasks are set).
    pub(super) fn measure_ring(&self, tracefs: &Tracefs, ring: &mut RingEngine) -> Option<u64> {
        if self.ids(tracefs).len() != self.defs.len() || self.defs.is_empty() {
            return None;
        }
        let events: Vec<&str> = self.defs.iter().map(|d| d.event.as_str()).collect();
        difference(
            || {
                ring.calibrate_on(&self.group, &events).ok()?;
                Some(ring)
            },
            |ring| ring.calibrate_off(&self.group, &events),
        )
    }

    /// The cost of one call with entry and return probes through perf events on this thread, with the
    /// session's sample layout.
    pub(super) fn measure_perf(&self, tracefs: &Tracefs, parse: &PerfParse) -> Option<u64> {
        if let Some((pmu, path, offset)) = &self.pmu {
            return measure_pmu(pmu, path, *offset, self.timed);
        }
        let ids = self.ids(tracefs);
        if ids.len() != self.defs.len() || ids.is_empty() {
            return None;
        }
        let tid = nix::unistd::gettid().as_raw();
        let cpus = crate::perf::online_cpus().ok()?;
        let bits = sample::TIME | sample::RAW | if parse.by_id { sample::IDENTIFIER } else { 0 };
        let specs: Vec<(Attr, ())> = ids
            .iter()
            .map(|&id| {
                let attr = Attr::tracepoint(id).sample_type(bits).clock_monotonic();
                (attr, ())
            })
            .collect();
        difference(
            || {
                let set =
                    EventSet::open(&specs, &cpus, &[tid], 128, &mut |_, _| Refused::Fail).ok()?;
                set.enable().ok()?;
                Some(set)
            },
            drop,
        )
    }

    /// `RPROF_DEBUG_COST=pmu`: time entry and return probes of the uprobe PMU on this thread carrying what
    /// pairing needs without fetch arguments (TIME | TID | IDENTIFIER | REGS_USER with the SP), to set beside
    /// the tracefs path's TIME | RAW with `sp=%sp` ([`Calibration::measure_perf`]). Prints both.
    pub(super) fn debug_compare_pmu(&self, tracefs: &Tracefs, parse: &PerfParse) {
        if std::env::var("RPROF_DEBUG_COST").as_deref() != Ok("pmu") {
            return;
        }
        let (Some(pmu), Some((path, offset))) = (
            crate::perf::UprobePmu::find(),
            own_file_offset(calibration_target as fn(u64) -> u64 as usize as u64),
        ) else {
            return;
        };
        for _ in 0..3 {
            let tracefs_ns = self.measure_perf(tracefs, parse);
            let pmu_ns = measure_pmu(&pmu, &path, offset, true);
            eprintln!(
                "rprof: probe pair cost: tracefs TIME|RAW(sp fetch) {tracefs_ns:?} ns, uprobe PMU \
                 TIME|TID|IDENTIFIER|REGS_USER(sp) {pmu_ns:?} ns"
            );
        }
    }
}
