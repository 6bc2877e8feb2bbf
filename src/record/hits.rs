//! The files a finished recording's samples are in, read back from the file as `perf record` does at its end
//! (perf marks the file of each sample's IP and of every address of its callchain): the binaries that get a
//! copy in the build-id cache.
use crate::process::AddressSpaces;
use crate::recording::{CpuMode, Event, Reader, RecordingError};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

/// The paths of the user mappings that the samples of recording `path` have an address in.
pub(super) fn sampled_files(path: &Path) -> Result<HashSet<Arc<str>>, RecordingError> {
    let mut reader = Reader::open(path)?;
    let mut spaces = AddressSpaces::new();
    let mut files = HashSet::new();
    while let Some(event) = reader.next_event()? {
        let Event::Sample(sample) = &event else {
            if let Some(task) = crate::replay::task_event_with(&event, |_| None) {
                spaces.apply(task);
            }
            continue;
        };
        let Some(space) = spaces.get(sample.pid) else {
            continue;
        };
        let kernel = sample.cpu_mode == CpuMode::Kernel;
        let chain = match sample.callchain.is_empty() {
            true => std::slice::from_ref(&sample.ip),
            false => &sample.callchain[..],
        };
        for part in crate::unwind::fp::split(chain, kernel).filter(|p| !p.kernel) {
            // A return address is looked up one byte back, as the resolver does (a call at a mapping's end).
            let addr = part.addr.saturating_sub(u64::from(!part.exact));
            if let Some(mapping) = space.find(addr) {
                if !files.contains(&mapping.path) {
                    files.insert(mapping.path.clone());
                }
            }
        }
    }
    Ok(files)
}
