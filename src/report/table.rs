//! The top table: one row per key (perf's `--sort` keys: command, process, thread, object, symbol), with the
//! share or time of the samples that have it as their leaf (self) and anywhere in their stack (total), and
//! under each row, with [`TableOptions::call_graph`], its call graph (see [`super::callgraph`]).
use super::callgraph::{self, CallGraph};
use super::{FrameId, Profile, StackCount};
use std::collections::{HashMap, HashSet};
use std::io::Write;

/// A column that makes rows: perf report's `--sort` keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// The command (`comm`).
    Comm,
    /// The process, as `PID:COMMAND`.
    Pid,
    /// The thread, as `TID:COMMAND`.
    Tid,
    /// The binary or the kernel (`dso`).
    Dso,
    /// The function (`sym`, `symbol`), with `[k]` or `[.]`.
    Sym,
}

impl SortKey {
    /// The keys perf report takes and rprof has.
    pub const NAMES: &'static str = "comm, pid, tid, dso, sym";

    /// A comma-separated list of keys, as perf's `--sort comm,dso,sym`.
    pub fn parse_list(list: &str) -> Result<Vec<SortKey>, String> {
        let keys = list
            .split(',')
            .map(|k| match k.trim() {
                "comm" => Ok(SortKey::Comm),
                "pid" => Ok(SortKey::Pid),
                "tid" => Ok(SortKey::Tid),
                "dso" => Ok(SortKey::Dso),
                "sym" | "symbol" => Ok(SortKey::Sym),
                other => Err(format!(
                    "unknown sort key '{other}': use {} (e.g. --sort comm,dso,sym)",
                    SortKey::NAMES
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(keys)
    }

    pub(super) fn header(self) -> &'static str {
        match self {
            SortKey::Comm => "Command",
            SortKey::Pid => "Pid:Command",
            SortKey::Tid => "Tid:Command",
            SortKey::Dso => "Object",
            SortKey::Sym => "Symbol",
        }
    }
}

/// Table options.
#[derive(Clone, Debug)]
pub struct TableOptions {
    /// Sort by total (children) instead of self.
    pub sort_by_total: bool,
    /// Print at most this many rows (0: all).
    pub limit: usize,
    /// What makes a row (default: command, object, symbol). Pid and tid need [`super::Filter::threads`].
    pub keys: Vec<SortKey>,
    /// Only off-CPU time was kept (`--off-cpu-only`): no CPU columns.
    pub off_cpu_only: bool,
    /// Print each row's call graph.
    pub call_graph: Option<CallGraph>,
    /// Leave out rows whose share (of the sorted column: self, or total with `sort_by_total`) is under this
    /// percentage, as perf report's --percent-limit (0: none).
    pub percent_limit: f64,
    /// Print each row's self sample count (perf report's `--show-nr-samples`, its Samples column).
    pub show_samples: bool,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            sort_by_total: false,
            limit: 0,
            keys: vec![SortKey::Comm, SortKey::Dso, SortKey::Sym],
            off_cpu_only: false,
            call_graph: None,
            percent_limit: 0.0,
            show_samples: false,
        }
    }
}

/// What identifies a row: the values of the table's keys (None for keys not shown).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct RowKey<'a> {
    comm: Option<u32>,
    pid: Option<u32>,
    tid: Option<u32>,
    dso: Option<&'a str>,
    pub(super) sym: Option<FrameId>,
    /// The function `sym` was inlined into, when it was (see [`symbol_at`]).
    into: Option<FrameId>,
}

/// A row's weights (sample periods): CPU self and total, then off-CPU (waiting) self and total; then its self
/// samples (on and off CPU).
type Weights = [u64; 5];

/// One stack of the profile with the process and thread it was sampled in, when those were kept apart.
pub(super) struct Weighted<'a> {
    comm: u32,
    thread: Option<(u32, u32)>,
    pub(super) frames: &'a [FrameId],
    pub(super) count: &'a StackCount,
}

