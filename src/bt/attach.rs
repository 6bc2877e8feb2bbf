//! Attach points into typed probes, as bpftrace 0.17's `AttachPointParser` reads them: split at `:` outside
//! quotes, `$N` replaced by positional parameters, the probe type by its name or short form (`t`, `u`, `ur`,
//! `U`, `p`, `i`, `s`, `h`, `k`, `kr`, `w`, `aw`, `f`, `fr`, `it`), then each type's parts with its messages
//! ("uprobe probe type requires 2 arguments", "Offset not allowed").
use std::fmt;

/// The probe types of bpftrace 0.17 (`PROBE_LIST`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeType {
    Begin,
    End,
    Kprobe,
    Kretprobe,
    Uprobe,
    Uretprobe,
    Usdt,
    Tracepoint,
    Profile,
    Interval,
    Software,
    Hardware,
    Watchpoint,
    AsyncWatchpoint,
    Kfunc,
    Kretfunc,
    Iter,
}

/// Every probe type: its name and its short form.
pub const PROBE_TYPES: &[(&str, &str, ProbeType)] = &[
    ("kprobe", "k", ProbeType::Kprobe),
    ("kretprobe", "kr", ProbeType::Kretprobe),
    ("uprobe", "u", ProbeType::Uprobe),
    ("uretprobe", "ur", ProbeType::Uretprobe),
    ("usdt", "U", ProbeType::Usdt),
    ("BEGIN", "BEGIN", ProbeType::Begin),
    ("END", "END", ProbeType::End),
    ("tracepoint", "t", ProbeType::Tracepoint),
    ("profile", "p", ProbeType::Profile),
    ("interval", "i", ProbeType::Interval),
    ("software", "s", ProbeType::Software),
    ("hardware", "h", ProbeType::Hardware),
    ("watchpoint", "w", ProbeType::Watchpoint),
    ("asyncwatchpoint", "aw", ProbeType::AsyncWatchpoint),
    ("kfunc", "f", ProbeType::Kfunc),
    ("kretfunc", "fr", ProbeType::Kretfunc),
    ("iter", "it", ProbeType::Iter),
];

impl ProbeType {
    pub fn name(self) -> &'static str {
        PROBE_TYPES
            .iter()
            .find(|(_, _, t)| *t == self)
            .map(|(n, _, _)| *n)
            .unwrap_or("")
    }

    /// The type written as `name` or its short form.
    pub fn from_name(name: &str) -> Option<ProbeType> {
        PROBE_TYPES
            .iter()
            .find(|(n, a, _)| *n == name || *a == name)
            .map(|(_, _, t)| *t)
    }
}

impl fmt::Display for ProbeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One attach point, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSpec {
    pub kind: ProbeType,
    /// Binary or library (uprobe, usdt), tracepoint category, time unit (profile, interval), event name
    /// (software, hardware).
    pub target: String,
    /// USDT provider namespace.
    pub ns: String,
    /// Function, tracepoint event or USDT probe name.
    pub func: String,
    /// Rate or period (profile, interval, software, hardware).
    pub freq: u64,
    /// `func+OFFSET`.
    pub offset: u64,
    /// A uprobe at an absolute address.
    pub address: u64,
    /// Whether a part holds `*` (expanded later against what exists).
    pub wildcard: bool,
}

impl ProbeSpec {
    fn new(kind: ProbeType) -> ProbeSpec {
        ProbeSpec {
            kind,
            target: String::new(),
            ns: String::new(),
            func: String::new(),
            freq: 0,
            offset: 0,
            address: 0,
            wildcard: false,
        }
    }
}

/// What reading an attach point gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attach {
    Probe(ProbeSpec),
    /// An empty attach point (a trailing comma): dropped, as bpftrace drops it.
    Empty,
}

