//! `-g`: distinct user and kernel stacks at function entry, counted (stackcount), printed as text or folded.
use crate::addr::FileOffset;
use crate::process::MapEntry;
use crate::symbols::{ModuleKey, Symbolizer, SymbolizerOptions};
use std::collections::HashMap;
use std::io::{self, Write};
use std::path::PathBuf;

/// Distinct stacks kept at most; more are counted in [`StackCounter::dropped`].
pub const MAX_STACKS: usize = 100_000;

/// Callchain context markers (PERF_CONTEXT_*): values at or above this are markers, not addresses.
const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;
const PERF_CONTEXT_KERNEL: u64 = (-128i64) as u64;
const PERF_CONTEXT_USER: u64 = (-512i64) as u64;

/// Insert the caller's return address `ret` (read at SP at function entry) after the first user frame, unless
/// the kernel already put it there. A frame-pointer walk that starts at a function's first instruction skips the
/// immediate caller, because the function has not pushed its frame yet.
pub fn add_entry_caller(chain: &mut Vec<u64>, ret: u64) {
    let Some(user) = chain.iter().position(|&a| a == PERF_CONTEXT_USER) else {
        return;
    };
    let ip = user + 1;
    if ip >= chain.len() || ret == 0 || chain.get(ip + 1) == Some(&ret) {
        return;
    }
    chain.insert(ip + 1, ret);
}

/// One stack key: target, process, raw callchain (with its context markers).
type Key = (u32, u32, Box<[u64]>);

/// Counts of distinct stacks per target, in bounded memory.
#[derive(Default)]
pub struct StackCounter {
    counts: HashMap<Key, u64>,
    /// Hits whose stack was not kept because [`MAX_STACKS`] distinct stacks were already counted.
    pub dropped: u64,
    maps: HashMap<u32, Vec<MapEntry>>,
    /// Processes whose maps are complete (read from /proc, or followed since their exec).
    complete: std::collections::HashSet<u32>,
}

impl StackCounter {
    /// An empty counter.
    pub fn new() -> StackCounter {
        StackCounter::default()
    }

    /// Count one entry of `target` in process `pid` with this callchain.
    pub fn add(&mut self, target: u32, pid: u32, chain: &[u64]) {
        // The process is alive now: remember its maps to symbolize its user addresses later.
        self.maps
            .entry(pid)
            .or_insert_with(|| crate::process::maps(pid as i32).unwrap_or_default());
        let key: Key = (target, pid, chain.into());
        if let Some(n) = self.counts.get_mut(&key) {
            *n += 1;
        } else if self.counts.len() < MAX_STACKS {
            self.counts.insert(key, 1);
        } else {
            self.dropped += 1;
        }
    }

    /// A process mapped `path` (an MMAP2 record): kept to symbolize its addresses at the end.
    pub fn add_mapping(&mut self, pid: u32, start: u64, len: u64, pgoff: u64, path: &str) {
        let maps = self.maps.entry(pid).or_default();
        maps.retain(|o| o.end <= start || o.start >= start + len);
        maps.push(MapEntry {
            start,
            end: start + len,
            read: true,
            write: false,
            exec: true,
            private: true,
            offset: pgoff,
            dev_major: 0,
            dev_minor: 0,
            inode: 0,
            path: path.to_string(),
        });
    }

    /// The process exec'd: its old maps are gone, and the records that follow describe it completely.
    pub fn exec(&mut self, pid: u32) {
        self.maps.remove(&pid);
        self.complete.insert(pid);
    }

    /// A new process starts with its parent's maps.
    pub fn fork(&mut self, parent: u32, child: u32) {
        if let Some(m) = self.maps.get(&parent).cloned() {
            self.maps.insert(child, m);
        }
        if self.complete.contains(&parent) {
            self.complete.insert(child);
        }
    }

