//! The target and sampling flags that `record`, `top` and `stat` share (perf's spelling), declared once and
//! flattened into each (`#[command(flatten)]`). Where a command words a flag's help its own way, it says so
//! with `mut_arg` beside its flatten; the name, the value, the parsing and the conflicts stay here.
use super::parse::{self, CpuList};
use clap::Args;
use rprof::record::{Rate, Target};

/// What is sampled or counted: processes, threads, or the whole system (on some CPUs).
#[derive(Args, Clone, Debug)]
pub struct TargetArgs {
    /// Sample these processes (comma-separated), their threads now and later.
    /// With `-- COMMAND`, the command only times the recording (perf's `-p PID -- sleep 3`): it runs, is not
    /// sampled, and recording stops when it exits.
    #[arg(
        short = 'p',
        long = "pid",
        value_delimiter = ',',
        conflicts_with = "tid"
    )]
    pub pid: Vec<i32>,
    /// Sample only these threads (comma-separated).
    #[arg(short = 't', long = "tid", value_delimiter = ',')]
    pub tid: Vec<i32>,
    /// Sample the whole system (every CPU, or those of -C).
    #[arg(short = 'a', long = "all-cpus", conflicts_with_all = ["pid", "tid"])]
    pub all_cpus: bool,
    /// Sample the whole system on these CPUs only, e.g. 0,1 or 0-3 or 0-1,3.
    #[arg(short = 'C', long = "cpu", value_name = "CPUS", value_parser = parse::cpu_list,
          conflicts_with_all = ["pid", "tid"])]
    pub cpu: Option<CpuList>,
}

impl TargetArgs {
    /// The processes (`-p`) or threads (`-t`) given; none: the caller's default.
    pub fn tasks(&self) -> Option<Target> {
        match (self.pid.is_empty(), self.tid.is_empty()) {
            (false, _) => Some(Target::Pids(self.pid.clone())),
            (true, false) => Some(Target::Tids(self.tid.clone())),
            (true, true) => None,
        }
    }

    /// Whether `-a` or `-C` asked for the whole system.
    pub fn system(&self) -> bool {
        self.all_cpus || self.cpu.is_some()
    }

    /// The CPUs of `-C`.
    pub fn cpus(&self) -> Option<Vec<u32>> {
        self.cpu.clone().map(|c| c.0)
    }
}

/// How often to sample: `-F HZ` or `-c PERIOD` (perf's default, 4000 Hz, when neither is given).
#[derive(Args, Clone, Debug)]
pub struct RateArgs {
    /// Sampling frequency in Hz.
    #[arg(short = 'F', long = "freq", value_name = "HZ|max", conflicts_with = "count", value_parser = parse::freq)]
    pub freq: Option<u64>,
    /// Sample every PERIOD events (nanoseconds for cpu-clock/task-clock).
    #[arg(short = 'c', long = "count", value_parser = parse::above_zero)]
    pub count: Option<u64>,
}

impl RateArgs {
    pub fn rate(&self) -> Rate {
        match (self.freq, self.count) {
            (_, Some(p)) => Rate::Period(p),
            (Some(f), None) => Rate::Frequency(f),
            (None, None) => Rate::Frequency(4000),
        }
    }

    /// Whether -F or -c was given (an event sampled at every hit otherwise, as a tracepoint).
    pub fn given(&self) -> bool {
        self.freq.is_some() || self.count.is_some()
    }
}
