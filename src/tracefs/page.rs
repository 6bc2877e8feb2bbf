//! The ftrace ring-buffer sub-buffer ("page") format, as read from `per_cpu/cpuN/trace_pipe_raw` or seen in its
//! memory map.
//!
//! A page is a header (`events/header_page`: a u64 timestamp, a `local_t` commit, then the data) followed by
//! events. Each event starts with a 32-bit word: `type_len` in the low 5 bits and a 27-bit time delta above it.
//! `type_len` 1..=28 is a data event of `type_len * 4` bytes; 0 is a data event whose length is in the next word;
//! 29 is padding (a discarded event, or the unused end of a page); 30 extends the delta to 59 bits; 31 is an
//! absolute timestamp. The commit word is the number of data bytes, with two flags in bits 31 and 30 telling that
//! events were lost before this page and that their count is stored right after the data.
//!
//! [`Cursor`] walks the events of a page's data and can resume from where it stopped when the page grows (the
//! mapped reader re-reads a page the writer is still filling). Everything here is pure and works on bytes.
use std::path::Path;

/// `type_len` of a padding event (a discarded event or the rest of the page).
const TYPE_PADDING: u32 = 29;
/// `type_len` of a time extend (59-bit delta).
const TYPE_TIME_EXTEND: u32 = 30;
/// `type_len` of an absolute timestamp (59 bits).
const TYPE_TIME_STAMP: u32 = 31;
/// Bits of the 27-bit delta in an event header.
const TS_SHIFT: u32 = 27;
/// The 5 high bits of a timestamp that an absolute timestamp event cannot hold (the kernel's TS_MSB).
const TS_MSB: u64 = 0xf8 << 56;

/// Commit-word flag: events were lost between the previous page and this one.
pub const RB_MISSED_EVENTS: u32 = 1 << 31;
/// Commit-word flag: the number of lost events is stored after the page's data.
pub const RB_MISSED_STORED: u32 = 1 << 30;

/// Where a field of the page header lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Byte offset from the start of the page.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
}

/// The layout of a page header, from `events/header_page`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageLayout {
    /// The page's base timestamp (u64).
    pub timestamp: Field,
    /// The commit word (`local_t`: the size of a C long).
    pub commit: Field,
    /// Where the events start.
    pub data_offset: usize,
}

impl Default for PageLayout {
    /// The layout of every 64-bit kernel: timestamp at 0, commit at 8 (8 bytes), data at 16.
    fn default() -> PageLayout {
        let long = std::mem::size_of::<std::ffi::c_long>();
        PageLayout {
            timestamp: Field { offset: 0, size: 8 },
            commit: Field {
                offset: 8,
                size: long,
            },
            data_offset: 8 + long,
        }
    }
}

impl PageLayout {
    /// Parse `events/header_page` (`field: u64 timestamp;\toffset:0;\tsize:8;...` lines). None when the
    /// timestamp, commit or data field is missing or the sizes are not ones this reader handles.
    pub fn parse(text: &str) -> Option<PageLayout> {
        let field = |name: &str| -> Option<Field> {
            text.lines().find_map(|line| {
                let decl = line.trim().strip_prefix("field:")?;
                let (decl, rest) = decl.split_once(';')?;
                if decl.split_whitespace().last()? != name {
                    return None;
                }
                let value = |key: &str| {
                    rest.split(';')
                        .find_map(|kv| kv.trim().strip_prefix(key)?.trim().parse().ok())
                };
                Some(Field {
                    offset: value("offset:")?,
                    size: value("size:")?,
                })
            })
        };
        let layout = PageLayout {
            timestamp: field("timestamp")?,
            commit: field("commit")?,
            data_offset: field("data")?.offset,
        };
        let sizes_ok = layout.timestamp.size == 8 && matches!(layout.commit.size, 4 | 8);
        let fits = layout.timestamp.offset + 8 <= layout.data_offset
            && layout.commit.offset + layout.commit.size <= layout.data_offset;
        (sizes_ok && fits).then_some(layout)
    }

    /// The layout in `dir/events/header_page` (a tracefs root or instance), or the default when it cannot be
    /// read or parsed.
    pub fn read(dir: &Path) -> PageLayout {
        std::fs::read_to_string(dir.join("events/header_page"))
            .ok()
            .and_then(|text| PageLayout::parse(&text))
            .unwrap_or_default()
    }

    /// The header of `page`, or None when `page` is shorter than the header.
    pub fn header(&self, page: &[u8]) -> Option<PageHeader> {
        if page.len() < self.data_offset {
            return None;
        }
        Some(PageHeader {
            timestamp: read_uint(page, self.timestamp)?,
            commit: read_uint(page, self.commit)?,
        })
    }

