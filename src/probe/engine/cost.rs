//! The probe's own cost, measured at start on functions of rprof's own binary with the session's engine, one
//! function per class of probed instruction (the plan's [`Calibration`]): what a probed call costs the target
//! (calls timed with and without the probes), and the bias, the part of that cost that lands inside every
//! measured duration (the mean duration the engine reports for the calibration function, which does
//! nothing).
use super::decode::{decode, EventTypes, Item, PerfParse, ProbeInfo};
use super::holes::Holes;
use super::perf::pmu_sample_bits;
use super::ring::RingEngine;
use crate::merge::OrderedMerge;
use crate::perf::attr::sample;
use crate::perf::probe_targets::{emulated_entry, stepped_entry};
use crate::perf::{Attr, EventSet, PerfEvent, Refused, UprobePmu};
use crate::probe::plan::{Calibration, CalibrationSite, ProbeClass, Role};
use crate::tracefs::Tracefs;
use std::path::{Path, PathBuf};

/// Calls per timed batch, and batches (the fastest batch counts: the others were interrupted).
const CALLS: u64 = 1000;
const BATCHES: usize = 5;

/// The functions of each class, with their file and file offset in rprof's own executable (from
/// /proc/self/maps: what a uprobe needs, without reading the symbol table, which takes seconds for a large
/// binary on a slow machine).
pub fn calibration_sites() -> Vec<(ProbeClass, PathBuf, u64)> {
    [
        (
            ProbeClass::Emulated,
            emulated_entry as extern "C" fn(u64) -> u64,
        ),
        (ProbeClass::SingleStepped, stepped_entry),
    ]
    .into_iter()
    .filter_map(|(class, f)| {
        let (path, offset) = own_file_offset(f as usize as u64)?;
        Some((class, path, offset))
    })
    .collect()
}

fn own_file_offset(addr: u64) -> Option<(PathBuf, u64)> {
    let maps = crate::process::maps(std::process::id() as i32).ok()?;
    let m = maps
        .iter()
        .find(|m| m.exec && m.start <= addr && addr < m.end)
        .filter(|m| m.path.starts_with('/') && !m.path.ends_with(" (deleted)"))?;
    Some((m.path.clone().into(), addr - m.start + m.offset))
}

/// What a probed call of one class costs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCost {
    /// ns per probed call (entry and return probes when timed), as the target sees it.
    pub cost_ns: u64,
    /// ns of it inside each measured duration (timed engines only).
    pub bias_ns: Option<u64>,
}

/// The costs of the classes calibrated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Costs {
    pub emulated: Option<ClassCost>,
    pub stepped: Option<ClassCost>,
}

impl Costs {
    pub fn of(&self, class: ProbeClass) -> Option<ClassCost> {
        match class {
            ProbeClass::Emulated => self.emulated,
            ProbeClass::SingleStepped => self.stepped,
        }
    }

    fn set(&mut self, class: ProbeClass, c: ClassCost) {
        match class {
            ProbeClass::Emulated => self.emulated = Some(c),
            ProbeClass::SingleStepped => self.stepped = Some(c),
        }
    }
}

/// One measurement: ns per call unprobed and probed (the fastest batch of each), which probed batch was the
/// fastest, and the durations the engine reported for the probed calls (all batches', in call order).
#[derive(Clone, Debug, Default)]
pub struct Measured {
    pub bare_ns: f64,
    pub probed_ns: f64,
    pub fastest_batch: usize,
    pub durations: Vec<u64>,
}

impl Measured {
    /// What the probes add to one call.
    pub fn cost_ns(&self) -> u64 {
        (self.probed_ns - self.bare_ns).max(0.0) as u64
    }

    /// The mean reported duration of the (empty) calibration function in the fastest probed batch, the one
    /// [`Measured::cost_ns`] comes from, less the 1% of calls at each end (an interrupt or the host preempting
    /// the VM, tens of microseconds): the bias. A mean, not a median: the traps' cost has a tail (longer in a
    /// VM, or with rprof's reader on the same CPU) that lands in the measured calls' mean durations too. The
    /// same batch as the cost: in a VM the traps' cost moves from one 20 ms window to the next (a stepped
    /// probe's between 9.3 and 13.9 us on a busy host), and a bias from all batches held a slow batch's traps
    /// that the cost left out. When calls were lost (not one duration per call), all batches count.
    pub fn bias_ns(&self) -> Option<u64> {
        let calls = CALLS as usize;
        let mut d = match self.durations.len() == calls * BATCHES {
            true => self.durations[self.fastest_batch * calls..][..calls].to_vec(),
            false => self.durations.clone(),
        };
        d.sort_unstable();
        let trim = d.len() / 100;
        let kept = d.get(trim..d.len() - trim).filter(|k| !k.is_empty())?;
        Some(kept.iter().sum::<u64>() / kept.len() as u64)
    }

