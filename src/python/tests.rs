//! Unit tests of the version gate, interpreter file names and a sample's copy.
use super::interpreter::version_of_name;
use super::{layout, version_of_file, SampleCopy};

/// Check the version gate: 3.11 and 3.12 by table, 3.13 by its debug offsets; 3.14 and later (and 2.x,
/// 3.10) are read no further.
#[test]
fn only_known_versions_are_read() {
    use layout::Reader;
    assert_eq!(
        layout::of_version(3, 11),
        Some(Reader::Table(&layout::V3_11))
    );
    assert_eq!(
        layout::of_version(3, 12),
        Some(Reader::Table(&layout::V3_12))
    );
    assert_eq!(layout::of_version(3, 13), Some(Reader::DebugOffsets));
    for (major, minor) in [(3, 14), (3, 15), (3, 10), (2, 7)] {
        assert_eq!(layout::of_version(major, minor), None, "{major}.{minor}");
    }
}

/// Check that an interpreter file's version comes from its `Py_Version` where it has one.
#[test]
fn file_versions() {
    for (path, want) in [
        ("/usr/bin/python3.11", (3, 11)),
        (
            "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0",
            (3, 12),
        ),
        (
            "/root/.pyenv/versions/3.13.0/lib/libpython3.13.so.1.0",
            (3, 13),
        ),
    ] {
        if std::path::Path::new(path).exists() {
            assert_eq!(
                version_of_file(std::path::Path::new(path)),
                Some(want),
                "{path}"
            );
        }
    }
    assert_eq!(version_of_file(std::path::Path::new("/bin/sh")), None);
}

/// Check which file names are interpreters, and their versions.
#[test]
fn interpreter_file_names() {
    assert_eq!(version_of_name("/usr/bin/python3.11"), Some((3, 11)));
    assert_eq!(
        version_of_name("/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0"),
        Some((3, 11))
    );
    assert_eq!(version_of_name("/usr/bin/python3.12d"), Some((3, 12)));
    assert_eq!(version_of_name("/usr/bin/python3.13t"), Some((3, 13)));
    assert_eq!(
        version_of_name("/usr/lib/libpython3.13t.so.1.0"),
        Some((3, 13))
    );
    assert_eq!(version_of_name("/usr/bin/python3.11-config"), None);
    assert_eq!(
        version_of_name("/usr/lib/python3.11/lib-dynload/_json.cpython-311.so"),
        None
    );
    assert_eq!(version_of_name("/usr/bin/perl"), None);
}

/// Check what a sample's copy holds: a word by address (within the copy only), and whether a register or an
/// aligned stack word points into a code object's instructions (the check that a frame found at the sampled
/// frame's address still runs the sampled code).
#[test]
fn sample_copy_words_and_code() {
    let mut stack = vec![0u8; 32];
    stack[8..16].copy_from_slice(&0x5000_0010u64.to_ne_bytes());
    stack[16..24].copy_from_slice(&0x7000_0000u64.to_ne_bytes());
    let regs = [0x10, 0x6000_0004];
    let copy = SampleCopy {
        sp: 0x1000,
        stack: &stack,
        regs: &regs,
    };
    assert_eq!(copy.word(0x1008), Some(0x5000_0010));
    assert_eq!(copy.word(0x1018), Some(0));
    assert_eq!(copy.word(0x1019), None, "past the copy");
    assert_eq!(copy.word(0xff8), None, "below sp");
    assert!(
        copy.points_into(&(0x5000_0000..0x5000_0100)),
        "a stack word"
    );
    assert!(copy.points_into(&(0x6000_0000..0x6000_0008)), "a register");
    assert!(!copy.points_into(&(0x5000_0011..0x5000_0100)));
    assert!(
        !copy.points_into(&(0x4000_0000..0x5000_0010)),
        "the end is not in the range"
    );
}
