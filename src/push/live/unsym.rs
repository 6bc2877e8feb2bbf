//! `--push-unsymbolized`: a period's profile with addresses, build ids and mappings only, for stores that
//! symbolize centrally (Pyroscope's and Parca's symbolizers fetch debug files by build id from debuginfod).
//! No binary is read on the host but for its build id. A location's address is its file offset in the
//! binary (mappings start at 0 with file offset 0, as `rprof report --pprof` writes them). Kernel frames keep
//! their names (a central symbolizer cannot know this host's kernel layout), and so do frames without a file
//! (JIT code named by a perf map, unknown mappings).
use super::{HeldSample, Live};
use crate::recording::SamplingPolicy;
use crate::report::proto;
use crate::resolve::KERNEL_NAME;
use std::collections::HashMap;

/// The string table, interned.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    ids: HashMap<String, i64>,
}

impl Strings {
    fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.ids.get(s) {
            return i;
        }
        self.table.push(s.to_string());
        self.ids.insert(s.to_string(), self.table.len() as i64 - 1);
        self.table.len() as i64 - 1
    }
}

/// What a frame id becomes: an offset in a binary (path, build id), or a named frame.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Where {
    File(String, Option<Vec<u8>>, u64),
    Named(String, bool),
}

impl Live {
    /// The unsymbolized pprof of `samples` (see the module documentation).
    pub(in crate::push) fn unsymbolized(&mut self, samples: &[HeldSample]) -> proto::Profile {
        let mut s = Strings::default();
        s.id("");
        let mut mappings: Vec<proto::Mapping> = Vec::new();
        let mut mapping_ids: HashMap<(String, Option<Vec<u8>>), u64> = HashMap::new();
        let mut locations: Vec<proto::Location> = Vec::new();
        let mut location_ids: HashMap<Where, u64> = HashMap::new();
        let mut functions: Vec<proto::Function> = Vec::new();
        let mut groups: HashMap<(u32, u32, std::sync::Arc<str>, bool), [i64; 3]> = HashMap::new();
        let mut stack_locations: HashMap<u32, Vec<u64>> = HashMap::new();
        for sample in samples {
            if let std::collections::hash_map::Entry::Vacant(e) =
                stack_locations.entry(sample.stack)
            {
                let ids = self.stacks[sample.stack as usize].1.clone();
                let mut locs = Vec::with_capacity(ids.len());
                // Leaf first.
                for &id in ids.iter().rev() {
                    let at = self.where_of(sample.pid, id);
                    let next = locations.len() as u64 + 1;
                    let loc = *location_ids.entry(at.clone()).or_insert(next);
                    if loc == next {
                        let mut ctx = (&mut s, &mut mappings, &mut mapping_ids, &mut functions);
                        locations.push(location(&mut ctx, loc, at));
                    }
                    locs.push(loc);
                }
                e.insert(locs);
            }
            let v = groups
                .entry((
                    sample.stack,
                    sample.pid,
                    sample.comm.clone(),
                    sample.off_cpu,
                ))
                .or_default();
            v[0] += 1;
            v[if sample.off_cpu { 2 } else { 1 }] += sample.weight as i64;
        }
        for m in &mut mappings {
            m.memory_limit = m.memory_limit.saturating_add(1).next_multiple_of(4096);
        }
        let off = groups.keys().any(|k| k.3);
        let types = [
            ("samples", "count"),
            ("cpu", "nanoseconds"),
            ("off_cpu", "nanoseconds"),
        ];
        let count = if off { 3 } else { 2 };
        let sample_type: Vec<proto::ValueType> = types[..count]
            .iter()
            .map(|(t, u)| proto::ValueType {
                r#type: s.id(t),
                unit: s.id(u),
            })
            .collect();
        let (pid_key, comm_key) = (s.id("pid"), s.id("comm"));
        let container_key = s.id("container_id");
        let mut sample = Vec::with_capacity(groups.len());
        for ((stack, pid, comm, _), v) in groups {
            let mut label = vec![
                proto::Label {
                    key: pid_key,
                    num: i64::from(pid),
                    ..Default::default()
                },
                proto::Label {
                    key: comm_key,
                    str: s.id(&comm),
                    ..Default::default()
                },
            ];
            if let Some(Some(id)) = self.containers.get(&pid) {
                label.push(proto::Label {
                    key: container_key,
                    str: s.id(id),
                    ..Default::default()
                });
            }
            sample.push(proto::Sample {
                location_id: stack_locations[&stack].clone(),
                value: v[..count].to_vec(),
                label,
            });
        }
        let period = match self.sampling.map(|x| x.policy) {
            Some(SamplingPolicy::Frequency(f)) if f > 0 => 1_000_000_000 / f as i64,
            Some(SamplingPolicy::Period(p)) => p as i64,
            _ => 0,
        };
        proto::Profile {
            period_type: Some(sample_type[1].clone()),
            default_sample_type: sample_type[1].r#type,
            sample_type,
            sample,
            mapping: mappings,
            location: locations,
            function: functions,
            period,
            string_table: s.table,
            ..Default::default()
        }
    }

