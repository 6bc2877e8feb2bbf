//! The perf mmap ring buffer: one metadata page followed by 2^n data pages. The kernel advances `data_head`;
//! we read records between our tail and the head, then publish the new `data_tail` so the kernel may reuse the
//! space. Records may wrap around the end of the buffer; they are then handed out in two parts.
use super::{PerfError, PerfEvent};
use linux_perf_event_reader::RawData;
use perf_event_open_sys::bindings::perf_event_mmap_page;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// One record in the ring, borrowed until the read callback returns.
#[derive(Clone, Copy, Debug)]
pub struct RawRecord<'a> {
    /// PERF_RECORD_* type.
    pub kind: u32,
    /// The header's misc bits.
    pub misc: u16,
    /// The whole record, header included (what a perf.data file stores).
    pub bytes: RawData<'a>,
}

impl<'a> RawRecord<'a> {
    /// The record body after the 8-byte header.
    pub fn body(&self) -> RawData<'a> {
        self.bytes
            .get(8..self.bytes.len())
            .unwrap_or(RawData::Single(&[]))
    }

    /// The whole record as one or two slices, for writing to a file.
    pub fn parts(&self) -> [&'a [u8]; 2] {
        match self.bytes {
            RawData::Single(a) => [a, &[]],
            RawData::Split(a, b) => [a, b],
        }
    }

    /// Parse the record with the layout information of the attr that produced it.
    pub fn event(
        &self,
        info: &linux_perf_event_reader::RecordParseInfo,
    ) -> linux_perf_event_reader::RawEventRecord<'a> {
        linux_perf_event_reader::RawEventRecord::new(
            linux_perf_event_reader::RecordType(self.kind),
            self.misc,
            self.body(),
            *info,
        )
    }
}

/// A mapped ring buffer of one perf event (other events may share it through SET_OUTPUT).
pub struct Ring {
    event: PerfEvent,
    map: memmap2::MmapRaw,
    data_offset: usize,
    data_size: usize,
}

impl Ring {
    /// Map `pages` data pages (a power of two) for `event`.
    pub fn new(event: PerfEvent, pages: usize) -> Result<Ring, PerfError> {
        let page = page_size();
        let pages = pages.max(1).next_power_of_two();
        let map = memmap2::MmapOptions::new()
            .len((pages + 1) * page)
            .map_raw(std::os::fd::AsRawFd::as_raw_fd(&event.as_fd()))
            .map_err(|source| PerfError::Mmap { pages, source })?;
        let meta = map.as_mut_ptr() as *const perf_event_mmap_page;
        // SAFETY: the first page of the mapping is the kernel's perf_event_mmap_page, which is initialized by
        // the time mmap returns; data_offset/data_size are written once by the kernel at mmap time.
        let (data_offset, data_size) =
            unsafe { ((*meta).data_offset as usize, (*meta).data_size as usize) };
        let (data_offset, data_size) = if data_size == 0 {
            (page, pages * page) // kernels before 4.1 leave these zero
        } else {
            (data_offset, data_size)
        };
        Ok(Ring {
            event,
            map,
            data_offset,
            data_size,
        })
    }

    /// The event that owns this buffer (others may redirect into it with [`PerfEvent::set_output`]).
    pub fn event(&self) -> &PerfEvent {
        &self.event
    }

