//! The build ids a recording names (BUILD_ID feature) and the kernel's text mapping, from the facts of
//! [`crate::buildid`]: the running kernel's and vDSO's build ids (with copies kept in the build-id cache) and
//! those of the files the recorded processes mapped.
use crate::buildid;
use crate::process;
use crate::recording::{BuildIdEntry, Mmap2};
use std::collections::BTreeMap;
use std::path::Path;

/// The kernel's text mapping as perf describes it: `[kernel.kallsyms]_text` from `_text` on.
pub(super) fn kernel_mmap() -> Option<Mmap2> {
    let start = buildid::running_text()?;
    Some(Mmap2 {
        pid: -1,
        tid: 0,
        start,
        len: u64::MAX - start,
        pgoff: start,
        prot: 5,
        flags: 2,
        path: "[kernel.kallsyms]_text".to_string(),
        kernel: true,
        ..Default::default()
    })
}

/// The BUILD_ID entries of the running kernel and its vDSO, as perf writes them. Unless `no_cache`, a copy of
/// /proc/kallsyms and of the vDSO image is kept in the build-id cache (once per kernel build), so that `report`
/// names the kernel's and the vDSO's frames from them, also after a reboot or on another machine (`symbols`
/// reads them). kallsyms is copied only when its addresses are `visible` (not hidden by kptr_restrict).
pub(super) fn kernel_build_ids(no_cache: bool, visible: bool) -> Vec<BuildIdEntry> {
    let mut entries = Vec::new();
    let dir = (!no_cache).then(buildid::buildid_dir).flatten();
    if let Some(build_id) = buildid::running_build_id() {
        if let Some(dir) = dir.as_ref().filter(|_| visible) {
            buildid::keep_kallsyms(dir, &build_id);
        }
        entries.push(BuildIdEntry {
            pid: -1,
            misc: 1, // PERF_RECORD_MISC_KERNEL
            build_id,
            path: "[kernel.kallsyms]".to_string(),
        });
    }
    let vdso = match &dir {
        Some(dir) => buildid::store_vdso(dir).unwrap_or_else(|e| {
            eprintln!(
                "rprof: warning: cannot keep a copy of the vDSO in {}: {e} (use -N to skip)",
                dir.display()
            );
            None
        }),
        None => None,
    };
    if let Some(build_id) = vdso.or_else(|| buildid::running_vdso().map(|(_, id)| id)) {
        entries.push(BuildIdEntry {
            pid: -1,
            misc: 2, // PERF_RECORD_MISC_USER
            build_id,
            path: buildid::VDSO.to_string(),
        });
    }
    entries
}

/// The BUILD_ID entries of the mapped files (`paths`: each file with the last process that mapped it).
pub(super) fn build_ids(paths: &BTreeMap<String, i32>) -> Vec<BuildIdEntry> {
    let mut out = Vec::new();
    for (path, pid) in paths {
        let Ok((file, _)) = process::open_target_file(*pid as u32, Path::new(path)) else {
            continue;
        };
        if let Some(build_id) = buildid::read_build_id(&file) {
            out.push(BuildIdEntry {
                pid: *pid,
                misc: 2, // PERF_RECORD_MISC_USER
                build_id,
                path: path.clone(),
            });
        }
    }
    out
}