/// Read the attach point `raw` (as the parser joined it) with the positional parameters `params` (`$1` is
/// `params[0]`). The error is bpftrace's message, to be printed at the attach point's span.
pub fn read(raw: &str, params: &[String]) -> Result<Attach, String> {
    let parts = split(raw, params)?;
    let front = parts[0].as_str();
    if front.is_empty() {
        return Ok(Attach::Empty);
    }
    if front.contains('*') {
        return Err(format!(
            "No probe type matched for {front} (wildcards in probe types are not expanded here; name the type)"
        ));
    }
    let kind = ProbeType::from_name(front).ok_or_else(|| format!("Invalid probe type: {front}"))?;
    let mut spec = ProbeSpec::new(kind);
    let n = parts.len();
    let need = |ok: bool, what: &str| -> Result<(), String> {
        if ok {
            Ok(())
        } else {
            Err(format!("{} probe type requires {what}", kind.name()))
        }
    };
    match kind {
        ProbeType::Begin | ProbeType::End => {
            need(n == 1 || (n == 2 && parts[1] == "*"), "0 arguments")?
        }
        ProbeType::Kprobe | ProbeType::Kretprobe => {
            need(n == 2, "1 argument")?;
            let (func, offset) = offset_of(&parts[1], kind == ProbeType::Kprobe)?;
            spec.func = func;
            spec.offset = offset;
        }
        ProbeType::Uprobe | ProbeType::Uretprobe => {
            need(n == 3, "2 arguments")?;
            spec.target = parts[1].clone();
            let (func, offset) = offset_of(&parts[2], kind == ProbeType::Uprobe)?;
            if offset == 0 && kind == ProbeType::Uprobe {
                if let Some(address) = parse_u64(&func) {
                    if spec.target.contains('*') {
                        return Err("Cannot use wildcards with absolute address".into());
                    }
                    spec.address = address;
                }
            }
            if spec.address == 0 {
                spec.func = func;
            }
            spec.offset = offset;
        }
        ProbeType::Usdt => {
            need(n == 3 || n == 4, "2 or 3 arguments")?;
            spec.target = parts[1].clone();
            spec.func = parts[n - 1].clone();
            if n == 4 {
                spec.ns = parts[2].clone();
            }
        }
        ProbeType::Tracepoint => {
            let mut parts = parts.clone();
            if parts.len() == 2 && parts[1].contains('*') {
                parts.insert(1, "*".into());
            }
            if parts.len() != 3 {
                return Err("tracepoint probe type requires 2 arguments".into());
            }
            spec.target = parts[1].clone();
            spec.func = parts[2].clone();
        }
        ProbeType::Profile | ProbeType::Interval => {
            need(n == 3, "2 arguments")?;
            spec.target = parts[1].clone();
            spec.freq = parse_u64(&parts[2]).ok_or("stoull")?;
        }
        ProbeType::Software | ProbeType::Hardware => {
            need(n == 2 || n == 3, "1 or 2 arguments")?;
            spec.target = parts[1].clone();
            if n == 3 && parts[2] != "*" {
                spec.freq = parse_u64(&parts[2]).ok_or("stoull")?;
            }
        }
        ProbeType::Watchpoint | ProbeType::AsyncWatchpoint => {
            need(n == 4, "3 arguments")?;
            spec.target = parts[1].clone();
            spec.func = parts[2].clone();
            spec.ns = parts[3].clone();
        }
        ProbeType::Kfunc | ProbeType::Kretfunc | ProbeType::Iter => {
            need(n == 2 || n == 3, "1 or 2 arguments")?;
            spec.func = parts[n - 1].clone();
            if n == 3 {
                spec.target = parts[1].clone();
            }
        }
    }
    spec.wildcard = [&spec.target, &spec.ns, &spec.func]
        .iter()
        .any(|p| p.contains('*'));
    Ok(Attach::Probe(spec))
}

/// The parts of an attach point between `:`s outside quotes, with `\x` escapes in quotes and `$N` replaced.
fn split(raw: &str, params: &[String]) -> Result<Vec<String>, String> {
    let mut parts = Vec::new();
    let mut part = String::new();
    let mut quoted = false;
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ':' if !quoted => parts.push(std::mem::take(&mut part)),
            '"' => quoted = !quoted,
            '\\' if quoted && chars.peek().is_some() => part.extend(chars.next()),
            '$' if !quoted => {
                let mut index = String::new();
                while let Some(&d) = chars.peek() {
                    if d == '"' || d == ':' {
                        break;
                    }
                    index.push(d);
                    chars.next();
                }
                let digits: String = index.chars().take_while(|c| c.is_ascii_digit()).collect();
                if digits.len() != index.len() {
                    return Err(format!(
                        "Found trailing text '{}' in positional parameter index. Try quoting the trailing text.",
                        &index[digits.len()..]
                    ));
                }
                let n: usize = digits.parse().unwrap_or(0);
                part.push_str(
                    n.checked_sub(1)
                        .and_then(|i| params.get(i))
                        .map_or("", |s| s.as_str()),
                );
            }
            c => part.push(c),
        }
    }
    parts.push(part);
    Ok(parts)
}