    /// The lost events announced by `header`, reading a stored count from `page` (the whole page).
    pub fn missed(&self, page: &[u8], header: &PageHeader) -> Missed {
        if !header.missed_events() {
            return Missed::None;
        }
        if !header.missed_stored() {
            return Missed::Unknown;
        }
        let at = Field {
            offset: self.data_offset + header.data_len(),
            size: self.commit.size,
        };
        read_uint(page, at).map_or(Missed::Unknown, Missed::Count)
    }

    /// Split a whole page (as `read()` returns it) into header, data and lost-event count.
    pub fn page<'a>(&self, page: &'a [u8]) -> Result<Page<'a>, PageError> {
        let header = self.header(page).ok_or(PageError::Short {
            len: page.len(),
            need: self.data_offset,
        })?;
        let end = self.data_offset + header.data_len();
        let data = page.get(self.data_offset..end).ok_or(PageError::Commit {
            commit: header.data_len(),
            room: page.len() - self.data_offset,
        })?;
        Ok(Page {
            header,
            data,
            missed: self.missed(page, &header),
        })
    }
}

fn read_uint(bytes: &[u8], field: Field) -> Option<u64> {
    let b = bytes.get(field.offset..field.offset + field.size)?;
    Some(match field.size {
        8 => u64::from_ne_bytes(b.try_into().ok()?),
        4 => u32::from_ne_bytes(b.try_into().ok()?) as u64,
        _ => return None,
    })
}

/// A page header: base timestamp and raw commit word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageHeader {
    /// The timestamp the first event's delta is relative to.
    pub timestamp: u64,
    /// The raw commit word: data length plus the `RB_MISSED_*` flags.
    pub commit: u64,
}

impl PageHeader {
    /// The flag bits live in the low 32 bits. The kernel adds `RB_MISSED_EVENTS` (an `int`, `1 << 31`) to a
    /// 64-bit `local_t`, which sign-extends it into the high word: those high bits are ignored.
    fn low(&self) -> u32 {
        self.commit as u32
    }

    /// Bytes of events in the page.
    pub fn data_len(&self) -> usize {
        (self.low() & !(RB_MISSED_EVENTS | RB_MISSED_STORED)) as usize
    }

    /// Events were lost before this page.
    pub fn missed_events(&self) -> bool {
        self.low() & RB_MISSED_EVENTS != 0
    }

    /// The number of lost events is stored after the data.
    pub fn missed_stored(&self) -> bool {
        self.low() & RB_MISSED_STORED != 0
    }
}

/// Events lost before a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missed {
    /// None were lost.
    None,
    /// Some were lost; the kernel had no room to store how many.
    Unknown,
    /// This many were lost.
    Count(u64),
}

/// A page split into its parts.
#[derive(Clone, Copy, Debug)]
pub struct Page<'a> {
    /// The header.
    pub header: PageHeader,
    /// The event bytes (up to the commit).
    pub data: &'a [u8],
    /// Events lost before this page.
    pub missed: Missed,
}

impl<'a> Page<'a> {
    /// The data events of the page, oldest first.
    pub fn events(&self) -> Events<'a> {
        Events {
            cursor: Cursor::new(self.header.timestamp),
            data: self.data,
            failed: false,
        }
    }
}

/// Iterator over the data events of a page (see [`Page::events`]); stops after the first error.
pub struct Events<'a> {
    cursor: Cursor,
    data: &'a [u8],
    failed: bool,
}

impl<'a> Iterator for Events<'a> {
    type Item = Result<Event<'a>, PageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let next = self.cursor.next(self.data).transpose();
        self.failed = matches!(next, Some(Err(_)));
        next
    }
}

/// One data event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event<'a> {
    /// The event's time, in the instance's trace clock.
    pub timestamp: u64,
    /// The event record, starting at its `common_type` field (may end with alignment padding).
    pub payload: &'a [u8],
}

/// A malformed page.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    #[error("ring-buffer page of {len} bytes is shorter than its {need}-byte header")]
    Short { len: usize, need: usize },
    #[error("ring-buffer page commits {commit} bytes of events but has room for {room}")]
    Commit { commit: usize, room: usize },
    #[error("ring-buffer event at data byte {offset} runs past the committed {len} bytes")]
    Truncated { offset: usize, len: usize },
    #[error("ring-buffer event at data byte {offset} has an impossible length field ({length})")]
    BadLength { offset: usize, length: u32 },
}

