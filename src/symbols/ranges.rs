//! Named address ranges sorted by start: the lookup shared by kallsyms and perf maps.
use std::sync::Arc;

/// Non-overlapping `[start, end)` ranges with names, sorted by start.
#[derive(Debug, Default)]
pub struct Ranges {
    entries: Vec<(u64, u64, Arc<str>)>,
}

impl Ranges {
    /// `entries` must be sorted by start and must not overlap.
    pub fn new(entries: Vec<(u64, u64, Arc<str>)>) -> Ranges {
        Ranges { entries }
    }

    /// The name of the range containing `addr`.
    pub fn lookup(&self, addr: u64) -> Option<&Arc<str>> {
        let i = self
            .entries
            .partition_point(|e| e.0 <= addr)
            .checked_sub(1)?;
        let (start, end, name) = &self.entries[i];
        (addr >= *start && addr < *end).then_some(name)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
