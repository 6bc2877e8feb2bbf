//! What the exports that show threads and time (pprof, Firefox profiler) get from a report: every kept sample
//! with its thread and time, and its stack as locations (an address in a module, with the functions inlined
//! there), built from the stack resolver's pending ids.
use super::{FrameId, StackCount};
use crate::resolve::{FastMap, Origin, StackResolver, KERNEL_NAME};
use std::collections::HashMap;

/// Every sample kept for the outputs that show threads and time (pprof, Firefox profiler), with its stack as
/// locations: an address in a module, with the functions inlined there.
#[derive(Debug, Default)]
pub struct Exports {
    pub modules: Vec<ExportModule>,
    pub locations: Vec<ExportLocation>,
    /// Stacks as location indices, outermost first.
    pub stacks: Vec<Vec<u32>>,
    /// In the order of the file (time order).
    pub samples: Vec<TimedSample>,
}

/// A binary (or the kernel) that locations are in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExportModule {
    pub path: String,
    pub build_id: Option<Vec<u8>>,
    pub kernel: bool,
}

/// One address and the functions it is in, outermost first (the function, then what was inlined into it).
#[derive(Debug, Clone)]
pub struct ExportLocation {
    /// Index in [`Exports::modules`]; None for frames without an address (JIT code, unknown mappings).
    pub module: Option<u32>,
    /// The file offset in the module (the kernel address for the kernel).
    pub address: u64,
    pub frames: Vec<FrameId>,
}

/// One sample of a thread.
#[derive(Debug, Clone, Copy)]
pub struct TimedSample {
    /// Nanoseconds (perf's clock), 0 when the recording has no times.
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    /// Index in [`Profile::comms`].
    pub comm: u32,
    /// Index in [`Exports::stacks`].
    pub stack: u32,
    /// The period: nanoseconds of CPU time, or of waiting for off-CPU samples.
    pub weight: u64,
    pub off_cpu: bool,
}

/// The stacks of the kept samples as locations; `stacks` are the session's distinct stacks of frame ids (some
/// pending), which `samples` index. Call after the resolver's `finish`.
pub(crate) fn build(
    resolver: &StackResolver,
    stacks: &[((u32, Vec<FrameId>), StackCount)],
    samples: Vec<TimedSample>,
) -> Exports {
    let mut ex = Exports {
        samples,
        ..Exports::default()
    };
    let mut modules: HashMap<ExportModule, u32> = HashMap::new();
    let mut locations: FastMap<FrameId, u32> = FastMap::default();
    let mut module_index = |ex: &mut Exports, m: ExportModule| {
        *modules.entry(m.clone()).or_insert_with(|| {
            ex.modules.push(m);
            ex.modules.len() as u32 - 1
        })
    };
    for ((_, stack), _) in stacks {
        let mut out = Vec::with_capacity(stack.len());
        for &id in stack {
            if let Some(&l) = locations.get(&id) {
                out.push(l);
                continue;
            }
            let location = match resolver.origin(id) {
                Origin::File {
                    path,
                    build_id,
                    offset,
                    frames,
                } => ExportLocation {
                    module: Some(module_index(
                        &mut ex,
                        ExportModule {
                            path: path.to_string_lossy().into_owned(),
                            build_id: build_id.map(<[u8]>::to_vec),
                            kernel: false,
                        },
                    )),
                    address: offset.0,
                    frames: frames.to_vec(),
                },
                Origin::Kernel { address, frames } => ExportLocation {
                    module: Some(module_index(
                        &mut ex,
                        ExportModule {
                            path: KERNEL_NAME.to_string(),
                            build_id: resolver.build_id(KERNEL_NAME).cloned(),
                            kernel: true,
                        },
                    )),
                    address,
                    frames: frames.to_vec(),
                },
                Origin::Frame(id) => ExportLocation {
                    module: None,
                    address: 0,
                    frames: vec![id],
                },
            };
            ex.locations.push(location);
            let l = ex.locations.len() as u32 - 1;
            locations.insert(id, l);
            out.push(l);
        }
        ex.stacks.push(out);
    }
    ex
}
