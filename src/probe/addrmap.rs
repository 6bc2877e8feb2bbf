//! From a runtime address in a process back to the probed function.
//!
//! The functions of one binary share a few tracefs events (one event holds many probe points, so that 1,000
//! probes need a handful of perf events and close in a second). A hit then names its function by its runtime
//! address (`__probe_ip` / `__probe_func` in the event's raw data). This module keeps each process's mappings
//! of the probed binaries, from `/proc/PID/maps` at start and from MMAP2 / COMM(exec) / FORK / EXIT records
//! after, and translates `runtime address -> file offset -> target`.
use super::resolve::{Target, TargetKind};
use crate::process::MapEntry;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// A probed binary: matched by path or by device and inode (paths differ across mount namespaces).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BinaryId {
    pub path: PathBuf,
    pub major: u32,
    pub minor: u32,
    pub inode: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mapping {
    start: u64,
    end: u64,
    pgoff: u64,
    bin: u32,
}

/// Mappings of the probed binaries per process, and the targets by (binary, file offset).
#[derive(Debug, Default)]
pub struct AddrMap {
    binaries: Vec<BinaryId>,
    offsets: HashMap<(u32, u64), u32>,
    procs: HashMap<u32, Vec<Mapping>>,
}

impl AddrMap {
    /// The binaries and offsets of the user targets.
    pub fn new(targets: &[Target]) -> AddrMap {
        let mut map = AddrMap::default();
        for (i, t) in targets.iter().enumerate() {
            let TargetKind::User { path, offset, .. } = &t.kind else {
                continue;
            };
            let bin = match map.binaries.iter().position(|b| b.path == *path) {
                Some(b) => b,
                None => {
                    let (major, minor, inode) = std::fs::metadata(path)
                        .map(|m| {
                            (
                                nix::sys::stat::major(m.dev()) as u32,
                                nix::sys::stat::minor(m.dev()) as u32,
                                m.ino(),
                            )
                        })
                        .unwrap_or((0, 0, 0));
                    map.binaries.push(BinaryId {
                        path: path.clone(),
                        major,
                        minor,
                        inode,
                    });
                    map.binaries.len() - 1
                }
            };
            map.offsets.insert((bin as u32, offset.0), i as u32);
        }
        map
    }

    /// True when no user function is probed.
    pub fn is_empty(&self) -> bool {
        self.binaries.is_empty()
    }

    /// The probed binary a mapping is of, if any.
    pub fn binary_of(&self, path: &[u8], major: u32, minor: u32, inode: u64) -> Option<u32> {
        self.binaries
            .iter()
            .position(|b| {
                b.path.as_os_str().as_encoded_bytes() == path
                    || (inode != 0 && b.inode == inode && b.major == major && b.minor == minor)
            })
            .map(|b| b as u32)
    }

    /// A process mapped `len` bytes of binary `bin` from file offset `pgoff` at `start`.
    pub fn add_mapping(&mut self, pid: u32, start: u64, len: u64, pgoff: u64, bin: u32) {
        let maps = self.procs.entry(pid).or_default();
        let m = Mapping {
            start,
            end: start + len,
            pgoff,
            bin,
        };
        // A new mapping replaces whatever it overlaps.
        maps.retain(|o| o.end <= m.start || o.start >= m.end);
        maps.push(m);
    }

    /// Add the probed binaries' mappings listed in `/proc/PID/maps`.
    pub fn add_proc_maps(&mut self, pid: u32, maps: &[MapEntry]) {
        for e in maps {
            if let Some(bin) = self.binary_of(e.path.as_bytes(), e.dev_major, e.dev_minor, e.inode)
            {
                self.add_mapping(pid, e.start, e.end - e.start, e.offset, bin);
            }
        }
    }

    /// Read `/proc/PID/maps` now (a process that exists before probing starts).
    pub fn synthesize(&mut self, pid: u32) {
        if let Ok(maps) = crate::process::maps(pid as i32) {
            self.add_proc_maps(pid, &maps);
        }
    }

    /// The process replaced its memory (exec).
    pub fn exec(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }

    /// A new process `child` starts with a copy of `parent`'s mappings.
    pub fn fork(&mut self, parent: u32, child: u32) {
        if let Some(maps) = self.procs.get(&parent).cloned() {
            self.procs.insert(child, maps);
        }
    }

    /// The process ended.
    pub fn exit(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }

    /// The target probed at runtime address `addr` in process `pid`.
    pub fn lookup(&self, pid: u32, addr: u64) -> Option<u32> {
        let m = self
            .procs
            .get(&pid)?
            .iter()
            .find(|m| addr >= m.start && addr < m.end)?;
        self.offsets
            .get(&(m.bin, addr - m.start + m.pgoff))
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::{ElfAddr, FileOffset};

    fn target(path: &str, off: u64) -> Target {
        Target {
            name: format!("f{off:x}"),
            aliases: Vec::new(),
            kind: TargetKind::User {
                path: path.into(),
                addr: ElfAddr(off),
                offset: FileOffset(off),
            },
        }
    }

    /// Check that runtime addresses translate through mappings, forks, execs and exits.
    #[test]
    fn translates_runtime_addresses() {
        let targets = vec![
            target("/nonexistent/bin", 0x1139),
            target("/nonexistent/bin", 0x1200),
        ];
        let mut m = AddrMap::new(&targets);
        let bin = m.binary_of(b"/nonexistent/bin", 0, 0, 0).unwrap();
        assert_eq!(m.binary_of(b"/other", 0, 0, 0), None);
        m.add_mapping(10, 0x5555_0000_1000, 0x1000, 0x1000, bin);
        assert_eq!(m.lookup(10, 0x5555_0000_1139), Some(0));
        assert_eq!(m.lookup(10, 0x5555_0000_1200), Some(1));
        assert_eq!(m.lookup(10, 0x5555_0000_1201), None);
        assert_eq!(m.lookup(11, 0x5555_0000_1139), None);
        m.fork(10, 11);
        assert_eq!(m.lookup(11, 0x5555_0000_1139), Some(0));
        m.exec(11);
        assert_eq!(m.lookup(11, 0x5555_0000_1139), None);
        m.exit(10);
        assert_eq!(m.lookup(10, 0x5555_0000_1139), None);
    }

    /// Check that /proc/PID/maps lines of the probed binary are taken, matched by inode too.
    #[test]
    fn takes_proc_maps() {
        let targets = vec![target("/nonexistent/bin", 0x1139)];
        let mut m = AddrMap::new(&targets);
        m.binaries[0].inode = 77;
        m.binaries[0].major = 8;
        let maps = crate::process::parse_maps(
            b"7f0000001000-7f0000002000 r-xp 00001000 08:00 77 /proc/1/root/nonexistent/bin\n\
              7f0000003000-7f0000004000 r-xp 00001000 08:00 78 /lib/other.so\n",
        );
        m.add_proc_maps(5, &maps);
        assert_eq!(m.lookup(5, 0x7f00_0000_1139), Some(0));
        assert_eq!(m.lookup(5, 0x7f00_0000_3139), None);
    }
}
