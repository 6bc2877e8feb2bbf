//! perf top's table: the samples counted by sort key (dso and sym by default), decayed from one refresh to
//! the next as perf top decays them, printed as `    PCT%  DSO  [.] SYM` lines.
use crate::push::live::top::Leaf;
use std::collections::HashMap;

/// A column of the table (perf top's `--sort` keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SortKey {
    Comm,
    Pid,
    Dso,
    Sym,
}

impl SortKey {
    /// `comm`, `pid`, `dso`, `sym` (perf's `symbol` too).
    pub fn parse(word: &str) -> Option<SortKey> {
        match word {
            "comm" => Some(SortKey::Comm),
            "pid" => Some(SortKey::Pid),
            "dso" => Some(SortKey::Dso),
            "sym" | "symbol" => Some(SortKey::Sym),
            _ => None,
        }
    }
}

/// The rows not shown: the kernel's, user space's.
#[derive(Clone, Copy, Debug, Default)]
pub struct Hide {
    pub kernel: bool,
    pub user: bool,
}

/// One entry of the table: a function in a binary in a process, whatever the sort shows (a zoom filters on
/// the binary and the process even where the table does not show them).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Entry {
    comm: String,
    pid: u32,
    /// The binary as the resolver names it (`[kernel.kallsyms]` for the kernel).
    module: String,
    sym: String,
    kernel: bool,
}

/// A row's identity: its column texts, and whether its code is the kernel's.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RowKey {
    columns: Vec<String>,
    kernel: bool,
}

/// A row as shown.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Share of all samples shown, in percent.
    pub percent: f64,
    pub columns: Vec<String>,
    pub kernel: bool,
    /// The binary of the row's largest entry (the row's own where the sort has `dso`): what `d` zooms into.
    pub module: String,
    /// The process of the row's largest entry (its own where the sort has `pid`): what `t` zooms into.
    pub process: Process,
}

/// A process as the table knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    pub comm: String,
}

/// The table narrowed to one binary, one process, or both (perf top's `d` and `t` zooms).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Zoom {
    /// Only this binary's samples (its name as in [`Row::module`]).
    pub module: Option<String>,
    pub process: Option<Process>,
}

impl Zoom {
    fn admits(&self, e: &Entry) -> bool {
        self.module.as_ref().is_none_or(|m| *m == e.module)
            && self
                .process
                .as_ref()
                .is_none_or(|p| p.pid == e.pid && p.comm == e.comm)
    }

    /// What perf's title line adds when zoomed: `, Thread: COMM(PID)` and `, DSO: NAME`.
    pub fn title(&self) -> String {
        let mut text = String::new();
        if let Some(p) = &self.process {
            text.push_str(&format!(", Thread: {}({})", p.comm, p.pid));
        }
        if let Some(m) = &self.module {
            text.push_str(&format!(", DSO: {}", short_name(m)));
        }
        text
    }
}

/// A binary's file name (perf's short name), `[kernel.kallsyms]` as it is.
pub fn short_name(module: &str) -> &str {
    module.rsplit('/').next().unwrap_or(module)
}

/// The counts across refreshes.
#[derive(Clone, Debug)]
pub struct Table {
    keys: Vec<SortKey>,
    /// Keep each refresh's counts at 7/8 into the next (perf top's decay); false: each refresh shows only
    /// the samples of its own period (perf top's `-z`).
    decay: bool,
    counts: HashMap<Entry, f64>,
}

impl Table {
    pub fn new(keys: Vec<SortKey>, decay: bool) -> Table {
        Table {
            keys,
            decay,
            counts: HashMap::new(),
        }
    }

