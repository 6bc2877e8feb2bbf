//! The report's outputs: folded stacks, SVG flame graphs (the table is in `table`).
use super::{folded_name, Profile, StackCount};
use std::collections::HashMap;
use std::io::Write;

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
    write_flamegraph_lines(text.lines(), title, count_name(new), out)
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
    write_flamegraph_lines(lines.iter().map(String::as_str), title, count_name(p), out)
}

/// An SVG flame graph of folded stacks (`outer;...;leaf COUNT` lines, or `... BASE NEW` for a differential
/// one), rendered in-process with inferno; `count_name` names the counts (samples, us, calls).
pub fn write_flamegraph_lines<'a>(
    lines: impl IntoIterator<Item = &'a str>,
    title: &str,
    count_name: &str,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.count_name = count_name.to_string();
    inferno::flamegraph::from_lines(&mut opts, lines, out).map_err(std::io::Error::other)
}
