//! perf annotate's `--stdio2` layout: a `Samples: N of event` header, `FUNCTION() BINARY`, then the
//! disassembly under its source lines, each instruction with its share (blank for none), branch targets
//! labelled by their offset in the function, and branches drawn as perf draws them (`↓ jmp 44`, `↑ jb 1a`,
//! `→ call func_d`, `← ret`).
use super::output::Row;
use super::source::SourceFiles;
use std::collections::BTreeSet;
use std::io::Write;

/// What the listing needs to know of the function.
pub struct Function<'a> {
    pub name: &'a str,
    pub binary: &'a str,
    pub start: u64,
    pub end: u64,
    pub event: &'a str,
    pub samples: u64,
}

/// Print the `--stdio2` annotation of `f` from its instruction rows.
pub fn write(
    out: &mut impl Write,
    f: &Function,
    rows: &[Row],
    files: &mut SourceFiles,
    pct: &dyn Fn(u64) -> f64,
    paint: &dyn Fn(f64, String) -> String,
) -> std::io::Result<()> {
    writeln!(
        out,
        "Samples: {}  of event '{}', [percent: local period]",
        f.samples, f.event
    )?;
    writeln!(out, "{}() {}", f.name, f.binary)?;
    writeln!(out, "Percent")?;
    let inside = |t: u64| (f.start..f.end).contains(&t);
    let targets: BTreeSet<u64> = rows
        .iter()
        .filter_map(|r| r.insn.target)
        .filter(|&t| inside(t))
        .collect();
    let label_width = targets
        .iter()
        .map(|t| format!("{:x}:", t - f.start).len())
        .max()
        .unwrap_or(0);
    let blank = " ".repeat(8 + label_width);
    writeln!(out, "{blank} {:016x} <{}>:", f.start, f.name)?;
    let mut last = None;
    for row in rows {
        if last != Some(&row.place) {
            if let Some(s) = &row.place.source {
                writeln!(out, "{blank} {}", files.line(&s.file, s.line).unwrap_or(""))?;
            }
            last = Some(&row.place);
        }
        let share = match row.period {
            0 => " ".repeat(6),
            p => paint(pct(p), format!("{:>6.2}", pct(p))),
        };
        let label = match targets.contains(&row.insn.addr) {
            true => format!("{:x}:", row.insn.addr - f.start),
            false => String::new(),
        };
        let (arrow, text) = drawn(
            &row.insn,
            f.start,
            inside(row.insn.target.unwrap_or(u64::MAX)),
        );
        writeln!(out, "{share}  {label:>label_width$} {arrow} {text}")?;
    }
    Ok(())
}

/// The arrow perf puts before an instruction, and its text with an in-function branch target written as the
/// target's offset (`jb 1a`) and a call's as the callee's name (`call func_d`).
fn drawn(insn: &super::disasm::Insn, start: u64, inside: bool) -> (char, String) {
    let text = insn.text.as_str();
    let mnemonic = text.split_whitespace().next().unwrap_or("");
    let operand_at = text[mnemonic.len()..]
        .find(|c: char| !c.is_whitespace())
        .map_or(text.len(), |i| mnemonic.len() + i);
    let head = &text[..operand_at];
    let named = || {
        let name = text[operand_at..].split_once('<')?.1.split_once('>')?.0;
        Some(name.to_string())
    };
    match insn.target {
        _ if mnemonic.starts_with("ret") => ('←', text.to_string()),
        Some(_) if mnemonic.starts_with("call") => (
            '→',
            format!(
                "{head}{}",
                named().unwrap_or_else(|| text[operand_at..].to_string())
            ),
        ),
        Some(t) if inside => {
            let arrow = if t > insn.addr { '↓' } else { '↑' };
            (arrow, format!("{head}{:x}", t - start))
        }
        _ => (' ', text.to_string()),
    }
}
