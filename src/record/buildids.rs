//! The build ids a recording names (BUILD_ID feature) and the kernel's text mapping, from the facts of
//! [`crate::buildid`]: the running kernel's and vDSO's build ids (with copies kept in the build-id cache) and
//! those of the files the recorded processes mapped, of which the binaries that samples are in get copies in
//! the build-id cache when the recording ends.
use super::hits;
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

/// The BUILD_ID entries of the mapped files (`paths`: each file with the last process that mapped it, which
/// opens it). Each entry's pid is the machine's, -1 for the host, as perf writes it: perf report files an
/// entry with another pid under a guest machine of that pid, and then reads the host's binaries' build ids
/// from the files on disk, whatever they are now.
pub(super) fn build_ids(paths: &BTreeMap<String, i32>) -> Vec<BuildIdEntry> {
    let mut out = Vec::new();
    for (path, pid) in paths {
        let Ok((file, _)) = process::open_target_file(*pid as u32, Path::new(path)) else {
            continue;
        };
        if let Some(build_id) = buildid::read_build_id(&file) {
            out.push(BuildIdEntry {
                pid: -1,
                misc: 2, // PERF_RECORD_MISC_USER
                build_id,
                path: path.clone(),
            });
        }
    }
    out
}

/// Keep copies of the binaries that the samples of the finished recording `output` are in (`entries`: its
/// BUILD_ID section; `paths`: the process that opens each file) in the build-id cache, as `perf record` does
/// when it ends, rprof's copies there bounded to `bound` bytes. A failure costs a warning (naming -N), never
/// the recording.
pub(super) fn keep_sampled(
    output: &Path,
    entries: &[BuildIdEntry],
    paths: &BTreeMap<String, i32>,
    bound: u64,
) {
    let Some(dir) = buildid::buildid_dir() else {
        return;
    };
    let kept = match keep_in(&dir, output, entries, paths, bound) {
        Ok(kept) => kept,
        Err(e) => {
            eprintln!(
                "rprof: warning: cannot keep copies of the sampled binaries in {}: {e} (use -N to skip)",
                dir.display()
            );
            return;
        }
    };
    if let Some(first) = kept.no_room.first() {
        eprintln!(
            "rprof: warning: {} sampled binaries ({first}{}) were not copied into the build-id cache {}: \
             they do not fit in --buildid-cache-size {} with rprof's other copies there; raise it, or report \
             before they are rebuilt",
            kept.no_room.len(),
            if kept.no_room.len() > 1 { ", ..." } else { "" },
            dir.display(),
            super::human_size(bound),
        );
    }
}

/// [`keep_sampled`] under cache directory `dir`.
fn keep_in(
    dir: &Path,
    output: &Path,
    entries: &[BuildIdEntry],
    paths: &BTreeMap<String, i32>,
    bound: u64,
) -> Result<buildid::Kept, String> {
    let sampled = hits::sampled_files(output).map_err(|e| e.to_string())?;
    let mut keeper = buildid::Keeper::open(dir, bound).map_err(|e| e.to_string())?;
    let relative = |p: std::path::PathBuf| p.strip_prefix(dir).map(Path::to_path_buf).unwrap_or(p);
    for entry in entries {
        match entry.path.as_str() {
            "[kernel.kallsyms]" => keeper.needs(&relative(buildid::cached_kallsyms_path(
                dir,
                &entry.build_id,
            ))),
            buildid::VDSO => {
                keeper.needs(&relative(buildid::cached_vdso_path(dir, &entry.build_id)))
            }
            path if sampled.contains(path) => {
                let pid = paths.get(path).copied().unwrap_or(-1) as u32;
                let Ok((file, _)) = process::open_target_file(pid, Path::new(path)) else {
                    continue;
                };
                keeper
                    .keep(path, &entry.build_id, file)
                    .map_err(|e| format!("{path}: {e}"))?;
            }
            _ => {}
        }
    }
    keeper.finish().map_err(|e| e.to_string())
}
