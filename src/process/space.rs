//! The one model of each process's address space, fed by MMAP/MMAP2/COMM(exec)/FORK/EXIT through one input type
//! ([`TaskEvent`]) and used alike by the live DWARF unwinder, report and probe.
//!
//! The overlap rule is the kernel's: a new mapping over part of an old one keeps the old one's uncovered head
//! and tail (the tail's file offset moves with it). Every change gives the process a new generation number,
//! unique across all processes of one [`AddressSpaces`], so that caches keyed by (pid, generation) retire their
//! entries without a scan.
use super::MapEntry;
use linux_perf_event_reader::{EventRecord, Mmap2FileId};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// `PROT_READ | PROT_EXEC`, for MMAP records (which only tell whether the mapping is executable).
const PROT_READ_EXEC: u32 = (libc::PROT_READ | libc::PROT_EXEC) as u32;

/// Device and inode of a mapped file (MMAP2 without build id, /proc/PID/maps).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileId {
    pub major: u32,
    pub minor: u32,
    pub inode: u64,
}

/// One mapping of a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// The file offset mapped at `start`.
    pub pgoff: u64,
    /// The file's path, `[vdso]`/`[heap]`/`//anon`... as the kernel names it.
    pub path: Arc<str>,
    /// Device and inode, when the record had them.
    pub file: Option<FileId>,
    /// The build id, when the record had it (MMAP2 with PERF_RECORD_MISC_MMAP_BUILD_ID).
    pub build_id: Option<Arc<[u8]>>,
    /// `PROT_*` bits.
    pub prot: u32,
}

impl Mapping {
    /// The mapping an MMAP or MMAP2 record describes (`len` bytes of `path` from `pgoff` at `start`), without
    /// file identity or build id.
    fn of_record(start: u64, len: u64, pgoff: u64, path: &[u8], prot: u32) -> Mapping {
        Mapping {
            start,
            end: start.saturating_add(len),
            pgoff,
            path: Arc::from(String::from_utf8_lossy(path).as_ref()),
            file: None,
            build_id: None,
            prot,
        }
    }

    /// The file offset of runtime address `addr` (inside this mapping).
    pub fn file_offset(&self, addr: u64) -> u64 {
        (addr - self.start).wrapping_add(self.pgoff)
    }

    /// Whether the code is executable.
    pub fn is_exec(&self) -> bool {
        self.prot & libc::PROT_EXEC as u32 != 0
    }
}

/// What changes address spaces: the one input of [`AddressSpaces::apply`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskEvent {
    /// Process `pid` mapped memory (user mappings only; the kernel's own are not part of any process).
    Mmap { pid: u32, mapping: Mapping },
    /// Process `pid` exec'd a new program: its mappings are gone, the new ones follow.
    Exec { pid: u32 },
    /// A new process `child` starts with a copy of `parent`'s mappings (threads share their process's).
    Fork { parent: u32, child: u32 },
    /// Process `pid` ended (its main thread exited).
    Exit { pid: u32 },
}

impl TaskEvent {
    /// The task event of a perf record; None for records that change no address space (samples, thread
    /// forks and exits, kernel mappings, plain COMM renames).
    pub fn from_record(record: &EventRecord<'_>) -> Option<TaskEvent> {
        use linux_perf_event_reader::CpuMode;
        match record {
            EventRecord::Mmap2(m) if m.cpu_mode != CpuMode::Kernel && m.pid >= 0 => {
                let (file, build_id) = match &m.file_id {
                    Mmap2FileId::InodeAndVersion(i) => (
                        Some(FileId {
                            major: i.major,
                            minor: i.minor,
                            inode: i.inode,
                        }),
                        None,
                    ),
                    Mmap2FileId::BuildId(id) => (None, Some(Arc::from(id.as_slice()))),
                };
                let path = m.path.as_slice();
                let mapping =
                    Mapping::of_record(m.address, m.length, m.page_offset, &path, m.protection);
                Some(TaskEvent::Mmap {
                    pid: m.pid as u32,
                    mapping: Mapping {
                        file,
                        build_id,
                        ..mapping
                    },
                })
            }
            EventRecord::Mmap(m) if m.cpu_mode != CpuMode::Kernel && m.pid >= 0 => {
                let prot = match m.is_executable {
                    true => PROT_READ_EXEC,
                    false => libc::PROT_READ as u32,
                };
                let path = m.path.as_slice();
                Some(TaskEvent::Mmap {
                    pid: m.pid as u32,
                    mapping: Mapping::of_record(m.address, m.length, m.page_offset, &path, prot),
                })
            }
            EventRecord::Comm(c) if c.is_execve => Some(TaskEvent::Exec { pid: c.pid as u32 }),
            EventRecord::Fork(f) if f.pid != f.ppid => Some(TaskEvent::Fork {
                parent: f.ppid as u32,
                child: f.pid as u32,
            }),
            EventRecord::Exit(e) if e.pid == e.tid => Some(TaskEvent::Exit { pid: e.pid as u32 }),
            _ => None,
        }
    }
}

