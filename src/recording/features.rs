//! Feature sections: encoding for the writer, parsing and validation for the reader.
//!
//! Formats (tools/perf/Documentation/perf.data-file-format.txt):
//! - `perf_header_string`: u32 len (including NUL padding to 64 bytes), then the NUL-padded string.
//! - HOSTNAME, OSRELEASE: one string. CMDLINE: u32 nr, then nr strings. NRCPUS: u32 available, u32 online.
//! - EVENT_DESC: u32 nr, u32 attr_size, then per event: attr, u32 nr_ids, string name, u64 ids[nr_ids].
//! - BUILD_ID: a sequence of `build_id_event { header, i32 pid, u8 build_id[24], char filename[] }`.
//! - rprof's NS_PIDS (bit [`HEADER_RPROF_NS_PIDS`]): u32 nr, then nr pairs of u32 (host pid, namespace pid).
use linux_perf_event_reader::constants::{
    PERF_RECORD_MISC_BUILD_ID_SIZE, PERF_RECORD_MISC_CPUMODE_MASK,
};

use super::{BuildIdEntry, FileAttr};
use std::collections::HashMap;

/// Feature bit numbers (HEADER_* in perf's header.h).
/// HEADER_TRACING_DATA: the formats of the tracepoint events.
pub(crate) const HEADER_TRACING_DATA: usize = 1;
pub(crate) const HEADER_BUILD_ID: usize = 2;
pub(crate) const HEADER_HOSTNAME: usize = 3;
pub(crate) const HEADER_OSRELEASE: usize = 4;
pub(crate) const HEADER_NRCPUS: usize = 7;
pub(crate) const HEADER_CMDLINE: usize = 11;
pub(crate) const HEADER_EVENT_DESC: usize = 12;
/// rprof's own section: host pid -> pid in the process's own pid namespace, for the processes of a recording
/// that live in another pid namespace (containers). perf.data has no place for it.
///
/// Bit 250 is safe: perf (tools/perf/util/header.c, `perf_header__process_sections`) counts the sections of
/// all 256 bits to size the section table but only processes the set bits below its HEADER_LAST_FEATURE (32
/// in perf 6.x), in bit order; this section's table entry comes last, so it shifts no other entry and is
/// never read. simpleperf's bits are 128 and up from the bottom. linux-perf-data (`PerfFileReader`) reads every
/// set bit's section into a map keyed by bit, rejects none, and hands it out by `feature_section_data`.
pub(crate) const HEADER_RPROF_NS_PIDS: usize = 250;
/// rprof's PYTHON section: the names of the Python frames of a recording (`qualname (file.py:line)`), which
/// its callchains carry as addresses [`crate::python::frame_addr`] gives (bit 251: as safe as 250, above).
pub(crate) const HEADER_RPROF_PYTHON: usize = 251;

/// perf aligns header strings and build-id filenames to this many bytes.
const NAME_ALIGN: usize = 64;
/// `sizeof(struct build_id_event)` without the filename.
const BUILD_ID_EVENT_SIZE: usize = 8 + 4 + 24;

/// Append a `perf_header_string`.
pub(crate) fn put_string(out: &mut Vec<u8>, s: &str) {
    let len = (s.len() + 1).next_multiple_of(NAME_ALIGN);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    out.resize(out.len() + len - s.len(), 0);
}

/// The CMDLINE section.
pub(crate) fn encode_cmdline(args: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(args.len() as u32).to_le_bytes());
    for arg in args {
        put_string(&mut out, arg);
    }
    out
}

/// The NRCPUS section.
pub(crate) fn encode_nrcpus(available: u32, online: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(8);
    out.extend_from_slice(&available.to_le_bytes());
    out.extend_from_slice(&online.to_le_bytes());
    out
}

/// The EVENT_DESC section; `attrs` all have `attr_size` bytes.
pub(crate) fn encode_event_desc(attrs: &[FileAttr], attr_size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(attrs.len() as u32).to_le_bytes());
    out.extend_from_slice(&(attr_size as u32).to_le_bytes());
    for a in attrs {
        out.extend_from_slice(&a.attr);
        out.extend_from_slice(&(a.ids.len() as u32).to_le_bytes());
        put_string(&mut out, &a.name);
        for id in &a.ids {
            out.extend_from_slice(&id.to_le_bytes());
        }
    }
    out
}

/// The BUILD_ID section, in perf's layout (size byte and PERF_RECORD_MISC_BUILD_ID_SIZE set).
pub(crate) fn encode_build_ids(entries: &[BuildIdEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        let name_len = (e.path.len() + 1).next_multiple_of(NAME_ALIGN);
        let size = BUILD_ID_EVENT_SIZE + name_len;
        if size > usize::from(u16::MAX) {
            continue; // no real path is this long; perf could not describe it either
        }
        let misc = (e.misc & PERF_RECORD_MISC_CPUMODE_MASK) | PERF_RECORD_MISC_BUILD_ID_SIZE;
        out.extend_from_slice(&0u32.to_le_bytes()); // header.type: perf leaves it 0
        out.extend_from_slice(&misc.to_le_bytes());
        out.extend_from_slice(&(size as u16).to_le_bytes());
        out.extend_from_slice(&e.pid.to_le_bytes());
        let n = e.build_id.len().min(20);
        let mut id = [0u8; 24];
        id[..n].copy_from_slice(&e.build_id[..n]);
        id[20] = n as u8;
        out.extend_from_slice(&id);
        out.extend_from_slice(e.path.as_bytes());
        out.resize(out.len() + name_len - e.path.len(), 0);
    }
    out
}

