//! `rprof report -g`: the call graph under each row of the table, in `perf report --stdio`'s graph layout
//! (perf's `-g graph,0.5,caller|callee,function,percent`):
//!
//! ```text
//!             |
//!             ---main
//!                |
//!                |--75.04%--work_a
//!                |          hot_a
//!                |
//!                 --24.96%--work_b
//!                           hot_b
//! ```
//!
//! The paths are those of the row's samples (those that end in it; with `--children`, those through it; an
//! off-CPU stack ends, for this, at its innermost user frame, as in the table), as perf draws them: `callee` from the function up to the outermost caller; `caller` from the outermost caller
//! down to the function for samples that end in it, and from the function down to the leaf for samples that
//! pass through it. Paths that share a beginning share a branch; a branch shows its share of all samples, and
//! branches under the threshold (0.5% of all samples) are left out.
use super::table::{wait_leaf, weighted, RowKey, SortKey, TableOptions, Weighted};
use super::{FrameId, Profile};
use std::io::Write;

/// Which way the graph runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallOrder {
    /// From the outermost caller down (`-g caller`, the default with `--children`).
    Caller,
    /// From the function up through its callers (`-g callee`, the default otherwise).
    Callee,
}

/// `-g`: the order of the graph and its threshold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CallGraph {
    pub order: CallOrder,
    /// Branches under this percentage of all samples are left out (perf's default: 0.5).
    pub threshold: f64,
}

/// Where the graph starts: perf's left margin, under the weight columns.
const MARGIN: usize = 12;

/// The call graphs of a table's rows.
pub(super) struct Graphs<'a> {
    p: &'a Profile,
    graph: CallGraph,
    keys: Vec<SortKey>,
    through: bool,
    stacks: Vec<Weighted<'a>>,
    total: u64,
}

/// One frame of the graph's tree, with the weight of the paths that end there and of all below it.
struct Node {
    frame: FrameId,
    hits: u64,
    cumul: u64,
    children: Vec<Node>,
}

impl<'a> Graphs<'a> {
    pub(super) fn new(p: &'a Profile, graph: CallGraph, opts: &TableOptions) -> Graphs<'a> {
        Graphs {
            p,
            graph,
            keys: opts.keys.clone(),
            through: opts.sort_by_total,
            stacks: weighted(p),
            total: p.period.saturating_add(p.off_period),
        }
    }

    /// Write the graph of row `key` (nothing when no branch reaches the threshold), then a blank line.
    pub(super) fn write(&self, key: &RowKey, out: &mut impl Write) -> std::io::Result<()> {
        let mut roots: Vec<Node> = Vec::new();
        for w in &self.stacks {
            let Some(last) = w.frames.len().checked_sub(1) else {
                continue;
            };
            // CPU time ends at the leaf; off-CPU time where the program waits (see `wait_leaf`).
            let ends = [
                (w.count.period, last),
                (
                    w.count.off_period,
                    wait_leaf(self.p, w.frames).unwrap_or(last),
                ),
            ];
            for (weight, end) in ends.into_iter().filter(|e| e.0 > 0) {
                let at = |i: &usize| RowKey::of(self.p, &self.keys, w, *i) == *key;
                let pos = match self.through {
                    true => (0..=end).find(at),
                    false => Some(end).filter(at),
                };
                if let Some(pos) = pos {
                    insert(&mut roots, &self.path(&w.frames[..=end], pos), weight);
                }
            }
        }
        let lines = self.lines(&roots);
        for line in &lines {
            writeln!(out, "{line}")?;
        }
        if !lines.is_empty() {
            writeln!(out)?;
        }
        Ok(())
    }

    /// The path drawn for a stack (outermost first, up to where it ends) through the row's frame at `pos`.
    fn path(&self, frames: &[FrameId], pos: usize) -> Vec<FrameId> {
        match self.graph.order {
            CallOrder::Callee => frames[..=pos].iter().rev().copied().collect(),
            CallOrder::Caller if pos + 1 == frames.len() => frames.to_vec(),
            CallOrder::Caller => frames[pos..].to_vec(),
        }
    }

    /// The branches of `nodes` that reach the threshold, heaviest first.
    fn kept<'n>(&self, nodes: &'n [Node]) -> Vec<&'n Node> {
        let min = (self.total as f64 * self.graph.threshold / 100.0).ceil() as u64;
        let mut kept: Vec<&Node> = nodes.iter().filter(|n| n.cumul >= min.max(1)).collect();
        let name = |n: &Node| &self.p.frames[n.frame as usize].name;
        kept.sort_by(|a, b| b.cumul.cmp(&a.cumul).then_with(|| name(a).cmp(name(b))));
        kept
    }

    fn name(&self, node: &Node) -> &str {
        &self.p.frames[node.frame as usize].name
    }

    /// perf's `callchain__fprintf_graph`: a single root is printed without its share, as `---` and its run.
    fn lines(&self, roots: &[Node]) -> Vec<String> {
        let mut lines = Vec::new();
        let mut left = " ".repeat(MARGIN);
        let mut level = self.kept(roots);
        if let [root] = level[..] {
            let run = run(root);
            lines.push(format!("{left}|"));
            for (i, node) in run.iter().enumerate() {
                let lead = if i == 0 { "---" } else { "   " };
                lines.push(format!("{left}{lead}{}", self.name(node)));
            }
            left.push_str("   ");
            level = self.kept(&run[run.len() - 1].children);
        }
        self.branches(&level, &[true], &left, &mut lines);
        lines
    }

    /// perf's `__callchain__fprintf_graph`: each branch after a separator line, its share on its first
    /// frame, `|` down the levels that have more branches to come.
    fn branches(&self, level: &[&Node], bars: &[bool], left: &str, lines: &mut Vec<String>) {
        for (i, node) in level.iter().enumerate() {
            let mut own = bars.to_vec();
            if i + 1 == level.len() {
                *own.last_mut().expect("a level") = false;
            }
            let separator: String = bars
                .iter()
                .map(|&bar| if bar { "|          " } else { "           " })
                .collect();
            lines.push(format!("{left}{separator}"));
            let run = run(node);
            for (j, step) in run.iter().enumerate() {
                let mut text = left.to_string();
                for (d, &bar) in own.iter().enumerate() {
                    text.push(if bar { '|' } else { ' ' });
                    if j == 0 && d + 1 == own.len() {
                        let share = node.cumul as f64 * 100.0 / self.total.max(1) as f64;
                        text.push_str(&format!("--{share:.2}%--"));
                    } else {
                        text.push_str("          ");
                    }
                }
                text.push_str(self.name(step));
                lines.push(text);
            }
            own.push(true);
            let children = self.kept(&run[run.len() - 1].children);
            self.branches(&children, &own, left, lines);
        }
    }
}