    /// The samples of one refresh period: the old counts decay (or go), these are added.
    pub fn add_period(&mut self, leaves: &[Leaf]) {
        match self.decay {
            true => {
                self.counts.values_mut().for_each(|c| *c *= 7.0 / 8.0);
                // perf top drops an entry (a row of its sort keys) whose period decays to nothing.
                let keys = &self.keys;
                let mut sums: HashMap<RowKey, f64> = HashMap::new();
                for (e, c) in &self.counts {
                    *sums.entry(row_key(keys, e)).or_default() += c;
                }
                self.counts.retain(|e, _| sums[&row_key(keys, e)] >= 0.5);
            }
            false => self.counts.clear(),
        }
        for leaf in leaves {
            let entry = Entry {
                comm: leaf.comm.to_string(),
                pid: leaf.pid,
                module: leaf.module.clone(),
                sym: leaf.name.clone(),
                kernel: leaf.kernel,
            };
            *self.counts.entry(entry).or_default() += 1.0;
        }
    }

    /// The rows, largest first, of the samples `zoom` admits, without the kernel's (`hide.kernel`) or user
    /// space's (`hide.user`), without those counting fewer than `min_count` samples (perf top's `-f`), and
    /// at most `limit` of them; percentages are of every sample counted, hidden and zoomed-out ones included
    /// (perf's absolute percentages).
    pub fn rows(&self, hide: Hide, min_count: f64, limit: usize, zoom: &Zoom) -> Vec<Row> {
        let total: f64 = self.counts.values().sum();
        // Per row: its count, and its largest entry (the binary and process a zoom takes).
        let mut sums: HashMap<RowKey, (f64, &Entry, f64)> = HashMap::new();
        for (e, &c) in &self.counts {
            if e.kernel && hide.kernel || !e.kernel && hide.user || !zoom.admits(e) {
                continue;
            }
            let sum = sums.entry(row_key(&self.keys, e)).or_insert((0.0, e, c));
            sum.0 += c;
            if c > sum.2 || c == sum.2 && (e.pid, &e.module) < (sum.1.pid, &sum.1.module) {
                (sum.1, sum.2) = (e, c);
            }
        }
        let mut rows: Vec<Row> = sums
            .into_iter()
            .filter(|(_, (c, _, _))| *c >= min_count)
            .map(|(k, (c, e, _))| Row {
                percent: if total > 0.0 { 100.0 * c / total } else { 0.0 },
                columns: k.columns,
                kernel: k.kernel,
                module: e.module.clone(),
                process: Process {
                    pid: e.pid,
                    comm: e.comm.clone(),
                },
            })
            .collect();
        rows.sort_by(|a, b| {
            b.percent
                .total_cmp(&a.percent)
                .then_with(|| a.columns.cmp(&b.columns))
        });
        rows.truncate(limit);
        rows
    }
}

fn row_key(keys: &[SortKey], e: &Entry) -> RowKey {
    RowKey {
        columns: keys.iter().map(|k| column(*k, e)).collect(),
        kernel: e.kernel,
    }
}

fn column(key: SortKey, e: &Entry) -> String {
    match key {
        SortKey::Comm => e.comm.clone(),
        SortKey::Pid => format!("{}:{}", e.pid, e.comm),
        // perf top names the kernel `[kernel]`; a binary by its file name.
        SortKey::Dso if e.kernel => "[kernel]".to_string(),
        SortKey::Dso => short_name(&e.module).to_string(),
        SortKey::Sym => format!("[{}] {}", if e.kernel { 'k' } else { '.' }, e.sym),
    }
}