/// The mappings of one process.
#[derive(Clone, Debug, Default)]
pub struct AddressSpace {
    mappings: BTreeMap<u64, Mapping>,
    generation: u64,
}

impl AddressSpace {
    /// The mapping that holds `addr`.
    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        let (_, m) = self.mappings.range(..=addr).next_back()?;
        (addr < m.end).then_some(m)
    }

    /// The mappings in address order.
    pub fn mappings(&self) -> impl Iterator<Item = &Mapping> {
        self.mappings.values()
    }

    /// Changes each time the mappings change; unique across the processes of one [`AddressSpaces`].
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Add a mapping; the parts of older mappings it covers are gone, their uncovered head and tail stay.
    fn map(&mut self, new: Mapping) {
        if new.end <= new.start {
            return;
        }
        let overlapping: Vec<u64> = self
            .mappings
            .range(..new.end)
            .rev()
            .take_while(|(_, m)| m.end > new.start)
            .map(|(s, _)| *s)
            .collect();
        for old_start in overlapping {
            let Some(old) = self.mappings.remove(&old_start) else {
                continue;
            };
            if old.start < new.start {
                let head = Mapping {
                    end: new.start,
                    ..old.clone()
                };
                self.mappings.insert(head.start, head);
            }
            if old.end > new.end {
                let tail = Mapping {
                    start: new.end,
                    pgoff: old.pgoff.wrapping_add(new.end - old.start),
                    ..old
                };
                self.mappings.insert(tail.start, tail);
            }
        }
        self.mappings.insert(new.start, new);
    }
}

/// Every process's address space, by pid.
#[derive(Debug, Default)]
pub struct AddressSpaces {
    /// Looked up once or more per sample: ahash, not SipHash.
    spaces: HashMap<u32, AddressSpace, ahash::RandomState>,
    last_generation: u64,
}

impl AddressSpaces {
    /// No process known yet.
    pub fn new() -> AddressSpaces {
        AddressSpaces::default()
    }

    /// The address space of `pid`, if any of its mappings is known.
    pub fn get(&self, pid: u32) -> Option<&AddressSpace> {
        self.spaces.get(&pid)
    }

    /// The generation of `pid`'s space (0 for an unknown process).
    pub fn generation(&self, pid: u32) -> u64 {
        self.spaces.get(&pid).map_or(0, |s| s.generation)
    }

    /// Apply one event.
    pub fn apply(&mut self, event: TaskEvent) {
        match event {
            TaskEvent::Mmap { pid, mapping } => {
                let generation = self.next_generation();
                let space = self.spaces.entry(pid).or_default();
                space.map(mapping);
                space.generation = generation;
            }
            TaskEvent::Exec { pid } => {
                let generation = self.next_generation();
                self.spaces.insert(
                    pid,
                    AddressSpace {
                        mappings: BTreeMap::new(),
                        generation,
                    },
                );
            }
            // A FORK for a process already described (perf synthesizes one after the mappings of a process
            // that existed before recording) keeps what is known.
            TaskEvent::Fork { parent, child } => {
                if parent == child || self.spaces.contains_key(&child) {
                    return;
                }
                let Some(mut copy) = self.spaces.get(&parent).cloned() else {
                    return;
                };
                copy.generation = self.next_generation();
                self.spaces.insert(child, copy);
            }
            TaskEvent::Exit { pid } => {
                self.spaces.remove(&pid);
            }
        }
    }

