//! perf stat's layout, column for column (perf 6.1's `stat-display.c`): a row per event and aggregate, the
//! value right-aligned in 18 columns, the unit (`msec`), the name in 32, then `# metric` (`CPUs utilized`,
//! `K/sec`); `<not supported>` and `<not counted>`; `-x SEP` CSV; the interval prefix and headers; the
//! footer with `seconds time elapsed`, `user` and `sys`.
use super::Aggr;

/// A row's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// A count (msec for the clocks, already scaled).
    Num(f64),
    NotSupported,
    NotCounted,
}

/// One printed row.
pub struct Row<'a> {
    /// The aggregate's label (`CPU0`, `S0-D0-C1`, `sleep-123`), empty for the total.
    pub label: Label,
    pub value: Value,
    /// `msec` for the clocks, else empty.
    pub unit: &'a str,
    pub name: &'a str,
    /// The derived metric and its unit (`0.998`, `CPUs utilized`).
    pub metric: Option<(f64, String)>,
    /// `-r`: the relative standard deviation of the mean, in percent (`-r` above 1 only: perf's CSV then has
    /// the column on every row, 0.00% included; its table shows only a noise above 0).
    pub noise: Option<f64>,
    /// Nanoseconds the counter ran, and its share of the time enabled (CSV columns).
    pub running: u64,
    pub share: f64,
}

/// The label of an aggregate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Label {
    Total,
    Cpu(u32),
    Core {
        socket: u32,
        die: u32,
        core: u32,
        cpus: usize,
    },
    Thread {
        comm: String,
        tid: i32,
    },
}

/// How rows are written: perf's columns, or `-x SEP`.
pub struct Layout {
    pub csv: Option<String>,
}

impl Layout {
    /// The row as perf prints it (without the newline), after `prefix` (an interval's time).
    pub fn row(&self, prefix: &str, r: &Row<'_>) -> String {
        match &self.csv {
            Some(sep) => csv_row(sep, prefix, r),
            None => std_row(prefix, r),
        }
    }

    /// The prefix of an interval's rows: its time since the start.
    pub fn interval_prefix(&self, secs: f64) -> String {
        let whole = secs.trunc() as u64;
        let nanos = ((secs - secs.trunc()) * 1e9).round().min(999_999_999.0) as u64;
        let sep = self.csv.as_deref().unwrap_or(" ");
        format!("{whole:>6}.{nanos:09}{sep}")
    }

    /// The header line of interval mode (none in CSV).
    pub fn interval_header(&self, aggr: Aggr) -> Option<String> {
        if self.csv.is_some() {
            return None;
        }
        let head = match aggr {
            Aggr::Global => "#           time             counts unit events",
            Aggr::PerCpu => "#           time CPU                    counts unit events",
            Aggr::PerCore => "#           time core            cpus             counts unit events",
            Aggr::PerThread => {
                "#           time             comm-pid                  counts unit events"
            }
        };
        Some(head.to_string())
    }
}

/// The label's columns.
fn label_text(label: &Label, csv: Option<&str>) -> String {
    match (label, csv) {
        (Label::Total, _) => String::new(),
        (Label::Cpu(c), None) => format!("CPU{c:<7} "),
        (Label::Cpu(c), Some(sep)) => format!("CPU{c}{sep}"),
        (
            Label::Core {
                socket,
                die,
                core,
                cpus,
            },
            None,
        ) => {
            format!("S{socket}-D{die}-C{core:<8} {cpus:>4} ")
        }
        (
            Label::Core {
                socket,
                die,
                core,
                cpus,
            },
            Some(sep),
        ) => {
            format!("S{socket}-D{die}-C{core}{sep}{cpus}{sep}")
        }
        (Label::Thread { comm, tid }, None) => format!("{comm:>16}-{tid:<8} "),
        (Label::Thread { comm, tid }, Some(sep)) => format!("{comm}-{tid}{sep}"),
    }
}

/// A value as perf prints it: by the event's scale, so two decimals for the clocks (msec) and none for the
/// counts, a mean over `-r` runs included (perf's `%.0f`: 551.4 page faults print as 551).
fn number(v: f64, unit: &str) -> String {
    match unit == "msec" {
        true => format!("{v:.2}"),
        false => format!("{v:.0}"),
    }
}

fn std_row(prefix: &str, r: &Row<'_>) -> String {
    let value = match r.value {
        Value::Num(v) => number(v, r.unit),
        Value::NotSupported => "<not supported>".to_string(),
        Value::NotCounted => "<not counted>".to_string(),
    };
    let mut line = format!(
        "{prefix}{}{value:>18} {:<4} {:<32}",
        label_text(&r.label, None),
        r.unit,
        r.name
    );
    match (&r.metric, r.value) {
        (Some((v, unit)), Value::Num(_)) => line.push_str(&format!(" # {v:>8.3} {unit:<23}")),
        (None, Value::Num(_)) => line.push_str(&" ".repeat(35)),
        _ => line.push_str(&" ".repeat(28)),
    }
    if let Some(pct) = r.noise.filter(|p| *p != 0.0 && p.is_finite()) {
        line.push_str(&format!("  ( +-{pct:6.2}% )"));
    }
    line
}

fn csv_row(sep: &str, prefix: &str, r: &Row<'_>) -> String {
    let value = match r.value {
        Value::Num(v) => number(v, r.unit),
        Value::NotSupported => "<not supported>".to_string(),
        Value::NotCounted => "<not counted>".to_string(),
    };
    let (mv, mu) = match (&r.metric, r.value) {
        (Some((v, unit)), Value::Num(_)) => (format!("{v:.3}"), unit.clone()),
        _ => (String::new(), String::new()),
    };
    let noise = match r.noise {
        Some(pct) if pct.is_finite() => format!("{sep}{pct:.2}%"),
        Some(_) => format!("{sep}0.00%"),
        None => String::new(),
    };
    format!(
        "{prefix}{}{value}{sep}{}{sep}{}{noise}{sep}{}{sep}{:.2}{sep}{mv}{sep}{mu}",
        label_text(&r.label, Some(sep)),
        r.unit,
        r.name,
        r.running,
        r.share
    )
}

