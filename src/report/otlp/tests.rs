//! The OTLP request of a small pprof profile, checked against the schema's rules.
use super::*;
use prost::Message;

/// `main -> work (with step inlined)` in /bin/app (build id 1234), two samples of pid 7: one on CPU (3
/// samples, 30 ms), one with no CPU time (2 samples).
fn pprof_profile() -> pprof::Profile {
    let strings = [
        "",
        "samples",
        "count",
        "cpu",
        "nanoseconds",
        "/bin/app",
        "1234",
        "main",
        "work",
        "step",
        "pid",
        "comm",
        "app",
    ];
    let function = |id, name| pprof::Function {
        id,
        name,
        system_name: name,
        filename: 5,
        start_line: 0,
    };
    let line = |function_id| pprof::Line {
        function_id,
        line: 0,
        column: 0,
    };
    let label = |key, str, num| pprof::Label {
        key,
        str,
        num,
        num_unit: 0,
    };
    let sample = |location_id: Vec<u64>, value: Vec<i64>| pprof::Sample {
        location_id,
        value,
        label: vec![label(10, 0, 7), label(11, 12, 0)],
    };
    pprof::Profile {
        sample_type: vec![
            pprof::ValueType { r#type: 1, unit: 2 },
            pprof::ValueType { r#type: 3, unit: 4 },
        ],
        sample: vec![
            sample(vec![2, 1], vec![3, 30_000_000]),
            sample(vec![1], vec![2, 0]),
        ],
        mapping: vec![pprof::Mapping {
            id: 1,
            memory_start: 0,
            memory_limit: 0x2000,
            filename: 5,
            build_id: 6,
            has_functions: true,
            ..Default::default()
        }],
        location: vec![
            pprof::Location {
                id: 1,
                mapping_id: 1,
                address: 0x1100,
                line: vec![line(1)],
                is_folded: false,
            },
            pprof::Location {
                id: 2,
                mapping_id: 1,
                address: 0x1234,
                line: vec![line(3), line(2)],
                is_folded: false,
            },
        ],
        function: vec![function(1, 7), function(2, 8), function(3, 9)],
        string_table: strings.iter().map(|s| s.to_string()).collect(),
        time_nanos: 1_700_000_000_000_000_000,
        duration_nanos: 15_000_000_000,
        period_type: Some(pprof::ValueType { r#type: 3, unit: 4 }),
        period: 10_101_010,
        ..Default::default()
    }
}

/// Check the tables' zero entries, one profile per sample type holding its non-zero samples, stacks leaf first
/// with inlined frames innermost first, labels as attributes, the build id on the mapping, and the round trip
/// through protobuf.
#[test]
fn otlp_of_a_pprof_profile() {
    let req = to_otlp(&pprof_profile(), &[("service.name", "app")]);
    let req = proto::ExportProfilesServiceRequest::decode(&*req.encode_to_vec()).unwrap();
    let d = req.dictionary.as_ref().unwrap();
    assert_eq!(d.string_table[0], "");
    assert_eq!(d.mapping_table[0], proto::Mapping::default());
    assert_eq!(d.location_table[0], proto::Location::default());
    assert_eq!(d.function_table[0], proto::Function::default());
    assert_eq!(d.stack_table[0], proto::Stack::default());
    assert_eq!(d.attribute_table[0], proto::KeyValueAndUnit::default());
    assert_eq!(d.link_table.len(), 1);
    let s = |i: i32| d.string_table[i as usize].as_str();
    let rp = &req.resource_profiles[0];
    assert_eq!(
        rp.resource.as_ref().unwrap().attributes[0].key,
        "service.name"
    );
    let profiles = &rp.scope_profiles[0].profiles;
    assert_eq!(profiles.len(), 2);
    let types: Vec<_> = profiles
        .iter()
        .map(|p| {
            p.sample_type
                .as_ref()
                .map(|t| (s(t.type_strindex), s(t.unit_strindex)))
        })
        .collect();
    assert_eq!(
        types,
        [Some(("samples", "count")), Some(("cpu", "nanoseconds"))]
    );
    assert_eq!(profiles[0].samples.len(), 2);
    assert_eq!(profiles[1].samples.len(), 1, "the sample with no CPU time");
    let cpu = &profiles[1].samples[0];
    assert_eq!(cpu.values, [30_000_000]);
    assert_eq!(profiles[1].time_unix_nano, 1_700_000_000_000_000_000);
    assert_eq!(profiles[1].duration_nano, 15_000_000_000);
    assert_eq!(profiles[1].period, 10_101_010);
    assert!(profiles
        .iter()
        .all(|p| p.profile_id.iter().any(|&b| b != 0)));
    // Leaf first: location 2 (step inlined into work), then location 1 (main).
    let stack = &d.stack_table[cpu.stack_index as usize].location_indices;
    let names: Vec<Vec<&str>> = stack
        .iter()
        .map(|&l| {
            d.location_table[l as usize]
                .lines
                .iter()
                .map(|line| s(d.function_table[line.function_index as usize].name_strindex))
                .collect()
        })
        .collect();
    assert_eq!(names, [vec!["step", "work"], vec!["main"]]);
    let attrs: Vec<(&str, Option<proto::Value>)> = cpu
        .attribute_indices
        .iter()
        .map(|&a| {
            let kv = &d.attribute_table[a as usize];
            (s(kv.key_strindex), kv.value.clone().and_then(|v| v.value))
        })
        .collect();
    assert_eq!(
        attrs,
        [
            ("pid", Some(proto::Value::Int(7))),
            ("comm", Some(proto::Value::String("app".into())))
        ]
    );
    let m = &d.mapping_table[1];
    assert_eq!(s(m.filename_strindex), "/bin/app");
    let kv = &d.attribute_table[m.attribute_indices[0] as usize];
    assert_eq!(s(kv.key_strindex), BUILD_ID_KEY);
    assert_eq!(
        kv.value.clone().and_then(|v| v.value),
        Some(proto::Value::String("1234".into()))
    );
}
