//! `rprof report --firefox`: the profile in the Firefox Profiler's processed format, written by
//! fxprof-processed-profile (samply's writer), self-contained (every function is named in the file).
//!
//! - One process per pid, named after the command of its main thread (the thread whose tid is the pid), else
//!   of its first sampled thread; one thread per tid, named after its command.
//! - Samples at their times, relative to the first sample. An on-CPU sample has weight 1 and a CPU delta of
//!   its period; an off-CPU sample has a CPU delta of zero and the weight of the intervals it waited (its
//!   nanoseconds / the sampling interval, at least 1), so waiting and running compare in the call tree, as
//!   samply does. Off-CPU stacks end in an `[off-cpu]` frame of the category "Off-CPU"; user frames are in
//!   the category "User", kernel frames in "Kernel".
//! - Each binary is a library with its path and build id (the debug id made from the build id as samply
//!   makes it). The function of an address is a frame at that address in its library, named through a
//!   symbol table written into the profile (so the profile is marked symbolicated and the viewer never asks
//!   for symbols). Addresses are file offsets (kernel addresses less the lowest kernel address used).
//!   Functions inlined at an address follow it as frames of their own (labels: the format written by this
//!   crate version has no inline depth). Unnamed code is named as the table names it (`perl+0x196480..0x19ec13`).
use super::{frame_name, Exports, Profile, ReportError, OFF_CPU_FRAME};
use fxprof_processed_profile::debugid::DebugId;
use fxprof_processed_profile::{
    CategoryColor, CategoryPairHandle, CpuDelta, Frame, FrameFlags, FrameInfo, LibraryHandle,
    LibraryInfo, ProcessHandle, ReferenceTimestamp, SamplingInterval, StackHandle, Symbol,
    SymbolTable, ThreadHandle, Timestamp,
};
use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::time::SystemTime;

/// What the recording does not say about itself.
#[derive(Clone, Debug, Default)]
pub struct FirefoxOptions {
    /// The profile's title (the product, in the Firefox Profiler's words).
    pub product: String,
    /// The wall-clock time of the first sample; the Unix epoch when unknown.
    pub started: Option<SystemTime>,
}

/// Used when the recording does not say how it sampled: 1 ms.
const DEFAULT_INTERVAL_NS: u64 = 1_000_000;

/// Write the profile as Firefox Profiler JSON (uncompressed). The profile must have been loaded with
/// [`super::Filter::exports`].
pub fn write_firefox(
    p: &Profile,
    opts: &FirefoxOptions,
    out: &mut impl Write,
) -> Result<(), ReportError> {
    let profile = to_firefox(p, opts)?;
    serde_json::to_writer(&mut *out, &profile).map_err(std::io::Error::from)?;
    Ok(())
}

/// Categories of frames.
struct Categories {
    user: CategoryPairHandle,
    kernel: CategoryPairHandle,
    off_cpu: CategoryPairHandle,
}

fn to_firefox(
    p: &Profile,
    opts: &FirefoxOptions,
) -> Result<fxprof_processed_profile::Profile, ReportError> {
    let ex = p
        .exports
        .as_ref()
        .ok_or(ReportError::NoExports("a Firefox profile"))?;
    let interval = p
        .sampling
        .and_then(|s| s.interval_ns())
        .unwrap_or(DEFAULT_INTERVAL_NS)
        .max(1);
    let reference = match opts.started {
        Some(t) => ReferenceTimestamp::from_system_time(t),
        None => ReferenceTimestamp::from_millis_since_unix_epoch(0.0),
    };
    let mut fx = fxprof_processed_profile::Profile::new(
        &opts.product,
        reference,
        SamplingInterval::from_nanos(interval),
    );
    fx.set_os_name("Linux");
    fx.set_symbolicated(true);
    let categories = Categories {
        user: fx.add_category("User", CategoryColor::Yellow).into(),
        kernel: fx.add_category("Kernel", CategoryColor::Orange).into(),
        off_cpu: match p.has_off_cpu() {
            true => fx.add_category("Off-CPU", CategoryColor::Blue).into(),
            false => fxprof_processed_profile::CategoryHandle::OTHER.into(),
        },
    };
    let libs = libraries(&mut fx, p, ex);

    // Names: a process after its main thread's command (the last one, after exec), a thread after its own.
    let mut main_comm: HashMap<u32, u32> = HashMap::new();
    let mut first_comm: HashMap<u32, u32> = HashMap::new();
    let mut thread_comm: HashMap<(u32, u32), u32> = HashMap::new();
    for s in &ex.samples {
        first_comm.entry(s.pid).or_insert(s.comm);
        thread_comm.insert((s.pid, s.tid), s.comm);
        if s.tid == s.pid {
            main_comm.insert(s.pid, s.comm);
        }
    }
    let t0 = ex.samples.iter().map(|s| s.time).min().unwrap_or(0);
    let since = |time: u64| Timestamp::from_nanos_since_reference(time.saturating_sub(t0));

    let mut processes: HashMap<u32, ProcessHandle> = HashMap::new();
    let mut threads: HashMap<(u32, u32), ThreadHandle> = HashMap::new();
    let mut stacks: HashMap<(ThreadHandle, u32, bool), Option<StackHandle>> = HashMap::new();
    for s in &ex.samples {
        let at = since(s.time);
        let process = *processes.entry(s.pid).or_insert_with(|| {
            let comm = main_comm.get(&s.pid).or(first_comm.get(&s.pid));
            let name = comm.map_or("?", |&c| p.comms[c as usize].as_str());
            fx.add_process(name, s.pid, at)
        });
        let thread = *threads.entry((s.pid, s.tid)).or_insert_with(|| {
            let thread = fx.add_thread(process, s.tid, at, s.tid == s.pid);
            let comm = thread_comm[&(s.pid, s.tid)];
            fx.set_thread_name(thread, &p.comms[comm as usize]);
            thread
        });
        let stack = *stacks
            .entry((thread, s.stack, s.off_cpu))
            .or_insert_with(|| {
                let frames = stack_frames(&mut fx, p, ex, &libs, &categories, s.stack, s.off_cpu);
                fx.intern_stack_frames(thread, frames.into_iter())
            });
        if s.off_cpu {
            let intervals = (s.weight + interval / 2) / interval;
            let weight = intervals.clamp(1, i32::MAX as u64) as i32;
            fx.add_sample(thread, at, stack, CpuDelta::ZERO, weight);
        } else {
            fx.add_sample(thread, at, stack, CpuDelta::from_nanos(s.weight), 1);
        }
    }
    Ok(fx)
}