/// The profile's stacks, by thread when it has them.
pub(super) fn weighted(p: &Profile) -> Vec<Weighted<'_>> {
    match &p.thread_stacks {
        Some(threads) => threads
            .iter()
            .map(|((pid, tid, comm, frames), count)| Weighted {
                comm: *comm,
                thread: Some((*pid, *tid)),
                frames,
                count,
            })
            .collect(),
        None => p
            .stacks
            .iter()
            .map(|((comm, frames), count)| Weighted {
                comm: *comm,
                thread: None,
                frames,
                count,
            })
            .collect(),
    }
}

impl<'a> RowKey<'a> {
    /// The key of the frame at `at` of stack `w` under `keys`.
    pub(super) fn of(p: &'a Profile, keys: &[SortKey], w: &Weighted, at: usize) -> RowKey<'a> {
        let frame = w.frames[at];
        let mut key = RowKey::default();
        for k in keys {
            match k {
                SortKey::Comm => key.comm = Some(w.comm),
                // `PID:COMMAND`: the command is part of the key.
                SortKey::Pid => {
                    (key.pid, key.comm) = (Some(w.thread.map_or(0, |t| t.0)), Some(w.comm))
                }
                SortKey::Tid => {
                    (key.tid, key.comm) = (Some(w.thread.map_or(0, |t| t.1)), Some(w.comm))
                }
                SortKey::Dso => key.dso = Some(&p.frames[frame as usize].module),
                SortKey::Sym => (key.sym, key.into) = symbol_at(p, w.frames, at),
            }
        }
        key
    }

    /// The row's cells, in the order of `keys`.
    fn cells(&self, p: &Profile, keys: &[SortKey]) -> Vec<String> {
        let comm = |c: Option<u32>| c.map_or("", |c| p.comms[c as usize].as_str());
        keys.iter()
            .map(|k| match k {
                SortKey::Comm => comm(self.comm).to_string(),
                SortKey::Pid | SortKey::Tid => {
                    let id = if *k == SortKey::Pid {
                        self.pid
                    } else {
                        self.tid
                    };
                    format!("{}:{}", id.unwrap_or(0), comm(self.comm))
                }
                SortKey::Dso => self.dso.unwrap_or("").to_string(),
                SortKey::Sym => self.sym.map_or(String::new(), |id| {
                    let kind = if p.frames[id as usize].kernel {
                        'k'
                    } else {
                        '.'
                    };
                    match self.into {
                        Some(into) => format!(
                            "[{kind}] {} (inlined into {})",
                            frame_name(p, id),
                            frame_name(p, into)
                        ),
                        None => format!("[{kind}] {}", frame_name(p, id)),
                    }
                }),
            })
            .collect()
    }
}

/// A frame's name in the table, and in every output that ranks functions (pprof, the Firefox profiler): its
/// function, or for unnamed code its address or range in its module (see [`super::FrameInfo::table_name`]),
/// with how many sampled addresses a range holds.
pub fn frame_name(p: &Profile, id: FrameId) -> String {
    let addresses = p.addresses.get(&id).copied().unwrap_or(1);
    p.frames[id as usize].table_name(addresses)
}

/// The function a row names for the frame at `at` of a stack (outermost first), and the function it was
/// inlined into when it was. perf ranks the function the code was compiled into (its symbol); rprof ranks
/// the inlined function, saying what it was inlined into. An inlined frame whose name has no path while that
/// function's has one (a Rust or C++ build with line tables only names `mix`, `copy<u64>`) names nothing of
/// the user's alone: its samples go to the containing function's row, as perf's `--no-inline` has it.
pub(super) fn symbol_at(
    p: &Profile,
    frames: &[FrameId],
    at: usize,
) -> (Option<FrameId>, Option<FrameId>) {
    let frame = frames[at];
    let info = |f: FrameId| &p.frames[f as usize];
    if !info(frame).inlined {
        return (Some(frame), None);
    }
    let container = frames[..at]
        .iter()
        .rposition(|&f| !info(f).inlined)
        .map(|i| frames[i]);
    match container {
        Some(c) if !has_path(&info(frame).name) && has_path(&info(c).name) => (Some(c), None),
        Some(c) => (Some(frame), Some(c)),
        None => (Some(frame), None),
    }
}

/// Whether a function name has a path (`crunch::work::mix`, `<u64>::wrapping_mul`): a `::` outside the
/// generic arguments (`copy<u64>` and `eq<u8, u8>` have none, nor has `index<u8, core::ops::Range<usize>>`).
fn has_path(name: &str) -> bool {
    let mut depth = 0i32;
    let bytes = name.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'<' | b'(' => depth += 1,
            b'>' | b')' => depth -= 1,
            b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => return true,
            _ => {}
        }
    }
    false
}