    fn cost(&self) -> ClassCost {
        ClassCost {
            cost_ns: self.cost_ns(),
            bias_ns: self.bias_ns(),
        }
    }
}

/// Where the calibration probes are: the session's group, the plan's calibration, the uprobe PMU.
pub struct Calibrator<'a> {
    pub tracefs: &'a Tracefs,
    pub group: &'a str,
    pub cal: &'a Calibration,
    pub pmu: Option<UprobePmu>,
}

impl Calibrator<'_> {
    /// `--count`: the cost of one counted call of each class (a counter on this thread).
    pub fn counters(&self, report: &mut dyn FnMut(ProbeClass, &Measured)) -> Costs {
        self.each(report, |site| {
            let attr = match self.pmu.filter(|_| self.cal.pmu) {
                Some(pmu) => pmu.attr(&site.path, site.offset, false)?,
                None => Attr::tracepoint(*self.ids(site).first()?),
            };
            difference(site.class, || {
                let ev = PerfEvent::open(&attr.period(0), 0, -1).ok()?;
                ev.enable().ok()?;
                Some(ev)
            })
        })
    }

    /// The cost and bias of each class through the tracefs ring (before its tasks are set; its rings open),
    /// filtered by task in the kernel or not as the session's events will be (`in_kernel`).
    pub fn ring(
        &self,
        ring: &mut RingEngine,
        in_kernel: bool,
        report: &mut dyn FnMut(ProbeClass, &Measured),
    ) -> Costs {
        self.each(report, |site| {
            let ids = self.ids(site);
            if ids.len() != site.events.len() {
                return None;
            }
            let types = EventTypes::for_roles(&roles(&ids), 4);
            let events: Vec<&str> = site.events.iter().map(String::as_str).collect();
            let mut measured = difference(site.class, || {
                ring.calibrate_on(self.group, &events, in_kernel).ok()
            })?;
            let mut merge = OrderedMerge::new();
            let _ = ring.read(&types, &mut merge, &mut Holes::default(), |_| usize::MAX);
            ring.calibrate_off(self.group, &events);
            measured.durations = durations(merge, own_tid());
            Some(measured)
        })
    }

    /// The cost and bias of each class through perf events on this thread, with the session's sample layout.
    pub fn perf(&self, by_id: bool, report: &mut dyn FnMut(ProbeClass, &Measured)) -> Costs {
        self.each(report, |site| {
            let specs = self.perf_specs(site, by_id)?;
            let tid = own_tid() as i32;
            let cpus = crate::perf::online_cpus().ok()?;
            let mut set: Option<EventSet<ProbeInfo>> = None;
            let mut measured = difference(site.class, || {
                let s =
                    EventSet::open(&specs, &cpus, &[tid], 128, &mut |_, _| Refused::Fail).ok()?;
                s.enable().ok()?;
                set = Some(s);
                Some(())
            })?;
            let mut set = set?;
            set.disable();
            let parse = PerfParse {
                any: specs[0].1.parse,
                samples: (!by_id).then_some(specs[0].1.parse),
                by_id,
            };
            let types = EventTypes::for_roles(&roles(&self.ids(site)), 4);
            let (mut merge, mut holes) = (OrderedMerge::new(), Holes::default());
            set.read(|infos, rec| decode(rec, infos, &parse, &types, &mut merge, &mut holes));
            measured.durations = durations(merge, own_tid());
            Some(measured)
        })
    }

    /// The perf events of one site: uprobe PMU probes (the thread and SP from the sample) or its tracefs
    /// events (TIME | RAW, and IDENTIFIER with `by_id`), as the session opens the targets'.
    fn perf_specs(&self, site: &CalibrationSite, by_id: bool) -> Option<Vec<(Attr, ProbeInfo)>> {
        let role = |i: usize| if i == 0 { Role::Entry } else { Role::Return };
        let n = if self.cal.timed { 2 } else { 1 };
        let mut specs = Vec::new();
        if let Some(pmu) = self.pmu.filter(|_| self.cal.pmu) {
            for i in 0..n {
                let attr = pmu
                    .attr(&site.path, site.offset, i == 1)?
                    .sample_type(pmu_sample_bits(false, role(i)))
                    .regs_user(1 << crate::perf::attr::regs::SP)
                    .clock_monotonic();
                let info = super::decode::EventInfo::bare(None, role(i));
                specs.push((
                    attr,
                    ProbeInfo {
                        parse: attr.parse_info(),
                        pmu: Some(info),
                        planned: None,
                    },
                ));
            }
            return Some(specs);
        }
        let bits = sample::TIME | sample::RAW | if by_id { sample::IDENTIFIER } else { 0 };
        for id in self.ids(site) {
            let attr = Attr::tracepoint(id).sample_type(bits).clock_monotonic();
            specs.push((
                attr,
                ProbeInfo {
                    parse: attr.parse_info(),
                    pmu: None,
                    planned: None,
                },
            ));
        }
        (specs.len() == n).then_some(specs)
    }

    /// Measure each site with `how`, reporting each measurement.
    fn each(
        &self,
        report: &mut dyn FnMut(ProbeClass, &Measured),
        mut how: impl FnMut(&CalibrationSite) -> Option<Measured>,
    ) -> Costs {
        let _turn = take_turn();
        let mut costs = Costs::default();
        for site in &self.cal.sites {
            if let Some(m) = how(site) {
                report(site.class, &m);
                costs.set(site.class, m.cost());
            }
        }
        costs
    }

    fn ids(&self, site: &CalibrationSite) -> Vec<u64> {
        site.events
            .iter()
            .filter_map(|e| self.tracefs.event_id(self.group, e).ok())
            .collect()
    }
}

