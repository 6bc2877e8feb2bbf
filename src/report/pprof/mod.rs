//! `rprof report --pprof`: the profile as pprof's `profile.proto`, gzipped, self-contained (every function is
//! named in the file; pprof never needs the binaries).
//!
//! - Sample types: `samples/count`, `cpu/nanoseconds`, and `off_cpu/nanoseconds` when the recording has
//!   off-CPU samples; the default (what pprof shows first) is `off_cpu` when the profile holds more off-CPU
//!   time than CPU time (`--off-cpu-only`, or a program that mostly waits), else `cpu`. The samples of one stack, process, thread, command and kind (on or off CPU) make one
//!   pprof sample, labelled `pid`, `tid` (numbers) and `comm` (and `thread_state` with off-CPU samples).
//! - `period_type` is `cpu/nanoseconds` and `period` the nominal time between samples: 1e9 / F for `-F F`
//!   recordings, or the fixed period of a clock event.
//! - Mappings: one per binary (and one for the kernel), with its path and hex build id. A location's address
//!   is the file offset in its binary, so user mappings start at 0 with file offset 0 (address - start +
//!   offset is the file offset, which is what a symbolizer would need) and end past the highest offset used;
//!   the kernel's mapping spans the kernel addresses used. Every mapping says `has_functions`: the names are
//!   in the file. Mapping 1 (the first) is the main binary: the executable (not the kernel, not a `[...]`
//!   pseudo-file, not a shared library) that the most samples ran in (in any frame of their stacks).
//! - Locations: one per address; `line[]` lists the functions at that address innermost first (the inlined
//!   function, then what it was inlined into). Frames without an address (JIT code named by a perf map,
//!   unknown mappings) get a location without a mapping (`mapping_id` 0, address 0).
//! - Functions: one per (name, mangled name, binary); `system_name` is the mangled name, `filename` the
//!   binary's path (rprof has no source file per function; with `--lines` the name carries `file:line`).
//!   Unnamed code is named as the table names it: by its module and file offset or unwind-table range
//!   (`perl+0x196480..0x19ec13`), or by its address where it has no file (`0xffffffff81234567`), so that
//!   `go tool pprof -top` ranks it as the table does; never one `[unknown]` function for all of it (pprof
//!   would also cut a `[unknown] (perl)` down to `[unknown]`: it takes `[...]` names for C++ and drops what
//!   is in parentheses).
use super::{ExportLocation, Exports, FrameId, Profile, ReportError};
use crate::recording::{Sampling, SamplingPolicy};
use std::collections::HashMap;
use std::io::Write;

pub mod proto;

/// Write the profile as a gzipped pprof `profile.proto`. The profile must have been loaded with
/// [`super::Filter::exports`].
pub fn write_pprof(p: &Profile, out: &mut impl Write) -> Result<(), ReportError> {
    let bytes = prost::Message::encode_to_vec(&to_pprof(p)?);
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&bytes)?;
    gz.finish()?;
    Ok(())
}

/// What a caller changes in the sample labels of [`to_pprof_with`].
#[derive(Clone, Debug, Default)]
pub struct PprofLabels {
    /// Leave the `tid` label out: the samples of a process's threads merge (fewer samples in the file).
    pub no_tid: bool,
    /// More labels on each process's samples (`rprof record --push`: the container id).
    pub by_pid: HashMap<u32, Vec<(String, String)>>,
}

/// The profile as pprof's message (see the module's documentation for what goes where).
pub fn to_pprof(p: &Profile) -> Result<proto::Profile, ReportError> {
    to_pprof_with(p, &PprofLabels::default())
}

