//! The per-function report of `rprof probe`: the table and funclatency-style histograms (CSV and JSON in
//! `structured`).
use crate::probe::analysis::{FuncStats, KeyedCounts, Stats};
use crate::probe::engine::cost::{ClassCost, Costs};
use crate::probe::engine::holes::LossSummary;
use crate::probe::plan::{Placement, ProbeClass};
use crate::probe::target::{PerTarget, Targets};
use std::io::{self, Write};

/// The output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// Table sorted by total time (by count when nothing is timed).
    #[default]
    Table,
    /// One log2 histogram per function (funclatency's layout), after the table.
    Hist,
    /// The histograms alone, as biolatency and runqlat print them (`--hist-only`).
    HistOnly,
    /// `function,count,total_us,self_us,avg_us,min_us,max_us,timing_lost`.
    Csv,
    /// One JSON object per report.
    Json,
}

/// The CSV header (parsed by other tools: keep it exact).
pub const CSV_HEADER: &str = "function,count,total_us,self_us,avg_us,min_us,max_us,timing_lost";

/// One report: the rows of a run or an interval, and what is said under them.
#[derive(Clone, Debug)]
pub struct Report<'a> {
    /// The rows, sorted by total time then count (in the given order with a key column).
    pub rows: Vec<Row<'a>>,
    /// `--by`: the value column's header (each row has its value).
    pub key_header: Option<&'a str>,
    /// True when returns are probed (durations are meaningful).
    pub timed: bool,
    /// Wall-clock time of the report (`-T`), as `HH:MM:SS`.
    pub timestamp: Option<String>,
    /// Open calls at the time of the report.
    pub open_calls: usize,
    pub totals: Totals,
    /// The probe's own cost per call of each class of probed instruction, measured at start.
    pub costs: Costs,
    /// Durations are net of the probe's bias (`--net`).
    pub net: bool,
    /// What a row's COUNT is where it is not calls (`profile:hz:99: COUNT is samples ...`).
    pub notes: Vec<String>,
}

/// What the report says of all rows: events lost, calls unpaired, returns without an entry.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Totals {
    pub lost: u64,
    pub unpaired: u64,
    pub orphan_returns: u64,
    /// Keyed pairing's drops and lone DONEs.
    pub keyed: KeyedCounts,
    /// Calls still running at the end (counted, not timed).
    pub open: u64,
    /// Calls open across a hole in the stream (counted, not timed).
    pub timing_lost: u64,
    /// Places where events were lost.
    pub holes: u64,
    /// What the losses cost and how to avoid them (the run's last report).
    pub loss: LossSummary,
}

impl Totals {
    pub fn of(stats: &Stats) -> Totals {
        Totals {
            lost: stats.lost,
            unpaired: stats.unpaired(),
            orphan_returns: stats.orphan_returns,
            keyed: stats.keyed,
            open: stats.open(),
            timing_lost: stats.timing_lost(),
            holes: stats.holes,
            loss: LossSummary::default(),
        }
    }
}

/// One row of a report: a function, its `--by` value, the class of its probe, its statistics.
#[derive(Clone, Copy, Debug)]
pub struct Row<'a> {
    pub name: &'a str,
    pub key: Option<&'a str>,
    pub class: Option<ProbeClass>,
    pub f: &'a FuncStats,
}

/// A row per target with at least one hit, sorted by total time then count, descending.
pub fn function_rows<'a>(
    targets: &'a Targets,
    stats: &'a Stats,
    placements: &PerTarget<Option<Placement>>,
) -> Vec<Row<'a>> {
    let mut rows: Vec<Row> = stats
        .funcs
        .iter()
        .filter(|(_, f)| f.count > 0 || f.paired > 0)
        .map(|(id, f)| Row {
            name: targets.name(id),
            key: None,
            class: placements[id].as_ref().map(|p| p.class),
            f,
        })
        .collect();
    rows.sort_by(|a, b| {
        (b.f.total_ns, b.f.count)
            .cmp(&(a.f.total_ns, a.f.count))
            .then_with(|| a.name.cmp(b.name))
    });
    rows
}

/// `word` for one, `words` for any other count.
pub fn plural(n: u64, word: &str) -> String {
    match n {
        1 => word.to_string(),
        _ => format!("{word}s"),
    }
}

/// `s` cut to `max` characters, with `~` marking the cut.
fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut c: String = s.chars().take(max.saturating_sub(1)).collect();
    c.push('~');
    c
}

