//! perf annotate's `--stdio` layout: a header, a sorted summary of the hot source lines, then the function's
//! source lines with their share of its samples, or (`--asm`) its disassembly with each instruction's share,
//! under the source line it comes from.
use super::disasm::{disassemble, Insn};
use super::source::SourceFiles;
use super::{AnnotateError, AnnotateOptions, Sampled};
use crate::addr::ElfAddr;
use crate::symbols::{function_code, SourceLine};
use crate::text::thousands;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

/// Where an instruction's code comes from: a source line, inside a function inlined there or not.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Place {
    /// The inlined function the line belongs to (None: the annotated function's own code).
    inlined: Option<String>,
    pub(super) source: Option<SourceLine>,
}

/// One instruction with its samples.
pub(super) struct Row {
    pub(super) insn: Insn,
    pub(super) place: Place,
    samples: u64,
    pub(super) period: u64,
}

/// Print the annotation of `sampled.functions[index]`.
pub fn write_annotation(
    sampled: &mut Sampled,
    index: usize,
    opts: &AnnotateOptions,
    out: &mut impl Write,
) -> Result<(), AnnotateError> {
    let hot = &sampled.functions[index];
    let (module, function) = (hot.module.clone(), hot.function.clone());
    let (samples, total) = (hot.samples, hot.period.max(1));
    let code = function_code(&module, function.start, function.end, &opts.debug).map_err(|e| {
        AnnotateError::Code {
            name: function.name.clone(),
            path: module.path.clone(),
            reason: e.to_string(),
        }
    })?;
    let rows = rows_of(sampled, index, &code);
    let pct = |period: u64| period as f64 * 100.0 / total as f64;
    let paint = |value: f64, text: String| match opts.color {
        true if value >= 5.0 => format!("\x1b[31m{text}\x1b[m"),
        true if value >= 0.5 => format!("\x1b[32m{text}\x1b[m"),
        _ => text,
    };
    let binary = module
        .path
        .file_name()
        .unwrap_or_default()
        .to_string_lossy();
    if opts.stdio2 {
        let mut files = SourceFiles::new(opts.source_prefixes.clone())
            .fetching(opts.debug.debuginfod.clone(), module.build_id.clone());
        let path = module.path.display().to_string();
        let f = super::stdio2::Function {
            name: &function.name,
            binary: &path,
            start: function.start.0,
            end: function.end.0,
            event: &sampled.event,
            samples,
        };
        return Ok(super::stdio2::write(
            out, &f, &rows, &mut files, &pct, &paint,
        )?);
    }
    let what = if opts.asm {
        "Source code & Disassembly"
    } else {
        "Source code"
    };
    let title = format!(
        " Percent |\t{what} of {} in {binary} for {} ({} samples, percent: local period)",
        function.name,
        sampled.event,
        thousands(samples)
    );
    writeln!(out, "{title}")?;
    writeln!(out, "{}", "-".repeat(title.len().max(60)))?;

    write_summary(out, &rows, &function.name, &pct, &paint)?;

    let mut files = SourceFiles::new(opts.source_prefixes.clone())
        .fetching(opts.debug.debuginfod.clone(), module.build_id.clone());
    let missing: BTreeSet<String> = rows
        .iter()
        .filter_map(|r| r.place.source.as_ref())
        .map(|s| s.file.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|f| !files.exists(f))
        .collect();
    for file in &missing {
        writeln!(
            out,
            "         : note: {} was not found: line numbers only (--source-prefix OLD=NEW reads a build made elsewhere)",
            files.path(file).display()
        )?;
    }
    if opts.asm {
        write_asm(
            out,
            &rows,
            &function.name,
            function.start.0,
            &mut files,
            &pct,
            &paint,
        )?;
    } else {
        write_source(out, &rows, &mut files, &pct, &paint)?;
    }
    Ok(())
}

/// The function's instructions, each with the source line it comes from and the samples whose IP it holds.
fn rows_of(sampled: &mut Sampled, index: usize, code: &[u8]) -> Vec<Row> {
    let hot = &sampled.functions[index];
    let (module, function, layout) = (hot.module.clone(), hot.function.clone(), hot.layout.clone());
    let by_addr = hot.by_addr.clone();
    let labels = super::labels_of(&module, function.start.0, &function.name);
    let mut rows: Vec<Row> = disassemble(code, function.start.0, &labels)
        .into_iter()
        .map(|insn| {
            let place = layout
                .file_offset(ElfAddr(insn.addr))
                .and_then(|offset| {
                    let frames = sampled.frames_at(&module, offset);
                    let inner = frames.last()?;
                    Some(Place {
                        inlined: inner.inlined.then(|| inner.name.clone()),
                        source: inner.source.clone(),
                    })
                })
                .unwrap_or_default();
            Row {
                insn,
                place,
                samples: 0,
                period: 0,
            }
        })
        .collect();
    // Each sampled IP counts on the instruction that holds it.
    for (addr, (n, period)) in by_addr {
        let i = rows.partition_point(|r| r.insn.addr <= addr);
        if let Some(row) = i.checked_sub(1).map(|i| &mut rows[i]) {
            if addr < row.insn.addr + row.insn.len {
                row.samples += n;
                row.period += period;
            }
        }
    }
    rows
}

