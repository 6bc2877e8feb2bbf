//! Go binaries: which version built them (from `.go.buildinfo`), and whether each function can be timed.
//!
//! A uretprobe rewrites the return address on the stack, and Go moves goroutine stacks (and checks return
//! addresses when it unwinds them), so uretprobes crash Go programs. rprof times Go functions without them: the
//! entry probe goes after the stack-growth check, a uprobe goes on every `ret`, and entries and returns are paired
//! per goroutine by the g pointer, which the register ABI (Go 1.17 and later, amd64) keeps in r14. Assembly
//! functions (ABI0, their symbols end in `.abi0`) do not keep it, and older Go has no register ABI: those are
//! counted only.
use crate::mapped::MappedFile;
use object::{Object, ObjectSection};
use std::path::Path;

/// How a Go function is probed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GoFunction {
    /// Entry after the stack check, a uprobe on each `ret`, paired by goroutine (r14).
    Timed,
    /// Entries counted only, for this reason.
    CountOnly(String),
}

/// The Go version (major, minor) that built `path`, if it is a Go binary whose `.go.buildinfo` holds the
/// version inline (Go 1.18 and later); `Some(None)` for a Go binary whose version could not be read.
pub fn go_version(path: &Path) -> Option<Option<(u32, u32)>> {
    let file = MappedFile::open(path).ok()?;
    let elf = object::File::parse(&*file).ok()?;
    let section = elf.section_by_name(".go.buildinfo")?;
    Some(section.data().ok().and_then(parse_buildinfo))
}

/// The version in a `.go.buildinfo` section: a 32-byte header (`\xff Go buildinf:`, pointer size, flags), then
/// with flag 2 the version as a uvarint-length-prefixed string (`go1.19.8`).
pub fn parse_buildinfo(data: &[u8]) -> Option<(u32, u32)> {
    if !data.starts_with(b"\xff Go buildinf:") || data.get(15)? & 2 == 0 {
        return None;
    }
    let (len, used) = uvarint(data.get(32..)?)?;
    let text = data.get(32 + used..32 + used + len as usize)?;
    let text = std::str::from_utf8(text).ok()?.strip_prefix("go")?;
    let mut parts = text.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

fn uvarint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, b) in bytes.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// How a function of a Go binary built by `version` is probed, given its symbol names.
pub fn function(version: Option<(u32, u32)>, names: &[&str]) -> GoFunction {
    if names.iter().any(|n| n.ends_with(".abi0")) {
        return GoFunction::CountOnly(
            "an assembly (ABI0) function does not keep the goroutine in r14".into(),
        );
    }
    match version {
        Some(v) if v >= (1, 17) => GoFunction::Timed,
        Some((a, b)) => GoFunction::CountOnly(format!(
            "Go {a}.{b} has no register ABI (Go 1.17 and later)"
        )),
        None => GoFunction::CountOnly("its Go version could not be read from .go.buildinfo".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that the version is read from a Go 1.18+ buildinfo, and ABI0 and old versions are counted only.
    #[test]
    fn versions_and_functions() {
        let mut data = b"\xff Go buildinf:".to_vec();
        data.extend([8, 2]);
        data.resize(32, 0);
        data.push(8);
        data.extend(b"go1.19.8");
        assert_eq!(parse_buildinfo(&data), Some((1, 19)));
        data[15] = 0;
        assert_eq!(parse_buildinfo(&data), None);
        assert_eq!(function(Some((1, 19)), &["main.work"]), GoFunction::Timed);
        assert!(matches!(
            function(Some((1, 19)), &["runtime.memmove.abi0"]),
            GoFunction::CountOnly(_)
        ));
        assert!(matches!(
            function(Some((1, 16)), &["main.work"]),
            GoFunction::CountOnly(_)
        ));
    }
}
