//! `report --diff BASE` as a table, in `perf diff`'s layout: one row per key (the table's: command, object,
//! symbol), with its self share in the base recording, in this one, and the change, sorted by the size of the
//! change (perf diff's `Baseline` and `Delta Abs`, with the new share beside them).
use super::table::{line, self_shares, SortKey, TableOptions};
use super::{thousands, Profile};
use std::io::Write;

/// One row: its cells, the base share and the new share (None where the key has no samples).
type DiffRow = (Vec<String>, Option<f64>, Option<f64>);

/// The difference of `new` against `base`, row by row: self shares of each recording's own total, and the
/// change in points (new less base), largest change first; `-` where a recording has no sample of the row.
/// `opts.limit` and `opts.percent_limit` (of the larger share) bound the rows.
pub fn write_diff_table(
    base: &Profile,
    new: &Profile,
    opts: &TableOptions,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let keys = &opts.keys;
    let rows = diff_rows(base, new, keys, opts);
    writeln!(
        out,
        "# base: {} samples, new: {} samples; shares of each recording's own samples",
        thousands(base.samples + base.off_samples),
        thousands(new.samples + new.off_samples)
    )?;
    writeln!(out, "#")?;
    let mut widths: Vec<usize> = keys.iter().map(|k| k.header().len()).collect();
    for (cells, _, _) in &rows {
        for (w, c) in widths.iter_mut().zip(cells) {
            *w = (*w).max(c.len());
        }
    }
    let headers: Vec<String> = keys.iter().map(|k| k.header().to_string()).collect();
    writeln!(
        out,
        "# Baseline      New  Delta Abs  {}",
        line(&headers, &widths)
    )?;
    let dashes: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    writeln!(
        out,
        "# -------- -------- ---------  {}",
        line(&dashes, &widths)
    )?;
    let share = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{s:.2}%"));
    for (cells, old, now) in &rows {
        let delta = now.unwrap_or(0.0) - old.unwrap_or(0.0);
        writeln!(
            out,
            "  {:>8} {:>8} {:>9}  {}",
            share(*old),
            share(*now),
            format!("{delta:+.2}%"),
            line(cells, &widths)
        )?;
    }
    Ok(())
}

/// The rows of both recordings, paired by their cells, largest change first (ties by the larger share, then
/// by name).
fn diff_rows(base: &Profile, new: &Profile, keys: &[SortKey], opts: &TableOptions) -> Vec<DiffRow> {
    let old = self_shares(base, keys);
    let now = self_shares(new, keys);
    let mut rows: Vec<DiffRow> = now
        .iter()
        .map(|(cells, &s)| (cells.clone(), old.get(cells).copied(), Some(s)))
        .collect();
    rows.extend(
        old.iter()
            .filter(|(cells, _)| !now.contains_key(*cells))
            .map(|(cells, &s)| (cells.clone(), Some(s), None)),
    );
    let change = |r: &DiffRow| (r.2.unwrap_or(0.0) - r.1.unwrap_or(0.0)).abs();
    let larger = |r: &DiffRow| r.1.unwrap_or(0.0).max(r.2.unwrap_or(0.0));
    rows.retain(|r| larger(r) >= opts.percent_limit);
    rows.sort_by(|a, b| {
        change(b)
            .total_cmp(&change(a))
            .then_with(|| larger(b).total_cmp(&larger(a)))
            .then_with(|| a.0.cmp(&b.0))
    });
    if opts.limit > 0 {
        rows.truncate(opts.limit);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::StackCount;
    use crate::resolve::FrameInfo;

    /// A profile of one command whose stacks are single named frames, each with `n` samples of period 1.
    fn profile(leaves: &[(&str, u64)]) -> Profile {
        let mut p = Profile {
            comms: vec!["app".into()],
            ..Profile::default()
        };
        for (i, (name, n)) in leaves.iter().enumerate() {
            p.frames.push(FrameInfo {
                name: name.to_string(),
                module: "app".into(),
                kernel: false,
                system_name: None,
                unnamed: None,
                inlined: false,
            });
            let count = StackCount {
                samples: *n,
                period: *n,
                ..StackCount::default()
            };
            p.stacks.insert((0, vec![i as u32]), count);
            p.samples += n;
            p.period += n;
        }
        p
    }

    /// Check that each row has its base share, its new share and the change, largest change first, with `-`
    /// for a function one recording lacks (and its whole share as the change).
    #[test]
    fn rows_pair_by_name_and_sort_by_change() {
        let base = profile(&[("hot", 75), ("cold", 20), ("gone", 5)]);
        let new = profile(&[("hot", 50), ("cold", 40), ("fresh", 10)]);
        let mut out = Vec::new();
        write_diff_table(&base, &new, &TableOptions::default(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let rows: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(rows.len(), 4, "{text}");
        assert!(
            rows[0].starts_with("    75.00%   50.00%   -25.00%  app")
                && rows[0].ends_with("[.] hot"),
            "{text}"
        );
        assert!(rows[1].contains("20.00%   40.00%   +20.00%"), "{text}");
        assert!(rows[2].contains("       -   10.00%   +10.00%"), "{text}");
        assert!(rows[3].contains(" 5.00%        -    -5.00%"), "{text}");
        assert!(
            text.starts_with("# base: 100 samples, new: 100 samples"),
            "{text}"
        );
    }
}