/// rprof's NS_PIDS section, sorted by host pid.
pub(crate) fn encode_ns_pids(pairs: &std::collections::BTreeMap<u32, u32>) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + 8 * pairs.len());
    out.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
    for (host, ns) in pairs {
        out.extend_from_slice(&host.to_le_bytes());
        out.extend_from_slice(&ns.to_le_bytes());
    }
    out
}

/// rprof's PYTHON section: u32 nr, then nr names, each a u32 length and its UTF-8 bytes.
pub(crate) fn encode_python_names(names: &[std::sync::Arc<str>]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(names.len() as u32).to_le_bytes());
    for n in names {
        out.extend_from_slice(&(n.len() as u32).to_le_bytes());
        out.extend_from_slice(n.as_bytes());
    }
    out
}

/// Parse rprof's PYTHON section.
pub(crate) fn parse_python_names(section: &[u8]) -> Result<Vec<std::sync::Arc<str>>, String> {
    let bad = || {
        format!(
            "rprof's PYTHON section is corrupt ({} bytes)",
            section.len()
        )
    };
    let mut b = Bytes::new(section);
    let nr = b.u32().ok_or_else(bad)? as usize;
    let mut names = Vec::with_capacity(nr.min(section.len() / 4));
    for _ in 0..nr {
        let len = b.u32().ok_or_else(bad)? as usize;
        let bytes = b.take(len).ok_or_else(bad)?;
        names.push(std::sync::Arc::from(
            String::from_utf8_lossy(bytes).as_ref(),
        ));
    }
    Ok(names)
}

/// Parse rprof's NS_PIDS section (host pid -> namespace pid).
pub(crate) fn parse_ns_pids(section: &[u8]) -> Result<HashMap<u32, u32>, String> {
    let bad = || {
        format!(
            "rprof's NS_PIDS section is corrupt ({} bytes)",
            section.len()
        )
    };
    let mut b = Bytes::new(section);
    let nr = b.u32().ok_or_else(bad)? as usize;
    if b.remaining() != 8 * nr {
        return Err(bad());
    }
    let mut pairs = HashMap::with_capacity(nr);
    for _ in 0..nr {
        let host = b.u32().ok_or_else(bad)?;
        pairs.insert(host, b.u32().ok_or_else(bad)?);
    }
    Ok(pairs)
}

/// A bounds-checked little-endian cursor over a feature section.
pub(crate) struct Bytes<'a> {
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Bytes<'a> {
        Bytes { data }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.data.len()
    }

    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.data.len() {
            return None;
        }
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        Some(head)
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// Check that an EVENT_DESC section is well-formed (every count fits in the section), so that
/// linux-perf-data never sizes an allocation from a corrupt count. Returns the reason when it is not.
/// Whether linux-perf-data reads exactly `size` bytes of an attr that says it is `size` bytes long. It reads
/// field by field up to the last PERF_ATTR_SIZE_VER* the size reaches, then skips to the end of the slot: a
/// size between two versions shifts everything it reads next (in EVENT_DESC, an id count read from the wrong
/// bytes allocated 15 GB).
pub(crate) fn attr_size_is_exact(size: usize) -> bool {
    matches!(size, 64 | 72 | 80 | 96 | 104 | 112 | 120) || size >= 128
}

pub(crate) fn check_event_desc(section: &[u8]) -> Result<(), String> {
    let bad = |what: &str| format!("EVENT_DESC section is corrupt ({what})");
    let mut b = Bytes::new(section);
    let nr = b.u32().ok_or_else(|| bad("no event count"))?;
    let attr_size = b.u32().ok_or_else(|| bad("no attr size"))? as usize;
    if !(64..=4096).contains(&attr_size) {
        return Err(bad(&format!("attr size {attr_size}")));
    }
    for i in 0..nr {
        let attr = b
            .take(attr_size)
            .ok_or_else(|| bad(&format!("event {i} attr past the end")))?;
        let own_size = u32::from_le_bytes([attr[4], attr[5], attr[6], attr[7]]) as usize;
        if !attr_size_is_exact(own_size) || own_size > attr_size {
            return Err(bad(&format!("event {i} attr size {own_size}")));
        }
        let nr_ids = b.u32().ok_or_else(|| bad(&format!("event {i} id count")))? as usize;
        let name_len = b.u32().ok_or_else(|| bad(&format!("event {i} name")))? as usize;
        b.take(name_len)
            .ok_or_else(|| bad(&format!("event {i} name past the end")))?;
        if nr_ids > b.remaining() / 8 {
            return Err(bad(&format!("event {i} has {nr_ids} ids")));
        }
        b.take(nr_ids * 8);
    }
    Ok(())
}

