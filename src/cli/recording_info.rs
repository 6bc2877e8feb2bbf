//! What a recording holds besides its samples, as perf's tools print it: `rprof evlist` (perf evlist),
//! `rprof buildid-list` (perf buildid-list) and `rprof report --header-only` (perf report --header-only's lines
//! that rprof can read).
use super::output::Stdout;
use anyhow::Context;
use clap::Args;
use rprof::recording::{Event, Reader, SamplingPolicy};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Print the events of a recording (rprof's or perf's), one a line, as `perf evlist` does.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  rprof evlist -i perf.data\n  rprof evlist -F")]
pub struct EvlistArgs {
    /// The recording to read.
    #[arg(short = 'i', long = "input", default_value = "rprof.data")]
    pub input: PathBuf,
    /// Show each event's sampling frequency or period (perf evlist -F).
    #[arg(short = 'F', long = "freq")]
    pub freq: bool,
}

/// Print the build-ids a recording (rprof's or perf's) holds, `BUILDID PATH` a line, as `perf buildid-list`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  rprof buildid-list -i perf.data")]
pub struct BuildidListArgs {
    /// The recording to read.
    #[arg(short = 'i', long = "input", default_value = "rprof.data")]
    pub input: PathBuf,
}

fn open(input: &Path) -> anyhow::Result<Reader> {
    Reader::open(input).with_context(|| format!("cannot read the recording {}", input.display()))
}

pub fn run_evlist(a: EvlistArgs) -> anyhow::Result<u8> {
    let reader = open(&a.input)?;
    let mut out = Stdout::lock();
    let tracepoints = reader.tracepoint_ids().iter().any(Option::is_some);
    for (name, attr) in reader.event_names().iter().zip(reader.event_attrs()) {
        match (a.freq, attr.policy) {
            (true, Some(SamplingPolicy::Frequency(f))) => writeln!(out, "{name}: sample_freq={f}")?,
            (true, Some(SamplingPolicy::Period(p))) => writeln!(out, "{name}: sample_period={p}")?,
            _ => writeln!(out, "{name}")?,
        }
    }
    if tracepoints {
        writeln!(
            out,
            "# Tip: use 'perf evlist --trace-fields' to show fields for tracepoint events"
        )?;
    }
    Ok(0)
}

pub fn run_buildid_list(a: BuildidListArgs) -> anyhow::Result<u8> {
    let reader = open(&a.input)?;
    let mut out = Stdout::lock();
    for entry in reader.build_ids() {
        let hex: String = entry.build_id.iter().map(|b| format!("{b:02x}")).collect();
        writeln!(out, "{hex} {}", entry.path)?;
    }
    Ok(0)
}

/// `report --header-only`: the lines of perf report's header that the recording has.
pub fn header_only(input: &Path) -> anyhow::Result<u8> {
    let mut reader = open(input)?;
    let mut text = vec!["# ========".to_string()];
    if let Some(mtime) = std::fs::metadata(input)
        .ok()
        .and_then(|m| m.modified().ok())
    {
        text.push(format!("# captured on    : {}", ctime(mtime)));
    }
    let meta = reader.meta().clone();
    if !meta.hostname.is_empty() {
        text.push(format!("# hostname : {}", meta.hostname));
    }
    if !meta.os_release.is_empty() {
        text.push(format!("# os release : {}", meta.os_release));
    }
    if meta.nr_cpus_online > 0 {
        text.push(format!("# nrcpus online : {}", meta.nr_cpus_online));
        text.push(format!("# nrcpus avail : {}", meta.nr_cpus_available));
    }
    if !meta.cmdline.is_empty() {
        text.push(format!("# cmdline : {} ", meta.cmdline.join(" ")));
    }
    for (name, attr) in reader.event_names().iter().zip(reader.event_attrs()) {
        text.push(event_line(name, attr));
    }
    let (mut first, mut last) = (u64::MAX, 0u64);
    while let Some(event) = reader
        .next_event()
        .with_context(|| format!("cannot read the recording {}", input.display()))?
    {
        if let Event::Sample(s) = event {
            if let Some(t) = s.time {
                (first, last) = (first.min(t), last.max(t));
            }
        }
    }
    if first <= last {
        text.push(format!("# time of first sample : {}", seconds(first)));
        text.push(format!("# time of last sample : {}", seconds(last)));
        let ms = (last - first) as f64 / 1e6;
        text.push(format!("# sample duration : {ms:10.3} ms"));
    }
    text.push("# ========".into());
    text.push("#".into());
    let mut out = Stdout::lock();
    for line in text {
        writeln!(out, "{line}")?;
    }
    Ok(0)
}

/// perf's `# event : ` line, with the fields rprof reads of the attr.
fn event_line(name: &str, attr: &rprof::recording::EventAttr) -> String {
    let ids: Vec<String> = attr.ids.iter().map(u64::to_string).collect();
    let mut line = format!("# event : name = {name}, , id = {{ {} }}", ids.join(", "));
    match attr.policy {
        Some(SamplingPolicy::Frequency(f)) => line.push_str(&format!(", sample_freq = {f}")),
        Some(SamplingPolicy::Period(p)) => {
            line.push_str(&format!(", {{ sample_period, sample_freq }} = {p}"))
        }
        None => {}
    }
    line.push_str(&format!(
        ", sample_type = {}",
        sample_type_names(attr.sample_type)
    ));
    line
}

/// PERF_SAMPLE_* bits as perf names them (`IP|TID|TIME|CPU|PERIOD|RAW|IDENTIFIER`).
fn sample_type_names(bits: u64) -> String {
    const NAMES: [&str; 25] = [
        "IP",
        "TID",
        "TIME",
        "ADDR",
        "READ",
        "CALLCHAIN",
        "ID",
        "CPU",
        "PERIOD",
        "STREAM_ID",
        "RAW",
        "BRANCH_STACK",
        "REGS_USER",
        "STACK_USER",
        "WEIGHT",
        "DATA_SRC",
        "IDENTIFIER",
        "TRANSACTION",
        "REGS_INTR",
        "PHYS_ADDR",
        "AUX",
        "CGROUP",
        "DATA_PAGE_SIZE",
        "CODE_PAGE_SIZE",
        "WEIGHT_STRUCT",
    ];
    let names: Vec<&str> = (0..NAMES.len())
        .filter(|i| bits & (1 << i) != 0)
        .map(|i| NAMES[i])
        .collect();
    names.join("|")
}

/// A sample time (nanoseconds of the monotonic clock) as perf prints it: seconds with 6 decimals.
fn seconds(ns: u64) -> String {
    format!("{}.{:06}", ns / 1_000_000_000, ns % 1_000_000_000 / 1000)
}

/// A time as ctime(3) prints it in UTC (`Sun Dec  6 19:48:21 2026`), as perf's `captured on`.
fn ctime(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{} {} {day:>2} {:02}:{:02}:{:02} {year}",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check the ctime layout on a known date, and perf's sample_type names.
    #[test]
    fn layouts() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_796_586_501);
        assert_eq!(ctime(t), "Sun Dec  6 19:48:21 2026");
        assert_eq!(
            sample_type_names(0x1_0587),
            "IP|TID|TIME|CPU|PERIOD|RAW|IDENTIFIER"
        );
        assert_eq!(seconds(773_844_574_123), "773.844574");
    }
}