/// perf's "Sorted summary": the hot lines, hottest first, then a `:` line.
fn write_summary(
    out: &mut impl Write,
    rows: &[Row],
    name: &str,
    pct: &dyn Fn(u64) -> f64,
    paint: &dyn Fn(f64, String) -> String,
) -> std::io::Result<()> {
    let mut lines: BTreeMap<&Place, u64> = BTreeMap::new();
    for row in rows {
        *lines.entry(&row.place).or_default() += row.period;
    }
    let mut sorted: Vec<(&Place, u64)> = lines.into_iter().filter(|(_, p)| *p > 0).collect();
    sorted.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    writeln!(out, " Sorted summary of {}:", name)?;
    for (place, period) in &sorted {
        let value = pct(*period);
        writeln!(
            out,
            "{} : {}",
            paint(value, format!("{value:>8.2}")),
            describe(place)
        )?;
    }
    writeln!(out, "         :")?;

    Ok(())
}

/// `file.c:13`, or `file.h:8 (inlined: name)`.
fn describe(place: &Place) -> String {
    let at = match &place.source {
        Some(s) => {
            let name = std::path::Path::new(&s.file)
                .file_name()
                .map_or(s.file.clone(), |n| n.to_string_lossy().into_owned());
            format!("{name}:{}", s.line)
        }
        None => "(no line information)".into(),
    };
    match &place.inlined {
        Some(name) => format!("{at} (inlined: {name})"),
        None => at,
    }
}

/// The source listing: each function's (and each inlined function's) lines from its first to its last, with
/// the share of the samples on the code of each line.
fn write_source(
    out: &mut impl Write,
    rows: &[Row],
    files: &mut SourceFiles,
    pct: &dyn Fn(u64) -> f64,
    paint: &dyn Fn(f64, String) -> String,
) -> std::io::Result<()> {
    // (inlined function, file) -> line -> period (Some: the line has code).
    let mut blocks: BTreeMap<(Option<&str>, &str), BTreeMap<u32, u64>> = BTreeMap::new();
    for row in rows {
        if let Some(s) = &row.place.source {
            let key = (row.place.inlined.as_deref(), s.file.as_str());
            *blocks.entry(key).or_default().entry(s.line).or_default() += row.period;
        }
    }
    for ((inlined, file), lines) in &blocks {
        let (Some(&first), Some(&last)) = (lines.keys().next(), lines.keys().next_back()) else {
            continue;
        };
        match inlined {
            Some(name) => writeln!(out, "         :  inlined: {name} ({file})")?,
            None => writeln!(out, "         :  {file}")?,
        }
        for line in first..=last {
            let text = files.line(file, line).unwrap_or("");
            match lines.get(&line) {
                Some(&period) => {
                    let value = pct(period);
                    writeln!(
                        out,
                        "{} : {line:<5} {text}",
                        paint(value, format!("{value:>8.2}"))
                    )?
                }
                None => writeln!(out, "         : {line:<5} {text}")?,
            }
        }
    }
    Ok(())
}

/// The disassembly, each run of instructions under its source line; branch targets say where they are
/// reached from.
fn write_asm(
    out: &mut impl Write,
    rows: &[Row],
    name: &str,
    start: u64,
    files: &mut SourceFiles,
    pct: &dyn Fn(u64) -> f64,
    paint: &dyn Fn(f64, String) -> String,
) -> std::io::Result<()> {
    let mut sources: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for row in rows {
        if let Some(target) = row.insn.target {
            sources.entry(target).or_default().push(row.insn.addr);
        }
    }
    writeln!(out, "         :            {start:016x} <{name}>:")?;
    let mut last: Option<&Place> = None;
    for row in rows {
        if last != Some(&row.place) {
            if let Some(s) = &row.place.source {
                let text = files.line(&s.file, s.line).unwrap_or("");
                match &row.place.inlined {
                    Some(inlined) => writeln!(
                        out,
                        "         : {:<5} {text}    [inlined: {inlined}]",
                        s.line
                    )?,
                    None => writeln!(out, "         : {:<5} {text}", s.line)?,
                }
            }
            last = Some(&row.place);
        }
        let value = pct(row.period);
        let from = match sources.get(&row.insn.addr) {
            Some(from) => {
                let list: Vec<String> = from.iter().map(|a| format!("{a:x}")).collect();
                format!("    <- {}", list.join(", "))
            }
            None => String::new(),
        };
        writeln!(
            out,
            "{} :   {:x}:   {}{from}",
            paint(value, format!("{value:>8.2}")),
            row.insn.addr,
            row.insn.text
        )?;
    }
    Ok(())
}