/// [`to_pprof`] with the sample labels changed as `labels` says.
pub fn to_pprof_with(p: &Profile, labels: &PprofLabels) -> Result<proto::Profile, ReportError> {
    let ex = p
        .exports
        .as_ref()
        .ok_or(ReportError::NoExports("a pprof profile"))?;
    let mut b = Builder {
        strings: vec![String::new()],
        string_ids: HashMap::from([(String::new(), 0)]),
        functions: Vec::new(),
        function_ids: HashMap::new(),
    };
    let types = sample_types(&mut b, p);
    let (mut mapping, mapping_of_module) = mappings(&mut b, ex);
    let location = locations(&mut b, p, ex, &mapping_of_module, &mut mapping);
    let (sample, duration) = samples(&mut b, p, ex, types.values.len(), labels);
    Ok(proto::Profile {
        sample_type: types.values,
        sample,
        mapping,
        location,
        function: b.functions,
        string_table: b.strings,
        duration_nanos: duration as i64,
        period_type: Some(types.period_type),
        period: types.period as i64,
        default_sample_type: types.default,
        ..Default::default()
    })
}

/// What each sample's values are, and the sampling period.
struct SampleTypes {
    /// `samples/count`, `cpu/nanoseconds` (or `events/count`), and `off_cpu/nanoseconds` with off-CPU samples.
    values: Vec<proto::ValueType>,
    period_type: proto::ValueType,
    period: u64,
    /// The string index of the type pprof shows first.
    default: i64,
}

fn sample_types(b: &mut Builder, p: &Profile) -> SampleTypes {
    // Periods of clock events are nanoseconds of CPU time; other events (cycles in a `perf record` file)
    // count in their own unit.
    let time = p.sampling.is_none_or(|s| s.clock);
    let (kind, unit) = if time {
        ("cpu", "nanoseconds")
    } else {
        ("events", "count")
    };
    let mut values = vec![b.value_type("samples", "count"), b.value_type(kind, unit)];
    if p.has_off_cpu() {
        values.push(b.value_type("off_cpu", "nanoseconds"));
    }
    let period = match p.sampling {
        Some(s) if s.clock => s.interval_ns().unwrap_or(0),
        Some(Sampling {
            policy: SamplingPolicy::Period(period),
            ..
        }) => period,
        _ => 0,
    };
    // A profile that is mostly waiting (or only waiting: `--off-cpu-only`) opens on its off-CPU time.
    let default = match p.off_period > p.period {
        true => "off_cpu",
        false => kind,
    };
    SampleTypes {
        values,
        period_type: b.value_type(kind, unit),
        period,
        default: b.string(default),
    }
}

/// One mapping per module, the main binary first, and each module's mapping id.
fn mappings(b: &mut Builder, ex: &Exports) -> (Vec<proto::Mapping>, Vec<u64>) {
    let order = mapping_order(ex);
    let mut mapping_of_module = vec![0u64; ex.modules.len()];
    for (i, &m) in order.iter().enumerate() {
        mapping_of_module[m] = i as u64 + 1;
    }
    let mapping = order
        .iter()
        .enumerate()
        .map(|(i, &m)| {
            let module = &ex.modules[m];
            let build_id = module.build_id.as_deref().map_or(String::new(), hex);
            let locations = ex.locations.iter().filter(|l| l.module == Some(m as u32));
            let (low, high) = locations.fold((u64::MAX, 0), |(lo, hi), l| {
                (lo.min(l.address), hi.max(l.address))
            });
            let (start, limit) = match module.kernel {
                true => (low & !0xfff, high.saturating_add(1)),
                false => (
                    0,
                    high.saturating_add(1)
                        .checked_next_multiple_of(4096)
                        .unwrap_or(u64::MAX),
                ),
            };
            proto::Mapping {
                id: i as u64 + 1,
                memory_start: start,
                memory_limit: limit.max(start + 1),
                file_offset: 0,
                filename: b.string(&module.path),
                build_id: b.string(&build_id),
                has_functions: true,
                has_filenames: false,
                has_line_numbers: false,
                has_inline_frames: false,
            }
        })
        .collect();
    (mapping, mapping_of_module)
}

