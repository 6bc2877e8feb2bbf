//! The probe's own cost per call, measured once at start on a function of rprof's own binary with the same
//! kind of probe and engine as the targets (the plan's [`Calibration`]), so the summary can say how much of
//! each duration is the probe (`durations include about 2.10us of probe cost per call`).
use super::decode::PerfParse;
use super::perf::pmu_sample_bits;
use super::ring::RingEngine;
use crate::perf::attr::sample;
use crate::perf::{Attr, EventSet, PerfEvent, Refused, UprobePmu};
use crate::probe::plan::{Attach, Calibration, Role, Source};
use crate::tracefs::Tracefs;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The function whose calls are timed with and without its probes.
#[inline(never)]
pub fn calibration_target(x: u64) -> u64 {
    std::hint::black_box(x.wrapping_mul(31) ^ 7)
}

/// Calls per timed batch, and batches (the fastest batch counts: the others were interrupted).
const CALLS: u64 = 1000;
const BATCHES: usize = 3;

/// The file and file offset of [`calibration_target`] in rprof's own executable, from /proc/self/maps: what a
/// uprobe on it needs, without reading the symbol table (which takes seconds for a large binary on a slow
/// machine).
pub fn calibration_site() -> Option<(PathBuf, u64)> {
    own_file_offset(calibration_target as fn(u64) -> u64 as usize as u64)
}

fn own_file_offset(addr: u64) -> Option<(PathBuf, u64)> {
    let maps = crate::process::maps(std::process::id() as i32).ok()?;
    let m = maps
        .iter()
        .find(|m| m.exec && m.start <= addr && addr < m.end)
        .filter(|m| m.path.starts_with('/') && !m.path.ends_with(" (deleted)"))?;
    Some((m.path.clone().into(), addr - m.start + m.offset))
}

/// One measurement: ns per call unprobed and probed (the fastest batch of each).
#[derive(Clone, Copy, Debug)]
pub struct Measured {
    pub bare_ns: f64,
    pub probed_ns: f64,
}

impl Measured {
    /// What the probes add to one call.
    pub fn cost_ns(&self) -> u64 {
        (self.probed_ns - self.bare_ns).max(0.0) as u64
    }
}

/// Where the calibration probes are: the session's group, the calibration site, the uprobe PMU.
pub struct Calibrator<'a> {
    pub tracefs: &'a Tracefs,
    pub group: &'a str,
    pub cal: &'a Calibration,
    pub site: &'a (PathBuf, u64),
    pub pmu: Option<UprobePmu>,
}

impl Calibrator<'_> {
    /// `--count`: the cost of one counted call (a counter on this thread).
    pub fn counter(&self) -> Option<Measured> {
        let attr = match &self.cal.source {
            Source::Counter(Attach::Pmu { path, offset }) => {
                self.pmu?.attr(path, *offset, false)?
            }
            _ => Attr::tracepoint(*self.ids().first()?),
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

    /// The cost of one call with the calibration probes through the tracefs ring (before its tasks are set).
    pub fn ring(&self, ring: &mut RingEngine) -> Option<Measured> {
        if self.ids().len() != self.cal.events.len() {
            return None;
        }
        let events: Vec<&str> = self.cal.events.iter().map(String::as_str).collect();
        difference(
            || {
                ring.calibrate_on(self.group, &events).ok()?;
                Some(ring)
            },
            |ring| ring.calibrate_off(self.group, &events),
        )
    }

    /// The cost of one call with the calibration probes through perf events on this thread, with the session's
    /// sample layout.
    pub fn perf(&self, parse: &PerfParse) -> Option<Measured> {
        if let (Source::Perf(Attach::Pmu { path, offset }), Some(pmu)) =
            (&self.cal.source, self.pmu)
        {
            return measure_pmu(&pmu, path, *offset, self.cal.timed);
        }
        let ids = self.ids();
        if ids.len() != self.cal.events.len() || ids.is_empty() {
            return None;
        }
        let bits = sample::TIME | sample::RAW | if parse.by_id { sample::IDENTIFIER } else { 0 };
        let specs: Vec<(Attr, ())> = ids
            .iter()
            .map(|&id| (Attr::tracepoint(id).sample_type(bits).clock_monotonic(), ()))
            .collect();
        on_this_thread(&specs)
    }

    /// Entry and return probes of the uprobe PMU on this thread carrying what pairing needs without fetch
    /// arguments (TIME | TID | IDENTIFIER | REGS_USER with the SP), to set beside the tracefs path's
    /// TIME | RAW with `sp=%sp` ([`Calibrator::perf`]): `RPROF_DEBUG_COST=pmu`.
    pub fn compare_pmu(&self, parse: &PerfParse) -> Option<(Measured, Measured)> {
        let pmu = UprobePmu::find()?;
        Some((
            self.perf(parse)?,
            measure_pmu(&pmu, &self.site.0, self.site.1, true)?,
        ))
    }

    fn ids(&self) -> Vec<u64> {
        self.cal
            .events
            .iter()
            .filter_map(|e| self.tracefs.event_id(self.group, e).ok())
            .collect()
    }
}

/// The cost of one call with a uprobe PMU entry probe (and return probe when `timed`) on this thread, with the
/// sample layout of the session's PMU events (less the stack).
fn measure_pmu(pmu: &UprobePmu, path: &Path, offset: u64, timed: bool) -> Option<Measured> {
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
    on_this_thread(&specs)
}

/// Time the calls with these perf events open and enabled on this thread.
fn on_this_thread(specs: &[(Attr, ())]) -> Option<Measured> {
    let tid = nix::unistd::gettid().as_raw();
    let cpus = crate::perf::online_cpus().ok()?;
    difference(
        || {
            let set = EventSet::open(specs, &cpus, &[tid], 128, &mut |_, _| Refused::Fail).ok()?;
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

/// Time the calls unprobed, then with the probes `on` sets up (and whatever it returns keeps alive). (Opening
/// a perf event on a uprobe already installs its breakpoint, enabled or not, so the bare calls are timed before
/// anything is opened.)
fn difference<G>(on: impl FnOnce() -> Option<G>, off: impl FnOnce(G)) -> Option<Measured> {
    let bare_ns = per_call();
    let guard = on()?;
    let probed_ns = per_call();
    off(guard);
    Some(Measured { bare_ns, probed_ns })
}
