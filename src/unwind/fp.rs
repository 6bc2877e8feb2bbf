//! Frame-pointer callchains come unwound from the kernel (PERF_SAMPLE_CALLCHAIN); this module splits them at
//! their PERF_CONTEXT_* markers into addresses that know their side (kernel or user) and whether they are looked
//! up exactly or one byte back.
use perf_event_open_sys::bindings::{PERF_CONTEXT_KERNEL, PERF_CONTEXT_MAX, PERF_CONTEXT_USER};

/// One address of a callchain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainPart {
    pub addr: u64,
    /// The address is in the kernel (it follows PERF_CONTEXT_KERNEL, or the sample was in kernel mode).
    pub kernel: bool,
    /// The address is where code was stopped (the leaf, or the first address after PERF_CONTEXT_USER: the
    /// interrupted instruction, the one after `syscall`, or a signal frame's trampoline and interrupted IP);
    /// every other address is a return address, which resolvers look up one byte back.
    pub exact: bool,
}

/// The addresses of a callchain (leaf first), without its markers; `kernel` is the side of the addresses
/// before any marker.
pub fn split(chain: &[u64], kernel: bool) -> impl Iterator<Item = ChainPart> + '_ {
    let mut kernel = kernel;
    let mut exact = true;
    chain.iter().filter_map(move |&addr| {
        if addr >= PERF_CONTEXT_MAX {
            match addr {
                PERF_CONTEXT_KERNEL => kernel = true,
                PERF_CONTEXT_USER => {
                    kernel = false;
                    exact = true;
                }
                _ => {}
            }
            return None;
        }
        let part = ChainPart {
            addr,
            kernel,
            exact,
        };
        exact = false;
        Some(part)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that markers switch sides, that the leaf and each first user address are exact and the others not.
    #[test]
    fn splits_at_markers() {
        let chain = [
            PERF_CONTEXT_KERNEL,
            0xffff_ffff_8100_0010,
            0xffff_ffff_8100_0020,
            PERF_CONTEXT_USER,
            0x1000,
            0x2000,
            PERF_CONTEXT_USER,
            0x3000,
            0x4000,
        ];
        let parts: Vec<(u64, bool, bool)> = split(&chain, false)
            .map(|p| (p.addr, p.kernel, p.exact))
            .collect();
        assert_eq!(
            parts,
            vec![
                (0xffff_ffff_8100_0010, true, true),
                (0xffff_ffff_8100_0020, true, false),
                (0x1000, false, true),
                (0x2000, false, false),
                (0x3000, false, true),
                (0x4000, false, false),
            ]
        );
        let ip_only: Vec<ChainPart> = split(&[0x1000, 0x2000], true).collect();
        assert!(ip_only[0].kernel && ip_only[0].exact && !ip_only[1].exact);
    }
}
