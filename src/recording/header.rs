//! The parts of a perf.data file around the data section: the file header, the feature section table and
//! the metadata feature sections, checked before linux-perf-data is given the file (so that no count or
//! bound it would trust can make it panic or allocate without bound), and the patched view it is given.
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use linux_perf_data::{Feature, PerfFile, PerfFileReader};

use super::convert::read_u64;
use super::features::{
    attr_size_is_exact, check_cmdline, check_event_desc, parse_build_ids, HEADER_CMDLINE,
    HEADER_EVENT_DESC,
};
use super::writer::{FileHeader, HEADER_SIZE};
use super::{BuildIdEntry, Meta};

/// Check the file header of a file of `file_len` bytes: the magic (little-endian PERFILE2), the header and
/// attr sizes, and that the attrs section and the start of the data section lie inside the file.
pub(super) fn check_header(
    header: &[u8; HEADER_SIZE as usize],
    file_len: u64,
) -> Result<FileHeader, String> {
    match &header[..8] {
        b"PERFILE2" => {}
        b"2ELIFREP" => return Err("big-endian perf.data files are not supported".into()),
        b"PERFFILE" => return Err("the old perf.data version 1 format is not supported".into()),
        _ => return Err("it does not start with the PERFILE2 magic".into()),
    }
    let word = |i: usize| read_u64(header, 8 + 8 * i);
    let (header_size, attr_size) = (word(0), word(1));
    let (attrs, data) = ((word(2), word(3)), (word(4), word(5)));
    let features = [word(8), word(9), word(10), word(11)];
    if header_size < HEADER_SIZE || header_size > file_len {
        return Err(format!("invalid header size {header_size}"));
    }
    if !(64 + 16..=4096 + 16).contains(&attr_size) {
        return Err(format!("invalid attr size {attr_size}"));
    }
    if attrs.1 < attr_size || section_end(attrs.0, attrs.1, file_len).is_none() {
        return Err(format!(
            "the attrs section ({} bytes at {}) is not inside the file",
            attrs.1, attrs.0
        ));
    }
    if data.0 < header_size || data.0 > file_len {
        return Err(format!(
            "the data section offset {} is not inside the file",
            data.0
        ));
    }
    Ok(FileHeader {
        attr_size,
        attrs,
        data,
        features,
    })
}

/// Check each attr of the attrs section (`attrs` = offset and size, `attr_size` per slot, which ends with the
/// 16-byte ids section): its own size must be one linux-perf-data reads exactly and fit the slot.
pub(super) fn check_attrs(
    file: &mut BufReader<File>,
    attrs: (u64, u64),
    attr_size: u64,
) -> Result<(), String> {
    let count = attrs.1 / attr_size;
    if count > MAX_ATTRS {
        return Err(format!(
            "its attrs section holds {count} attrs (at most {MAX_ATTRS} are read)"
        ));
    }
    let io = |e: std::io::Error| format!("cannot read its attrs section: {e}");
    let mut slot = vec![0u8; attr_size as usize];
    for i in 0..count {
        file.seek(SeekFrom::Start(attrs.0 + i * attr_size))
            .map_err(io)?;
        file.read_exact(&mut slot).map_err(io)?;
        let size = u32::from_le_bytes([slot[4], slot[5], slot[6], slot[7]]) as u64;
        if !attr_size_is_exact(size as usize) || size + 16 > attr_size {
            return Err(format!(
                "attr {i} has an invalid size {size} (its slot is {attr_size} bytes)"
            ));
        }
    }
    Ok(())
}

/// The event ids of each attr, read from the ids section each attr slot of the attrs section points to
/// (`attrs` = offset and size, `attr_size` per slot, checked by [`check_attrs`]). linux-perf-data reads them
/// only with an EVENT_DESC feature section, which an unfinished recording lacks; without them, records of
/// several attrs could not be told apart. An attr whose ids section is not inside the file has none.
pub(super) fn attr_ids(
    file: &File,
    attrs: (u64, u64),
    attr_size: u64,
    file_len: u64,
) -> Vec<Vec<u64>> {
    use std::os::unix::fs::FileExt;
    let word = |at: u64| {
        let mut b = [0u8; 8];
        file.read_exact_at(&mut b, at)
            .ok()
            .map(|_| u64::from_le_bytes(b))
    };
    let ids_of = |slot: u64| -> Option<Vec<u64>> {
        let (offset, size) = (word(slot + attr_size - 16)?, word(slot + attr_size - 8)?);
        section_end(offset, size, file_len)?;
        let mut bytes = vec![0u8; usize::try_from(size).ok()?];
        file.read_exact_at(&mut bytes, offset).ok()?;
        let ids = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()));
        Some(ids.collect())
    };
    (0..(attrs.1 / attr_size).min(MAX_ATTRS))
        .map(|i| ids_of(attrs.0 + i * attr_size).unwrap_or_default())
        .collect()
}

