//! funclatency's log2 histograms of durations (`--hist`) and of values (`--hist VALUE`), in bcc's layout,
//! printed over the range of buckets that have counts.
use super::table::{Report, Row};
use crate::probe::analysis::{bucket_range, FuncStats, Histogram};
use std::io::{self, Write};

/// funclatency's star bar.
fn stars(val: u64, max: u64, width: usize) -> String {
    let n = if max == 0 {
        0
    } else {
        ((width as u128 * val as u128) / max as u128) as usize
    };
    let mut s = "*".repeat(n.min(width));
    if val > max {
        s.pop();
        s.push('+');
    }
    s
}

/// One log2 histogram in nanoseconds, in bcc's `print_log2_hist` layout.
pub fn write_log2_hist(w: &mut dyn Write, h: &Histogram, unit: &str) -> io::Result<()> {
    let idx_max = h.buckets.iter().rposition(|&n| n > 0).unwrap_or(0);
    // From the first bucket with a count, as bpftrace and bcc (`strip_leading_zero`) print.
    let idx_min = h.buckets.iter().position(|&n| n > 0).unwrap_or(0).max(1);
    let val_max = h.buckets.iter().copied().max().unwrap_or(0);
    if idx_max == 0 {
        return Ok(());
    }
    let wide = idx_max > 32;
    let width = if wide { 20 } else { 40 };
    if wide {
        writeln!(w, "               {unit:<29} : count     distribution")?;
    } else {
        writeln!(w, "     {unit:<19} : count     distribution")?;
    }
    for i in idx_min..=idx_max {
        let (low, high) = bucket_range(i);
        let val = h.buckets[i];
        let bar = stars(val, val_max, width);
        if wide {
            writeln!(w, "{low:>20} -> {high:<20} : {val:<8} |{bar:<width$}|")?;
        } else {
            writeln!(w, "{low:>10} -> {high:<10} : {val:<8} |{bar:<width$}|")?;
        }
    }
    Ok(())
}

/// Under a histogram, the calls it lacks: `calls: 837 (836 timed, 1 still running at the end)`.
fn write_untimed(w: &mut dyn Write, f: &FuncStats) -> io::Result<()> {
    let mut parts = vec![format!("{} timed", f.paired)];
    if f.unpaired > 0 {
        parts.push(format!("{} unpaired", f.unpaired));
    }
    if f.open > 0 {
        parts.push(format!("{} still running at the end", f.open));
    }
    if f.timing_lost > 0 {
        parts.push(format!("{} open across lost events", f.timing_lost));
    }
    if parts.len() == 1 {
        return Ok(());
    }
    writeln!(w, "calls: {} ({})", f.count, parts.join(", "))
}

/// The name funclatency gives a histogram's unit of `unit` nanoseconds.
fn unit_name(unit: u64) -> &'static str {
    match unit {
        1_000 => "usecs",
        1_000_000 => "msecs",
        1_000_000_000 => "secs",
        _ => "nsecs",
    }
}

/// A histogram per timed function, as funclatency prints them; `alone` (`--hist-only`): with no table before
/// them, each headed by its `--by` value only (biolatency -D's `disk = sda`), and by its function only where
/// there are several.
pub fn write_hists(w: &mut dyn Write, report: &Report, alone: bool) -> io::Result<()> {
    if !report.timed {
        return Ok(());
    }
    let several = report.rows.iter().any(|r| r.name != report.rows[0].name);
    for &Row { name, key, f, .. } in &report.rows {
        if f.paired == 0 {
            continue;
        }
        match (key, report.key_header) {
            (Some(key), Some(header)) if alone && !several => writeln!(w, "\n{header} = {key}")?,
            // biolatency -D's `disk = 'sda'`: the row's value under its function.
            (Some(key), Some(header)) => writeln!(w, "\nFunction = {name}, {header} = {key}")?,
            _ if alone && !several => writeln!(w)?,
            _ => writeln!(w, "\nFunction = {name}")?,
        }
        let unit = f.hist.unit.max(1);
        let label = unit_name(unit);
        write_log2_hist(w, &f.hist, label)?;
        writeln!(
            w,
            "\navg = {} {label}, total: {} {label}, count: {}",
            f.avg_ns() / unit,
            f.total_ns / unit,
            f.paired
        )?;
        write_untimed(w, f)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that the histogram follows funclatency's layout.
    #[test]
    fn hist_layout() {
        let mut h = Histogram::default();
        h.record(1);
        h.record(5);
        h.record(6);
        let mut out = Vec::new();
        write_log2_hist(&mut out, &h, "nsecs").unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "     nsecs               : count     distribution"
        );
        assert_eq!(
            lines[1],
            format!(
                "         0 -> 1          : 1        |{:<40}|",
                "*".repeat(20)
            )
        );
        assert_eq!(
            lines[3],
            format!("         4 -> 7          : 2        |{}|", "*".repeat(40))
        );
        assert_eq!(lines.len(), 4);
    }

    /// Check that a histogram is printed from its first bucket with a count to its last, as bpftrace does.
    #[test]
    fn hist_prints_the_range_with_counts() {
        let mut h = Histogram::default();
        h.record(1_000_000);
        h.record(5_000_000);
        let mut out = Vec::new();
        write_log2_hist(&mut out, &h, "nsecs").unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].starts_with("    524288 -> 1048575"), "{text}");
        assert!(lines[4].starts_with("   4194304 -> 8388607"), "{text}");
        assert_eq!(lines.len(), 5, "{text}");
    }
}
