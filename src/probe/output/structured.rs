//! The per-function report of `rprof probe` as CSV (an exact header other tools parse) and JSON.
use super::table::{Report, Row, CSV_HEADER};
use crate::probe::analysis::{bucket_range, Histogram};
use crate::probe::plan::ProbeClass;
use std::io::{self, Write};

/// A CSV field, quoted (with its quotes doubled) when it holds a comma, a quote or a line break.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// CSV: the exact header, then one line per function; times in microseconds with 3 decimals.
pub fn write_csv(w: &mut dyn Write, report: &Report) -> io::Result<()> {
    match report.key_header {
        Some(header) => {
            let (first, rest) = CSV_HEADER.split_once(',').unwrap_or((CSV_HEADER, ""));
            writeln!(w, "{first},{},{rest}", csv_field(header))?;
        }
        None => writeln!(w, "{CSV_HEADER}")?,
    }
    for &Row { name, key, f, .. } in &report.rows {
        let name = match key {
            Some(k) => format!("{},{}", csv_field(name), csv_field(k)),
            None => csv_field(name),
        };
        writeln!(
            w,
            "{},{},{},{},{},{},{},{}",
            name,
            f.count,
            us(f.total_ns),
            us(f.self_ns),
            us(f.avg_ns()),
            us(f.min_ns),
            us(f.max_ns),
            f.timing_lost
        )?;
    }
    Ok(())
}

/// JSON: `{"timestamp", "lost", "counted" (the kernel's own count, `--count` from rings), "unpaired", "orphan_returns", "open_calls", "functions": [...]}` on one line.
pub fn write_json(w: &mut dyn Write, report: &Report) -> io::Result<()> {
    let functions: Vec<serde_json::Value> = report
        .rows
        .iter()
        .map(
            |&Row {
                 name,
                 key,
                 class,
                 f,
             }| {
                let mut v = serde_json::json!({
                    "function": name,
                    "count": f.count,
                    "probe": class.map(ProbeClass::name),
                });
                if let (Some(k), Some(o)) = (key, v.as_object_mut()) {
                    o.insert("key".into(), k.into());
                }
                if report.timed {
                    let extra = serde_json::json!({
                        "paired": f.paired,
                        "unpaired": f.unpaired,
                        "open": f.open,
                        "timing_lost": f.timing_lost,
                        "total_ns": f.total_ns,
                        "self_ns": f.self_ns,
                        "avg_ns": f.avg_ns(),
                        "min_ns": f.min_ns,
                        "max_ns": f.max_ns,
                        "p50_ns": f.quantile(0.5),
                        "p90_ns": f.quantile(0.9),
                        "p99_ns": f.quantile(0.99),
                        "hist_log2": hist_pairs(&f.hist),
                    });
                    if let (Some(o), serde_json::Value::Object(e)) = (v.as_object_mut(), extra) {
                        o.extend(e);
                    }
                }
                v
            },
        )
        .collect();
    let doc = serde_json::json!({
        "timestamp": report.timestamp,
        "lost": report.totals.lost,
        "counted": report.totals.loss.counted,
        "holes": report.totals.holes,
        "timing_lost": report.totals.timing_lost,
        "pages_needed": report.totals.loss.pages_needed,
        "peak_events_per_s": report.totals.loss.peak_rate.round() as u64,
        "unpaired": report.totals.unpaired,
        "orphan_returns": report.totals.orphan_returns,
        "open_calls": report.open_calls,
        "keyed": {
            "replaced": report.totals.keyed.replaced,
            "later": report.totals.keyed.later,
            "capped": report.totals.keyed.capped,
            "expired": report.totals.keyed.expired,
            "done_alone": report.totals.keyed.done_alone,
            "no_key": report.totals.keyed.no_key,
        },
        "probe_cost_ns": {
            "emulated": report.costs.emulated.map(|c| c.cost_ns),
            "single_stepped": report.costs.stepped.map(|c| c.cost_ns),
        },
        "probe_bias_ns": {
            "emulated": report.costs.emulated.and_then(|c| c.bias_ns),
            "single_stepped": report.costs.stepped.and_then(|c| c.bias_ns),
        },
        "net": report.net,
        "by": report.key_header,
        "functions": functions,
    });
    writeln!(w, "{doc}")
}

/// Non-empty buckets as `[low, high, count]`.
fn hist_pairs(h: &Histogram) -> Vec<[u64; 3]> {
    h.buckets
        .iter()
        .enumerate()
        .filter(|(_, &n)| n > 0)
        .map(|(i, &n)| {
            let (lo, hi) = bucket_range(i);
            [lo, hi, n]
        })
        .collect()
}

/// Nanoseconds as microseconds with 3 decimals (`12.345`).
fn us(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}