/// Calibrations of rprof sessions that run at the same time would disturb each other (their probes are on the
/// same functions of the same binary, and a probe read through a tracefs ring traps in every process that
/// maps the file, the bare calls of another session's calibration included): they take turns, under an
/// exclusive lock on a file (released when it is closed). Without the file, no turns are taken.
fn take_turn() -> Option<std::fs::File> {
    let dir = Path::new("/run/lock");
    let dir = if dir.is_dir() {
        dir.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("rprof-calibration.lock"))
        .ok()?;
    file.lock().ok()?;
    Some(file)
}

/// Entry, then return: the roles of a site's event ids.
fn roles(ids: &[u64]) -> Vec<(u64, Role)> {
    ids.iter()
        .zip([Role::Entry, Role::Return])
        .map(|(&id, role)| (id, role))
        .collect()
}

/// The durations of the calls of thread `tid` in the merge (calls one after the other): each entry to the return
/// that follows it.
fn durations(mut merge: OrderedMerge<Item>, tid: u32) -> Vec<u64> {
    let mut out = Vec::new();
    let mut entered = None;
    merge.drain(|time, item| {
        // Another rprof calibrating at the same time hits the same functions: only this thread's calls count.
        let Item::Hit(h) = item else {
            return;
        };
        if h.tid == tid {
            match h.role {
                Role::Entry => entered = Some(time),
                Role::Return => {
                    if let Some(t0) = entered.take() {
                        out.push(time.saturating_sub(t0));
                    }
                }
                Role::Hit | Role::Value | Role::Pair(_) => {}
            }
        }
    });
    out
}

/// This thread's id.
fn own_tid() -> u32 {
    nix::unistd::gettid().as_raw() as u32
}

/// This thread's CPU time (user and system: the probe's traps included), in ns: unlike the wall clock, not
/// stretched when the machine runs something else in between.
fn thread_cpu_ns() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map_or(0.0, |t| t.tv_sec() as f64 * 1e9 + t.tv_nsec() as f64)
}

/// The fastest of [`BATCHES`] batches of [`CALLS`] calls of the class's function, in ns of this thread's CPU
/// time per call, and which batch it was.
fn per_call(class: ProbeClass) -> (f64, usize) {
    let f = match class {
        ProbeClass::Emulated => emulated_entry,
        ProbeClass::SingleStepped => stepped_entry,
    };
    let f = std::hint::black_box(f);
    let mut best = (f64::MAX, 0);
    for batch in 0..BATCHES {
        let t = thread_cpu_ns();
        let mut x = 1u64;
        for _ in 0..CALLS {
            x = f(x).wrapping_add(1);
        }
        std::hint::black_box(x);
        let ns = (thread_cpu_ns() - t) / CALLS as f64;
        if ns < best.0 {
            best = (ns, batch);
        }
    }
    best
}

/// Time the class's calls unprobed, then with the probes `on` sets up (kept alive until the calls are timed).
/// (Opening a perf event on a uprobe already installs its breakpoint, enabled or not, so the bare calls are
/// timed before anything is opened.)
fn difference<G>(class: ProbeClass, on: impl FnOnce() -> Option<G>) -> Option<Measured> {
    let (bare_ns, _) = per_call(class);
    let guard = on()?;
    let (probed_ns, fastest_batch) = per_call(class);
    drop(guard);
    Some(Measured {
        bare_ns,
        probed_ns,
        fastest_batch,
        durations: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that the bias is the fastest batch's trimmed mean, and all calls' when some were lost.
    #[test]
    fn bias_from_the_fastest_batch() {
        let calls = CALLS as usize;
        let mut durations: Vec<u64> = (0..BATCHES)
            .flat_map(|b| std::iter::repeat_n(1000 * (b as u64 + 1), calls))
            .collect();
        let m = Measured {
            fastest_batch: 2,
            durations: durations.clone(),
            ..Measured::default()
        };
        assert_eq!(m.bias_ns(), Some(3000));
        durations.pop();
        let m = Measured {
            fastest_batch: 2,
            durations,
            ..Measured::default()
        };
        assert_eq!(
            m.bias_ns(),
            Some(3000 - 1),
            "all batches (one call lost), trimmed"
        );
    }
}