/// Where an off-CPU stack waits: its innermost user frame (the kernel part of every wait ends in the
/// scheduler), or its leaf when it has no user frame (a kernel thread).
pub(super) fn wait_leaf(p: &Profile, frames: &[FrameId]) -> Option<usize> {
    frames
        .iter()
        .rposition(|&f| !p.frames[f as usize].kernel)
        .or(frames.len().checked_sub(1))
}

/// The rows: key -> weights.
fn rows<'a>(p: &'a Profile, keys: &[SortKey]) -> HashMap<RowKey<'a>, Weights> {
    let mut rows: HashMap<RowKey, Weights> = HashMap::new();
    let mut seen: HashSet<RowKey> = HashSet::new();
    for w in weighted(p) {
        let (cpu, off) = (w.count.period, w.count.off_period);
        if let Some(leaf) = w.frames.len().checked_sub(1) {
            let row = rows.entry(RowKey::of(p, keys, &w, leaf)).or_default();
            row[0] += cpu;
            row[4] += w.count.samples;
        }
        if let Some(at) = wait_leaf(p, w.frames) {
            let row = rows.entry(RowKey::of(p, keys, &w, at)).or_default();
            row[2] += off;
            row[4] += w.count.off_samples;
        }
        seen.clear();
        for at in 0..w.frames.len() {
            // Recursion: count a key once per sample for its total.
            let key = RowKey::of(p, keys, &w, at);
            if seen.insert(key) {
                let row = rows.entry(key).or_default();
                row[1] += cpu;
                row[3] += off;
            }
        }
    }
    rows
}

/// The top table: self and total (children) shares, weighted by sample period as perf is, then the keys'
/// columns. With off-CPU samples, the weights are times instead: CPU self and total, and wait self (off-CPU
/// time in stacks whose innermost user frame is the function: where the program waits) and wait total (in
/// stacks through it); rows sort by self time, CPU and waiting together (or total, `sort_by_total`).
pub fn write_table(p: &Profile, opts: &TableOptions, out: &mut impl Write) -> std::io::Result<()> {
    let keys = &opts.keys;
    let mut rows: Vec<(RowKey, Weights, Vec<String>)> = rows(p, keys)
        .into_iter()
        .map(|(key, w)| (key, w, key.cells(p, keys)))
        .collect();
    let order = |w: &Weights| match opts.sort_by_total {
        true => (w[1] + w[3], w[0] + w[2]),
        false => (w[0] + w[2], w[1] + w[3]),
    };
    // Ties in a stable order that does not depend on the order frames were first seen.
    rows.sort_by(|a, b| order(&b.1).cmp(&order(&a.1)).then_with(|| a.2.cmp(&b.2)));
    let total = p.period.max(1) as f64;
    rows.retain(|(_, w, _)| order(w).0 as f64 * 100.0 / total >= opts.percent_limit);
    rows.truncate(if opts.limit == 0 {
        usize::MAX
    } else {
        opts.limit
    });
    let columns = Columns::new(p, opts);
    let mut widths: Vec<usize> = keys.iter().map(|k| k.header().len()).collect();
    for (_, _, cells) in &rows {
        for (w, c) in widths.iter_mut().zip(cells) {
            *w = (*w).max(c.len());
        }
    }
    super::write_summary_line(p, out)?;
    writeln!(out, "#")?;
    let headers: Vec<String> = keys.iter().map(|k| k.header().to_string()).collect();
    writeln!(out, "# {}  {}", columns.headers(), line(&headers, &widths))?;
    let dashes: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    writeln!(out, "# {}  {}", columns.dashes(), line(&dashes, &widths))?;
    let graphs = opts.call_graph.map(|g| callgraph::Graphs::new(p, g, opts));
    for (key, weights, cells) in &rows {
        writeln!(
            out,
            "  {}  {}",
            columns.values(weights),
            line(cells, &widths)
        )?;
        if let Some(graphs) = &graphs {
            graphs.write(key, out)?;
        }
    }
    Ok(())
}

