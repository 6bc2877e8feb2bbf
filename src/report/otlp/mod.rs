//! `rprof report --otlp`: the profile as an OpenTelemetry profiles request (`ExportProfilesServiceRequest`,
//! protobuf, schema in [`proto`]), made from the pprof profile of the same samples: one OTLP profile per pprof
//! sample type (`samples/count`, `cpu/nanoseconds`, `off_cpu/nanoseconds`), sharing one dictionary.
//!
//! - Tables: entry 0 of each is its zero value, as the schema requires; the string table is pprof's (with
//!   the attribute keys added), so index N names the same string in both.
//! - Mappings, locations and functions are pprof's, in pprof's order (pprof id N is OTLP index N); a mapping's
//!   build id is its attribute `process.executable.build_id.gnu` (hex).
//! - Each pprof sample becomes one OTLP sample in every profile where its value is not zero: its stack (leaf
//!   first) in the stack table, its labels (`pid`, `tid`, `comm`, ...) as attributes (numbers as ints).
//! - The resource carries what the caller gives (`service.name`, `host.name`, ...); the scope is rprof.
use super::pprof::proto as pprof;
use super::{Profile, ReportError};
use std::collections::HashMap;
use std::io::Write;
use std::time::SystemTime;

pub mod proto;

/// The semantic-convention key of a GNU build id on a mapping.
const BUILD_ID_KEY: &str = "process.executable.build_id.gnu";

/// Write the profile as an OTLP request (uncompressed protobuf), its samples starting at `start` (the Unix
/// epoch when unknown), under a resource named (`service.name`) after the main binary. The profile must have
/// been loaded with [`super::Filter::exports`].
pub fn write_otlp(
    p: &Profile,
    start: Option<SystemTime>,
    out: &mut impl Write,
) -> Result<(), ReportError> {
    let mut pprof = super::to_pprof(p)?;
    let since_epoch = start.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok());
    pprof.time_nanos = since_epoch.map_or(0, |d| d.as_nanos() as i64);
    let main = pprof
        .mapping
        .first()
        .and_then(|m| pprof.string_table.get(m.filename as usize))
        .map(|path| path.rsplit('/').next().unwrap_or(path).to_string())
        .unwrap_or_else(|| "rprof".into());
    let request = to_otlp(&pprof, &[("service.name", &main)]);
    out.write_all(&prost::Message::encode_to_vec(&request))?;
    Ok(())
}