/// A node and the nodes below it while the path does not branch or end: what perf prints as one branch.
fn run(node: &Node) -> Vec<&Node> {
    let mut run = vec![node];
    let mut at = node;
    while at.hits == 0 && at.children.len() == 1 {
        at = &at.children[0];
        run.push(at);
    }
    run
}

/// Add a path of `weight` to the tree.
fn insert(level: &mut Vec<Node>, path: &[FrameId], weight: u64) {
    let Some((&first, rest)) = path.split_first() else {
        return;
    };
    let at = match level.iter().position(|n| n.frame == first) {
        Some(at) => at,
        None => {
            level.push(Node {
                frame: first,
                hits: 0,
                cumul: 0,
                children: Vec::new(),
            });
            level.len() - 1
        }
    };
    let node = &mut level[at];
    node.cumul = node.cumul.saturating_add(weight);
    if rest.is_empty() {
        node.hits = node.hits.saturating_add(weight);
    } else {
        insert(&mut node.children, rest, weight);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{FrameInfo, StackCount};

    fn profile(stacks: &[(&[&str], u64)]) -> Profile {
        let mut p = Profile {
            comms: vec!["app".into()],
            ..Profile::default()
        };
        let id = |name: &str, p: &mut Profile| match p.frames.iter().position(|f| f.name == name) {
            Some(i) => i as FrameId,
            None => {
                p.frames.push(FrameInfo {
                    name: name.into(),
                    module: "app".into(),
                    kernel: false,
                    system_name: None,
                    unnamed: None,
                    inlined: false,
                });
                (p.frames.len() - 1) as FrameId
            }
        };
        for (names, period) in stacks {
            let frames: Vec<FrameId> = names.iter().map(|n| id(n, &mut p)).collect();
            let count = StackCount {
                samples: 1,
                period: *period,
                ..StackCount::default()
            };
            p.period += period;
            p.samples += 1;
            p.stacks.insert((0, frames), count);
        }
        p
    }

    /// Check perf's layout: the single root as `---`, then the branches with their shares and the bars of
    /// the levels that go on, for `main` with `--children` in caller order.
    #[test]
    fn perf_graph_layout() {
        let p = profile(&[
            (&["main", "work_a", "hot_a"], 75),
            (&["main", "work_b", "hot_b"], 25),
        ]);
        let opts = TableOptions {
            sort_by_total: true,
            call_graph: Some(CallGraph {
                order: CallOrder::Caller,
                threshold: 0.5,
            }),
            ..TableOptions::default()
        };
        let graphs = Graphs::new(&p, opts.call_graph.unwrap(), &opts);
        let w = &graphs.stacks[0];
        let main = RowKey::of(&p, &opts.keys, w, 0);
        let mut out = Vec::new();
        graphs.write(&main, &mut out).unwrap();
        let m = " ".repeat(MARGIN);
        let want = [
            format!("{m}|"),
            format!("{m}---main"),
            format!("{m}   |          "),
            format!("{m}   |--75.00%--work_a"),
            format!("{m}   |          hot_a"),
            format!("{m}   |          "),
            format!("{m}    --25.00%--work_b"),
            format!("{m}              hot_b"),
            String::new(),
        ];
        assert_eq!(String::from_utf8(out).unwrap(), want.join("\n") + "\n");
    }
}
