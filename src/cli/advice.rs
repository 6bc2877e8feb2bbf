//! The closing verdict of `record` and `report`: how far to trust the profile, one line per fact the profile
//! shows, each with what to do about it. Text for the terminal, kept out of the library (which returns the
//! facts: [`RecordSummary`], [`Quality`], [`DwarfStats`]).
use rprof::record::RecordSummary;
use rprof::report::{interval_points, samples_needed, Quality, UnnamedShare};
use rprof::symbols::Unnamed;
use rprof::text::thousands;
use rprof::unwind::dwarf::DwarfStats;

/// How precise a share must be for the verdict to call the profile precise (points of percentage, 95%).
const POINTS: f64 = 2.0;

/// A cause that covers at least this share of samples gets its line.
const SHOWN_SHARE: f64 = 0.01;

/// The verdict after `rprof record`: precision, losses, and the DWARF stack copies.
pub fn record_verdict(s: &RecordSummary) -> Vec<String> {
    let mut lines = Vec::new();
    // A recording of every event has no sampling error.
    if s.samples > 0 && !s.every_event {
        // Which functions are hot is not known yet: the worst case is a share of 50%.
        let needed = samples_needed(0.5, POINTS);
        let within = interval_points(0.5, s.samples);
        lines.push(match s.samples >= needed {
            true => format!(
                "precision: {} samples: any function's share is within ±{within:.1} points (95%)",
                thousands(s.samples)
            ),
            false => format!(
                "precision: {} samples: a function's share may be off by up to ±{within:.1} points (95%); \
                 ±{POINTS:.0} points needs {} samples: record longer or at a higher -F",
                thousands(s.samples),
                thousands(needed)
            ),
        });
    }
    lines.extend(losses(s.samples, s.lost, s.lost_samples, s.throttled));
    if let Some(d) = s.dwarf.as_ref().filter(|d| d.unwound > 0) {
        lines.push(dwarf_verdict(d));
    }
    lines
}

/// The verdict after `rprof report`: the precision of the top rows, losses, cut stacks, unnamed code by cause.
/// `debuginfod` says whether debuginfod servers were asked already.
pub fn report_verdict(q: &Quality, dwarf: &DwarfStats, debuginfod: bool) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(line) = precision(q) {
        lines.push(line);
    }
    lines.extend(losses(q.samples, q.lost, q.lost_samples, q.throttled));
    if dwarf.unwound > 0 {
        lines.push(dwarf_verdict(dwarf));
    } else if q.cut_stacks as f64 >= SHOWN_SHARE * q.user_stacks as f64 && q.cut_stacks > 0 {
        lines.push(format!(
            "stacks: {:.1}% do not reach a thread's first function (_start, start_thread, clone): a function \
             without frame pointers cut them; record with --call-graph dwarf, or build with \
             -fno-omit-frame-pointer",
            share(q.cut_stacks, q.user_stacks)
        ));
    }
    for u in &q.unnamed {
        let big = |n: u64| n as f64 >= SHOWN_SHARE * q.samples as f64 && n > 0;
        if big(u.self_samples) || big(u.stack_samples) {
            lines.push(unnamed_line(u, q.samples, debuginfod));
        }
    }
    lines
}

/// How precise the top rows' shares are, and how many samples ±2 points would need.
fn precision(q: &Quality) -> Option<String> {
    if q.every_event {
        return None;
    }
    let n = q.samples;
    let worst = q
        .top_shares
        .iter()
        .copied()
        .max_by(|a, b| (a * (1.0 - a)).total_cmp(&(b * (1.0 - b))))?;
    let within = interval_points(worst, n);
    let needed = samples_needed(worst, POINTS);
    let rows = q.top_shares.len();
    Some(match n >= needed {
        true => format!(
            "precision: the top {rows} rows' shares are within ±{within:.1} points (95%) with {} samples",
            thousands(n)
        ),
        false => format!(
            "precision: the top {rows} rows' shares may be off by up to ±{within:.1} points (95%) with {} \
             samples; a function at {:.1}% needs {} samples for ±{POINTS:.0} points: record longer or at a \
             higher -F",
            thousands(n),
            worst * 100.0,
            thousands(needed)
        ),
    })
}

