//! Reading the per-CPU ring buffers of a tracefs instance through `per_cpu/cpuN/trace_pipe_raw`.
//!
//! Two ways, chosen per CPU:
//! - **Mapped** (Linux 6.10+): map the meta page (`struct trace_buffer_meta`, include/uapi/linux/trace_mmap.h)
//!   and the sub-buffers, then consume with `TRACE_MMAP_IOCTL_GET_READER`. The kernel keeps one "reader"
//!   sub-buffer out of the ring for us: `meta.reader.id` names it. Each GET_READER either marks the data now on
//!   the reader sub-buffer consumed (`meta.reader.read` moves to its commit; the writer may still be appending
//!   to it when the ring is nearly empty) or, when all of it was, swaps in the next sub-buffer and marks that
//!   one consumed. The kernel assumes we read all it marked, so we keep our own position (a [`Cursor`]) in the
//!   reader sub-buffer and read up to its commit word each time; a drain ends at a GET_READER that did neither.
//!   The sub-buffer stays ours until the next GET_READER, so its committed bytes do not change.
//! - **Read**: `read()` one sub-buffer at a time; each read returns a page with its own header, until EAGAIN.
//!
//! While a ring is mapped its buffer cannot be resized: set the instance's buffer size before opening.
//! Dropping [`FtraceRings`] unmaps and closes everything. One consumer per instance: another reader of the
//! same `trace_pipe_raw` would take pages away from this one.
use super::PerfError;
use crate::tracefs::page::{Cursor, Missed, PageHeader, PageLayout};
use memmap2::{MmapOptions, MmapRaw};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

// TRACE_MMAP_IOCTL_GET_READER = _IO('R', 0x20) (include/uapi/linux/trace_mmap.h).
nix::ioctl_none!(trace_mmap_get_reader, b'R', 0x20);

/// Byte offsets of the `struct trace_buffer_meta` fields read here.
mod meta {
    pub const META_PAGE_SIZE: usize = 0;
    pub const META_STRUCT_LEN: usize = 4;
    pub const SUBBUF_SIZE: usize = 8;
    pub const NR_SUBBUFS: usize = 12;
    pub const READER_ID: usize = 24;
    pub const READER_READ: usize = 28;
    pub const OVERRUN: usize = 48;
    /// The fields above end here; a shorter struct is another layout, and is read instead of mapped.
    pub const MIN_LEN: u32 = 56;
}

/// How one CPU's ring is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingMode {
    /// Memory-mapped, consumed with TRACE_MMAP_IOCTL_GET_READER.
    Mapped,
    /// Copied page by page with `read()`.
    Read,
}

/// Events the kernel reported lost, summed over the CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lost {
    /// Events lost, as counted on the pages that follow them (`RB_MISSED_STORED`).
    pub events: u64,
    /// Times events were lost without a count: the page was too full to store it.
    pub unknown: u64,
    /// Events overwritten since the mapped rings were opened, from their meta pages: exact, also when pages
    /// had no room for the count (read rings: 0; `per_cpu/cpuN/stats` has their overrun).
    pub overrun: u64,
    /// Pages (or the rest of a page) skipped because they did not parse.
    pub bad_pages: u64,
}

/// The rings of every online CPU of one tracefs instance.
pub struct FtraceRings {
    rings: Vec<CpuRing>,
    layout: PageLayout,
}

struct CpuRing {
    cpu: u32,
    path: PathBuf,
    file: File,
    reader: Reader,
    lost: Lost,
    /// The time of the last event read from this ring (0: none yet).
    last: u64,
}

/// A hole in one CPU's stream: the page read after it says events were lost (overwritten) before it, so the
/// events lost were written after `after` (the last event read from that CPU, 0 if none) and before `before`
/// (the first event of the flagged page).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    pub cpu: u32,
    pub after: u64,
    pub before: u64,
}

enum Reader {
    Mapped(Box<MappedRing>),
    Read { buf: Vec<u8>, max_pages: usize },
}