/// `func+OFFSET` into the function and the offset.
fn offset_of(part: &str, allowed: bool) -> Result<(String, u64), String> {
    let pluses = part.matches('+').count();
    if pluses == 0 {
        return Ok((part.to_string(), 0));
    }
    if !allowed {
        return Err("Offset not allowed".into());
    }
    if pluses != 1 {
        return Err("Cannot take more than one offset".into());
    }
    let (func, offset) = part.split_once('+').unwrap_or((part, ""));
    if func.is_empty() || offset.is_empty() {
        return Err("Invalid offset".into());
    }
    Ok((func.to_string(), parse_u64(offset).ok_or("stoull")?))
}

/// A number as C's `strtoull` with base 0 reads it (decimal, `0x` hex, leading-0 octal), whole.
fn parse_u64(s: &str) -> Option<u64> {
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).ok();
    }
    if s.len() > 1 && s.starts_with('0') {
        return u64::from_str_radix(&s[1..], 8).ok();
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(raw: &str) -> ProbeSpec {
        match read(raw, &["1234".into(), "99".into()]) {
            Ok(Attach::Probe(p)) => p,
            other => panic!("{raw}: {other:?}"),
        }
    }

    /// Check every short form and the parts of each probe type.
    #[test]
    fn types_and_parts() {
        for (name, short, kind) in PROBE_TYPES {
            assert_eq!(ProbeType::from_name(name), Some(*kind));
            assert_eq!(ProbeType::from_name(short), Some(*kind));
        }
        let p = probe("t:syscalls:sys_enter_openat");
        assert_eq!(
            (p.kind, p.target.as_str(), p.func.as_str()),
            (ProbeType::Tracepoint, "syscalls", "sys_enter_openat")
        );
        let p = probe("ur:/bin/bash:readline");
        assert_eq!(
            (p.kind, p.target.as_str()),
            (ProbeType::Uretprobe, "/bin/bash")
        );
        let p = probe("profile:hz:$2");
        assert_eq!((p.target.as_str(), p.freq), ("hz", 99));
        let p = probe("U:/usr/bin/python3.11:python:function__entry");
        assert_eq!(
            (p.ns.as_str(), p.func.as_str()),
            ("python", "function__entry")
        );
        let p = probe("tracepoint:sched_*");
        assert!(p.wildcard);
        assert_eq!(p.target, "*");
        let p = probe("uprobe:/bin/bash:0x1000");
        assert_eq!(p.address, 0x1000);
        assert_eq!(probe("kprobe:vfs_read+16").offset, 16);
    }

    /// Check bpftrace's messages for malformed attach points.
    #[test]
    fn errors() {
        let err = |raw: &str| read(raw, &[]).unwrap_err();
        assert_eq!(
            err("uprobe:/bin/bash"),
            "uprobe probe type requires 2 arguments"
        );
        assert_eq!(err("BEGIN:x"), "BEGIN probe type requires 0 arguments");
        assert_eq!(
            err("interval:s"),
            "interval probe type requires 2 arguments"
        );
        assert_eq!(
            err("software:cpu-clock:1:2"),
            "software probe type requires 1 or 2 arguments"
        );
        assert_eq!(err("kprobe:a+b+c"), "Cannot take more than one offset");
        assert_eq!(err("kretprobe:foo+1"), "Offset not allowed");
        assert_eq!(err("profile:hz:abc"), "stoull");
        assert_eq!(err("foo:bar"), "Invalid probe type: foo");
        assert_eq!(read("", &[]), Ok(Attach::Empty));
    }
}
