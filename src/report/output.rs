//! The report's outputs: top table, folded stacks, SVG flame graph.
use super::{folded_name, FrameId, Profile, StackCount};
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
/// With off-CPU samples, the columns are times instead: CPU self, CPU total, and off-CPU total (the time
/// threads waited in stacks through the function).
pub fn write_table(p: &Profile, opts: &TableOptions, out: &mut impl Write) -> std::io::Result<()> {
    // (comm, frame) -> (self period, total period, off-CPU total)
    let mut rows: HashMap<(u32, FrameId), [u64; 3]> = HashMap::new();
    let mut seen: Vec<FrameId> = Vec::new();
    for ((comm, stack), count) in &p.stacks {
        if let Some(&leaf) = stack.last() {
            rows.entry((*comm, leaf)).or_default()[0] += count.period;
        }
        seen.clear();
        for &f in stack {
            // Recursion: count a function once per sample for its total.
            if !seen.contains(&f) {
                seen.push(f);
                let row = rows.entry((*comm, f)).or_default();
                row[1] += count.period;
                row[2] += count.off_period;
            }
        }
    }
    let mut rows: Vec<_> = rows.into_iter().collect();
    rows.sort_by(|a, b| {
        // Waits count as the functions' own time: a frame is where its stack waits as much as where it runs.
        let key = |r: &((u32, FrameId), [u64; 3])| {
            let [selfp, totalp, off] = r.1;
            if opts.sort_by_total {
                (totalp + off, selfp + off)
            } else {
                (selfp + off, totalp + off)
            }
        };
        // Ties in a stable order that does not depend on the order frames were first seen.
        let names = |r: &((u32, FrameId), [u64; 3])| {
            let f = &p.frames[r.0 .1 as usize];
            (&p.comms[r.0 .0 as usize], &f.name, &f.module, &f.unnamed)
        };
        key(b).cmp(&key(a)).then_with(|| names(a).cmp(&names(b)))
    });
    let time = p.has_off_cpu();
    let total = p.period.max(1) as f64;
    let cell = |v: u64| match time {
        true => format!("{:>9.3}s", v as f64 / 1e9),
        false => format!("{:>6.2}%", v as f64 * 100.0 / total),
    };
    super::write_summary_line(p, out)?;
    writeln!(out, "#")?;
    if time {
        writeln!(
            out,
            "# {:>10} {:>10} {:>10}  {:<16} {:<24} Symbol",
            "CPU self", "CPU total", "Off-CPU", "Command", "Object"
        )?;
        writeln!(
            out,
            "# {:->10} {:->10} {:->10}  {:-<16} {:-<24} {:-<30}",
            "", "", "", "", "", ""
        )?;
    } else {
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
    }
    let limit = if opts.limit == 0 {
        usize::MAX
    } else {
        opts.limit
    };
    for ((comm, frame), [selfp, totalp, off]) in rows.into_iter().take(limit) {
        let f = &p.frames[frame as usize];
        let off = match time {
            true => format!(" {}", cell(off)),
            false => String::new(),
        };
        writeln!(
            out,
            "  {} {}{off}  {:<16} {:<24} [{}] {}",
            cell(selfp),
            cell(totalp),
            p.comms[comm as usize],
            f.module,
            if f.kernel { 'k' } else { '.' },
            f.table_name(p.addresses.get(&frame).copied().unwrap_or(1))
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

/// The last frame of off-CPU stacks in folded output and flame graphs.
pub const OFF_CPU_FRAME: &str = "[off-cpu]";

/// One folded line per distinct stack. Without off-CPU samples the weight is the sample count (as perf and
/// flamegraph.pl expect); with them, every weight is microseconds, and off-CPU stacks end in [`OFF_CPU_FRAME`].
/// Stacks that differ only in which unnamed code of a module they ran are one folded stack (`[perl]`).
fn folded_lines(p: &Profile) -> Vec<String> {
    let time = p.has_off_cpu();
    let mut folded: HashMap<String, StackCount> = HashMap::with_capacity(p.stacks.len());
    for ((comm, stack), count) in &p.stacks {
        let mut line = p.comms[*comm as usize].replace(';', ":");
        for &f in stack {
            line.push(';');
            line.push_str(&folded_name(&p.frames[f as usize]));
        }
        folded.entry(line).or_default().add(count);
    }
    let mut lines: Vec<String> = Vec::with_capacity(folded.len());
    for (line, count) in folded {
        if !time {
            lines.push(format!("{line} {}", count.samples));
            continue;
        }
        if count.samples > 0 {
            lines.push(format!("{line} {}", count.period / 1000));
        }
        if count.off_samples > 0 {
            lines.push(format!(
                "{line};{OFF_CPU_FRAME} {}",
                count.off_period / 1000
            ));
        }
    }
    lines.sort_unstable();
    lines
}

/// Differential folded stacks, `comm;outer;...;leaf BASE NEW` (inferno's and flamegraph.pl's difffolded
/// format): the base run scaled to the new run's total, so that the change in share shows, not the change in
/// length.
pub fn write_diff_folded(
    base: &Profile,
    new: &Profile,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let lines = |p: &Profile| folded_lines(p).join("\n").into_bytes();
    let options = inferno::differential::Options {
        normalize: true,
        strip_hex: false,
    };
    inferno::differential::from_readers(options, &lines(base)[..], &lines(new)[..], out)
}

/// A differential SVG flame graph of `new` against `base`: widths are the new run's, red where a stack
/// grew, blue where it shrank (inferno's differential mode).
pub fn write_diff_flamegraph(
    base: &Profile,
    new: &Profile,
    title: &str,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let mut diff = Vec::new();
    write_diff_folded(base, new, &mut diff)?;
    let text = String::from_utf8_lossy(&diff);
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.count_name = count_name(new).to_string();
    inferno::flamegraph::from_lines(&mut opts, text.lines(), out).map_err(std::io::Error::other)
}

fn count_name(p: &Profile) -> &'static str {
    match p.has_off_cpu() {
        true => "us",
        false => "samples",
    }
}

/// An SVG flame graph rendered in-process with inferno.
pub fn write_flamegraph(p: &Profile, title: &str, out: &mut impl Write) -> std::io::Result<()> {
    let lines = folded_lines(p);
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.count_name = count_name(p).to_string();
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)
        .map_err(std::io::Error::other)
}