    /// Where a frame id of process `pid` is: a file offset, or a name (kernel and frames without a file).
    fn where_of(&mut self, pid: u32, id: crate::report::FrameId) -> Where {
        if let Some((module, offset)) = self.resolver.module_of(id) {
            let path = module.path.to_string_lossy().into_owned();
            let build_id = match &module.build_id {
                Some(b) => Some(b.clone()),
                None => {
                    let by_file = &mut self.build_ids_by_file;
                    self.build_ids
                        .entry((pid, path.clone()))
                        .or_insert_with(|| build_id_by_file(by_file, pid, &path))
                        .clone()
                }
            };
            return Where::File(path, build_id, offset.0);
        }
        if let Some(addr) = self.resolver.kernel_address(id) {
            let name = self.resolver.symbolizer().kernel(addr);
            return Where::Named(name.map_or(format!("{addr:#x}"), |n| n.to_string()), true);
        }
        let frame = self.resolver.frame(id);
        Where::Named(frame.name.clone(), frame.kernel)
    }
}

/// A file's identity: device, inode, size and modification time (seconds, nanoseconds).
pub(in crate::push) type FileKey = (u64, u64, u64, i64, i64);

/// The build id of `path` as process `pid` sees it (through its root, else on the host), read once per file:
/// every short-lived process of a compiler or a shell maps the same files, and each read used to open and
/// parse them again; a `stat` now finds the file's id in `ids`.
pub(super) fn build_id_by_file(
    ids: &mut crate::resolve::FastMap<FileKey, Option<Vec<u8>>>,
    pid: u32,
    path: &str,
) -> Option<Vec<u8>> {
    use std::os::unix::fs::MetadataExt;
    let root = format!("/proc/{pid}/root{path}");
    for candidate in [root.as_str(), path] {
        let Ok(meta) = std::fs::metadata(candidate) else {
            continue;
        };
        let key = (
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec(),
        );
        let id = ids
            .entry(key)
            .or_insert_with(|| crate::buildid::file_build_id(std::path::Path::new(candidate)));
        if id.is_some() {
            return id.clone();
        }
    }
    None
}

type Ctx<'a> = (
    &'a mut Strings,
    &'a mut Vec<proto::Mapping>,
    &'a mut HashMap<(String, Option<Vec<u8>>), u64>,
    &'a mut Vec<proto::Function>,
);

/// The mapping id of a binary (or the kernel), made at its first use; `address` extends its limit.
fn mapping(
    ctx: &mut Ctx<'_>,
    path: &str,
    build_id: Option<Vec<u8>>,
    address: u64,
    named: bool,
) -> u64 {
    let (s, mappings, mapping_ids, _) = ctx;
    let next = mappings.len() as u64 + 1;
    let mid = *mapping_ids
        .entry((path.to_string(), build_id.clone()))
        .or_insert(next);
    if mid == next {
        mappings.push(proto::Mapping {
            id: mid,
            filename: s.id(path),
            build_id: s.id(&build_id
                .as_deref()
                .map_or(String::new(), crate::buildid::hex)),
            has_functions: named,
            ..Default::default()
        });
    }
    let m = &mut mappings[mid as usize - 1];
    if !named {
        m.memory_limit = m.memory_limit.max(address);
    }
    mid
}

/// The location `id` for `at`, with its mapping (files and the kernel) or its function (named frames).
fn location(ctx: &mut Ctx<'_>, id: u64, at: Where) -> proto::Location {
    match at {
        Where::File(path, build_id, offset) => proto::Location {
            id,
            mapping_id: mapping(ctx, &path, build_id, offset, false),
            address: offset,
            ..Default::default()
        },
        Where::Named(name, kernel) => {
            let function_id = ctx.3.len() as u64 + 1;
            let name = ctx.0.id(&name);
            ctx.3.push(proto::Function {
                id: function_id,
                name,
                system_name: name,
                ..Default::default()
            });
            let mapping_id = match kernel {
                true => mapping(ctx, KERNEL_NAME, None, 0, true),
                false => 0,
            };
            proto::Location {
                id,
                mapping_id,
                line: vec![proto::Line {
                    function_id,
                    ..Default::default()
                }],
                ..Default::default()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two processes mapping the same binary (here: this test process and pid 1, both seeing this test binary
    /// through their root) cost one read of its build id: the second finds it by the file's identity.
    #[test]
    fn build_id_read_once_per_file() {
        let exe = std::env::current_exe().unwrap();
        let path = exe.to_str().unwrap();
        let mut ids = crate::resolve::FastMap::default();
        let own = build_id_by_file(&mut ids, std::process::id(), path);
        assert!(own.is_some(), "the test binary has no build id");
        assert_eq!(build_id_by_file(&mut ids, 1, path), own);
        // A pid that does not exist: the host's file.
        assert_eq!(build_id_by_file(&mut ids, u32::MAX, path), own);
        assert_eq!(ids.len(), 1, "one read per file, not per process");
        assert_eq!(own, crate::buildid::file_build_id(&exe));
    }
}
