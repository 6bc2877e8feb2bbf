//! The `uprobe` PMU: uprobes that perf_event_open itself creates from a file and an offset. Nothing is written
//! to `uprobe_events`, and the kernel removes the probe with its last fd, so a SIGKILLed rprof leaves nothing
//! behind (bpftrace's uprobes work the same way). Such a probe has no fetch arguments.
use super::Attr;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const SYSFS: &str = "/sys/bus/event_source/devices/uprobe";

/// The uprobe PMU of this kernel: its perf type and the `retprobe` bit of `config`.
#[derive(Clone, Copy, Debug)]
pub struct UprobePmu {
    type_: u32,
    retprobe: u64,
}

impl UprobePmu {
    /// The PMU, if the kernel has it (4.17 and later): `type` and `format/retprobe` under its sysfs directory.
    pub fn find() -> Option<UprobePmu> {
        let type_ = std::fs::read_to_string(format!("{SYSFS}/type"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let format = std::fs::read_to_string(format!("{SYSFS}/format/retprobe")).ok()?;
        let bit: u32 = format.trim().strip_prefix("config:")?.parse().ok()?;
        Some(UprobePmu {
            type_,
            retprobe: 1u64.checked_shl(bit)?,
        })
    }

    /// A uprobe (or, with `retprobe`, a uretprobe) at `offset` in the file `path`; every hit is a sample.
    /// Fails only for a path with a NUL byte.
    pub fn attr(&self, path: &Path, offset: u64, retprobe: bool) -> Option<Attr> {
        let config = if retprobe { self.retprobe } else { 0 };
        let path = interned(path)?;
        Some(Attr::pmu_probe(
            self.type_,
            config,
            path.as_ptr() as u64,
            offset,
        ))
    }
}

/// `path` as a C string that lives as long as rprof: the attr holds its address, which the kernel reads when
/// the event is opened (each distinct path is kept once).
fn interned(path: &Path) -> Option<&'static CStr> {
    static PATHS: Mutex<Option<HashMap<PathBuf, &'static CStr>>> = Mutex::new(None);
    let mut paths = PATHS.lock().unwrap_or_else(|e| e.into_inner());
    let paths = paths.get_or_insert_with(HashMap::new);
    if let Some(&c) = paths.get(path) {
        return Some(c);
    }
    let c: &'static CStr = Box::leak(
        CString::new(path.as_os_str().as_bytes())
            .ok()?
            .into_boxed_c_str(),
    );
    paths.insert(path.to_path_buf(), c);
    Some(c)
}