/// Lines for lost and throttled samples.
fn losses(samples: u64, lost: u64, lost_samples: u64, throttled: u64) -> Vec<String> {
    let mut lines = Vec::new();
    if lost > 0 || lost_samples > 0 {
        lines.push(format!(
            "lost: {} events and {} samples ({:.1}% of samples) while the ring buffers were full: record with \
             more -m pages or a lower -F",
            thousands(lost),
            thousands(lost_samples),
            share(lost_samples, samples + lost_samples)
        ));
    }
    if throttled > 0 {
        lines.push(format!(
            "throttled {} times: the kernel lowered the sampling rate (kernel.perf_cpu_time_max_percent); \
             record at a lower -F",
            thousands(throttled)
        ));
    }
    lines
}

/// How DWARF unwinds ended, against the size of the stack copies, with advice on the size.
pub fn dwarf_verdict(s: &DwarfStats) -> String {
    let deepest = match s.deepest {
        0 => "no stack unwound completely".to_string(),
        n => format!("the deepest complete stack used {} bytes", thousands(n)),
    };
    let mut line = format!(
        "DWARF-unwound {} user stacks with {}-byte stack copies: {:.1}% truncated at the end of the copy, \
         {:.1}% stopped at a frame without unwind info; {deepest}",
        thousands(s.unwound),
        thousands(s.copy_size),
        share(s.truncated, s.unwound),
        share(s.failed, s.unwound)
    );
    let max = u64::from(super::parse::MAX_STACK_COPY);
    if share(s.truncated, s.unwound) >= SHOWN_SHARE * 100.0 {
        match s.copy_size < max {
            true => line.push_str("; record with --call-graph dwarf,65528 for deeper stacks"),
            false => line.push_str(
                "; 65528 bytes is the kernel's largest copy: use -g on a build with frame pointers",
            ),
        }
    } else if s.truncated == 0 && s.deepest > 0 && s.deepest * 2 <= s.copy_size {
        // Every sample copies the whole size: a smaller copy costs the workload less.
        let enough = (s.deepest * 3 / 2).next_multiple_of(4096).min(max);
        line.push_str(&format!(
            "; --call-graph dwarf,{enough} would do, and copy less per sample"
        ));
    }
    if s.cut_loading > 0 {
        line.push_str(&format!(
            "; {} stacks met a module whose file was still being read (a slow disk) and stop there",
            thousands(s.cut_loading)
        ));
    } else if share(s.failed, s.unwound) >= SHOWN_SHARE * 100.0 {
        line.push_str(
            "; install debug symbols (.debug_frame) or build with -fasynchronous-unwind-tables",
        );
    }
    line
}

/// The line of one module's unnamed code. It leads with the share of samples whose leaf is such code when
/// that share is shown (at least 1%), else with the share of samples that have such a frame in their stack:
/// code that is mostly a caller (a frame-pointer stack broken below it) has no leaf share to lead with.
fn unnamed_line(u: &UnnamedShare, samples: u64, debuginfod: bool) -> String {
    let (cause, fix) = cause_and_fix(u.cause, debuginfod);
    let (at_leaf, in_stack) = match u.module.as_str() {
        "[unknown]" => ("are in no mapping".to_string(), "in no mapping".to_string()),
        "[uprobes]" => ("are in [uprobes]".to_string(), "in [uprobes]".to_string()),
        module => (
            format!("in {module} have no symbol"),
            format!("in {module} without a symbol"),
        ),
    };
    let shown = |n: u64| n as f64 >= SHOWN_SHARE * samples as f64 && n > 0;
    let head = match shown(u.self_samples) {
        true => format!(
            "{:.1}% of samples {at_leaf} ({:.1}% of samples have such a frame in their stack)",
            share(u.self_samples, samples),
            share(u.stack_samples, samples)
        ),
        false => {
            let leaf = match u.self_samples {
                0 => "none at the leaf".to_string(),
                1 => "1 sample at the leaf".to_string(),
                n => format!("{} samples at the leaf", thousands(n)),
            };
            format!(
                "{:.1}% of samples have a frame {in_stack} in their stack ({leaf})",
                share(u.stack_samples, samples)
            )
        }
    };
    format!("{head}: {cause}; {fix}")
}

