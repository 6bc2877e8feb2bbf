//! COMM and MMAP2 records for processes that exist before the kernel tells about them, as perf synthesizes
//! them from /proc: the processes of the target when sampling starts, and (`-G`) a process met in a sample
//! of the cgroup before any record about it (one that joined the cgroup without exec'ing or forking there).
use crate::process;
use crate::recording::{self, Mmap2, SampleId};

/// One synthesized record, and the mapping it describes (for MMAP2).
pub(super) struct Synthesized {
    pub(super) bytes: Vec<u8>,
    pub(super) mmap: Option<Mmap2>,
}

/// COMM for each thread and MMAP2 for each executable mapping of `pid`, stamped `time`, as perf synthesizes
/// them. A process that exits while being read gives what was read (or nothing).
pub(super) fn process_records(sample_type: u64, pid: i32, time: u64) -> Vec<Synthesized> {
    let mut out = Vec::new();
    let Ok(tids) = process::threads(pid) else {
        return out;
    };
    for &tid in &tids {
        let Ok(name) = process::comm(pid, tid) else {
            continue;
        };
        let id = SampleId {
            pid: pid as u32,
            tid: tid as u32,
            time,
            ..Default::default()
        };
        out.push(Synthesized {
            bytes: recording::encode_comm(sample_type, pid as u32, tid as u32, &name, false, &id),
            mmap: None,
        });
    }
    let Ok(maps) = process::maps(pid) else {
        return out;
    };
    let id = SampleId {
        pid: pid as u32,
        tid: pid as u32,
        time,
        ..Default::default()
    };
    for m in maps.iter().filter(|m| m.exec) {
        let mmap = Mmap2 {
            pid,
            tid: pid,
            start: m.start,
            len: m.end - m.start,
            pgoff: m.offset,
            maj: m.dev_major,
            min: m.dev_minor,
            ino: m.inode,
            prot: 1 | 4 | if m.write { 2 } else { 0 },
            flags: if m.private { 2 } else { 1 },
            path: if m.path.is_empty() {
                "//anon".to_string()
            } else {
                m.path.clone()
            },
            kernel: false,
        };
        out.push(Synthesized {
            bytes: recording::encode_mmap2(sample_type, &mmap, &id),
            mmap: Some(mmap),
        });
    }
    out
}
