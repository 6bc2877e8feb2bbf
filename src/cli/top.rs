//! `rprof top` arguments (perf top's spelling), the `--stdio` printer, and the choice of the terminal UI
//! ([`super::top_tui`]) when standard output is a terminal.
use super::parse;
use anyhow::Context;
use clap::Args;
use rprof::record::{CallGraph, EventSpec, RecordConfig, Target};
use rprof::top::{format_rows, Hide, Screen, SortKey, TopConfig};
use std::io::{IsTerminal, Write};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// perf top's live view: the functions taking the CPU now, system-wide or in some processes.
#[derive(Args, Debug)]
#[command(
    args_override_self = true,
    mut_arg("pid", |a| a.help("Sample only these processes (comma-separated), their threads now and later (default: \
                                the whole system)")),
    mut_arg("all_cpus", |a| a.help("The whole system (the default; accepted as perf top accepts it)")),
    mut_arg("cpu", |a| a.help("The whole system on these CPUs only, e.g. 0,1 or 0-3")),
    mut_arg("freq", |a| a.help("Sampling frequency in Hz (perf top's default: 4000)")),
    after_help = "Examples:\n  rprof top\n  rprof top -p 1234 -d 1\n  rprof top --stdio --sort comm,dso,sym -n 20\n  \
                  rprof top -e page-faults -K\n\n\
                  Each refresh adds its samples to the table after the earlier counts decay to 7/8 (perf top's \
                  decay; -z shows only the last period). The terminal UI's keys (perf top's): q (or Esc, \
                  Ctrl-C) quits with the terminal restored, p pauses and resumes the display (sampling goes on), \
                  the arrows select a row, d zooms into its binary and t into its process (the title line says \
                  ', DSO: NAME' or ', Thread: COMM(PID)'), the same key or Esc zooms out. SIGINT or SIGTERM \
                  ends it too."
)]
pub struct TopArgs {
    /// Print each refresh as text (perf top --stdio), also chosen when standard output is not a terminal.
    #[arg(long = "stdio")]
    pub stdio: bool,
    #[command(flatten)]
    pub target: super::target::TargetArgs,
    /// The sampled event (as rprof record -e): cpu-clock (the default here: no hardware PMU means no
    /// cycles), task-clock, software events (page-faults, cs, ...), hardware events where there is a PMU,
    /// tracepoints.
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    pub event: Vec<String>,
    #[command(flatten)]
    pub rate: super::target::RateArgs,
    /// Record call stacks by frame pointers (the table still counts the function each sample was in: perf
    /// top's self overhead).
    #[arg(short = 'g')]
    pub g: bool,
    /// Hide the kernel's functions.
    #[arg(short = 'K', long = "hide_kernel_symbols")]
    pub hide_kernel: bool,
    /// Hide user space's functions.
    #[arg(short = 'U', long = "hide_user_symbols")]
    pub hide_user: bool,
    /// The table's columns, comma-separated: comm, pid, dso, sym (perf top's default: dso,sym).
    #[arg(short = 's', long = "sort", value_name = "KEYS", default_value = "dso,sym", value_parser = sort_keys)]
    pub sort: SortKeys,
    /// The refresh period in seconds (perf top's -d: not a duration here; see --seconds).
    #[arg(short = 'd', long = "delay", value_name = "SECONDS", default_value = "2", value_parser = parse::seconds)]
    pub delay: Duration,
    /// Rows shown (perf top's -E/--entries; the terminal UI shows what fits).
    #[arg(short = 'n', long = "rows", visible_alias = "entries", value_name = "N", value_parser = parse::above_zero)]
    pub rows: Option<u64>,
    /// Hide the rows with fewer samples than this (decayed counts; perf top's -f, default 5).
    #[arg(
        short = 'f',
        long = "count-filter",
        value_name = "N",
        default_value = "5"
    )]
    pub count_filter: u64,
    /// Show only the samples of the last period (perf top's -z, no decay).
    #[arg(short = 'z', long = "zero")]
    pub zero: bool,
    /// Stop after this many seconds.
    #[arg(long = "seconds", value_name = "SECONDS", value_parser = parse::seconds)]
    pub seconds: Option<Duration>,
    /// Stop after this many refreshes.
    #[arg(long = "refreshes", value_name = "N", value_parser = parse::above_zero)]
    pub refreshes: Option<u64>,
}

#[derive(Clone, Debug)]
pub struct SortKeys(pub Vec<SortKey>);

fn sort_keys(s: &str) -> Result<SortKeys, String> {
    s.split(',')
        .map(|w| {
            SortKey::parse(w.trim())
                .ok_or_else(|| format!("unknown sort key '{w}': give comm, pid, dso or sym"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(SortKeys)
}

fn config(a: &TopArgs, rows: usize) -> TopConfig {
    let target = a.target.tasks().unwrap_or(Target::System);
    let rate = a.rate.rate();
    let argv: Vec<String> = std::env::args().collect();
    let mut events = rprof::events::specs_from_args(argv.get(1..).unwrap_or_default());
    if !events.iter().map(|s| &s.name).eq(a.event.iter()) {
        events = a.event.iter().map(|e| EventSpec::new(e)).collect();
    }
    let call_graph = if a.g { CallGraph::Fp } else { CallGraph::None };
    let record = RecordConfig {
        target,
        cpus: a.target.cpus(),
        rate,
        task_clock: a.event.iter().all(|e| e == "task-clock") && !a.event.is_empty(),
        call_graph,
        mmap_pages: rprof::record::default_mmap_pages(call_graph),
        cmdline: argv,
        no_buildid_cache: true,
        duration: a.seconds,
        events,
        rate_given: a.rate.given(),
        ..RecordConfig::default()
    };
    TopConfig {
        record,
        delay: a.delay,
        sort: a.sort.0.clone(),
        decay: !a.zero,
        hide: Hide {
            kernel: a.hide_kernel,
            user: a.hide_user,
        },
        count_filter: a.count_filter,
        rows,
        refreshes: a.refreshes,
        event_name: match a.event.is_empty() {
            true => "cpu-clock".into(),
            false => a.event.join(","),
        },
    }
}

pub fn run(a: TopArgs) -> anyhow::Result<u8> {
    let tui = !a.stdio && std::io::stdout().is_terminal();
    let rows = match (a.rows, tui) {
        (Some(n), _) => n as usize,
        (None, true) => usize::MAX,
        (None, false) => 20,
    };
    let mut cfg = config(&a, rows);
    let needs = rprof::events::privilege::Needs {
        system_wide: matches!(cfg.record.target, Target::System),
        kernel: None,
    };
    cfg.record.user_only = super::least_privilege("top", needs)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("cannot install the signal handler")?;
    }
    let paused = Arc::new(AtomicBool::new(false));
    let summary = match tui {
        true => super::top_tui::run(&cfg, stop, paused)?,
        false => {
            let show: rprof::top::Show = Box::new(print_screen);
            rprof::top::run(&cfg, stop, paused, show, &mut |_| {})?
        }
    };
    let _ = summary;
    Ok(0)
}

/// One refresh as perf top --stdio prints it: the screen cleared (as perf does, for a terminal), the header,
/// a rule, a blank line, the rows.
fn print_screen(screen: &Screen) {
    let mut text = String::from("\x1b[H\x1b[2J\n");
    text.push_str(&screen.header);
    text.push('\n');
    text.push_str(&"-".repeat(79));
    text.push_str("\n\n");
    for line in format_rows(&screen.rows) {
        text.push_str(&line);
        text.push('\n');
    }
    text.push('\n');
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}