/// Why code has no name, and what to do about it.
fn cause_and_fix(cause: Unnamed, debuginfod: bool) -> (&'static str, &'static str) {
    match cause {
        Unnamed::Stripped => (
            "the binary is stripped and no debug file was found",
            match debuginfod {
                true => "install its debug package (the debuginfod servers had nothing either)",
                false => "install its debug package, or set DEBUGINFOD_URLS",
            },
        ),
        Unnamed::NoSymbol => (
            "no symbol of the binary covers that code",
            "build it with -g, or without stripping its .symtab",
        ),
        Unnamed::BuildIdMismatch => (
            "the file on disk is another build than the recorded one",
            match debuginfod {
                true => "record without -N (a copy of each sampled binary stays in the build-id cache), or report where the recorded build is (the debuginfod servers had nothing either)",
                false => "record without -N (a copy of each sampled binary stays in the build-id cache), report where the recorded build is, or set DEBUGINFOD_URLS to fetch it",
            },
        ),
        Unnamed::FileGone => (
            "the file is gone from this system",
            match debuginfod {
                true => "record without -N (a copy of each sampled binary stays in the build-id cache), or report where it was recorded (the debuginfod servers had nothing either)",
                false => "record without -N (a copy of each sampled binary stays in the build-id cache), report where it was recorded, or set DEBUGINFOD_URLS to fetch it by build id",
            },
        ),
        Unnamed::Unreadable => (
            "the file cannot be read as ELF",
            "check that it is readable and whole",
        ),
        Unnamed::NoMapping => (
            "the addresses lie in no mapping of their process: in frame-pointer stacks, a function built \
             without frame pointers left a wrong return address; else the code was mapped before recording, \
             or MMAP records were lost",
            "record with --call-graph dwarf, or from the program's start (-- CMD) with more -m pages",
        ),
        Unnamed::JitWithoutMap => (
            "it is JIT code and the process wrote no /tmp/perf-PID.map",
            "turn the JIT's perf map on (node --perf-basic-prof, python3.12 -X perf, \
             java -XX:+DumpPerfMapAtExit)",
        ),
        Unnamed::JitNotInMap => (
            "it is JIT code that the process's /tmp/perf-PID.map does not list",
            "keep the map until the process ends, and report before it is rewritten",
        ),
        Unnamed::UprobeTrampoline => (
            "it is the kernel's uprobe trampoline page, not code of the program: a return probe (rprof probe, \
             bpftrace's uretprobe, perf probe's %return) was on a function of these stacks, and the kernel put \
             the page's address in place of that function's return address, so this frame stands for its caller",
            "record while no return probe is on the program to see the callers' names",
        ),
        Unnamed::KernelWithoutSymbols => (
            "no symbols of the recorded kernel are at hand",
            "report on the recording machine, or record without -N so that a copy of kallsyms is kept",
        ),
        Unnamed::OverBudget => (
            "rprof record --push was over its CPU or memory budget and did not read the binary",
            "raise --push-cpu-budget or --push-mem-budget, or let the store symbolize it by build id",
        ),
    }
}