/// Check that a CMDLINE section's string count fits in the section.
pub(crate) fn check_cmdline(section: &[u8]) -> Result<(), String> {
    let mut b = Bytes::new(section);
    let nr = b.u32().ok_or("CMDLINE section is empty")? as usize;
    if nr > b.remaining() / 4 {
        return Err(format!(
            "CMDLINE section is corrupt ({nr} strings in {} bytes)",
            section.len()
        ));
    }
    Ok(())
}

/// Parse a BUILD_ID section (perf's and rprof's layout). Entries are kept with their pid and cpumode.
pub(crate) fn parse_build_ids(section: &[u8]) -> Result<Vec<BuildIdEntry>, String> {
    let mut entries = Vec::new();
    let mut b = Bytes::new(section);
    while b.remaining() > 0 {
        let offset = section.len() - b.remaining();
        let bad = || format!("BUILD_ID section is corrupt at byte {offset}");
        let _type = b.u32().ok_or_else(bad)?;
        let misc = b.u16().ok_or_else(bad)?;
        let size = b.u16().ok_or_else(bad)? as usize;
        if size < BUILD_ID_EVENT_SIZE {
            return Err(bad());
        }
        let body = b.take(size - 8).ok_or_else(bad)?;
        let pid = i32::from_le_bytes([body[0], body[1], body[2], body[3]]);
        let id = &body[4..28];
        let len = if misc & PERF_RECORD_MISC_BUILD_ID_SIZE != 0 {
            usize::from(id[20]).min(20)
        } else {
            // Old perf: the length is 20 minus trailing all-zero 4-byte groups.
            let mut len = 20;
            while len > 0 && id[len - 4..len].iter().all(|&x| x == 0) {
                len -= 4;
            }
            len
        };
        let name = &body[28..];
        let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
        entries.push(BuildIdEntry {
            pid,
            misc: misc & PERF_RECORD_MISC_CPUMODE_MASK,
            build_id: id[..len].to_vec(),
            path: String::from_utf8_lossy(name).into_owned(),
        });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::{check_event_desc, parse_build_ids};

    /// Check that an EVENT_DESC attr whose own size falls between two PERF_ATTR_SIZE_VER* sizes is refused:
    /// linux-perf-data would read the id count 1 byte off and allocate for ~2 billion ids (a fuzzer's find).
    #[test]
    fn event_desc_attr_size_between_versions_is_refused() {
        let section = |own_size: u32| {
            let mut s = Vec::new();
            s.extend_from_slice(&1u32.to_le_bytes()); // nr
            s.extend_from_slice(&136u32.to_le_bytes()); // attr_size
            let mut attr = vec![0u8; 136];
            attr[4..8].copy_from_slice(&own_size.to_le_bytes());
            s.extend_from_slice(&attr);
            s.extend_from_slice(&0u32.to_le_bytes()); // nr_ids
            s.extend_from_slice(&4u32.to_le_bytes()); // name
            s.extend_from_slice(b"cpu\0");
            // What a reader one byte off would take as the id count: 0x71000000.
            s.extend_from_slice(&[0, 0, 0, 0x71]);
            s
        };
        assert!(check_event_desc(&section(128)).is_ok());
        assert!(check_event_desc(&section(136)).is_ok());
        let err = check_event_desc(&section(127)).unwrap_err();
        assert!(err.contains("attr size 127"), "{err}");
        assert!(check_event_desc(&section(88)).is_err());
    }

    /// Check that the NS_PIDS section reads back what was written, and that a count that does not match its
    /// bytes is refused.
    #[test]
    fn ns_pids_round_trip() {
        let pairs: std::collections::BTreeMap<u32, u32> = [(4242, 1), (4250, 7)].into();
        let bytes = super::encode_ns_pids(&pairs);
        assert_eq!(bytes.len(), 4 + 16);
        let back = super::parse_ns_pids(&bytes).unwrap();
        assert_eq!(back, pairs.into_iter().collect());
        assert!(super::parse_ns_pids(&bytes[..bytes.len() - 4]).is_err());
        let mut lying = bytes.clone();
        lying[0] = 200;
        assert!(super::parse_ns_pids(&lying).is_err());
        assert!(super::parse_ns_pids(&[]).is_err());
    }

    /// Check that the BUILD_ID parser rejects a record whose size runs past the section.
    #[test]
    fn build_id_section_bounds() {
        let mut section = Vec::new();
        section.extend_from_slice(&0u32.to_le_bytes());
        section.extend_from_slice(&0u16.to_le_bytes());
        section.extend_from_slice(&200u16.to_le_bytes());
        section.resize(60, 0);
        assert!(parse_build_ids(&section).is_err());
    }
}
