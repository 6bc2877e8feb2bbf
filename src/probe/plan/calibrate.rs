//! The calibration probes: on rprof's own functions of each class of probed instruction the targets have.
use super::{
    Calibration, CalibrationSite, Capabilities, Method, Mode, Placement, PlannedEvent, ProbeClass,
    SP_FETCH,
};
use crate::probe::target::PerTarget;
use crate::probe::ProbeOptions;
use crate::tracefs::{ProbeDef, ProbeLocation};

/// The calibration probes on rprof's own functions of the classes the targets' probes have, read the way the
/// targets are (their definitions are added to `defs`, except for uprobe PMU probes, which need none).
pub(super) fn calibration(
    group: &str,
    mode: Mode,
    pmu: bool,
    events: &[PlannedEvent],
    placements: &PerTarget<Option<Placement>>,
    opts: &ProbeOptions,
    caps: &Capabilities,
) -> (Option<Calibration>, Vec<ProbeDef>) {
    let mut defs = Vec::new();
    let timed = !opts.count_only;
    let method = match mode {
        Mode::Counters => Method::Counter,
        Mode::Sampled if events.iter().any(PlannedEvent::ring) => Method::Ring,
        Mode::Sampled => Method::Perf,
    };
    let used = |c: ProbeClass| placements.values().flatten().any(|p| p.class == c);
    let fetch = if mode == Mode::Counters || !timed {
        Vec::new()
    } else {
        vec![SP_FETCH.to_string()]
    };
    let mut sites = Vec::new();
    for (class, path, offset) in caps.calibration_sites.iter().filter(|s| used(s.0)) {
        let tag = match class {
            ProbeClass::Emulated => "e",
            ProbeClass::SingleStepped => "s",
        };
        let mut names = vec![format!("cal_{tag}")];
        if timed {
            names.push(format!("calr_{tag}"));
        }
        if pmu {
            names.clear();
        }
        for (i, name) in names.iter().enumerate() {
            defs.push(ProbeDef {
                group: group.to_string(),
                event: name.clone(),
                is_return: i == 1,
                location: ProbeLocation::User {
                    path: path.clone(),
                    offset: *offset,
                    ref_ctr: None,
                },
                fetch: fetch.clone(),
            });
        }
        sites.push(CalibrationSite {
            class: *class,
            path: path.clone(),
            offset: *offset,
            events: names,
        });
    }
    let cal = (!sites.is_empty()).then_some(Calibration {
        method,
        pmu,
        timed,
        sites,
    });
    (cal, defs)
}