    fn head_tail(&self) -> (&AtomicU64, &AtomicU64) {
        let meta = self.map.as_mut_ptr() as *mut perf_event_mmap_page;
        // SAFETY: data_head and data_tail are naturally aligned u64 fields of the mapped metadata page, which
        // lives as long as `self.map`. The kernel writes data_head and reads data_tail concurrently, so both
        // are accessed only through atomics.
        // ATOMICS: see `read` for the orderings used.
        unsafe {
            (
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*meta).data_head)),
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*meta).data_tail)),
            )
        }
    }

    /// Bytes waiting to be read.
    pub fn pending(&self) -> u64 {
        let (head, tail) = self.head_tail();
        head.load(Ordering::Acquire)
            .wrapping_sub(tail.load(Ordering::Relaxed))
    }

    /// Hand every complete record now in the buffer to `f`, oldest first, then free their space.
    /// Returns the number of records read.
    pub fn read(&mut self, f: impl FnMut(RawRecord<'_>)) -> usize {
        self.read_at_most(usize::MAX, f).0
    }

    /// As [`Ring::read`], but at most `max` records; returns the records read and whether more were left.
    pub fn read_at_most(&mut self, max: usize, mut f: impl FnMut(RawRecord<'_>)) -> (usize, bool) {
        let (head_a, tail_a) = self.head_tail();
        // ATOMICS: Acquire pairs with the kernel's release of data_head (smp_store_release in
        // perf_output_put_handle), so the record bytes before head are visible to us.
        let head = head_a.load(Ordering::Acquire);
        // ATOMICS: only this reader writes data_tail, so a relaxed load sees our own last store.
        let mut tail = tail_a.load(Ordering::Relaxed);
        // SAFETY: [data_offset, data_offset + data_size) lies inside the mapping. We only look at the bytes in
        // [tail, head), which the kernel has published and will not overwrite until we advance data_tail.
        let data = unsafe {
            std::slice::from_raw_parts(
                (self.map.as_mut_ptr() as *const u8).add(self.data_offset),
                self.data_size,
            )
        };
        let mut count = 0;
        while head.wrapping_sub(tail) >= 8 && count < max {
            let start = (tail % self.data_size as u64) as usize;
            // Headers are 8-byte aligned and the buffer size is a multiple of 8: a header never wraps.
            let header = &data[start..start + 8];
            let kind = u32::from_ne_bytes(header[0..4].try_into().expect("4 bytes"));
            let misc = u16::from_ne_bytes(header[4..6].try_into().expect("2 bytes"));
            let size = u16::from_ne_bytes(header[6..8].try_into().expect("2 bytes")) as usize;
            if size < 8 || size as u64 > head.wrapping_sub(tail) {
                // A corrupt header would make us loop forever: drop what is left.
                tail = head;
                break;
            }
            let end = start + size;
            let bytes = if end <= self.data_size {
                RawData::Single(&data[start..end])
            } else {
                RawData::Split(&data[start..], &data[..end - self.data_size])
            };
            f(RawRecord { kind, misc, bytes });
            count += 1;
            tail = tail.wrapping_add(size as u64);
        }
        // ATOMICS: Release orders our reads of the records before the kernel may see the space as free
        // (it reads data_tail with smp_load_acquire / a full barrier in perf_output_begin).
        tail_a.store(tail, Ordering::Release);
        (count, head.wrapping_sub(tail) >= 8)
    }
}

impl AsFd for Ring {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.event.as_fd()
    }
}

/// The system page size.
pub fn page_size() -> usize {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .map(|n| n as usize)
        .unwrap_or(4096)
}

/// Wait until one of the rings or `extra` has data (or a ring hung up), or `timeout_ms` passes. Returns whether
/// every ring hung up (all traced tasks are gone).
pub fn poll_rings(
    rings: &[&Ring],
    extra: &[BorrowedFd<'_>],
    timeout_ms: u16,
) -> Result<bool, PerfError> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds: Vec<PollFd> = rings
        .iter()
        .map(|r| PollFd::new(r.as_fd(), PollFlags::POLLIN))
        .chain(extra.iter().map(|fd| PollFd::new(*fd, PollFlags::POLLIN)))
        .collect();
    match poll(&mut fds, PollTimeout::from(timeout_ms)) {
        Ok(_) => {}
        Err(nix::errno::Errno::EINTR) => return Ok(false),
        Err(e) => return Err(PerfError::Poll(e.into())),
    }
    let hup = PollFlags::POLLHUP | PollFlags::POLLERR;
    let rings = &fds[..rings.len()];
    Ok(!rings.is_empty()
        && rings
            .iter()
            .all(|p| p.revents().is_some_and(|r| r.intersects(hup))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a record split by the wrap gives back its body and parts in order.
    #[test]
    fn split_record_body_and_parts() {
        let a = [9u8, 0, 0, 0, 0, 0, 16, 0, 1, 2];
        let b = [3u8, 4, 5, 6, 7, 8];
        let r = RawRecord {
            kind: 9,
            misc: 0,
            bytes: RawData::Split(&a, &b),
        };
        assert_eq!(r.body().as_slice().as_ref(), &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(r.parts(), [&a[..], &b[..]]);
    }
}