impl FtraceRings {
    /// Open `per_cpu/cpuN/trace_pipe_raw` of every online CPU under `instance_dir` (an instance's directory or
    /// the tracefs root), mapped when the kernel allows it, else read. `force_read` skips mapping.
    pub fn open(instance_dir: &Path, force_read: bool) -> Result<FtraceRings, PerfError> {
        let layout = PageLayout::read(instance_dir);
        let subbuf = read_number(&instance_dir.join("buffer_subbuf_size_kb"))
            .map(|kb| kb as usize * 1024)
            .unwrap_or_else(super::ring::page_size);
        let buffer_kb = read_number(&instance_dir.join("buffer_size_kb")).unwrap_or(1 << 16);
        let max_pages = (buffer_kb as usize * 1024).div_ceil(subbuf.max(1)) + 2;
        let mut rings = Vec::new();
        for cpu in super::online_cpus()? {
            let path = instance_dir.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw"));
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&path)
                .map_err(|source| PerfError::TraceOpen {
                    path: path.clone(),
                    source,
                })?;
            let mapped = if force_read {
                None
            } else {
                MappedRing::map(&file, &layout).map(Box::new)
            };
            let reader = match mapped {
                Some(m) => Reader::Mapped(m),
                None => Reader::Read {
                    buf: vec![0; subbuf],
                    max_pages,
                },
            };
            rings.push(CpuRing {
                cpu,
                path,
                file,
                reader,
                lost: Lost::default(),
                last: 0,
            });
        }
        Ok(FtraceRings { rings, layout })
    }

    /// The CPUs, in the order of [`FtraceRings::fds`].
    pub fn cpus(&self) -> Vec<u32> {
        self.rings.iter().map(|r| r.cpu).collect()
    }

    /// How each CPU's ring is read.
    pub fn modes(&self) -> Vec<(u32, RingMode)> {
        self.rings.iter().map(|r| (r.cpu, r.mode())).collect()
    }

    /// [`RingMode::Mapped`] when every ring is mapped, else [`RingMode::Read`].
    pub fn mode(&self) -> RingMode {
        if !self.rings.is_empty() && self.rings.iter().all(|r| r.mode() == RingMode::Mapped) {
            RingMode::Mapped
        } else {
            RingMode::Read
        }
    }

    /// The open `trace_pipe_raw` files, for `poll` (POLLIN when data is there, subject to `buffer_percent`).
    pub fn fds(&self) -> Vec<BorrowedFd<'_>> {
        self.rings.iter().map(|r| r.file.as_fd()).collect()
    }

    /// The events reported lost so far.
    pub fn lost(&self) -> Lost {
        let mut total = Lost::default();
        for r in &self.rings {
            total.events += r.lost.events;
            total.unknown += r.lost.unknown;
            total.bad_pages += r.lost.bad_pages;
            if let Reader::Mapped(m) = &r.reader {
                total.overrun += m.overrun().saturating_sub(m.overrun_at_open);
            }
        }
        total
    }

    /// Hand every event now in the rings to `f(cpu, timestamp, payload)`, one CPU after the other (each CPU's
    /// events in time order); the payload starts at the event's `common_type`. Returns the number of events.
    pub fn read(&mut self, f: impl FnMut(u32, u64, &[u8])) -> Result<usize, PerfError> {
        self.read_gaps(f, |_| {})
    }

    /// As [`FtraceRings::read`], and hand each hole the pages announce (events lost before them: overwrite
    /// mode flags the first page read after it) to `gap`, before the events that follow it.
    pub fn read_gaps(
        &mut self,
        f: impl FnMut(u32, u64, &[u8]),
        gap: impl FnMut(Gap),
    ) -> Result<usize, PerfError> {
        Ok(self.read_at_most(|_| usize::MAX, f, gap)?.0)
    }

    /// As [`FtraceRings::read_gaps`], but about `max(last)` events of each CPU, where `last` is the time of
    /// the last event read from it (read mode stops at the end of the page that reaches the bound). Also
    /// returns, when a ring may have events left, the earliest time of the last events read from such rings:
    /// what is left of them is not older.
    pub fn read_at_most(
        &mut self,
        max: impl Fn(u64) -> usize,
        mut f: impl FnMut(u32, u64, &[u8]),
        mut gap: impl FnMut(Gap),
    ) -> Result<(usize, Option<u64>), PerfError> {
        let (mut count, mut left) = (0, None::<u64>);
        for ring in &mut self.rings {
            let (n, more) = ring.drain(&self.layout, max(ring.last), &mut f, &mut gap)?;
            count += n;
            if more {
                left = Some(left.map_or(ring.last, |l| l.min(ring.last)));
            }
        }
        Ok((count, left))
    }
}

fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl CpuRing {
    fn mode(&self) -> RingMode {
        match self.reader {
            Reader::Mapped(_) => RingMode::Mapped,
            Reader::Read { .. } => RingMode::Read,
        }
    }

    /// Read up to about `max` events; returns the events read and whether some may be left.
    fn drain(
        &mut self,
        layout: &PageLayout,
        max: usize,
        f: &mut impl FnMut(u32, u64, &[u8]),
        gap: &mut impl FnMut(Gap),
    ) -> Result<(usize, bool), PerfError> {
        let cpu = self.cpu;
        let last = &mut self.last;
        let mut emit = |ts: u64, payload: &[u8], hole: bool| {
            if hole {
                gap(Gap {
                    cpu,
                    after: *last,
                    before: ts,
                });
            }
            *last = ts;
            f(cpu, ts, payload)
        };
        match &mut self.reader {
            Reader::Mapped(m) => m
                .drain(&self.file, layout, max, &mut self.lost, &mut emit)
                .map_err(|source| PerfError::TraceIoctl {
                    path: self.path.clone(),
                    source,
                }),
            Reader::Read { buf, max_pages } => read_pages(
                &mut self.file,
                buf,
                *max_pages,
                max,
                layout,
                &mut self.lost,
                &mut emit,
            )
            .map_err(|source| PerfError::TraceRead {
                path: self.path.clone(),
                source,
            }),
        }
    }
}

/// Count what a page says was lost before it; true when it says events were.
fn count_missed(lost: &mut Lost, missed: Missed) -> bool {
    match missed {
        Missed::None => return false,
        Missed::Unknown => lost.unknown += 1,
        Missed::Count(n) => lost.events += n,
    }
    true
}

