//! The image that names a recording's `[vdso]` frames.
use super::binary::Binary;
use super::unnamed::Unnamed;
use super::DebugSources;
use crate::buildid::{buildid_dir, cached_vdso_path, running_build_id, running_vdso, VDSO};
use std::path::Path;

/// The vDSO of a recorded build id: the build-id cache's copy of that image, else this process's own vDSO when
/// it is the recorded one (the same build id, or, with none recorded, the same kernel as `kernel_build_id`).
pub(crate) fn open_vdso(
    build_id: Option<&[u8]>,
    kernel_build_id: Option<&[u8]>,
) -> Result<Box<Binary>, Unnamed> {
    let name = Path::new(VDSO);
    let cached = build_id.zip(buildid_dir()).and_then(|(id, dir)| {
        Binary::open(
            &cached_vdso_path(&dir, id),
            name,
            Some(id),
            &DebugSources::none(),
        )
        .ok()
    });
    if let Some(binary) = cached {
        return Ok(Box::new(binary));
    }
    let (image, running_id) = running_vdso().ok_or(Unnamed::FileGone)?;
    let same = match build_id {
        Some(id) => *id == running_id,
        None => kernel_build_id.is_none_or(|k| running_build_id().as_deref() == Some(k)),
    };
    if !same {
        return Err(Unnamed::FileGone);
    }
    Binary::from_bytes(image, name, None)
        .map(Box::new)
        .map_err(|_| Unnamed::Unreadable)
}