/// One location per exported location, marking the mappings that have inlined frames.
fn locations(
    b: &mut Builder,
    p: &Profile,
    ex: &Exports,
    mapping_of_module: &[u64],
    mapping: &mut [proto::Mapping],
) -> Vec<proto::Location> {
    let mut location = Vec::with_capacity(ex.locations.len());
    for (i, l) in ex.locations.iter().enumerate() {
        let mapping_id = l.module.map_or(0, |m| mapping_of_module[m as usize]);
        if l.frames.len() > 1 && mapping_id > 0 {
            mapping[mapping_id as usize - 1].has_inline_frames = true;
        }
        // Not symbolized (`rprof record --push` over its budget): the address alone, for the store to name
        // from the mapping's build id.
        if let ([f], true) = (&l.frames[..], mapping_id > 0) {
            if is_over_budget(&p.frames[*f as usize]) {
                mapping[mapping_id as usize - 1].has_functions = false;
                location.push(proto::Location {
                    id: i as u64 + 1,
                    mapping_id,
                    address: l.address,
                    ..Default::default()
                });
                continue;
            }
        }
        location.push(b.location(p, ex, i as u64 + 1, mapping_id, l));
    }
    location
}

/// Whether a frame is an address `rprof record --push` did not symbolize (over its budget).
fn is_over_budget(f: &crate::resolve::FrameInfo) -> bool {
    f.unnamed
        .as_ref()
        .is_some_and(|u| u.cause == crate::symbols::Unnamed::OverBudget)
}

/// The samples grouped by stack, process, thread, command and kind, each labelled; and the time they span.
fn samples(
    b: &mut Builder,
    p: &Profile,
    ex: &Exports,
    value_count: usize,
    extra: &PprofLabels,
) -> (Vec<proto::Sample>, u64) {
    // (stack, pid, tid, comm, off CPU) -> [samples, CPU ns, off-CPU ns]
    let mut groups: HashMap<(u32, u32, u32, u32, bool), [u64; 3]> = HashMap::new();
    let (mut first, mut last) = (u64::MAX, 0);
    for s in &ex.samples {
        let v = groups
            .entry((
                s.stack,
                s.pid,
                if extra.no_tid { 0 } else { s.tid },
                s.comm,
                s.off_cpu,
            ))
            .or_default();
        v[0] += 1;
        let slot = if s.off_cpu { 2 } else { 1 };
        v[slot] = v[slot].saturating_add(s.weight);
        if s.time > 0 {
            first = first.min(s.time);
            last = last.max(s.time);
        }
    }
    let mut groups: Vec<_> = groups.into_iter().collect();
    groups.sort_unstable_by_key(|g| g.0);
    let labels = SampleLabels::new(b, p.has_off_cpu());
    let sample = groups
        .into_iter()
        .map(|((stack, pid, tid, comm, off), v)| {
            let mut value: Vec<i64> = v.iter().map(|&x| x.min(i64::MAX as u64) as i64).collect();
            value.truncate(value_count);
            proto::Sample {
                // Leaf first.
                location_id: ex.stacks[stack as usize]
                    .iter()
                    .rev()
                    .map(|&l| l as u64 + 1)
                    .collect(),
                value,
                label: {
                    let mut label = labels.of(b, pid, tid, &p.comms[comm as usize], off);
                    if extra.no_tid {
                        label.remove(1);
                    }
                    for (k, v) in extra.by_pid.get(&pid).into_iter().flatten() {
                        label.push(proto::Label {
                            key: b.string(k),
                            str: b.string(v),
                            ..Default::default()
                        });
                    }
                    label
                },
            }
        })
        .collect();
    (sample, last.saturating_sub(first.min(last)))
}

/// The string ids of the sample labels: `pid`, `tid`, `comm`, and `thread_state` (`on-cpu` or `off-cpu`) in
/// profiles with off-CPU samples.
struct SampleLabels {
    keys: [i64; 4],
    states: Option<[i64; 2]>,
}

impl SampleLabels {
    fn new(b: &mut Builder, off_cpu: bool) -> SampleLabels {
        SampleLabels {
            keys: ["pid", "tid", "comm", "thread_state"].map(|k| b.string(k)),
            states: off_cpu.then(|| [b.string("on-cpu"), b.string("off-cpu")]),
        }
    }

