//! Where the records of a session go: the recording file (none with `--push` and no `-o`), and a [`Tap`] that
//! sees every record as it is written, the same bytes in the same order (`rprof record --push` turns them
//! into profiles on threads of its own).
use crate::recording::{BuildIdEntry, FileAttr, Meta, RecordingError, Writer};

/// A reader of the records as they are written. It runs on the sampling thread: it should copy the bytes
/// and hand them on, never wait long.
pub trait Tap: Send {
    /// Before the first record: the attrs of the records (those of the file).
    fn start(&mut self, attrs: &[FileAttr]);
    /// One record, whole (header first), in pieces.
    fn record(&mut self, parts: &[&[u8]]);
    /// Every ring was read once; `last`: the final round.
    fn end_round(&mut self, last: bool);
    /// Where the names of the Python frames the records carry go, for the tap's reader to name them.
    fn python_names(&self) -> Option<crate::python::Names> {
        None
    }
}

/// The recording file and the tap, either or both.
pub(super) struct Sink {
    pub(super) file: Option<Writer>,
    pub(super) tap: Option<Box<dyn Tap>>,
}

impl Sink {
    pub(super) fn new(
        file: Option<Writer>,
        mut tap: Option<Box<dyn Tap>>,
        attrs: &[FileAttr],
    ) -> Sink {
        if let Some(t) = &mut tap {
            t.start(attrs);
        }
        Sink { file, tap }
    }

    pub(super) fn write_record(&mut self, parts: &[&[u8]]) -> Result<(), RecordingError> {
        if let Some(t) = &mut self.tap {
            t.record(parts);
        }
        match &mut self.file {
            Some(w) => w.write_record(parts),
            None => Ok(()),
        }
    }

    /// A round ended: the file is flushed when due, the tap told.
    pub(super) fn end_round(&mut self, last: bool) -> Result<(), RecordingError> {
        if let Some(t) = &mut self.tap {
            t.end_round(last);
        }
        match &mut self.file {
            Some(w) => w.flush_if_due(),
            None => Ok(()),
        }
    }

    /// Complete the file (the tap is dropped: its reader sees the end); returns the file's size (0 without
    /// one).
    pub(super) fn finish(
        self,
        meta: &Meta,
        build_ids: impl FnOnce() -> Vec<BuildIdEntry>,
    ) -> Result<u64, RecordingError> {
        drop(self.tap);
        match self.file {
            Some(w) => w.finish(meta, &build_ids()),
            None => Ok(0),
        }
    }
}