/// A function's name cut to `max` characters in its middle, with `~` marking the cut: both ends stay, the
/// namespace and the function with its parameters (which tell C++ overloads apart).
fn cut_middle(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let head = max.saturating_sub(1) / 2;
    let tail = max.saturating_sub(1) - head;
    let mut c: String = s.chars().take(head).collect();
    c.push('~');
    c.extend(s.chars().skip(n - tail));
    c
}

/// A duration for people: `812ns`, `10.23us`, `10.02ms`, `1.500s`.
pub fn human_ns(ns: u64) -> String {
    let f = ns as f64;
    if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        format!("{:.2}us", f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2}ms", f / 1e6)
    } else {
        format!("{:.3}s", f / 1e9)
    }
}

pub use super::hist::{write_hists, write_log2_hist};

/// Write `report` in `format`.
pub fn write(w: &mut dyn Write, report: &Report, format: Format) -> io::Result<()> {
    match format {
        Format::Table => write_table(w, report),
        Format::Hist => {
            write_table(w, report)?;
            write_hists(w, report, false)
        }
        Format::HistOnly => {
            write_hists(w, report, true)?;
            write_footer(w, report)
        }
        Format::Csv => super::structured::write_csv(w, report),
        Format::Json => super::structured::write_json(w, report),
    }
}

/// The table: FUNC COUNT TOTAL SELF AVG MIN MAX P50 P90 P99, then lost/unpaired counts.
pub fn write_table(w: &mut dyn Write, report: &Report) -> io::Result<()> {
    if let Some(ts) = &report.timestamp {
        writeln!(w, "{ts}")?;
    }
    let rows = &report.rows;
    let width =
        |f: &dyn Fn(&Row) -> usize, cap: usize| rows.iter().map(f).max().unwrap_or(4).clamp(4, cap);
    // With `--by`, the function and value columns share the line: each is cut, and the percentiles are left to
    // CSV and JSON, so that a row fits in about 120 columns.
    let keyed = report.key_header;
    let name_w = width(
        &|r| r.name.chars().count(),
        if keyed.is_some() { 28 } else { 60 },
    );
    let key_w =
        width(&|r| r.key.map_or(0, |k| k.chars().count()), 28).max(keyed.map_or(0, str::len));
    let columns: &[&str] = if keyed.is_some() {
        &["COUNT", "TOTAL", "SELF", "AVG", "MIN", "MAX"]
    } else {
        &[
            "COUNT", "TOTAL", "SELF", "AVG", "MIN", "MAX", "P50", "P90", "P99",
        ]
    };
    // The class of each probe matters where durations hold its bias.
    let classes = report.timed && rows.iter().any(|r| r.class.is_some());
    let mut head = format!("{:<name_w$}", "FUNC");
    if let Some(h) = keyed {
        // `--by pid,comm`: one column of both, headed `PID COMM`.
        head.push_str(&format!(" {:<key_w$}", h.to_uppercase().replace(',', " ")));
    }
    if report.timed {
        for c in columns {
            head.push_str(&format!(" {c:>10}"));
        }
    } else {
        head.push_str(&format!(" {:>10}", "COUNT"));
    }
    if classes {
        head.push_str("  PROBE");
    }
    writeln!(w, "{}", head.trim_end())?;
    for row in rows {
        let f = row.f;
        let class = match (classes, row.class) {
            (true, Some(c)) => format!("  {}", class_tag(c)),
            _ => String::new(),
        };
        let mut line = format!("{:<name_w$}", cut_middle(row.name, name_w));
        if keyed.is_some() {
            line.push_str(&format!(" {:<key_w$}", cut(row.key.unwrap_or(""), key_w)));
        }
        if !report.timed {
            writeln!(w, "{line} {:>10}{class}", f.count)?;
            continue;
        }
        let q = |x: f64| f.quantile(x).map_or("-".to_string(), human_ns);
        // Nothing timed (a counted-only target, or every call still running): no time to show.
        let timed = |ns: u64| match f.paired {
            0 => "-".to_string(),
            _ => human_ns(ns),
        };
        let mut line = format!(
            "{line} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            f.count,
            timed(f.total_ns),
            timed(f.self_ns),
            timed(f.avg_ns()),
            timed(f.min_ns),
            timed(f.max_ns),
        );
        if keyed.is_none() {
            line.push_str(&format!(" {:>10} {:>10} {:>10}", q(0.5), q(0.9), q(0.99)));
        }
        writeln!(w, "{line}{class}")?;
    }
    write_footer(w, report)
}

/// The PROBE column: how the kernel runs the probed instruction (`emul`: emulated; `step`: single-stepped).
fn class_tag(c: ProbeClass) -> &'static str {
    match c {
        ProbeClass::Emulated => "emul",
        ProbeClass::SingleStepped => "step",
    }
}

