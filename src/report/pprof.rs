//! `rprof report --pprof`: the profile as pprof's `profile.proto`, gzipped, self-contained (every function is
//! named in the file; pprof never needs the binaries).
//!
//! - Sample types: `samples/count`, `cpu/nanoseconds`, and `off_cpu/nanoseconds` when the recording has
//!   off-CPU samples. The samples of one stack, process, thread, command and kind (on or off CPU) make one
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
//!   Unknown frames are named `[unknown] (MODULE)`, as in the table.
use super::{ExportLocation, Exports, FrameId, Profile, ReportError};
use crate::recording::{Sampling, SamplingPolicy};
use std::collections::HashMap;
use std::io::Write;

/// The messages of pprof's `profile.proto` (package `perftools.profiles`), with its published field numbers.
pub mod proto {
    /// A profile: samples of stacks, with the tables they refer to.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        /// `string_table[0]` must be "".
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "7")]
        pub drop_frames: i64,
        #[prost(int64, tag = "8")]
        pub keep_frames: i64,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    /// A type and its unit, as string table indices.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    /// A stack (leaf first) with one value per sample type.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    /// A string (`str`) or numeric (`num`) label.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    /// A mapped binary.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    /// An address and the functions there, innermost first.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub address: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
        #[prost(bool, tag = "5")]
        pub is_folded: bool,
    }

    /// One function at a location.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        #[prost(int64, tag = "2")]
        pub line: i64,
        #[prost(int64, tag = "3")]
        pub column: i64,
    }

    /// A function.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

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
    let off_cpu = p.has_off_cpu();
    // Periods of clock events are nanoseconds of CPU time; other events (cycles in a `perf record` file)
    // count in their own unit.
    let time = p.sampling.is_none_or(|s| s.clock);
    let (kind, unit) = if time {
        ("cpu", "nanoseconds")
    } else {
        ("events", "count")
    };
    let mut sample_type = vec![b.value_type("samples", "count"), b.value_type(kind, unit)];
    if off_cpu {
        sample_type.push(b.value_type("off_cpu", "nanoseconds"));
    }
    let period_type = Some(b.value_type(kind, unit));
    let period = match p.sampling {
        Some(s) if s.clock => s.interval_ns().unwrap_or(0),
        Some(Sampling {
            policy: SamplingPolicy::Period(period),
            ..
        }) => period,
        _ => 0,
    };

    let order = mapping_order(ex);
    let mut mapping_of_module = vec![0u64; ex.modules.len()];
    for (i, &m) in order.iter().enumerate() {
        mapping_of_module[m] = i as u64 + 1;
    }
    let mut mapping: Vec<proto::Mapping> = order
        .iter()
        .map(|&m| {
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
                id: 0,
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
    for (i, m) in mapping.iter_mut().enumerate() {
        m.id = i as u64 + 1;
    }

    let mut location = Vec::with_capacity(ex.locations.len());
    for (i, l) in ex.locations.iter().enumerate() {
        let mapping_id = l.module.map_or(0, |m| mapping_of_module[m as usize]);
        if l.frames.len() > 1 && mapping_id > 0 {
            mapping[mapping_id as usize - 1].has_inline_frames = true;
        }
        location.push(b.location(p, ex, i as u64 + 1, mapping_id, l));
    }

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
    let keys = [
        b.string("pid"),
        b.string("tid"),
        b.string("comm"),
        b.string("thread_state"),
    ];
    let states = [b.string("on-cpu"), b.string("off-cpu")];
    let sample = groups
        .into_iter()
        .map(|((stack, pid, tid, comm, off), v)| {
            let mut label = vec![
                proto::Label {
                    key: keys[0],
                    num: pid as i64,
                    ..Default::default()
                },
                proto::Label {
                    key: keys[1],
                    num: tid as i64,
                    ..Default::default()
                },
                proto::Label {
                    key: keys[2],
                    str: b.string(&p.comms[comm as usize]),
                    ..Default::default()
                },
            ];
            if off_cpu {
                label.push(proto::Label {
                    key: keys[3],
                    str: states[off as usize],
                    ..Default::default()
                });
            }
            let mut value: Vec<i64> = v.iter().map(|&x| x.min(i64::MAX as u64) as i64).collect();
            value.truncate(sample_type.len());
            proto::Sample {
                // Leaf first.
                location_id: ex.stacks[stack as usize]
                    .iter()
                    .rev()
                    .map(|&l| l as u64 + 1)
                    .collect(),
                value,
                label,
            }
        })
        .collect();
    let default_sample_type = b.string(kind);
    Ok(proto::Profile {
        sample_type,
        sample,
        mapping,
        location,
        function: b.functions,
        string_table: b.strings,
        duration_nanos: last.saturating_sub(first.min(last)) as i64,
        period_type,
        period: period as i64,
        default_sample_type,
        ..Default::default()
    })
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
        let name = if f.name == "[unknown]" {
            format!("[unknown] ({})", f.module)
        } else {
            f.name.clone()
        };
        let key = (name, f.system_name.clone(), path.to_string());
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
                frame("[unknown]", "[anon]", None),
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
            "[unknown] ([anon])"
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

    /// Check which paths count as shared libraries for the choice of the main binary.
    #[test]
    fn shared_libraries() {
        assert!(is_shared_library("/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(is_shared_library("/usr/lib/libfoo.so"));
        assert!(!is_shared_library("/usr/bin/python3.11"));
        assert!(!is_shared_library("/tmp/so/app"));
    }
}