    /// Print the stacks: per target, each stack innermost frame first then its count (stackcount's layout),
    /// or folded (`target;outermost;...;innermost count`) for flame graphs.
    pub fn write(&self, w: &mut dyn Write, names: &[String], folded: bool) -> io::Result<()> {
        let mut sym = Resolver::default();
        // Merge stacks that symbolize the same (different pids, addresses in the same function).
        let mut lines: HashMap<(u32, Vec<String>), u64> = HashMap::new();
        for ((target, pid, chain), n) in &self.counts {
            let frames = sym.frames(&self.maps, *pid, chain);
            *lines.entry((*target, frames)).or_default() += n;
        }
        let mut lines: Vec<((u32, Vec<String>), u64)> = lines.into_iter().collect();
        lines.sort_by(|a, b| {
            a.0 .0
                .cmp(&b.0 .0)
                .then(b.1.cmp(&a.1))
                .then(a.0 .1.cmp(&b.0 .1))
        });
        if folded {
            for ((target, frames), n) in &lines {
                let mut parts: Vec<&str> = frames.iter().rev().map(String::as_str).collect();
                if parts.is_empty() {
                    parts.push(&names[*target as usize]);
                }
                writeln!(w, "{} {n}", parts.join(";"))?;
            }
        } else {
            let mut last: Option<u32> = None;
            for ((target, frames), n) in &lines {
                if last != Some(*target) {
                    writeln!(w, "\nSTACKS of {}", names[*target as usize])?;
                    last = Some(*target);
                }
                for f in frames {
                    writeln!(w, "  {f}")?;
                }
                writeln!(w, "    {n}\n")?;
            }
        }
        if self.dropped > 0 {
            writeln!(
                w,
                "({} hits not shown: more than {MAX_STACKS} distinct stacks)",
                self.dropped
            )?;
        }
        Ok(())
    }
}

/// Symbolizes callchains through the shared [`Symbolizer`] (kallsyms, ELF, DWARF, debug files).
struct Resolver {
    symbolizer: Symbolizer,
}

impl Default for Resolver {
    fn default() -> Self {
        let opts = SymbolizerOptions {
            inlines: false,
            ..SymbolizerOptions::default()
        };
        Resolver {
            symbolizer: Symbolizer::new(opts),
        }
    }
}

impl Resolver {
    fn frames(
        &mut self,
        maps: &HashMap<u32, Vec<MapEntry>>,
        pid: u32,
        chain: &[u64],
    ) -> Vec<String> {
        let mut out = Vec::new();
        let mut kernel = false;
        for &addr in chain {
            if addr >= PERF_CONTEXT_MAX {
                kernel = addr == PERF_CONTEXT_KERNEL;
                if addr == PERF_CONTEXT_USER {
                    kernel = false;
                }
                continue;
            }
            let name = if kernel {
                self.symbolizer
                    .kernel(addr)
                    .map(|s| format!("{s}_[k]"))
                    .unwrap_or_else(|| format!("0x{addr:x}_[k]"))
            } else {
                self.user(maps.get(&pid), pid, addr)
            };
            out.push(name);
        }
        out
    }

    fn user(&mut self, maps: Option<&Vec<MapEntry>>, pid: u32, addr: u64) -> String {
        let Some(m) = maps.and_then(|m| m.iter().find(|e| addr >= e.start && addr < e.end)) else {
            return format!("0x{addr:x}");
        };
        if !m.path.starts_with('/') {
            return format!("{}+0x{:x}", m.path, addr - m.start);
        }
        let offset = FileOffset(addr - m.start + m.offset);
        let key = ModuleKey {
            path: PathBuf::from(&m.path),
            pid,
            build_id: None,
        };
        match self.symbolizer.user(&key, offset).first() {
            Some(f) => f.name.clone(),
            None => {
                let base = std::path::Path::new(&m.path)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned());
                format!("{}+0x{:x}", base.unwrap_or_default(), offset.0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that the caller is inserted after the probed IP once, and not twice.
    #[test]
    fn inserts_entry_caller() {
        let mut c = vec![PERF_CONTEXT_USER, 0x1000, 0x3000];
        add_entry_caller(&mut c, 0x2000);
        assert_eq!(c, vec![PERF_CONTEXT_USER, 0x1000, 0x2000, 0x3000]);
        add_entry_caller(&mut c, 0x2000);
        assert_eq!(c.len(), 4);
        let mut k = vec![PERF_CONTEXT_KERNEL, 0xffff_ffff_8100_0000];
        add_entry_caller(&mut k, 0x2000);
        assert_eq!(k.len(), 2);
    }
}
