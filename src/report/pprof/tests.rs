//! The pprof message of a small profile, checked against profile.proto's rules.
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
        inlined: false,
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
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut raw).unwrap();
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