/// A rate per second as perf prints it: `K/sec` above a thousand, `M/sec`, `G/sec`.
pub fn rate(per_sec: f64) -> (f64, String) {
    for (limit, unit) in [(1e9, "G"), (1e6, "M"), (1e3, "K")] {
        if per_sec > limit {
            return (per_sec / limit, format!("{unit}/sec"));
        }
    }
    (per_sec, "/sec".to_string())
}

/// The footer: `seconds time elapsed` (with its noise over `-r` runs), and the command's `user` and `sys`.
pub fn footer(elapsed: &[f64], user_sys: Option<(f64, f64)>) -> String {
    let mut out = String::from("\n");
    match elapsed {
        [one] => out.push_str(&format!(" {one:17.9} seconds time elapsed\n\n")),
        many => {
            let (mean, sd) = mean_and_error(many);
            let precision = match sd > 1.0 || sd == 0.0 {
                true => 2,
                false => (-sd.log10()).ceil() as usize + 2,
            };
            out.push_str(&format!(
                " {mean:17.precision$} +- {sd:.precision$} seconds time elapsed"
            ));
            if mean > 0.0 && sd > 0.0 {
                out.push_str(&format!("  ( +-{:6.2}% )", 100.0 * sd / mean));
            }
            out.push_str("\n\n");
        }
    }
    if let (Some((user, sys)), [_]) = (user_sys, elapsed) {
        out.push_str(&format!(
            " {user:17.9} seconds user\n {sys:17.9} seconds sys\n\n\n"
        ));
    }
    out
}

/// The mean of `xs` and the standard deviation of that mean (perf's `stddev_stats`).
pub fn mean_and_error(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    if xs.len() < 2 {
        return (mean, 0.0);
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, (var / n).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(v: f64, unit: &str) -> Option<(f64, String)> {
        Some((v, unit.to_string()))
    }

    fn row(
        value: Value,
        unit: &'static str,
        name: &'static str,
        metric: Option<(f64, String)>,
    ) -> Row<'static> {
        Row {
            label: Label::Total,
            value,
            unit,
            name,
            metric,
            noise: None,
            running: 803350,
            share: 100.0,
        }
    }

    /// Check rows against lines perf 6.1 printed on this machine (`perf stat -- sleep 0.1`, `-x,`).
    #[test]
    fn rows_as_perf_prints_them() {
        let std = Layout { csv: None };
        assert_eq!(
            std.row("", &row(Value::Num(0.85), "msec", "task-clock", m(0.008, "CPUs utilized"))),
            "              0.85 msec task-clock                       #    0.008 CPUs utilized          "
        );
        assert_eq!(
            std.row(
                "",
                &row(Value::Num(2.0), "", "context-switches", Some(rate(2357.0)))
            )
            .trim_end(),
            "                 2      context-switches                 #    2.357 K/sec"
        );
        assert_eq!(
            std.row("", &row(Value::NotSupported, "", "cycles", None)),
            "   <not supported>      cycles                                                      "
        );
        assert_eq!(
            std.row(&std.interval_prefix(0.504304096), &row(Value::Num(1.0), "", "cs", None)),
            "     0.504304096                  1      cs                                                                 "
        );
        let mut r = row(Value::Num(74.0), "", "page-faults", Some(rate(85583.0)));
        r.noise = Some(0.45);
        assert_eq!(
            std.row("", &r),
            "                74      page-faults                      #   85.583 K/sec                    ( +-  0.45% )"
        );
        let csv = Layout {
            csv: Some(",".into()),
        };
        assert_eq!(
            csv.row(
                "",
                &row(
                    Value::Num(0.80),
                    "msec",
                    "task-clock",
                    m(0.009, "CPUs utilized")
                )
            ),
            "0.80,msec,task-clock,803350,100.00,0.009,CPUs utilized"
        );
        let mut ns = row(Value::NotSupported, "", "cycles", None);
        ns.running = 0;
        assert_eq!(csv.row("", &ns), "<not supported>,,cycles,0,100.00,,");
        // -r N: perf's noise column after the event's name, on every row.
        ns.noise = Some(0.0);
        assert_eq!(csv.row("", &ns), "<not supported>,,cycles,0.00%,0,100.00,,");
        let mut pf = row(Value::Num(51.0), "", "page-faults", m(2461.0, "K/sec"));
        pf.noise = Some(1.3089);
        assert_eq!(
            csv.row("", &pf),
            "51,,page-faults,1.31%,803350,100.00,2461.000,K/sec"
        );
        let mut cpu = row(
            Value::Num(140.01),
            "msec",
            "task-clock",
            m(1.0, "CPUs utilized"),
        );
        cpu.label = Label::Cpu(1);
        assert_eq!(
            std.row("", &cpu),
            "CPU1                   140.01 msec task-clock                       #    1.000 CPUs utilized          "
        );
        cpu.label = Label::Core {
            socket: 0,
            die: 0,
            core: 1,
            cpus: 1,
        };
        assert!(std
            .row("", &cpu)
            .starts_with("S0-D0-C1           1             140.01 msec task-clock"));
        assert_eq!(
            footer(&[0.06727, 0.05, 0.084], None).lines().nth(1),
            Some("           0.06709 +- 0.00982 seconds time elapsed  ( +- 14.63% )")
        );
    }
}