/// A sample's frames, outermost first; off-CPU stacks end in [`OFF_CPU_FRAME`].
fn stack_frames(
    fx: &mut fxprof_processed_profile::Profile,
    p: &Profile,
    ex: &Exports,
    libs: &Libraries,
    categories: &Categories,
    stack: u32,
    off_cpu: bool,
) -> Vec<FrameInfo> {
    let mut frames = Vec::new();
    for &l in &ex.stacks[stack as usize] {
        let location = &ex.locations[l as usize];
        let address = libs.address.get(l as usize).copied().flatten();
        for (i, &f) in location.frames.iter().enumerate() {
            let info = &p.frames[f as usize];
            let category_pair = match info.kernel {
                true => categories.kernel,
                false => categories.user,
            };
            let frame = match address {
                // The function at the address: named by the library's symbol table.
                Some((lib, rva)) if i == 0 => {
                    Frame::RelativeAddressFromInstructionPointer(lib, rva)
                }
                _ => Frame::Label(fx.intern_string(&frame_name(p, f))),
            };
            frames.push(FrameInfo {
                frame,
                category_pair,
                flags: FrameFlags::empty(),
            });
        }
    }
    if off_cpu {
        frames.push(FrameInfo {
            frame: Frame::Label(fx.intern_string(OFF_CPU_FRAME)),
            category_pair: categories.off_cpu,
            flags: FrameFlags::empty(),
        });
    }
    frames
}

/// The libraries of the profile, and the library and relative address of each location that has both.
struct Libraries {
    address: Vec<Option<(LibraryHandle, u32)>>,
}

/// Add each module as a library, with a symbol table naming the function at every location in it.
fn libraries(fx: &mut fxprof_processed_profile::Profile, p: &Profile, ex: &Exports) -> Libraries {
    let kernel_base = ex
        .locations
        .iter()
        .filter(|l| l.module.is_some_and(|m| ex.modules[m as usize].kernel))
        .map(|l| l.address)
        .min()
        .unwrap_or(0);
    let mut symbols: Vec<Vec<Symbol>> = vec![Vec::new(); ex.modules.len()];
    let mut address = Vec::with_capacity(ex.locations.len());
    for l in &ex.locations {
        let (Some(m), Some(&outer)) = (l.module, l.frames.first()) else {
            address.push(None);
            continue;
        };
        let base = match ex.modules[m as usize].kernel {
            true => kernel_base,
            false => 0,
        };
        // Offsets past 4 GiB do not fit the format's relative addresses: those locations become labels.
        let Ok(rva) = u32::try_from(l.address - base) else {
            address.push(None);
            continue;
        };
        symbols[m as usize].push(Symbol {
            address: rva,
            size: Some(1),
            name: frame_name(p, outer),
        });
        address.push(Some((m, rva)));
    }
    let handles: Vec<LibraryHandle> = ex
        .modules
        .iter()
        .zip(symbols)
        .map(|(module, symbols)| {
            let name = module
                .path
                .rsplit('/')
                .next()
                .unwrap_or(&module.path)
                .to_string();
            let build_id = module.build_id.as_deref().unwrap_or(&[]);
            fx.add_lib(LibraryInfo {
                debug_name: name.clone(),
                name,
                path: module.path.clone(),
                debug_path: module.path.clone(),
                debug_id: debug_id(build_id),
                code_id: module
                    .build_id
                    .as_ref()
                    .map(|b| b.iter().map(|x| format!("{x:02x}")).collect()),
                arch: Some(std::env::consts::ARCH.to_string()),
                symbol_table: Some(Arc::new(SymbolTable::new(symbols))),
            })
        })
        .collect();
    Libraries {
        address: address
            .into_iter()
            .map(|a| a.map(|(m, rva)| (handles[m as usize], rva)))
            .collect(),
    }
}

/// The Breakpad debug id of an ELF build id, as samply and dump_syms make it: its first 16 bytes (zero
/// padded) as a GUID stored little-endian (the first three fields byte-swapped), age 0. The nil id without a
/// build id.
fn debug_id(build_id: &[u8]) -> DebugId {
    if build_id.is_empty() {
        return DebugId::nil();
    }
    let mut guid = [0u8; 16];
    let n = build_id.len().min(16);
    guid[..n].copy_from_slice(&build_id[..n]);
    // from_guid_age reads the bytes as a GUID in memory (little-endian fields), which swaps them as
    // Breakpad's ELF file ids do.
    DebugId::from_guid_age(&guid, 0).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a build id becomes the debug id samply gives it (the GUID's first three fields swapped).
    #[test]
    fn debug_id_from_build_id() {
        let id: Vec<u8> = (1..=20).collect();
        assert_eq!(
            debug_id(&id).breakpad().to_string(),
            "040302010605080709 0A0B0C0D0E0F100".replace(' ', "")
        );
        assert!(debug_id(&[]).is_nil());
    }
}
