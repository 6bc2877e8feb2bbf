//! JIT symbols from `/tmp/perf-PID.map` (`START SIZE NAME` lines, hex numbers).
use super::unnamed::Unnamed;
use crate::addr::RuntimeAddr;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The perf maps of the processes of a recording, read on first use.
#[derive(Default)]
pub(crate) struct PerfMaps {
    /// Perf maps by pid (None when the pid has none).
    maps: HashMap<u32, Option<PerfMap>>,
    /// Host pid -> namespace pid (see [`PerfMaps::set_ns_pids`]).
    ns_pids: HashMap<u32, u32>,
}

impl PerfMaps {
    /// Forget the perf maps read (a long session, between periods): a process's map is read again at its
    /// next JIT address, and an exited process's is not kept (nor found by a new process of its pid).
    pub fn forget(&mut self) {
        self.maps = HashMap::new();
    }

    /// Host pid -> pid in the process's own pid namespace (a container), for finding its perf-PID.map.
    pub fn set_ns_pids(&mut self, ns_pids: HashMap<u32, u32>) {
        self.ns_pids = ns_pids;
    }

    /// The name of a JIT address of process `pid`, from /tmp/perf-PID.map: the host's file, else (a process
    /// in a container) the one the process wrote under its namespace pid in its own /tmp, through
    /// /proc/PID/root while it lives.
    pub fn lookup(&mut self, pid: u32, addr: RuntimeAddr) -> Result<Arc<str>, Unnamed> {
        let ns_pid = self.ns_pids.get(&pid).copied();
        let map = self.maps.entry(pid).or_insert_with(|| {
            let inside = ns_pid.map(|ns| {
                crate::process::root_path(pid, Path::new(&format!("/tmp/perf-{ns}.map")))
            });
            std::iter::once(PathBuf::from(format!("/tmp/perf-{pid}.map")))
                .chain(inside)
                .find_map(|path| std::fs::read(path).ok())
                .map(|data| parse_perf_map(&data))
        });
        let map = map.as_ref().ok_or(Unnamed::JitWithoutMap)?;
        map.lookup(addr.0).cloned().ok_or(Unnamed::JitNotInMap)
    }
}

/// The symbols of one perf map, sorted by start address.
#[derive(Debug, Default)]
pub struct PerfMap {
    /// (start, end, name), sorted by start.
    entries: Vec<(u64, u64, Arc<str>)>,
}

impl PerfMap {
    /// The symbol whose range contains `addr`.
    pub fn lookup(&self, addr: u64) -> Option<&Arc<str>> {
        let i = self
            .entries
            .partition_point(|e| e.0 <= addr)
            .checked_sub(1)?;
        let (start, end, name) = &self.entries[i];
        (addr >= *start && addr < *end).then_some(name)
    }
}

fn parse_hex(s: &str) -> Option<u64> {
    let s = s.strip_prefix("0x").unwrap_or(s);
    u64::from_str_radix(s, 16).ok()
}

/// Parse a perf map. When two entries start at the same address, the later one wins (the JIT reused the memory).
pub fn parse_perf_map(data: &[u8]) -> PerfMap {
    let text = String::from_utf8_lossy(data);
    let mut entries: Vec<(u64, u64, Arc<str>)> = Vec::new();
    for line in text.lines() {
        let mut parts = line.trim_start().splitn(3, ' ');
        let (Some(start), Some(size), Some(name)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let (Some(start), Some(size)) = (parse_hex(start), parse_hex(size)) else {
            continue;
        };
        let name = name.trim();
        if size == 0 || name.is_empty() {
            continue;
        }
        entries.push((start, start.saturating_add(size), Arc::from(name)));
    }
    // Stable sort, then keep the last entry of each start address.
    entries.sort_by_key(|e| e.0);
    let mut deduped: Vec<(u64, u64, Arc<str>)> = Vec::with_capacity(entries.len());
    for e in entries {
        match deduped.last_mut() {
            Some(last) if last.0 == e.0 => *last = e,
            _ => deduped.push(e),
        }
    }
    PerfMap { entries: deduped }
}

#[cfg(test)]
mod tests {
    use super::parse_perf_map;

    /// Check that perf map lines resolve within their size only, and later duplicates win.
    #[test]
    fn parses_perf_map() {
        let map = parse_perf_map(
            b"7f0000001000 100 LazyCompile:*foo bar.js:1\n0x7f0000002000 0x20 stub\n7f0000001000 80 newer\nbad line\n",
        );
        assert_eq!(map.lookup(0x7f0000001010).map(|s| &**s), Some("newer"));
        assert_eq!(map.lookup(0x7f0000001090), None);
        assert_eq!(map.lookup(0x7f000000201f).map(|s| &**s), Some("stub"));
        assert_eq!(map.lookup(0x7f0000002020), None);
        assert_eq!(map.lookup(0x10), None);
    }
}