    fn of(&self, b: &mut Builder, pid: u32, tid: u32, comm: &str, off: bool) -> Vec<proto::Label> {
        let number = |key, num: u32| proto::Label {
            key,
            num: i64::from(num),
            ..Default::default()
        };
        let text = |key, str| proto::Label {
            key,
            str,
            ..Default::default()
        };
        let mut label = vec![
            number(self.keys[0], pid),
            number(self.keys[1], tid),
            text(self.keys[2], b.string(comm)),
        ];
        if let Some(states) = self.states {
            label.push(text(self.keys[3], states[usize::from(off)]));
        }
        label
    }
}

/// The string table and the functions, as they are interned.
struct Builder {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    functions: Vec<proto::Function>,
    /// (name, system name, module path) -> function id.
    function_ids: HashMap<(String, Option<String>, String), u64>,
}

impl Builder {
    fn string(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), id);
        id
    }

    fn value_type(&mut self, kind: &str, unit: &str) -> proto::ValueType {
        proto::ValueType {
            r#type: self.string(kind),
            unit: self.string(unit),
        }
    }

    fn function(&mut self, p: &Profile, frame: FrameId, path: &str) -> u64 {
        let f = &p.frames[frame as usize];
        let key = (
            super::frame_name(p, frame),
            f.system_name.clone(),
            path.to_string(),
        );
        if let Some(&id) = self.function_ids.get(&key) {
            return id;
        }
        let id = self.functions.len() as u64 + 1;
        let function = proto::Function {
            id,
            name: self.string(&key.0),
            system_name: self.string(key.1.as_deref().unwrap_or(&key.0)),
            filename: self.string(path),
            start_line: 0,
        };
        self.functions.push(function);
        self.function_ids.insert(key, id);
        id
    }

    fn location(
        &mut self,
        p: &Profile,
        ex: &Exports,
        id: u64,
        mapping_id: u64,
        l: &ExportLocation,
    ) -> proto::Location {
        let path = l
            .module
            .map_or("", |m| ex.modules[m as usize].path.as_str());
        // Innermost first: the exports list the function, then what was inlined into it.
        let line = l
            .frames
            .iter()
            .rev()
            .map(|&f| proto::Line {
                function_id: self.function(p, f, path),
                line: 0,
                column: 0,
            })
            .collect();
        proto::Location {
            id,
            mapping_id,
            address: if mapping_id == 0 { 0 } else { l.address },
            line,
            is_folded: false,
        }
    }
}

/// Module indices in the order of the mappings: the main binary first (see the module documentation), then
/// the others in the order they were met.
fn mapping_order(ex: &Exports) -> Vec<usize> {
    let mut weight = vec![0u64; ex.modules.len()];
    let mut stack_modules: Vec<Vec<usize>> = Vec::with_capacity(ex.stacks.len());
    for stack in &ex.stacks {
        let mut modules: Vec<usize> = stack
            .iter()
            .filter_map(|&l| ex.locations[l as usize].module.map(|m| m as usize))
            .collect();
        modules.sort_unstable();
        modules.dedup();
        stack_modules.push(modules);
    }
    for s in &ex.samples {
        for &m in &stack_modules[s.stack as usize] {
            weight[m] += 1;
        }
    }
    let main = (0..ex.modules.len())
        .filter(|&m| {
            let module = &ex.modules[m];
            !module.kernel && !module.path.starts_with('[') && !is_shared_library(&module.path)
        })
        // The first of equals.
        .max_by_key(|&m| (weight[m], std::cmp::Reverse(m)));
    let mut order: Vec<usize> = main.into_iter().collect();
    order.extend((0..ex.modules.len()).filter(|&m| Some(m) != main));
    order
}

/// `libc.so.6`, `libfoo.so`, `libbar.so.1.2`: what pprof takes for a shared library.
fn is_shared_library(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.ends_with(".so") || name.contains(".so.") || name.contains(".so_")
}

/// Bytes as lowercase hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
