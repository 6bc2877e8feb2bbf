//! The ids of the BPF programs loaded now (`bpf(BPF_PROG_GET_NEXT_ID)`), to tell whether the kernel's
//! run-time symbols (BPF programs and their trampolines in /proc/kallsyms) changed. rprof loads no BPF program:
//! this only lists them.

/// `BPF_PROG_GET_NEXT_ID` of `enum bpf_cmd`.
const BPF_PROG_GET_NEXT_ID: libc::c_long = 11;

/// The part of `union bpf_attr` the command reads and writes: `start_id` (in a union with `prog_id`),
/// `next_id`, `open_flags`.
#[repr(C)]
#[derive(Default)]
struct NextId {
    start_id: u32,
    next_id: u32,
    open_flags: u32,
}

/// At most this many programs are listed (a host has tens to hundreds); past it the list is not used.
const MAX_PROGRAMS: usize = 1 << 16;

/// The ids of the BPF programs loaded now, in increasing order; None when they cannot be listed (no
/// CAP_SYS_ADMIN, a kernel without BPF), where an empty list means none are loaded.
pub fn bpf_prog_ids() -> Option<Vec<u32>> {
    let mut ids = Vec::new();
    let mut start = 0u32;
    loop {
        let mut attr = NextId {
            start_id: start,
            ..NextId::default()
        };
        // SAFETY: `attr` is a live, writable struct of the size passed; the kernel reads `start_id` and writes
        // `next_id` within those bytes and keeps no pointer to it.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_GET_NEXT_ID,
                &mut attr as *mut NextId,
                std::mem::size_of::<NextId>() as libc::c_uint,
            )
        };
        if rc != 0 {
            return match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::ENOENT) => Some(ids),
                _ => None,
            };
        }
        // Ids only grow; anything else (or a list past all bounds) is not a list to key on.
        if attr.next_id <= start || ids.len() >= MAX_PROGRAMS {
            return None;
        }
        ids.push(attr.next_id);
        start = attr.next_id;
    }
}

#[cfg(test)]
mod tests {
    /// Check that the ids come sorted, each once (programs of other tools may come and go meanwhile).
    #[test]
    fn ids_sorted() {
        if let Some(ids) = super::bpf_prog_ids() {
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
            assert!(ids.iter().all(|&id| id > 0), "{ids:?}");
        }
    }
}
