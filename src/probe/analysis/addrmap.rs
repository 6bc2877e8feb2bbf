//! From a runtime address in a process back to the probed function.
//!
//! The functions of one binary share a few tracefs events (one event holds many probe points, so that 1,000
//! probes need a handful of perf events and close in a second). A hit then names its function by its runtime
//! address (`__probe_ip` / `__probe_func` in the event's raw data). This module keeps the probed binaries and
//! their probed offsets, and translates `runtime address -> file offset -> target` through the process's
//! mappings in the shared address-space model ([`crate::process::AddressSpace`]).
use crate::probe::plan::Placement;
use crate::probe::target::{PerTarget, TargetId, TargetKind, Targets};
use crate::process::{AddressSpace, Mapping};
use crate::resolve::FastMap;
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

/// The probed binaries, and the targets by (binary, file offset).
#[derive(Debug, Default)]
pub struct AddrMap {
    binaries: Vec<BinaryId>,
    offsets: FastMap<(u32, u64), TargetId>,
}

impl AddrMap {
    /// The binaries and probed offsets (each function's offset plus its placement) of the user targets.
    pub fn new(targets: &Targets, placements: &PerTarget<Option<Placement>>) -> AddrMap {
        let mut map = AddrMap::default();
        for (id, t) in targets.iter() {
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
            let placed = placements[id].as_ref();
            map.offsets
                .insert((bin as u32, offset.0 + placed.map_or(0, |p| p.offset)), id);
            // Go: the uprobes on each `ret` stand for the function too.
            for r in placed.and_then(|p| p.returns.as_deref()).unwrap_or(&[]) {
                map.offsets.insert((bin as u32, offset.0 + r), id);
            }
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

    /// The probed binary a mapping is of, if any.
    fn binary_of_mapping(&self, m: &Mapping) -> Option<u32> {
        let (major, minor, inode) = m.file.map_or((0, 0, 0), |f| (f.major, f.minor, f.inode));
        self.binary_of(m.path.as_bytes(), major, minor, inode)
    }

    /// The target probed at runtime address `addr` of a process whose mappings are `space`.
    pub fn lookup(&self, space: Option<&AddressSpace>, addr: u64) -> Option<TargetId> {
        let m = space?.find(addr)?;
        let bin = self.binary_of_mapping(m)?;
        self.offsets.get(&(bin, m.file_offset(addr))).copied()
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::{ElfAddr, FileOffset};
    use crate::probe::target::Target;
    use crate::process::AddressSpaces;

    fn target(path: &str, off: u64) -> Target {
        Target {
            name: format!("f{off:x}"),
            aliases: Vec::new(),
            kind: TargetKind::User {
                path: path.into(),
                addr: ElfAddr(off),
                offset: FileOffset(off),
            },
            fetches: Vec::new(),
            code: None,
            go: None,
            syscall_sites: Vec::new(),
            filter: None,
        }
    }

    /// Check that runtime addresses translate through the mappings of the probed binary, by path or by
    /// device and inode, and not through other files.
    #[test]
    fn translates_runtime_addresses() {
        let targets = Targets::new(vec![
            target("/nonexistent/bin", 0x1139),
            target("/nonexistent/bin", 0x1200),
        ]);
        let mut m = AddrMap::new(&targets, &targets.per_target(None));
        assert!(m.binary_of(b"/nonexistent/bin", 0, 0, 0).is_some());
        assert_eq!(m.binary_of(b"/other", 0, 0, 0), None);
        m.binaries[0].inode = 77;
        m.binaries[0].major = 8;
        let maps = crate::process::parse_maps(
            b"555500001000-555500002000 r-xp 00001000 00:00 0 /nonexistent/bin\n\
              7f0000001000-7f0000002000 r-xp 00001000 08:00 77 /proc/1/root/nonexistent/bin\n\
              7f0000003000-7f0000004000 r-xp 00001000 08:00 78 /lib/other.so\n",
        );
        let mut spaces = AddressSpaces::new();
        spaces.add_proc_maps(10, &maps);
        let space = spaces.get(10);
        assert_eq!(m.lookup(space, 0x5555_0000_1139), Some(TargetId::new(0)));
        assert_eq!(m.lookup(space, 0x5555_0000_1200), Some(TargetId::new(1)));
        assert_eq!(m.lookup(space, 0x5555_0000_1201), None);
        assert_eq!(m.lookup(space, 0x7f00_0000_1139), Some(TargetId::new(0)));
        assert_eq!(m.lookup(space, 0x7f00_0000_3139), None);
        assert_eq!(m.lookup(spaces.get(11), 0x5555_0000_1139), None);
    }
}
