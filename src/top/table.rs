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

/// One row's identity: its column texts, and whether its code is the kernel's.
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
}

/// The counts across refreshes.
#[derive(Debug)]
pub struct Table {
    keys: Vec<SortKey>,
    /// Keep each refresh's counts at 7/8 into the next (perf top's decay); false: each refresh shows only
    /// the samples of its own period (perf top's `-z`).
    decay: bool,
    counts: HashMap<RowKey, f64>,
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
                // perf top drops an entry whose period decays to nothing.
                self.counts.retain(|_, c| *c >= 0.5);
            }
            false => self.counts.clear(),
        }
        for leaf in leaves {
            let key = RowKey {
                columns: self.keys.iter().map(|k| column(*k, leaf)).collect(),
                kernel: leaf.kernel,
            };
            *self.counts.entry(key).or_default() += 1.0;
        }
    }

    /// The rows, largest first, without the kernel's (`hide_kernel`) or user space's (`hide_user`), without
    /// those counting fewer than `min_count` samples (perf top's `-f`), and at most `limit` of them;
    /// percentages are of every sample counted, hidden ones included (as perf top's).
    pub fn rows(&self, hide: Hide, min_count: f64, limit: usize) -> Vec<Row> {
        let total: f64 = self.counts.values().sum();
        let mut rows: Vec<Row> = self
            .counts
            .iter()
            .filter(|(k, c)| {
                !(k.kernel && hide.kernel || !k.kernel && hide.user) && **c >= min_count
            })
            .map(|(k, c)| Row {
                percent: if total > 0.0 { 100.0 * c / total } else { 0.0 },
                columns: k.columns.clone(),
                kernel: k.kernel,
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

fn column(key: SortKey, leaf: &Leaf) -> String {
    match key {
        SortKey::Comm => leaf.comm.to_string(),
        SortKey::Pid => format!("{}:{}", leaf.pid, leaf.comm),
        // perf top names the kernel `[kernel]`; a binary by its file name.
        SortKey::Dso if leaf.kernel => "[kernel]".to_string(),
        SortKey::Dso => leaf
            .module
            .rsplit('/')
            .next()
            .unwrap_or(&leaf.module)
            .to_string(),
        SortKey::Sym => format!("[{}] {}", if leaf.kernel { 'k' } else { '.' }, leaf.name),
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
    fn rows_are_perf_tops_and_decay_by_seven_eighths() {
        let mut t = Table::new(vec![SortKey::Dso, SortKey::Sym], true);
        let mut period = vec![leaf("hot", "/tmp/spin", false); 6];
        period.extend(vec![leaf("clear_page", "[kernel.kallsyms]", true); 2]);
        t.add_period(&period);
        let rows = t.rows(Hide::default(), 0.0, 10);
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
                10
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
                10
            )[0]
            .columns[1],
            "[k] clear_page"
        );
        // Next period: only kernel samples; the user row decays to 6 * 7/8 = 5.25.
        t.add_period(&[leaf("clear_page", "[kernel.kallsyms]", true)]);
        let rows = t.rows(Hide::default(), 0.0, 10);
        assert!((rows[0].percent - 100.0 * 5.25 / (5.25 + 1.75 + 1.0)).abs() < 1e-9);
        // perf top's count filter: the kernel row has 2 * 7/8 + 1 = 2.75 samples, under 3.
        assert_eq!(t.rows(Hide::default(), 3.0, 10).len(), 1);
        let mut z = Table::new(vec![SortKey::Sym], false);
        z.add_period(&period);
        z.add_period(&[leaf("x", "/bin/x", false)]);
        assert_eq!(z.rows(Hide::default(), 0.0, 10).len(), 1);
    }
}