/// The most attrs a recording may have (perf records one per event; thousands would be probe groups).
const MAX_ATTRS: u64 = 65_536;

/// The file as linux-perf-data sees it: the real file with some byte ranges replaced (a header with
/// validated sections, and the feature table moved to where the crate looks for it).
pub(super) struct PatchedFile {
    inner: BufReader<File>,
    patches: Vec<(u64, Vec<u8>)>,
    pos: u64,
}

impl Read for PatchedFile {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut limit = buf.len() as u64;
        for (start, bytes) in &self.patches {
            let end = start + bytes.len() as u64;
            if (*start..end).contains(&self.pos) {
                let from = (self.pos - start) as usize;
                let n = (bytes.len() - from).min(buf.len());
                buf[..n].copy_from_slice(&bytes[from..from + n]);
                self.pos += n as u64;
                self.inner.seek(SeekFrom::Start(self.pos))?;
                return Ok(n);
            }
            if *start > self.pos {
                limit = limit.min(start - self.pos);
            }
        }
        let n = self.inner.read(&mut buf[..limit as usize])?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for PatchedFile {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.pos = self.inner.seek(to)?;
        Ok(self.pos)
    }
}

/// `offset + size` if that range lies inside a file of `file_len` bytes.
pub(super) fn section_end(offset: u64, size: u64, file_len: u64) -> Option<u64> {
    offset.checked_add(size).filter(|&end| end <= file_len)
}

/// Read the feature section table at `table_at` and check that every section lies inside the file and that
/// the counts in EVENT_DESC and CMDLINE fit their sections.
pub(super) fn read_feature_table(
    file: &mut BufReader<File>,
    features: [u64; 4],
    table_at: u64,
    file_len: u64,
) -> Result<(), String> {
    let count: u32 = features.iter().map(|w| w.count_ones()).sum();
    let table_len = 16 * u64::from(count);
    if section_end(table_at, table_len, file_len).is_none() {
        return Err(format!(
            "its feature section table ({table_len} bytes at byte {table_at}) is missing: the file is truncated"
        ));
    }
    let io = |e: std::io::Error| format!("cannot read its feature sections: {e}");
    let mut table = vec![0u8; table_len as usize];
    file.seek(SeekFrom::Start(table_at)).map_err(io)?;
    file.read_exact(&mut table).map_err(io)?;
    let set_bits = (0..256).filter(|bit| features[bit / 64] & (1 << (bit % 64)) != 0);
    for (i, bit) in set_bits.enumerate() {
        let (offset, size) = (read_u64(&table, 16 * i), read_u64(&table, 16 * i + 8));
        if section_end(offset, size, file_len).is_none() {
            return Err(format!(
                "its feature section {bit} ({size} bytes at byte {offset}) is past the end of the file"
            ));
        }
        if bit == HEADER_EVENT_DESC || bit == HEADER_CMDLINE {
            let mut bytes = vec![0u8; size as usize];
            file.seek(SeekFrom::Start(offset)).map_err(io)?;
            file.read_exact(&mut bytes).map_err(io)?;
            if bit == HEADER_EVENT_DESC {
                check_event_desc(&bytes)?;
            } else {
                check_cmdline(&bytes)?;
            }
        }
    }
    Ok(())
}

/// Let linux-perf-data parse `path` with `patches` laid over its bytes.
pub(super) fn parse_patched(
    path: &Path,
    patches: Vec<(u64, Vec<u8>)>,
) -> Result<PerfFileReader<PatchedFile>, linux_perf_data::Error> {
    let inner = BufReader::with_capacity(1 << 16, File::open(path)?);
    PerfFileReader::parse_file(PatchedFile {
        inner,
        patches,
        pos: 0,
    })
}

