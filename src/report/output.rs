//! The report's outputs: top table, folded stacks, SVG flame graph.
use super::{FrameId, Profile};
use std::collections::HashMap;
use std::io::Write;

/// Table options.
#[derive(Clone, Debug, Default)]
pub struct TableOptions {
    /// Sort by total (children) instead of self.
    pub sort_by_total: bool,
    /// Print at most this many rows (0: all).
    pub limit: usize,
}

/// The top table: self %, total (children) %, command, object, symbol; weighted by sample period as perf is.
pub fn write_table(p: &Profile, opts: &TableOptions, out: &mut impl Write) -> std::io::Result<()> {
    // (comm, frame) -> (self period, total period)
    let mut rows: HashMap<(u32, FrameId), (u64, u64)> = HashMap::new();
    let mut seen: Vec<FrameId> = Vec::new();
    for ((comm, stack), count) in &p.stacks {
        if let Some(&leaf) = stack.last() {
            rows.entry((*comm, leaf)).or_default().0 += count.period;
        }
        seen.clear();
        for &f in stack {
            // Recursion: count a function once per sample for its total.
            if !seen.contains(&f) {
                seen.push(f);
                rows.entry((*comm, f)).or_default().1 += count.period;
            }
        }
    }
    let mut rows: Vec<_> = rows.into_iter().collect();
    rows.sort_by(|a, b| {
        let key = |r: &((u32, FrameId), (u64, u64))| {
            if opts.sort_by_total {
                (r.1 .1, r.1 .0)
            } else {
                (r.1 .0, r.1 .1)
            }
        };
        // Ties in a stable order that does not depend on the order frames were first seen.
        let names = |r: &((u32, FrameId), (u64, u64))| {
            let f = &p.frames[r.0 .1 as usize];
            (&p.comms[r.0 .0 as usize], &f.name, &f.module)
        };
        key(b).cmp(&key(a)).then_with(|| names(a).cmp(&names(b)))
    });
    let total = p.period.max(1) as f64;
    super::write_summary_line(p, out)?;
    writeln!(out, "#")?;
    writeln!(
        out,
        "# {:>7}  {:>7}  {:<16} {:<24} Symbol",
        "Self", "Total", "Command", "Object"
    )?;
    writeln!(
        out,
        "# {:->7}  {:->7}  {:-<16} {:-<24} {:-<30}",
        "", "", "", "", ""
    )?;
    let limit = if opts.limit == 0 {
        usize::MAX
    } else {
        opts.limit
    };
    for ((comm, frame), (selfp, totalp)) in rows.into_iter().take(limit) {
        let f = &p.frames[frame as usize];
        writeln!(
            out,
            "  {:>6.2}%  {:>6.2}%  {:<16} {:<24} [{}] {}",
            selfp as f64 * 100.0 / total,
            totalp as f64 * 100.0 / total,
            p.comms[comm as usize],
            f.module,
            if f.kernel { 'k' } else { '.' },
            f.name
        )?;
    }
    Ok(())
}

/// Folded stacks, `comm;outer;...;leaf COUNT`, one line per distinct stack, sorted (what flamegraph.pl and
/// inferno-flamegraph read).
pub fn write_folded(p: &Profile, out: &mut impl Write) -> std::io::Result<()> {
    for line in folded_lines(p) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn folded_lines(p: &Profile) -> Vec<String> {
    let mut lines: Vec<String> = p
        .stacks
        .iter()
        .map(|((comm, stack), count)| {
            let mut line = p.comms[*comm as usize].replace(';', ":");
            for &f in stack {
                line.push(';');
                let frame = &p.frames[f as usize];
                let name = if frame.name == "[unknown]" {
                    format!("[unknown] ({})", frame.module)
                } else {
                    frame.name.clone()
                };
                line.push_str(&name.replace(';', ":"));
            }
            line.push(' ');
            line.push_str(&count.samples.to_string());
            line
        })
        .collect();
    lines.sort_unstable();
    lines
}

/// An SVG flame graph rendered in-process with inferno.
pub fn write_flamegraph(p: &Profile, title: &str, out: &mut impl Write) -> std::io::Result<()> {
    let lines = folded_lines(p);
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.count_name = "samples".to_string();
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)
        .map_err(std::io::Error::other)
}
