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

/// The profile as pprof's message (see the module's documentation for what goes where).
pub fn to_pprof(p: &Profile) -> Result<proto::Profile, ReportError> {
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
    let (sample, duration) = samples(&mut b, p, ex, types.values.len());
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
        location.push(b.location(p, ex, i as u64 + 1, mapping_id, l));
    }
    location
}

/// The samples grouped by stack, process, thread, command and kind, each labelled; and the time they span.
fn samples(
    b: &mut Builder,
    p: &Profile,
    ex: &Exports,
    value_count: usize,
) -> (Vec<proto::Sample>, u64) {
    // (stack, pid, tid, comm, off CPU) -> [samples, CPU ns, off-CPU ns]
    let mut groups: HashMap<(u32, u32, u32, u32, bool), [u64; 3]> = HashMap::new();
    let (mut first, mut last) = (u64::MAX, 0);
    for s in &ex.samples {
        let v = groups
            .entry((s.stack, s.pid, s.tid, s.comm, s.off_cpu))
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
                label: labels.of(b, pid, tid, &p.comms[comm as usize], off),
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
mod tests {
    use super::*;
    use crate::report::{ExportModule, FrameInfo, TimedSample};
    use crate::resolve::UnnamedCode;
    use crate::symbols::Unnamed;

    fn frame(name: &str, module: &str, system_name: Option<&str>) -> FrameInfo {
        FrameInfo {
            name: name.into(),
            module: module.into(),
            kernel: false,
            system_name: system_name.map(str::to_string),
            unnamed: None,
        }
    }

    /// A profile of `main -> outer (with inner inlined)` in `/bin/app`, over `malloc` in libc, and an unknown
    /// JIT frame.
    fn profile() -> Profile {
        let modules = vec![
            ExportModule {
                path: "/lib/libc.so.6".into(),
                build_id: Some(vec![0xab, 0x01]),
                kernel: false,
            },
            ExportModule {
                path: "/bin/app".into(),
                build_id: Some(vec![0x12, 0x34, 0xff]),
                kernel: false,
            },
        ];
        let locations = vec![
            ExportLocation {
                module: Some(1),
                address: 0x1100,
                frames: vec![0],
            },
            ExportLocation {
                module: Some(1),
                address: 0x1234,
                frames: vec![1, 2],
            },
            ExportLocation {
                module: Some(0),
                address: 0x9000,
                frames: vec![3],
            },
            ExportLocation {
                module: None,
                address: 0,
                frames: vec![4],
            },
        ];
        let sample = |stack, off_cpu, weight| TimedSample {
            time: 1000,
            pid: 7,
            tid: 8,
            comm: 0,
            stack,
            weight,
            off_cpu,
        };
        Profile {
            frames: vec![
                frame("main", "app", None),
                frame("outer", "app", None),
                frame("inner", "app", None),
                frame("malloc", "libc.so.6", None),
                FrameInfo::unnamed(
                    "[anon]".into(),
                    false,
                    Unnamed::JitWithoutMap,
                    UnnamedCode::Address(0x7f00_0000_1000),
                ),
            ],
            comms: vec!["app".into()],
            samples: 3,
            period: 3000,
            off_samples: 1,
            off_period: 5000,
            exports: Some(Exports {
                modules,
                locations,
                stacks: vec![vec![0, 1], vec![0, 2], vec![0, 3]],
                samples: vec![
                    sample(0, false, 1000),
                    sample(0, false, 1000),
                    sample(1, false, 1000),
                    sample(1, true, 5000),
                    sample(2, false, 0),
                ],
            }),
            ..Profile::default()
        }
    }

    /// Check that the message follows profile.proto's rules: "" first in the string table, ids from 1 that
    /// resolve, one value per sample type, leaf first, inlined functions innermost first, main binary first.
    #[test]
    fn message_rules() {
        let p = to_pprof(&profile()).unwrap();
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(p.string_table[0], "");
        let types: Vec<_> = p
            .sample_type
            .iter()
            .map(|t| (s(t.r#type), s(t.unit)))
            .collect();
        assert_eq!(
            types,
            [
                ("samples", "count"),
                ("cpu", "nanoseconds"),
                ("off_cpu", "nanoseconds")
            ]
        );
        assert_eq!(s(p.mapping[0].filename), "/bin/app");
        assert_eq!(s(p.mapping[0].build_id), "1234ff");
        assert_eq!(p.mapping[0].id, 1);
        assert!(p.mapping[0].has_inline_frames && !p.mapping[1].has_inline_frames);
        let inlined = &p.location[1];
        let names: Vec<_> = inlined
            .line
            .iter()
            .map(|l| s(p.function[l.function_id as usize - 1].name))
            .collect();
        assert_eq!(names, ["inner", "outer"]);
        assert_eq!(inlined.mapping_id, 1);
        assert_eq!(inlined.address, 0x1234);
        let jit = &p.location[3];
        assert_eq!(jit.mapping_id, 0);
        assert_eq!(
            s(p.function[jit.line[0].function_id as usize - 1].name),
            "0x7f0000001000"
        );
        // (stack 0, on), (stack 1, on), (stack 1, off), (stack 2, on)
        assert_eq!(p.sample.len(), 4);
        let values: Vec<_> = p.sample.iter().map(|x| x.value.clone()).collect();
        assert_eq!(
            values,
            [
                vec![2, 2000, 0],
                vec![1, 1000, 0],
                vec![1, 0, 5000],
                vec![1, 0, 0]
            ]
        );
        assert_eq!(p.sample[0].location_id, [2, 1]);
        for f in &p.function {
            assert!(f.id >= 1 && f.id as usize <= p.function.len());
        }
        let labels: Vec<_> = p.sample[2]
            .label
            .iter()
            .map(|l| (s(l.key), l.num, s(l.str)))
            .collect();
        assert_eq!(
            labels,
            [
                ("pid", 7, ""),
                ("tid", 8, ""),
                ("comm", 0, "app"),
                ("thread_state", 0, "off-cpu")
            ]
        );
    }

    /// Check that pprof opens on off-CPU time when the profile holds more of it than CPU time, else on CPU time.
    #[test]
    fn default_sample_type_follows_the_time() {
        let mut waiting = profile();
        assert!(waiting.off_period > waiting.period);
        let p = to_pprof(&waiting).unwrap();
        assert_eq!(p.string_table[p.default_sample_type as usize], "off_cpu");
        waiting.period = 10 * waiting.off_period;
        let p = to_pprof(&waiting).unwrap();
        assert_eq!(p.string_table[p.default_sample_type as usize], "cpu");
    }

    /// Check that the written file is gzip and decodes back to the same message.
    #[test]
    fn gzipped_roundtrip() {
        let profile = profile();
        let mut bytes = Vec::new();
        write_pprof(&profile, &mut bytes).unwrap();
        assert_eq!(&bytes[..2], &[0x1f, 0x8b]);
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut raw)
            .unwrap();
        let decoded = <proto::Profile as prost::Message>::decode(&raw[..]).unwrap();
        assert_eq!(decoded, to_pprof(&profile).unwrap());
    }

    /// Check that unnamed code is one function per code range and binary, named as the table names it (with
    /// the count of addresses of a range), and that no function is named `[unknown]`.
    #[test]
    fn unnamed_code_named_per_binary_and_range() {
        let mut p = profile();
        let unnamed =
            |module: &str, code| FrameInfo::unnamed(module.into(), false, Unnamed::Stripped, code);
        p.frames[0] = unnamed("app", UnnamedCode::Range(0x1000, 0x1200));
        p.frames[3] = unnamed("libc.so.6", UnnamedCode::Range(0x9000, 0x9100));
        p.addresses.insert(0, 2);
        let ex = p.exports.as_mut().unwrap();
        // A second address in app's range, and one in a second range of app.
        ex.locations[1].frames = vec![0];
        ex.locations.push(ExportLocation {
            module: Some(1),
            address: 0x2000,
            frames: vec![5],
        });
        ex.stacks.push(vec![4]);
        p.frames.push(unnamed("app", UnnamedCode::Offset(0x2000)));
        let pb = to_pprof(&p).unwrap();
        let s = |i: i64| pb.string_table[i as usize].as_str();
        let mut names: Vec<(&str, &str)> = pb
            .function
            .iter()
            .map(|f| (s(f.name), s(f.filename)))
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                ("0x7f0000001000", ""),
                ("app+0x1000..0x1200 (2 addresses)", "/bin/app"),
                ("app+0x2000", "/bin/app"),
                ("libc.so.6+0x9000..0x9100", "/lib/libc.so.6"),
            ]
        );
        // Both addresses of the range are locations of its one function.
        assert_eq!(pb.location[0].line, pb.location[1].line);
    }

    /// Check which paths count as shared libraries for the choice of the main binary.
    #[test]
    fn shared_libraries() {
        assert!(is_shared_library("/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(is_shared_library("/usr/lib/libfoo.so"));
        assert!(!is_shared_library("/usr/bin/python3.11"));
        assert!(!is_shared_library("/tmp/so/app"));
    }
}