/// The rows as perf top --stdio prints them: `    PCT%  COL  COL...`, each column padded to its widest.
pub fn format_rows(rows: &[Row]) -> Vec<String> {
    let columns = rows.first().map_or(0, |r| r.columns.len());
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .map(|r| r.columns[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|r| {
            let mut line = format!("{:>9.2}%", r.percent);
            for (i, c) in r.columns.iter().enumerate() {
                match i + 1 == columns {
                    true => line.push_str(&format!("  {c}")),
                    false => line.push_str(&format!("  {c:<w$}", w = widths[i])),
                }
            }
            line
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn leaf(name: &str, module: &str, kernel: bool) -> Leaf {
        Leaf {
            name: name.into(),
            module: module.into(),
            kernel,
            comm: Arc::from("spin"),
            pid: 7,
            weight: 1,
        }
    }

    #[test]
    fn a_zoom_keeps_one_binary_or_one_process_whatever_the_sort_shows() {
        let mut t = Table::new(vec![SortKey::Sym], true);
        let mut period = vec![leaf("hot", "/tmp/spin", false); 4];
        period.extend(vec![leaf("memcpy", "/lib/libc.so.6", false); 3]);
        let mut other = leaf("memcpy", "/lib/libc.so.6", false);
        (other.pid, other.comm) = (9, Arc::from("cat"));
        period.extend(vec![other; 5]);
        period.push(leaf("clear_page", "[kernel.kallsyms]", true));
        t.add_period(&period);
        let all = t.rows(Hide::default(), 0.0, 10, &Zoom::default());
        // One memcpy row for both processes; it zooms into its larger one, cat.
        assert_eq!(all[0].columns, vec!["[.] memcpy"]);
        assert_eq!(
            (all[0].process.pid, all[0].module.as_str()),
            (9, "/lib/libc.so.6")
        );
        let libc = Zoom {
            module: Some(all[0].module.clone()),
            process: None,
        };
        let rows = t.rows(Hide::default(), 0.0, 10, &libc);
        assert_eq!(rows.len(), 1);
        assert!(
            (rows[0].percent - 100.0 * 8.0 / 13.0).abs() < 1e-9,
            "absolute percent"
        );
        assert_eq!(libc.title(), ", DSO: libc.so.6");
        let spin = Zoom {
            module: None,
            process: Some(all[1].process.clone()),
        };
        let rows = t.rows(Hide::default(), 0.0, 10, &spin);
        let names: Vec<_> = rows.iter().map(|r| r.columns[0].as_str()).collect();
        assert_eq!(names, vec!["[.] hot", "[.] memcpy", "[k] clear_page"]);
        assert!((rows[1].percent - 100.0 * 3.0 / 13.0).abs() < 1e-9);
        assert_eq!(spin.title(), ", Thread: spin(7)");
    }

    #[test]
    fn rows_are_perf_tops_and_decay_by_seven_eighths() {
        let mut t = Table::new(vec![SortKey::Dso, SortKey::Sym], true);
        let mut period = vec![leaf("hot", "/tmp/spin", false); 6];
        period.extend(vec![leaf("clear_page", "[kernel.kallsyms]", true); 2]);
        t.add_period(&period);
        let rows = t.rows(Hide::default(), 0.0, 10, &Zoom::default());
        assert_eq!(
            format_rows(&rows),
            vec![
                "    75.00%  spin      [.] hot",
                "    25.00%  [kernel]  [k] clear_page"
            ]
        );
        assert_eq!(
            t.rows(
                Hide {
                    kernel: true,
                    user: false
                },
                0.0,
                10,
                &Zoom::default()
            )
            .len(),
            1
        );
        assert_eq!(
            t.rows(
                Hide {
                    kernel: false,
                    user: true
                },
                0.0,
                10,
                &Zoom::default()
            )[0]
            .columns[1],
            "[k] clear_page"
        );
        // Next period: only kernel samples; the user row decays to 6 * 7/8 = 5.25.
        t.add_period(&[leaf("clear_page", "[kernel.kallsyms]", true)]);
        let rows = t.rows(Hide::default(), 0.0, 10, &Zoom::default());
        assert!((rows[0].percent - 100.0 * 5.25 / (5.25 + 1.75 + 1.0)).abs() < 1e-9);
        // perf top's count filter: the kernel row has 2 * 7/8 + 1 = 2.75 samples, under 3.
        assert_eq!(t.rows(Hide::default(), 3.0, 10, &Zoom::default()).len(), 1);
        let mut z = Table::new(vec![SortKey::Sym], false);
        z.add_period(&period);
        z.add_period(&[leaf("x", "/bin/x", false)]);
        assert_eq!(z.rows(Hide::default(), 0.0, 10, &Zoom::default()).len(), 1);
    }
}
