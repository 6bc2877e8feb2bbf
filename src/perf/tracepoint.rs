//! Attr settings for tracepoint and probe events (added by `rprof probe`; the rest of the perf layer is shared).
use super::Attr;

impl Attr {
    /// Ask for FORK and EXIT records only (not MMAP or COMM): `rprof probe` closes the shadow stack of a thread
    /// that exits in the middle of a call.
    pub fn task_events(mut self) -> Attr {
        self.raw.set_task(1);
        self
    }

    /// Wake the reader after this many samples (instead of a byte watermark).
    pub fn wakeup_events(mut self, events: u32) -> Attr {
        self.raw.set_watermark(0);
        self.raw.__bindgen_anon_2.wakeup_events = events;
        self
    }
}