/// What the probes cost, per class of probed instruction, and how much of it is inside each duration.
fn write_costs(w: &mut dyn Write, report: &Report) -> io::Result<()> {
    let classes: Vec<(ProbeClass, ClassCost)> = [ProbeClass::Emulated, ProbeClass::SingleStepped]
        .into_iter()
        .filter(|&c| {
            report.rows.iter().any(|r| r.class == Some(c))
                || report.rows.iter().all(|r| r.class.is_none())
        })
        .filter_map(|c| Some((c, report.costs.of(c)?)))
        .collect();
    if classes.is_empty() {
        return Ok(());
    }
    let list = |f: &dyn Fn(&ClassCost) -> Option<u64>| {
        classes
            .iter()
            .filter_map(|(c, cost)| Some(format!("{} ({})", human_ns(f(cost)?), class_tag(*c))))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !report.timed {
        return writeln!(
            w,
            "each counted call cost about {} (measured at start)",
            list(&|c| Some(c.cost_ns))
        );
    }
    writeln!(
        w,
        "probe cost about {} per call (entry and return probes, measured at start; emul: the kernel emulates the \
         probed instruction, step: it single-steps it)",
        list(&|c| Some(c.cost_ns))
    )?;
    let bias = list(&|c| c.bias_ns);
    if !bias.is_empty() {
        let how = if report.net {
            "durations are net of it (--net)"
        } else {
            "--net subtracts it"
        };
        writeln!(
            w,
            "each duration includes a probe bias of about {bias}; {how}"
        )?;
    }
    Ok(())
}

fn write_footer(w: &mut dyn Write, report: &Report) -> io::Result<()> {
    let s = &report.totals;
    for note in &report.notes {
        writeln!(w, "{note}")?;
    }
    write_costs(w, report)?;
    if s.lost > 0 || s.holes > 0 {
        writeln!(w, "{}", lost_line(s, report.timed))?;
    }
    if let Some(line) = keyed_line(&s.keyed) {
        writeln!(w, "{line}")?;
    }
    let unpaired = s.unpaired;
    if report.timed && (unpaired > 0 || s.orphan_returns > 0) {
        writeln!(
            w,
            "UNPAIRED {unpaired} {} whose return never came (longjmp, exceptions, a thread that exited mid-call \
             as in exit_group, >64 nested, lost events); {} {} without an entry",
            plural(unpaired, "call"),
            s.orphan_returns,
            plural(s.orphan_returns, "return"),
        )?;
    }
    if report.timed && s.open > 0 {
        writeln!(
            w,
            "OPEN {} {} still running at the end: counted, not timed",
            s.open,
            plural(s.open, "call")
        )?;
    }
    Ok(())
}

/// `LOST 86,210 events in 412 holes (the ring buffers overflowed); 20,100 calls open across them counted, not
/// timed; --mmap-pages 64 would have held the peak of 1.2M events/s`.
fn lost_line(s: &Totals, timed: bool) -> String {
    let n = crate::text::thousands;
    let mut line = format!("LOST {} {}", n(s.lost), plural(s.lost, "event"));
    if s.holes > 0 {
        line.push_str(&format!(" in {} {}", n(s.holes), plural(s.holes, "hole")));
    }
    line.push_str(" (the ring buffers overflowed)");
    if let Some(counted) = s.loss.counted {
        line.push_str(&format!(
            "; the kernel counted {} (exact), {} read",
            n(counted),
            n(counted.saturating_sub(s.lost))
        ));
    }
    if timed {
        line.push_str(&format!(
            "; {} {} open across them counted, not timed",
            n(s.timing_lost),
            plural(s.timing_lost, "call")
        ));
    }
    let l = &s.loss;
    let rate = format!("{} events/s", rate(l.peak_rate));
    match (l.capacity, l.pages_needed) {
        (Some(cap), _) if l.peak_rate > cap => line.push_str(&format!(
            "; the peak of {rate} is more than rprof reads ({} events/s): no ring holds it, probe fewer \
             functions",
            self::rate(cap)
        )),
        (_, Some(pages)) => line.push_str(&format!(
            "; --mmap-pages {pages} would have held the peak of {rate}"
        )),
        _ => line.push_str("; raise --mmap-pages"),
    }
    line
}

/// A rate for people: `812`, `45.1K`, `1.20M`.
fn rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2}M", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.1}K", r / 1e3)
    } else {
        format!("{r:.0}")
    }
}