/// Read mode: one page per `read()`, until EAGAIN (or `max_pages`, the size of the buffer, so that a writer
/// faster than us cannot keep us here, or the page that reaches `max` events). Returns the events read and
/// whether it stopped before EAGAIN.
fn read_pages(
    file: &mut File,
    buf: &mut [u8],
    max_pages: usize,
    max: usize,
    layout: &PageLayout,
    lost: &mut Lost,
    emit: &mut impl FnMut(u64, &[u8], bool),
) -> std::io::Result<(usize, bool)> {
    let mut count = 0;
    let mut pages = 0;
    let mut hole = false;
    loop {
        if pages >= max_pages || count >= max {
            return Ok((count, true));
        }
        let n = match file.read(buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        pages += 1;
        let Ok(page) = layout.page(&buf[..n]) else {
            lost.bad_pages += 1;
            continue;
        };
        hole |= count_missed(lost, page.missed);
        for event in page.events() {
            match event {
                Ok(e) => {
                    emit(e.timestamp, e.payload, std::mem::take(&mut hole));
                    count += 1;
                }
                Err(_) => lost.bad_pages += 1,
            }
        }
    }
    Ok((count, false))
}

/// A mapped ring: the meta page, all sub-buffers, and our position in the reader sub-buffer.
struct MappedRing {
    meta: MmapRaw,
    data: MmapRaw,
    subbuf_size: usize,
    nr_subbufs: u32,
    /// The sub-buffer `cursor` walks.
    current: u32,
    cursor: Cursor,
    /// Bytes of `current` consumed by an earlier reader before we mapped it (skipped once).
    skip: usize,
    /// `current` became the reader through our GET_READER: its lost-event flags are ours to count.
    fresh: bool,
    /// `current` failed to parse: wait for the next sub-buffer.
    bad: bool,
    /// A page said events were lost before it: the next event follows a hole.
    hole: bool,
    overrun_at_open: u64,
}

impl MappedRing {
    /// Map the ring of `file`. None when the kernel refuses the mapping (before 6.10, or a buffer that cannot
    /// be mapped) or its meta page is not the layout this reader knows: the caller reads instead.
    fn map(file: &File, layout: &PageLayout) -> Option<MappedRing> {
        let page = super::ring::page_size();
        let meta = MmapOptions::new()
            .len(page)
            .map_raw_read_only(file.as_raw_fd())
            .ok()?;
        let word = |offset| load_u32(&meta, offset, Ordering::Acquire);
        let (meta_len, struct_len) = (word(meta::META_PAGE_SIZE), word(meta::META_STRUCT_LEN));
        let (subbuf_size, nr_subbufs) = (word(meta::SUBBUF_SIZE) as usize, word(meta::NR_SUBBUFS));
        let sane = struct_len >= meta::MIN_LEN
            && meta_len as usize >= page
            && (meta_len as usize).is_multiple_of(page)
            && subbuf_size > layout.data_offset
            && subbuf_size.is_multiple_of(page)
            && nr_subbufs > 0;
        if !sane {
            return None;
        }
        let data = MmapOptions::new()
            .offset(meta_len as u64)
            .len(subbuf_size * nr_subbufs as usize)
            .map_raw_read_only(file.as_raw_fd())
            .ok()?;
        let mut ring = MappedRing {
            meta,
            data,
            subbuf_size,
            nr_subbufs,
            current: 0,
            cursor: Cursor::new(0),
            skip: 0,
            fresh: false,
            bad: false,
            hole: false,
            overrun_at_open: 0,
        };
        ring.current = ring.reader_id();
        ring.skip = ring.kernel_read() as usize;
        ring.overrun_at_open = ring.overrun();
        Some(ring)
    }

    /// The kernel's read position in the reader sub-buffer (`meta.reader.read`), set by GET_READER.
    fn kernel_read(&self) -> u32 {
        load_u32(&self.meta, meta::READER_READ, Ordering::Acquire)
    }

    fn reader_id(&self) -> u32 {
        load_u32(&self.meta, meta::READER_ID, Ordering::Acquire)
    }

    /// Events overwritten before they were read, as of the last GET_READER. (`reader.lost_events` is not used:
    /// GET_READER stores the count on the swapped-in sub-buffer and clears it before updating the meta page.)
    fn overrun(&self) -> u64 {
        load_u64(&self.meta, meta::OVERRUN)
    }

    /// The header of sub-buffer `id`, loading the commit word with Acquire: it pairs with the writer's
    /// `smp_wmb()` before it publishes a commit (rb_set_commit_to_write), so the event bytes below the commit
    /// are visible once we see it.
    fn header(&self, id: u32, layout: &PageLayout) -> PageHeader {
        let base = id as usize * self.subbuf_size;
        let commit = match layout.commit.size {
            4 => load_u32(&self.data, base + layout.commit.offset, Ordering::Acquire) as u64,
            _ => load_u64_ordered(&self.data, base + layout.commit.offset, Ordering::Acquire),
        };
        let timestamp = load_u64(&self.data, base + layout.timestamp.offset);
        PageHeader { timestamp, commit }
    }

    /// The committed event bytes of sub-buffer `id` of `data` (`len` clamped to the sub-buffer by the caller).
    fn events_of<'a>(
        data: &'a MmapRaw,
        subbuf_size: usize,
        id: u32,
        layout: &PageLayout,
        len: usize,
    ) -> &'a [u8] {
        let start = id as usize * subbuf_size + layout.data_offset;
        // SAFETY: `id < nr_subbufs` (checked by the caller) and `len <= subbuf_size - data_offset`, so the range
        // lies inside the data mapping, which lives as long as `data`. These bytes are below the sub-buffer's
        // commit, which we loaded with Acquire: the writer finished them before publishing that commit. The
        // sub-buffer is the reader sub-buffer, which the kernel keeps out of the ring until our next
        // TRACE_MMAP_IOCTL_GET_READER: the writer only appends past the commit, and overwrite mode only reuses
        // sub-buffers in the ring, so nothing writes these bytes while the slice lives (it is dropped before the
        // next ioctl, see `drain`). The mapping is read-only, so we cannot write them either.
        unsafe { std::slice::from_raw_parts(data.as_ptr().add(start), len) }
    }

    /// Read up to `max` events; returns the events read and whether some may be left. Stopping at `max`
    /// inside the reader sub-buffer leaves the cursor where it is, and the next call goes on from it.
    fn drain(
        &mut self,
        file: &File,
        layout: &PageLayout,
        max: usize,
        lost: &mut Lost,
        emit: &mut impl FnMut(u64, &[u8], bool),
    ) -> std::io::Result<(usize, bool)> {
        let mut count = 0;
        let room = self.subbuf_size - layout.data_offset;
        // A sub-buffer takes one or two rounds (one GET_READER consumes it, the next swaps in another), and the
        // ring has nr_subbufs of them: the bound keeps a writer faster than us from holding us here.
        for _ in 0..2 * self.nr_subbufs as usize + 4 {
            let id = self.reader_id();
            if id >= self.nr_subbufs {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("reader sub-buffer id {id} out of {}", self.nr_subbufs),
                ));
            }
            if id != self.current {
                self.current = id;
                self.cursor = Cursor::new(0);
                self.skip = 0;
                self.fresh = true;
                self.bad = false;
            }
            let header = self.header(id, layout);
            let len = header.data_len().min(room);
            if self.cursor.offset() == 0 {
                // The page timestamp is written before the first commit: read it once there is data.
                self.cursor = Cursor::new(header.timestamp);
            }
            if self.fresh && len > 0 {
                self.fresh = false;
                self.hole |= count_missed(lost, self.missed(id, layout, &header, len));
            }
            if !self.bad {
                let data = Self::events_of(&self.data, self.subbuf_size, id, layout, len);
                if self.skip > 0 {
                    let skip = std::mem::take(&mut self.skip);
                    self.bad = self.cursor.skip_to(data, skip).is_err();
                }
                while !self.bad {
                    if count >= max {
                        return Ok((count, true));
                    }
                    match self.cursor.next(data) {
                        Ok(Some(e)) => {
                            emit(e.timestamp, e.payload, std::mem::take(&mut self.hole));
                            count += 1;
                        }
                        Ok(None) => break,
                        Err(_) => {
                            lost.bad_pages += 1;
                            self.bad = true;
                        }
                    }
                }
            }
            let read_before = self.kernel_read();
            // SAFETY: the ioctl takes no argument and only updates the kernel's reader state and the meta page;
            // `file` is the open trace_pipe_raw whose ring is mapped. No slice of the sub-buffers is alive here.
            unsafe { trace_mmap_get_reader(file.as_raw_fd()) }.map_err(std::io::Error::from)?;
            // GET_READER either marks the reader sub-buffer's unread data consumed (same id, `reader.read` moves
            // to its commit) or, when all of it was, swaps in the next sub-buffer. Only a call that did neither
            // means the ring is empty; a call that consumed must be followed by another, which may swap.
            let consumed = self.kernel_read() != read_before;
            if self.reader_id() == id && !consumed {
                let grown = self.header(id, layout).data_len().min(room) > len;
                if !grown || self.bad {
                    return Ok((count, false));
                }
            }
        }
        Ok((count, true))
    }

    /// The lost events announced by sub-buffer `id`'s commit flags (count stored after its `len` data bytes).
    fn missed(&self, id: u32, layout: &PageLayout, header: &PageHeader, len: usize) -> Missed {
        if !header.missed_events() {
            return Missed::None;
        }
        let at = id as usize * self.subbuf_size + layout.data_offset + len;
        if !header.missed_stored()
            || len + layout.commit.size > self.subbuf_size - layout.data_offset
        {
            return Missed::Unknown;
        }
        Missed::Count(match layout.commit.size {
            4 => load_u32(&self.data, at, Ordering::Relaxed) as u64,
            // Events are 4-byte aligned: the count after them may not be 8-byte aligned.
            _ if !at.is_multiple_of(8) => {
                let low = load_u32(&self.data, at, Ordering::Relaxed) as u64;
                let high = load_u32(&self.data, at + 4, Ordering::Relaxed) as u64;
                if cfg!(target_endian = "little") {
                    low | high << 32
                } else {
                    high | low << 32
                }
            }
            _ => load_u64(&self.data, at),
        })
    }
}