    /// Add the mappings listed in `/proc/PID/maps` (a process that existed before the events started).
    pub fn add_proc_maps(&mut self, pid: u32, maps: &[MapEntry]) {
        for e in maps {
            let prot = [
                (e.read, libc::PROT_READ),
                (e.write, libc::PROT_WRITE),
                (e.exec, libc::PROT_EXEC),
            ]
            .iter()
            .filter(|(on, _)| *on)
            .fold(0u32, |p, (_, bit)| p | *bit as u32);
            let mapping = Mapping {
                start: e.start,
                end: e.end,
                pgoff: e.offset,
                path: Arc::from(e.path.as_str()),
                file: (e.inode != 0).then_some(FileId {
                    major: e.dev_major,
                    minor: e.dev_minor,
                    inode: e.inode,
                }),
                build_id: None,
                prot,
            };
            self.apply(TaskEvent::Mmap { pid, mapping });
        }
    }

    /// Read `/proc/PID/maps` now, if the process exists (a process that existed before the events started).
    pub fn synthesize(&mut self, pid: u32) {
        if let Ok(maps) = super::maps(pid as i32) {
            self.add_proc_maps(pid, &maps);
        }
    }

    fn next_generation(&mut self) -> u64 {
        self.last_generation += 1;
        self.last_generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(start: u64, end: u64, pgoff: u64, path: &str) -> Mapping {
        Mapping {
            start,
            end,
            pgoff,
            path: Arc::from(path),
            file: None,
            build_id: None,
            prot: PROT_READ_EXEC,
        }
    }

    fn mmap(s: &mut AddressSpaces, pid: u32, start: u64, end: u64, pgoff: u64, path: &str) {
        s.apply(TaskEvent::Mmap {
            pid,
            mapping: mapping(start, end, pgoff, path),
        });
    }

    fn spans(s: &AddressSpaces, pid: u32) -> Vec<(u64, u64, u64, String)> {
        s.get(pid)
            .map(|space| {
                space
                    .mappings()
                    .map(|m| (m.start, m.end, m.pgoff, m.path.to_string()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Check that a mapping over part of another keeps the uncovered head and tail, the tail's file offset moved.
    #[test]
    fn overlap_keeps_head_and_tail() {
        let mut s = AddressSpaces::new();
        mmap(&mut s, 7, 0x1000, 0x5000, 0, "/a");
        mmap(&mut s, 7, 0x2000, 0x3000, 0x10000, "/b");
        mmap(&mut s, 7, 0x8000, 0x9000, 0, "/c");
        assert_eq!(
            spans(&s, 7),
            vec![
                (0x1000, 0x2000, 0, "/a".into()),
                (0x2000, 0x3000, 0x10000, "/b".into()),
                (0x3000, 0x5000, 0x2000, "/a".into()),
                (0x8000, 0x9000, 0, "/c".into()),
            ]
        );
        // One mapping over several: the first keeps its head, the last its tail, the ones between go.
        mmap(&mut s, 7, 0x1800, 0x8800, 0, "/d");
        assert_eq!(
            spans(&s, 7),
            vec![
                (0x1000, 0x1800, 0, "/a".into()),
                (0x1800, 0x8800, 0, "/d".into()),
                (0x8800, 0x9000, 0x800, "/c".into()),
            ]
        );
        let space = s.get(7).unwrap();
        assert_eq!(&*space.find(0x8800).unwrap().path, "/c");
        assert_eq!(space.find(0x8800).unwrap().file_offset(0x8810), 0x810);
        assert!(space.find(0x9000).is_none());
        assert!(space.find(0xfff).is_none());
    }

    /// Check that each change gives a new generation, unique across processes.
    #[test]
    fn generations_change_and_differ() {
        let mut s = AddressSpaces::new();
        assert_eq!(s.generation(1), 0);
        mmap(&mut s, 1, 0x1000, 0x2000, 0, "/a");
        let g1 = s.generation(1);
        mmap(&mut s, 2, 0x1000, 0x2000, 0, "/a");
        let g2 = s.generation(2);
        assert!(g1 != 0 && g2 != 0 && g1 != g2);
        mmap(&mut s, 1, 0x3000, 0x4000, 0, "/b");
        assert!(s.generation(1) != g1 && s.generation(1) != g2);
    }

    /// Check that fork copies the parent's mappings (later changes stay apart), that a FORK for a process already
    /// described keeps its mappings, that exec clears and exit forgets.
    #[test]
    fn fork_exec_exit() {
        let mut s = AddressSpaces::new();
        mmap(&mut s, 10, 0x1000, 0x2000, 0, "/bin/sh");
        s.apply(TaskEvent::Fork {
            parent: 10,
            child: 11,
        });
        assert_eq!(spans(&s, 11), spans(&s, 10));
        assert_ne!(s.generation(11), s.generation(10));
        mmap(&mut s, 11, 0x1000, 0x2000, 0, "/bin/ls");
        assert_eq!(&*s.get(10).unwrap().find(0x1000).unwrap().path, "/bin/sh");
        assert_eq!(&*s.get(11).unwrap().find(0x1000).unwrap().path, "/bin/ls");
        // Already described (synthesized mappings, then a synthesized FORK): kept.
        s.apply(TaskEvent::Fork {
            parent: 10,
            child: 11,
        });
        assert_eq!(&*s.get(11).unwrap().find(0x1000).unwrap().path, "/bin/ls");
        // Unknown parent: nothing to copy.
        s.apply(TaskEvent::Fork {
            parent: 99,
            child: 12,
        });
        assert!(s.get(12).is_none());
        let before = s.generation(11);
        s.apply(TaskEvent::Exec { pid: 11 });
        assert!(spans(&s, 11).is_empty());
        assert_ne!(s.generation(11), before);
        s.apply(TaskEvent::Exit { pid: 10 });
        assert!(s.get(10).is_none());
        assert_eq!(s.generation(10), 0);
    }

    /// Check that dlopen / dlclose / dlopen of another library at the same address names the right file at
    /// each step (dlclose leaves the range as an anonymous mapping or unmapped: the next mmap replaces it).
    #[test]
    fn dlopen_dlclose_redlopen_same_address() {
        let mut s = AddressSpaces::new();
        mmap(
            &mut s,
            5,
            0x7f00_0000_0000,
            0x7f00_0000_1000,
            0,
            "/tmp/libA.so",
        );
        mmap(
            &mut s,
            5,
            0x7f00_0000_1000,
            0x7f00_0000_2000,
            0x1000,
            "/tmp/libA.so",
        );
        let a = s.generation(5);
        assert_eq!(
            &*s.get(5).unwrap().find(0x7f00_0000_1010).unwrap().path,
            "/tmp/libA.so"
        );
        // dlopen of B at the same address: the loader reserves the whole range, then maps segments into it.
        mmap(
            &mut s,
            5,
            0x7f00_0000_0000,
            0x7f00_0000_3000,
            0,
            "/tmp/libB.so",
        );
        mmap(
            &mut s,
            5,
            0x7f00_0000_1000,
            0x7f00_0000_2000,
            0x1000,
            "/tmp/libB.so",
        );
        assert_ne!(s.generation(5), a);
        let space = s.get(5).unwrap();
        let m = space.find(0x7f00_0000_1010).unwrap();
        assert_eq!(
            (&*m.path, m.file_offset(0x7f00_0000_1010)),
            ("/tmp/libB.so", 0x1010)
        );
        assert!(space.mappings().all(|m| &*m.path == "/tmp/libB.so"));
        assert_eq!(
            spans(&s, 5),
            vec![
                (0x7f00_0000_0000, 0x7f00_0000_1000, 0, "/tmp/libB.so".into()),
                (
                    0x7f00_0000_1000,
                    0x7f00_0000_2000,
                    0x1000,
                    "/tmp/libB.so".into()
                ),
                (
                    0x7f00_0000_2000,
                    0x7f00_0000_3000,
                    0x2000,
                    "/tmp/libB.so".into()
                ),
            ]
        );
    }

    /// Check that /proc/PID/maps entries keep device, inode and protection.
    #[test]
    fn proc_maps_entries() {
        let maps = crate::process::parse_maps(
            b"7f0000001000-7f0000002000 r-xp 00001000 08:01 77 /lib/x.so\n\
              7f0000002000-7f0000003000 rw-p 00000000 00:00 0 \n",
        );
        let mut s = AddressSpaces::new();
        s.add_proc_maps(3, &maps);
        let space = s.get(3).unwrap();
        let m = space.find(0x7f00_0000_1000).unwrap();
        assert_eq!(
            m.file,
            Some(FileId {
                major: 8,
                minor: 1,
                inode: 77
            })
        );
        assert!(m.is_exec());
        let anon = space.find(0x7f00_0000_2000).unwrap();
        assert!(!anon.is_exec() && anon.file.is_none() && anon.path.is_empty());
    }
}
