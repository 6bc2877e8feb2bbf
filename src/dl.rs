//! The dynamic linker's view of a library: where its IFUNC symbols resolve on this CPU.
//!
//! Only rprof's IFUNC helper process calls this (`rprof __resolve-ifuncs LIB NAME...`, see
//! [`crate::symbols::ifunc`]): `dlopen` runs the library's constructors and every `dlsym` of an IFUNC runs its
//! resolver, code that must never run inside the profiler itself. This module and [`crate::perf`] and
//! [`crate::mapped`] are the only ones allowed `unsafe`.
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Load `lib` and look up each of `names`: the ELF address (in `lib`'s own numbering) of what the name resolves
/// to, or None when the linker does not know it or it resolves into another file. Fails when `lib` cannot be
/// loaded (an executable, a file of another architecture): the linker's message.
pub fn resolve(lib: &Path, names: &[String]) -> Result<Vec<(String, Option<u64>)>, String> {
    let path = CString::new(lib.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: `path` is a NUL-terminated string that lives across the call; dlopen may run the library's
    // constructors, which is why only the helper process calls this.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(last_error());
    }
    let mut map: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: `handle` came from dlopen above; RTLD_DI_LINKMAP writes one `struct link_map *` into `map`.
    let ok = unsafe {
        libc::dlinfo(
            handle,
            libc::RTLD_DI_LINKMAP,
            (&mut map as *mut *mut libc::c_void).cast(),
        )
    };
    if ok != 0 || map.is_null() {
        return Err(last_error());
    }
    // SAFETY: `map` points at glibc's `struct link_map`, whose first member is `ElfW(Addr) l_addr`, the
    // difference between the library's load address and its ELF addresses.
    let bias = unsafe { *(map as *const usize) } as u64;
    let own = std::fs::canonicalize(lib).ok();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let Ok(cname) = CString::new(name.as_bytes()) else {
            out.push((name.clone(), None));
            continue;
        };
        // SAFETY: `handle` is open and `cname` is NUL-terminated; for an IFUNC, dlsym calls its resolver.
        let addr = unsafe { libc::dlsym(handle, cname.as_ptr()) };
        let inside = !addr.is_null() && same_file(addr, own.as_deref());
        out.push((
            name.clone(),
            inside.then(|| (addr as u64).wrapping_sub(bias)),
        ));
    }
    Ok(out)
}

/// True when `addr` lies in the file `own` (canonical path), as dladdr says.
fn same_file(addr: *mut libc::c_void, own: Option<&Path>) -> bool {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: `info` is a valid out-parameter; dladdr only reads the linker's tables for `addr`.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return false;
    }
    // SAFETY: dladdr set `dli_fname` to a NUL-terminated string owned by the linker, alive while loaded.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    let name = Path::new(std::ffi::OsStr::from_bytes(name.to_bytes()));
    std::fs::canonicalize(name).ok().as_deref() == own
}

/// The linker's last error message.
fn last_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated message valid until the next dl* call on this thread.
    let msg = unsafe { libc::dlerror() };
    if msg.is_null() {
        return "unknown dynamic linker error".into();
    }
    // SAFETY: non-null, NUL-terminated (above).
    unsafe { CStr::from_ptr(msg) }
        .to_string_lossy()
        .into_owned()
}