/// The HOSTNAME, OSRELEASE, NRCPUS, CMDLINE and BUILD_ID feature sections.
pub(super) fn read_meta(perf_file: &PerfFile) -> Result<(Meta, Vec<BuildIdEntry>), String> {
    let bad = |e: linux_perf_data::Error| format!("its feature sections are corrupt: {e}");
    let nr_cpus = perf_file.nr_cpus().map_err(bad)?;
    let string = |s: Option<&str>| s.unwrap_or_default().to_string();
    let meta = Meta {
        hostname: string(perf_file.hostname().map_err(bad)?),
        os_release: string(perf_file.os_release().map_err(bad)?),
        nr_cpus_online: nr_cpus.map_or(0, |n| n.nr_cpus_online),
        nr_cpus_available: nr_cpus.map_or(0, |n| n.nr_cpus_available),
        cmdline: perf_file
            .cmdline()
            .map_err(bad)?
            .unwrap_or_default()
            .into_iter()
            .map(str::to_string)
            .collect(),
    };
    let build_ids = match perf_file.feature_section_data(Feature::BUILD_ID) {
        Some(section) => parse_build_ids(section)?,
        None => Vec::new(),
    };
    Ok((meta, build_ids))
}

/// How much of the data section to read, and whether the feature sections exist.
pub(super) struct DataExtent {
    pub(super) len: u64,
    /// What is wrong with the file's end, reported after its events.
    pub(super) problem: Option<String>,
    pub(super) keep_features: bool,
    /// The header was never completed.
    pub(super) unfinished: bool,
    /// The file is shorter than its finished header says.
    pub(super) truncated: bool,
}

impl DataExtent {
    pub(super) fn of(header: &FileHeader, file_len: u64) -> DataExtent {
        let data = header.data;
        let available = file_len - data.0;
        let truncated = section_end(data.0, data.1, file_len).is_none();
        // An unfinished recording: rprof's writer keeps the feature bits 0 and updates the data size as it goes
        // (so `perf report` can read a killed recording); perf leaves the data size 0 until it finishes.
        // With tracepoints, rprof's writer keeps the TRACING_DATA bit (and a table after the records).
        let tracing_only = header.features == [1 << super::features::HEADER_TRACING_DATA, 0, 0, 0];
        let unfinished = data.1 == 0 || header.features == [0; 4] || tracing_only;
        let (len, problem) = if unfinished {
            let why = "its header was never completed, so it has no build ids or command line";
            let len = match tracing_only && data.1 != 0 {
                // The records end where the feature table is.
                true => available.min(data.1),
                false => available,
            };
            (len, Some(why.to_string()))
        } else if truncated {
            let why = format!(
                "the file is truncated: its data section needs {} bytes after byte {}",
                data.1, data.0
            );
            (available, Some(why))
        } else {
            (data.1, None)
        };
        DataExtent {
            len,
            keep_features: problem.is_none(),
            problem,
            unfinished,
            truncated: truncated && !unfinished,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(attr_size: u64, attrs: (u64, u64), data: (u64, u64)) -> [u8; HEADER_SIZE as usize] {
        let features = [0; 4];
        FileHeader {
            attr_size,
            attrs,
            data,
            features,
        }
        .to_bytes()
    }

    /// Check that a header's magic, sizes and section bounds are checked against the file's length.
    #[test]
    fn header_checks() {
        let good = header(136, (104, 136), (240, 1000));
        let fields = check_header(&good, 2000).unwrap();
        assert_eq!((fields.attrs, fields.data), ((104, 136), (240, 1000)));
        let mut big_endian = good;
        big_endian[..8].copy_from_slice(b"2ELIFREP");
        assert!(check_header(&big_endian, 2000)
            .unwrap_err()
            .contains("big-endian"));
        let mut other = good;
        other[..8].copy_from_slice(b"NOTPERF!");
        assert!(check_header(&other, 2000)
            .unwrap_err()
            .contains("PERFILE2 magic"));
        let err = check_header(&header(8, (104, 136), (240, 0)), 2000).unwrap_err();
        assert!(err.contains("invalid attr size 8"), "{err}");
        let err = check_header(&header(136, (104, 1 << 40), (240, 0)), 2000).unwrap_err();
        assert!(err.contains("attrs section"), "{err}");
        let err = check_header(&header(136, (104, 136), (4000, 0)), 2000).unwrap_err();
        assert!(err.contains("data section offset 4000"), "{err}");
    }

    /// Check that `section_end` refuses ranges past the file and sums that overflow.
    #[test]
    fn section_bounds() {
        assert_eq!(section_end(10, 20, 30), Some(30));
        assert_eq!(section_end(10, 21, 30), None);
        assert_eq!(section_end(u64::MAX, 2, u64::MAX), None);
    }
}