/// Load a u32 of a mapping (meta page or sub-buffer) that the kernel may write concurrently.
fn load_u32(map: &MmapRaw, offset: usize, order: Ordering) -> u32 {
    assert!(
        offset.is_multiple_of(4) && offset + 4 <= map.len(),
        "u32 at {offset} outside the map"
    );
    // SAFETY: the offset is 4-byte aligned (and the mapping page-aligned) and inside the mapping, which lives as
    // long as `map`. The kernel writes these words concurrently, so they are read only through an atomic load;
    // an atomic load (Relaxed or Acquire, lock-free, at most 8 bytes) is allowed on read-only memory.
    unsafe { AtomicU32::from_ptr(map.as_mut_ptr().add(offset).cast()) }.load(order)
}

/// Load a u64 of a mapping with Relaxed ordering.
fn load_u64(map: &MmapRaw, offset: usize) -> u64 {
    load_u64_ordered(map, offset, Ordering::Relaxed)
}

fn load_u64_ordered(map: &MmapRaw, offset: usize, order: Ordering) -> u64 {
    assert!(
        offset.is_multiple_of(8) && offset + 8 <= map.len(),
        "u64 at {offset} outside the map"
    );
    // SAFETY: as in `load_u32`, for an 8-byte aligned u64 inside the mapping.
    unsafe { AtomicU64::from_ptr(map.as_mut_ptr().add(offset).cast()) }.load(order)
}

#[cfg(test)]
mod tests {
    /// Check that the GET_READER request is _IO('R', 0x20), as in include/uapi/linux/trace_mmap.h.
    #[test]
    fn get_reader_request_code() {
        assert_eq!(nix::request_code_none!(b'R', 0x20), 0x5220);
    }
}