/// `part` as a percentage of `whole`.
fn share(part: u64, whole: u64) -> f64 {
    part as f64 * 100.0 / whole.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(
        unwound: u64,
        truncated: u64,
        failed: u64,
        copy_size: u64,
        deepest: u64,
    ) -> DwarfStats {
        DwarfStats {
            unwound,
            truncated,
            failed,
            copy_size,
            deepest,
            cut_loading: 0,
        }
    }

    /// Check that the DWARF line's advice follows the numbers: the largest copy when stacks ran past it, a
    /// smaller one when the deepest stack used less than half, debug symbols when frames had no unwind info.
    /// Check that stacks cut at a module still loading are said as such, not as missing unwind info.
    #[test]
    fn dwarf_line_says_stacks_cut_while_a_module_loaded() {
        let mut s = stats(100, 0, 100, 8192, 0);
        s.cut_loading = 40;
        let line = dwarf_verdict(&s);
        assert!(
            line.contains("40 stacks met a module whose file was still being read"),
            "{line}"
        );
        assert!(!line.contains("install debug symbols"), "{line}");
    }

    #[test]
    fn dwarf_advice_follows_the_numbers() {
        let deep = dwarf_verdict(&stats(100, 30, 0, 8192, 8000));
        assert!(
            deep.starts_with("DWARF-unwound 100 user stacks with 8,192-byte"),
            "{deep}"
        );
        assert!(
            deep.contains("30.0% truncated at the end of the copy"),
            "{deep}"
        );
        assert!(
            deep.contains("--call-graph dwarf,65528 for deeper"),
            "{deep}"
        );
        let none = dwarf_verdict(&stats(100, 100, 0, 1024, 0));
        assert!(none.contains("no stack unwound completely"), "{none}");
        let shallow = dwarf_verdict(&stats(100, 0, 0, 16384, 2000));
        assert!(
            shallow.contains("--call-graph dwarf,4096 would do"),
            "{shallow}"
        );
        let fine = dwarf_verdict(&stats(100, 0, 0, 16384, 9000));
        assert!(
            !fine.contains("--call-graph") && !fine.contains("install"),
            "{fine}"
        );
        let blind = dwarf_verdict(&stats(100, 0, 5, 16384, 9000));
        assert!(blind.contains("install debug symbols"), "{blind}");
    }

    /// Check that the report's verdict says when the top rows are imprecise and how many samples would do,
    /// and that a cause under 1% of samples gets no line.
    #[test]
    fn report_verdict_lines() {
        let q = Quality {
            samples: 500,
            top_shares: vec![0.4, 0.2],
            unnamed: vec![
                UnnamedShare {
                    module: "perl".into(),
                    cause: Unnamed::Stripped,
                    self_samples: 130,
                    stack_samples: 200,
                },
                UnnamedShare {
                    module: "libz.so.1".into(),
                    cause: Unnamed::Stripped,
                    self_samples: 1,
                    stack_samples: 2,
                },
            ],
            ..Quality::default()
        };
        let lines = report_verdict(&q, &DwarfStats::default(), false);
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(
            lines[0].contains("needs 2,305 samples for ±2 points"),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].starts_with("26.0% of samples in perl have no symbol (40.0% of samples"),
            "{}",
            lines[1]
        );
        assert!(lines[1].ends_with("install its debug package, or set DEBUGINFOD_URLS"));
    }

    /// Check that a cause whose code is in stacks but (almost) never at the leaf leads with its stack share,
    /// and says how many samples it has at the leaf, for frames in no mapping and for a module's code.
    #[test]
    fn unnamed_line_leads_with_the_stack_share_when_no_leaf() {
        let line = |module: &str, cause, self_samples, stack_samples| {
            let u = UnnamedShare {
                module: module.into(),
                cause,
                self_samples,
                stack_samples,
            };
            unnamed_line(&u, 1000, false)
        };
        let nowhere = line("[unknown]", Unnamed::NoMapping, 0, 891);
        assert!(
            nowhere.starts_with(
                "89.1% of samples have a frame in no mapping in their stack (none at the leaf): the addresses"
            ),
            "{nowhere}"
        );
        let perl = line("perl", Unnamed::Stripped, 3, 120);
        assert!(
            perl.starts_with(
                "12.0% of samples have a frame in perl without a symbol in their stack (3 samples at the leaf): \
                 the binary is stripped"
            ),
            "{perl}"
        );
        let leaf = line("perl", Unnamed::Stripped, 10, 120);
        assert!(
            leaf.starts_with(
                "1.0% of samples in perl have no symbol (12.0% of samples have such a frame"
            ),
            "{leaf}"
        );
    }
}
