//! The attrs of `rprof record`: the one handed to the kernel, the one stored in the file, and the tasks they
//! are opened on.
use super::{CallGraph, Rate, RecordConfig, RecordError, Target};
use crate::events::{self, EventSpec, Plan, PlannedEvent};
use crate::perf::attr::sample;
use crate::perf::{self, Attr, Workload};
use crate::process::{self, ProcessError};

/// The attr handed to the kernel for one sampled event; the first event of the session also carries the
/// side-band records.
pub(super) fn build_attr(cfg: &RecordConfig, event: &PlannedEvent, first: bool) -> Attr {
    let base = event.attr();
    let attr = sampled_like_the_clock(cfg, sampling(cfg, event, base));
    // The event's own modifiers (`page-faults:u`) add to --user-only/--kernel-only.
    let attr = match base.excludes_kernel() {
        true => attr.exclude(false, true),
        false => attr,
    };
    match first {
        true => attr.side_band(),
        false => attr,
    }
}

/// `attr` sampling at the recording's rate: every perf-type event (perf's default 4000 Hz, or -F/-c); a
/// tracefs event at every hit unless -c or -F was given (as perf).
fn sampling(cfg: &RecordConfig, event: &PlannedEvent, attr: Attr) -> Attr {
    match (event.is_trace() && !cfg.rate_given, cfg.rate) {
        (true, _) => attr,
        (false, Rate::Frequency(hz)) => attr.frequency(hz),
        (false, Rate::Period(p)) => attr.period(p),
    }
}

/// The plan of the recording's events (the clock of `cfg.task_clock` when none is given); an event that
/// needs the PMU this machine lacks is refused in one line.
pub(super) fn plan(cfg: &RecordConfig) -> Result<Plan, RecordError> {
    let specs = match cfg.events.is_empty() {
        true => vec![EventSpec::new(match cfg.task_clock {
            true => "task-clock",
            false => "cpu-clock",
        })],
        false => cfg.events.clone(),
    };
    let plan = events::plan::plan(&specs, cfg.binary.as_deref())?;
    if let Some(line) = plan.events.iter().find_map(PlannedEvent::pmu_missing) {
        return Err(RecordError::Config(line));
    }
    Ok(plan)
}

/// Whether the session records every event rather than a sample: only tracefs events, at a fixed period
/// (no -F). The kernel writes every hit of such an event whose samples carry their period (PERF_SAMPLE_PERIOD,
/// which record always asks for), at any -c, as `perf record -e TRACEPOINT -c N` shows. A clock is sampled
/// at any period.
pub(super) fn every_event(cfg: &RecordConfig, plan: &Plan) -> bool {
    let every_hit = !cfg.rate_given || matches!(cfg.rate, Rate::Period(_));
    every_hit && plan.all_trace()
}

/// The `context-switches` event of `--off-cpu`: a sample with the stack of every thread leaving a CPU, and the
/// switch records in both directions. Every switch-out has its stack, or with `off_cpu_stack_hz` the stacks
/// are sampled at about that rate per event, while the switch records still time every switch. It samples
/// what the clock samples (the same fields, the same stacks, the
/// same tasks), without side-band records (the clock has those).
pub(super) fn switch_attr(cfg: &RecordConfig) -> Attr {
    let attr = match cfg.off_cpu_stack_hz {
        Some(hz) => Attr::context_switches().frequency(hz),
        None => Attr::context_switches(),
    };
    sampled_like_the_clock(cfg, attr).switch_records()
}