/// The OTLP request holding `profile`'s samples, one profile per sample type, under a resource with `resource`
/// attributes. The profiles start at `profile.time_nanos` and last `profile.duration_nanos`.
pub fn to_otlp(
    profile: &pprof::Profile,
    resource: &[(&str, &str)],
) -> proto::ExportProfilesServiceRequest {
    let mut d = Dictionary::new(profile);
    let mapping_table = std::iter::once(proto::Mapping::default())
        .chain(profile.mapping.iter().map(|m| d.mapping(m)))
        .collect();
    let function_index: HashMap<u64, i32> = profile
        .function
        .iter()
        .enumerate()
        .map(|(i, f)| (f.id, i as i32 + 1))
        .collect();
    let function_table = std::iter::once(proto::Function::default())
        .chain(profile.function.iter().map(|f| proto::Function {
            name_strindex: f.name as i32,
            system_name_strindex: f.system_name as i32,
            filename_strindex: f.filename as i32,
            start_line: f.start_line,
        }))
        .collect();
    let location_index: HashMap<u64, i32> = profile
        .location
        .iter()
        .enumerate()
        .map(|(i, l)| (l.id, i as i32 + 1))
        .collect();
    let location_table = std::iter::once(proto::Location::default())
        .chain(profile.location.iter().map(|l| {
            proto::Location {
                mapping_index: l.mapping_id as i32,
                address: l.address,
                lines: l
                    .line
                    .iter()
                    .map(|line| proto::Line {
                        function_index: function_index.get(&line.function_id).copied().unwrap_or(0),
                        line: line.line,
                        column: line.column,
                    })
                    .collect(),
                attribute_indices: Vec::new(),
            }
        }))
        .collect();
    let samples: Vec<(i32, Vec<i32>)> = profile
        .sample
        .iter()
        .map(|s| {
            let stack = s
                .location_id
                .iter()
                .map(|id| location_index.get(id).copied().unwrap_or(0))
                .collect();
            (d.stack(stack), s.label.iter().map(|l| d.label(l)).collect())
        })
        .collect();
    let profiles = profile
        .sample_type
        .iter()
        .enumerate()
        .map(|(t, vt)| one_type(profile, t, vt, &samples))
        .collect();
    let resource = proto::Resource {
        attributes: resource
            .iter()
            .map(|(k, v)| proto::KeyValue {
                key: k.to_string(),
                value: Some(proto::AnyValue {
                    value: Some(proto::Value::String(v.to_string())),
                }),
            })
            .collect(),
    };
    proto::ExportProfilesServiceRequest {
        resource_profiles: vec![proto::ResourceProfiles {
            resource: Some(resource),
            scope_profiles: vec![proto::ScopeProfiles {
                scope: Some(proto::InstrumentationScope {
                    name: "rprof".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                }),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
        dictionary: Some(proto::ProfilesDictionary {
            mapping_table,
            location_table,
            function_table,
            link_table: vec![proto::Link::default()],
            string_table: d.strings,
            attribute_table: d.attributes,
            stack_table: d.stacks,
        }),
    }
}

/// The OTLP profile of sample type `t`: the samples whose value of that type is not zero.
fn one_type(
    profile: &pprof::Profile,
    t: usize,
    vt: &pprof::ValueType,
    samples: &[(i32, Vec<i32>)],
) -> proto::Profile {
    let value_type = |v: &pprof::ValueType| proto::ValueType {
        type_strindex: v.r#type as i32,
        unit_strindex: v.unit as i32,
    };
    let samples = profile
        .sample
        .iter()
        .zip(samples)
        .filter_map(|(s, (stack, attributes))| {
            let value = *s.value.get(t)?;
            (value != 0).then(|| proto::Sample {
                stack_index: *stack,
                attribute_indices: attributes.clone(),
                link_index: 0,
                values: vec![value],
                timestamps_unix_nano: Vec::new(),
            })
        })
        .collect();
    // Never all zeroes (the schema calls that invalid): the start time and the sample type.
    let mut profile_id = (profile.time_nanos as u64).to_le_bytes().to_vec();
    profile_id.extend((t as u64 + 1).to_le_bytes());
    proto::Profile {
        sample_type: Some(value_type(vt)),
        samples,
        time_unix_nano: profile.time_nanos.max(0) as u64,
        duration_nano: profile.duration_nanos.max(0) as u64,
        period_type: profile.period_type.as_ref().map(value_type),
        period: profile.period,
        profile_id,
        ..Default::default()
    }
}

/// The dictionary's interned tables: strings (pprof's first), attributes and stacks.
struct Dictionary {
    strings: Vec<String>,
    string_ids: HashMap<String, i32>,
    attributes: Vec<proto::KeyValueAndUnit>,
    attribute_ids: HashMap<(i32, AttrValue), i32>,
    stacks: Vec<proto::Stack>,
    stack_ids: HashMap<Vec<i32>, i32>,
}

/// An attribute's value, as a hashable key.
#[derive(Clone, PartialEq, Eq, Hash)]
enum AttrValue {
    Str(i32),
    Int(i64),
}

impl Dictionary {
    fn new(profile: &pprof::Profile) -> Dictionary {
        // pprof's string_table[0] is "" by pprof's own rule, as OTLP's must be.
        let strings = profile.string_table.clone();
        let string_ids = strings
            .iter()
            .enumerate()
            .rev()
            .map(|(i, s)| (s.clone(), i as i32))
            .collect();
        Dictionary {
            strings,
            string_ids,
            attributes: vec![proto::KeyValueAndUnit::default()],
            attribute_ids: HashMap::new(),
            stacks: vec![proto::Stack::default()],
            stack_ids: HashMap::new(),
        }
    }

    fn string(&mut self, s: &str) -> i32 {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as i32;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), id);
        id
    }

    fn attribute(&mut self, key: i32, value: AttrValue) -> i32 {
        if let Some(&id) = self.attribute_ids.get(&(key, value.clone())) {
            return id;
        }
        let any = match &value {
            AttrValue::Str(s) => proto::Value::String(self.strings[*s as usize].clone()),
            AttrValue::Int(n) => proto::Value::Int(*n),
        };
        let id = self.attributes.len() as i32;
        self.attributes.push(proto::KeyValueAndUnit {
            key_strindex: key,
            value: Some(proto::AnyValue { value: Some(any) }),
            unit_strindex: 0,
        });
        self.attribute_ids.insert((key, value), id);
        id
    }

    /// A pprof label as an attribute: a string label by its text, a numeric one as an int.
    fn label(&mut self, l: &pprof::Label) -> i32 {
        let value = match l.str {
            0 => AttrValue::Int(l.num),
            s => AttrValue::Str(s as i32),
        };
        self.attribute(l.key as i32, value)
    }

    fn stack(&mut self, locations: Vec<i32>) -> i32 {
        if let Some(&id) = self.stack_ids.get(&locations) {
            return id;
        }
        let id = self.stacks.len() as i32;
        self.stacks.push(proto::Stack {
            location_indices: locations.clone(),
        });
        self.stack_ids.insert(locations, id);
        id
    }

    fn mapping(&mut self, m: &pprof::Mapping) -> proto::Mapping {
        let build_id = self
            .strings
            .get(m.build_id as usize)
            .cloned()
            .unwrap_or_default();
        let attribute_indices = match build_id.is_empty() {
            true => Vec::new(),
            false => {
                let key = self.string(BUILD_ID_KEY);
                let value = self.string(&build_id);
                vec![self.attribute(key, AttrValue::Str(value))]
            }
        };
        proto::Mapping {
            memory_start: m.memory_start,
            memory_limit: m.memory_limit,
            file_offset: m.file_offset,
            filename_strindex: m.filename as i32,
            attribute_indices,
        }
    }
}

#[cfg(test)]
mod tests;