/// A position in a page's data: byte offset and the running timestamp there. Resumable: hand it the same page's
/// data again, longer, and it continues after the last event it returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    offset: usize,
    timestamp: u64,
    ended: bool,
}

impl Cursor {
    /// A cursor at the start of a page whose header timestamp is `page_timestamp`.
    pub fn new(page_timestamp: u64) -> Cursor {
        Cursor {
            offset: 0,
            timestamp: page_timestamp,
            ended: false,
        }
    }

    /// Byte offset into the page data of the next event.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The running timestamp (that of the last event passed).
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }

    /// Walk events up to `offset` without returning them (to start where an earlier reader stopped).
    pub fn skip_to(&mut self, data: &[u8], offset: usize) -> Result<(), PageError> {
        while self.offset < offset && !self.ended {
            if self.next(data)?.is_none() {
                break;
            }
        }
        Ok(())
    }

    /// The next data event in `data` (a page's event bytes up to its commit), or None at the end. Time extends,
    /// absolute timestamps and padding are consumed on the way. On an error the cursor stays before the bad
    /// event.
    pub fn next<'a>(&mut self, data: &'a [u8]) -> Result<Option<Event<'a>>, PageError> {
        loop {
            if self.ended || self.offset + 4 > data.len() {
                return Ok(None);
            }
            let at = self.offset;
            let word = |i: usize| -> Result<u32, PageError> {
                let b = data.get(at + i..at + i + 4).ok_or(PageError::Truncated {
                    offset: at,
                    len: data.len(),
                })?;
                Ok(u32::from_ne_bytes(b.try_into().expect("4 bytes")))
            };
            let head = word(0)?;
            let type_len = head & 0x1f;
            let delta = (head >> 5) as u64;
            match type_len {
                TYPE_PADDING if delta == 0 => {
                    // A null padding event: the rest of the page is unused.
                    self.ended = true;
                    return Ok(None);
                }
                TYPE_PADDING => {
                    // A discarded event or the padded end of a page; array[0] is its length after the header.
                    // Its delta counts: the writer computed the next event's delta from the discarded event's
                    // time (the kernel's own checker, rb_read_data_buffer, adds it too).
                    let length = word(4)?;
                    let total = round4(length as usize + 4);
                    self.advance(data, total, length)?;
                    self.timestamp = self.timestamp.wrapping_add(delta);
                }
                TYPE_TIME_EXTEND => {
                    let high = word(4)? as u64;
                    self.advance(data, 8, 8)?;
                    self.timestamp = self.timestamp.wrapping_add((high << TS_SHIFT) + delta);
                }
                TYPE_TIME_STAMP => {
                    let high = word(4)? as u64;
                    self.advance(data, 8, 8)?;
                    self.timestamp = fix_absolute((high << TS_SHIFT) | delta, self.timestamp);
                }
                0 => {
                    // array[0] holds the length of the data plus array[0] itself.
                    let length = word(4)?;
                    if length < 4 {
                        return Err(PageError::BadLength { offset: at, length });
                    }
                    let total = round4(length as usize + 4);
                    self.advance(data, total, length)?;
                    self.timestamp = self.timestamp.wrapping_add(delta);
                    let payload = &data[at + 8..at + 4 + length as usize];
                    return Ok(Some(self.event(payload)));
                }
                n => {
                    let total = 4 + n as usize * 4;
                    self.advance(data, total, n)?;
                    self.timestamp = self.timestamp.wrapping_add(delta);
                    return Ok(Some(self.event(&data[at + 4..at + total])));
                }
            }
        }
    }

    fn advance(&mut self, data: &[u8], total: usize, length: u32) -> Result<(), PageError> {
        let end = self.offset.checked_add(total).ok_or(PageError::BadLength {
            offset: self.offset,
            length,
        })?;
        if end > data.len() {
            return Err(PageError::Truncated {
                offset: self.offset,
                len: data.len(),
            });
        }
        self.offset = end;
        Ok(())
    }

    fn event<'a>(&self, payload: &'a [u8]) -> Event<'a> {
        Event {
            timestamp: self.timestamp,
            payload,
        }
    }
}

fn round4(n: usize) -> usize {
    (n + 3) & !3
}

/// An absolute timestamp event holds 59 bits. The kernel (rb_fix_abs_ts) restores the 5 high bits from the
/// previous timestamp, and carries into them when the low 59 bits wrapped.
fn fix_absolute(abs: u64, previous: u64) -> u64 {
    if previous & TS_MSB == 0 {
        return abs;
    }
    let full = abs | (previous & TS_MSB);
    if full < previous {
        full.wrapping_add(1 << 59)
    } else {
        full
    }
}

#[cfg(test)]
mod tests;