/// The sample fields, stacks and task scope of the session's events.
fn sampled_like_the_clock(cfg: &RecordConfig, mut attr: Attr) -> Attr {
    let tracing = cfg
        .events
        .iter()
        .any(|e| events::parse(e).map_or(true, |e| e.is_trace()));
    let mut st = sample::IP | sample::TID | sample::TIME | sample::PERIOD;
    // As perf does: the CPU of each sample only when sampling CPUs rather than tasks (8 bytes a sample).
    if matches!(cfg.target, Target::System | Target::Cgroup(_)) || cfg.cpus.is_some() || cfg.raw {
        st |= sample::CPU;
    }
    // Several events write into the rings and the file: each record says which. Tracepoints and probes
    // carry their fields (perf's samples of them always do).
    if cfg.off_cpu || tracing || cfg.events.len() > 1 {
        st |= sample::IDENTIFIER;
    }
    if tracing || cfg.raw {
        st |= sample::RAW;
    }
    match cfg.call_graph {
        CallGraph::None => {}
        CallGraph::Fp => st |= sample::CALLCHAIN,
        CallGraph::Dwarf { stack_size } => {
            st |= sample::CALLCHAIN | sample::REGS_USER | sample::STACK_USER;
            attr = attr.regs_user(crate::regs::GENERAL).stack_user(stack_size);
        }
    }
    attr = attr
        .sample_type(st)
        .sample_id_all()
        .exclude(cfg.kernel_only, cfg.user_only)
        .wakeup_watermark((cfg.mmap_pages * perf::ring::page_size() / 2) as u32);
    if matches!(cfg.call_graph, CallGraph::Dwarf { .. }) {
        attr = attr.callchain_user(false);
    }
    if cfg.clock_monotonic {
        attr = attr.clock_monotonic();
    }
    match cfg.target {
        Target::Command(_) => attr.inherit().enable_on_exec(),
        Target::Pids(_) => attr.inherit(),
        Target::Tids(_) | Target::System | Target::Cgroup(_) => attr,
    }
}

/// The attr stored in the file: what the samples in the file contain (DWARF mode stores the unwound
/// callchain in place of registers and stack copies).
pub(super) fn file_attr_for(cfg: &RecordConfig, kernel: Attr) -> Attr {
    match cfg.call_graph {
        CallGraph::Dwarf { .. } => kernel
            .sample_type(kernel.get_sample_type() & !(sample::REGS_USER | sample::STACK_USER))
            .regs_user(0)
            .stack_user(0)
            .callchain_user(true),
        _ => kernel,
    }
}

/// The tasks to open the events on: the launched command, the threads of the processes now (`inherit`
/// follows the later ones), the threads given, or every task (-1).
pub(super) fn tasks(
    cfg: &RecordConfig,
    workload: Option<&Workload>,
) -> Result<Vec<i32>, RecordError> {
    Ok(match &cfg.target {
        Target::Command(_) => vec![workload.expect("command target has a workload").pid()],
        Target::Pids(pids) => {
            let mut tids = Vec::new();
            for &pid in pids {
                tids.extend(process::threads(pid)?);
            }
            tids
        }
        Target::Tids(tids) => {
            for &tid in tids {
                if !process::exists(tid) {
                    return Err(ProcessError::NoSuchProcess { pid: tid }.into());
                }
            }
            tids.clone()
        }
        Target::System => vec![-1],
        // Opened on the cgroup's directory instead.
        Target::Cgroup(_) => vec![],
    })
}

/// The ring's data pages per CPU when none are asked for: perf's 128 (512 KiB), and with DWARF stacks as many
/// more as make the ring hold as many samples as perf's does with its default 8 KiB stack copy (perf 6.1 keeps
/// 512 KiB whatever the copy size; rprof's default copy is 16 KiB, so its samples are twice perf's and a ring
/// of the same size filled twice as fast: 48 samples lost on a loaded machine where perf lost none).
pub fn default_mmap_pages(call_graph: CallGraph) -> usize {
    const PERF_PAGES: usize = 128;
    const PERF_STACK: usize = 8192;
    // A DWARF sample beside its stack copy: header, ip, tid, time, cpu, period, kernel callchain, registers.
    const SAMPLE: usize = 512;
    match call_graph {
        CallGraph::Dwarf { stack_size } => (PERF_PAGES * (stack_size as usize + SAMPLE))
            .div_ceil(PERF_STACK + SAMPLE)
            .next_power_of_two()
            .max(PERF_PAGES),
        CallGraph::None | CallGraph::Fp => PERF_PAGES,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a DWARF ring holds as many samples as perf's 512 KiB holds of its 8 KiB copies.
    #[test]
    fn dwarf_rings_hold_perfs_samples() {
        assert_eq!(default_mmap_pages(CallGraph::Fp), 128);
        assert_eq!(default_mmap_pages(CallGraph::None), 128);
        assert_eq!(
            default_mmap_pages(CallGraph::Dwarf { stack_size: 8192 }),
            128
        );
        assert_eq!(
            default_mmap_pages(CallGraph::Dwarf { stack_size: 1024 }),
            128
        );
        assert_eq!(
            default_mmap_pages(CallGraph::Dwarf { stack_size: 16384 }),
            256
        );
        assert_eq!(
            default_mmap_pages(CallGraph::Dwarf { stack_size: 65528 }),
            1024
        );
    }
}