/// `KEYED 3 STARTs replaced by a later START of their key, 2 dropped at the --max-open cap, ...`: what keyed
/// pairing could not pair, the non-zero parts only.
fn keyed_line(k: &KeyedCounts) -> Option<String> {
    let parts: Vec<String> = [
        (k.replaced, "STARTs replaced by a later START of their key"),
        (
            k.later,
            "later STARTs of an open key dropped (--keep first)",
        ),
        (k.capped, "STARTs dropped at the --max-open cap"),
        (k.expired, "STARTs dropped after --max-age"),
        (k.done_alone, "DONEs without an open START"),
        (k.no_key, "events whose key could not be read"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{} {what}", crate::text::thousands(n)))
    .collect();
    (!parts.is_empty()).then(|| format!("KEYED {}", parts.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::super::structured::{write_csv, write_json};
    use super::*;
    use crate::probe::target::{Target, TargetId, TargetKind};

    fn sample() -> (Targets, Stats) {
        let mut s = Stats::new(3);
        let t = TargetId::new;
        s.funcs[t(0)].enter();
        s.funcs[t(0)].paired_call(10_000_000, 2_000_000);
        s.funcs[t(1)].enter();
        s.funcs[t(1)].enter();
        s.funcs[t(1)].paired_call(4_000_000, 4_000_000);
        s.funcs[t(1)].paired_call(4_000_000, 4_000_000);
        let named = |name: &str| Target {
            name: name.into(),
            aliases: Vec::new(),
            kind: TargetKind::Tracepoint {
                category: "c".into(),
                event: name.into(),
            },
            fetches: Vec::new(),
            code: None,
            go: None,
            syscall_sites: Vec::new(),
            filter: None,
        };
        let targets = Targets::new(vec![
            named("outer"),
            named("ns::f(int, char)"),
            named("never"),
        ]);
        (targets, s)
    }

    fn report<'a>(targets: &'a Targets, stats: &'a Stats) -> Report<'a> {
        Report {
            rows: function_rows(targets, stats, &targets.per_target(None)),
            key_header: None,
            timed: true,
            timestamp: None,
            open_calls: 0,
            totals: Totals::of(stats),
            costs: Costs::default(),
            net: false,
            notes: Vec::new(),
        }
    }

    /// Check that the CSV has the exact header, one line per called function, quoting and microseconds.
    #[test]
    fn csv_layout() {
        let (targets, stats) = sample();
        let r = report(&targets, &stats);
        let mut out = Vec::new();
        write_csv(&mut out, &r).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "function,count,total_us,self_us,avg_us,min_us,max_us,timing_lost\n\
             outer,1,10000.000,2000.000,10000.000,10000.000,10000.000,0\n\
             \"ns::f(int, char)\",2,8000.000,8000.000,4000.000,4000.000,4000.000,0\n"
        );
    }

    /// Check that the calls a histogram lacks are said under it and in the table's footer: a call still
    /// running at the end is counted, OPEN, and not timed.
    #[test]
    fn open_calls_are_said() {
        let (targets, mut stats) = sample();
        stats.funcs[TargetId::new(0)].enter();
        stats.funcs[TargetId::new(0)].open = 1;
        let r = report(&targets, &stats);
        let mut out = Vec::new();
        write(&mut out, &r, Format::Hist).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("\ncalls: 2 (1 timed, 1 still running at the end)\n"),
            "{text}"
        );
        assert!(
            text.contains("\nOPEN 1 call still running at the end: counted, not timed\n"),
            "{text}"
        );
        assert_eq!(text.matches("calls: ").count(), 1, "{text}");
    }

    /// Check that the table is sorted by total and JSON parses back.
    #[test]
    fn table_and_json() {
        let (targets, stats) = sample();
        let r = report(&targets, &stats);
        let mut out = Vec::new();
        write_table(&mut out, &r).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("FUNC"));
        assert!(lines[1].starts_with("outer") && lines[1].contains("10.00ms"));
        assert!(lines[2].starts_with("ns::f(int, char)"));
        assert_eq!(lines.len(), 3);
        let mut out = Vec::new();
        write_json(&mut out, &r).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["functions"][1]["count"], 2);
        assert_eq!(v["functions"][0]["self_ns"], 2_000_000);
    }

    /// Check that a long name is cut in its middle, keeping its parameters, and a short one is kept.
    #[test]
    fn names_are_cut_in_the_middle() {
        let name = "ns::detail::Klass<std::vector<int>>::method(double)";
        assert_eq!(cut_middle(name, 25), "ns::detail::~thod(double)");
        assert_eq!(cut_middle("f(int)", 25), "f(int)");
    }
}