/// Each row's self share (percent of the CPU and waiting time together), by the row's cells under `keys`:
/// what `--diff` compares across two recordings, whose frame ids differ.
pub(super) fn self_shares(p: &Profile, keys: &[SortKey]) -> HashMap<Vec<String>, f64> {
    let total = p.period.saturating_add(p.off_period).max(1) as f64;
    let mut shares: HashMap<Vec<String>, f64> = HashMap::new();
    for (key, w) in rows(p, keys) {
        let weight = w[0] + w[2];
        if weight > 0 {
            *shares.entry(key.cells(p, keys)).or_default() += weight as f64 * 100.0 / total;
        }
    }
    shares
}

/// Cells left-aligned in their widths, the last one unpadded.
pub(super) fn line(cells: &[String], widths: &[usize]) -> String {
    let mut text = String::new();
    for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
        if i + 1 == cells.len() {
            text.push_str(cell);
        } else {
            text.push_str(&format!("{cell:<width$} "));
        }
    }
    text
}

/// The weight columns: shares of the total, or times (with off-CPU samples).
struct Columns {
    /// Which of the four weights are shown.
    shown: Vec<usize>,
    time: bool,
    total: f64,
    /// The Samples column (`--show-nr-samples`).
    samples: bool,
}

impl Columns {
    fn new(p: &Profile, opts: &TableOptions) -> Columns {
        let time = p.has_off_cpu();
        let shown = match (time, opts.off_cpu_only) {
            (false, _) => vec![0, 1],
            (true, false) => vec![0, 1, 2, 3],
            (true, true) => vec![2, 3],
        };
        Columns {
            shown,
            time,
            total: p.period.max(1) as f64,
            samples: opts.show_samples,
        }
    }

    fn width(&self) -> usize {
        if self.time {
            10
        } else {
            7
        }
    }

    fn headers(&self) -> String {
        const NAMES: [[&str; 4]; 2] = [
            ["Self", "Total", "", ""],
            ["CPU self", "CPU total", "Wait self", "Wait total"],
        ];
        let names = NAMES[usize::from(self.time)];
        let width = self.width();
        let cells: Vec<String> = self
            .shown
            .iter()
            .map(|&i| format!("{:>width$}", names[i]))
            .chain(self.samples.then(|| format!("{:>12}", "Samples")))
            .collect();
        cells.join(" ")
    }

    fn dashes(&self) -> String {
        let mut dashes = vec!["-".repeat(self.width()); self.shown.len()];
        dashes.extend(self.samples.then(|| "-".repeat(12)));
        dashes.join(" ")
    }

    fn values(&self, w: &Weights) -> String {
        let cells: Vec<String> = self
            .shown
            .iter()
            .map(|&i| match self.time {
                true => format!("{:>9.3}s", w[i] as f64 / 1e9),
                false => format!("{:>6.2}%", w[i] as f64 * 100.0 / self.total),
            })
            .chain(self.samples.then(|| format!("{:>12}", w[4])))
            .collect();
        cells.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check which names have a path: the crate's and the standard library's full names do, the bare names
    /// of a line-tables-only build do not, whatever their generic arguments hold.
    #[test]
    fn paths_in_names() {
        for name in [
            "crunch::work::mix",
            "<u64>::wrapping_mul",
            "core::ptr::copy::<u64>",
        ] {
            assert!(has_path(name), "{name}");
        }
        for name in [
            "mix",
            "copy<u64>",
            "eq<u8, u8>",
            "index<u8, core::ops::Range<usize>>",
            "main",
        ] {
            assert!(!has_path(name), "{name}");
        }
    }
}
