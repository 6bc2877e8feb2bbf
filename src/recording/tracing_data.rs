//! The HEADER_TRACING_DATA feature section: the formats of a recording's tracepoint events, in the layout of
//! perf's `trace-event-info.c` (version 0.6), so that `perf script` and `perf report` name the events of
//! PERF_TYPE_TRACEPOINT attrs and print their fields from the samples' PERF_SAMPLE_RAW data.
//!
//! Layout: the magic `\x17\x08\x44tracing`, the version `0.6\0`, the byte order (0: little), the size of a
//! long, the page size (u32); `header_page\0` and `header_event\0`, each with a u64 size and tracefs's file of
//! that name; the ftrace events (a u32 count: none); the event systems (a u32 count, then each system's name
//! with its NUL, a u32 count of its events, and each event's `format` file with a u64 size); kallsyms and
//! ftrace_printk (u32 sizes: empty) and the saved command lines (a u64 size: empty). [`decode_tracing_data`]
//! reads it back, and perf's own (tools/perf/util/trace-event-read.c).

/// A tracepoint event's format, as tracefs gives it (`events/SYSTEM/EVENT/format`, whose `ID:` is the attr's
/// `config`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracingEvent {
    pub system: String,
    pub format: String,
}

/// The bytes of a HEADER_TRACING_DATA section for `events`, with tracefs's `events/header_page` and
/// `events/header_event` files.
pub fn encode_tracing_data(
    header_page: &str,
    header_event: &str,
    page_size: u32,
    events: &[TracingEvent],
) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&[23, 8, 68]);
    out.extend_from_slice(b"tracing");
    out.extend_from_slice(b"0.6\0");
    out.push(0); // little-endian
    out.push(std::mem::size_of::<std::ffi::c_long>() as u8);
    out.extend_from_slice(&page_size.to_le_bytes());
    let file = |out: &mut Vec<u8>, text: &str| {
        out.extend_from_slice(&(text.len() as u64).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
    };
    out.extend_from_slice(b"header_page\0");
    file(&mut out, header_page);
    out.extend_from_slice(b"header_event\0");
    file(&mut out, header_event);
    out.extend_from_slice(&0u32.to_le_bytes()); // ftrace events
    let mut systems: Vec<&str> = Vec::new();
    for e in events {
        if !systems.contains(&e.system.as_str()) {
            systems.push(&e.system);
        }
    }
    out.extend_from_slice(&(systems.len() as u32).to_le_bytes());
    for system in systems {
        out.extend_from_slice(system.as_bytes());
        out.push(0);
        let of_system: Vec<&TracingEvent> = events.iter().filter(|e| e.system == system).collect();
        out.extend_from_slice(&(of_system.len() as u32).to_le_bytes());
        for e in of_system {
            file(&mut out, &e.format);
        }
    }
    out.extend_from_slice(&0u32.to_le_bytes()); // kallsyms
    out.extend_from_slice(&0u32.to_le_bytes()); // ftrace_printk
    out.extend_from_slice(&0u64.to_le_bytes()); // saved_cmdline
    out
}

/// One event format of a HEADER_TRACING_DATA section, as [`decode_tracing_data`] reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedEvent {
    /// Its system (`sched`, `syscalls`; `ftrace` for the ftrace formats).
    pub system: String,
    /// The `ID:` of the format: a tracepoint attr's `config`; None if the format has no `ID:` line.
    pub id: Option<u64>,
    /// The `format` file's text.
    pub format: String,
}

/// A cursor over the section's bytes, in the byte order the section says.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    big: bool,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| {
            format!(
                "the tracing data ends at byte {} inside {what} ({n} bytes wanted)",
                self.bytes.len()
            )
        })?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn number(&mut self, n: usize, what: &str) -> Result<u64, String> {
        let b = self.take(n, what)?;
        let fold = |acc: u64, &x: &u8| acc << 8 | u64::from(x);
        Ok(match self.big {
            true => b.iter().fold(0, fold),
            false => b.iter().rev().fold(0, fold),
        })
    }

    /// A NUL-terminated string.
    fn string(&mut self, what: &str) -> Result<String, String> {
        let rest = &self.bytes[self.at..];
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| format!("the tracing data ends inside {what} (no NUL)"))?;
        self.at += len + 1;
        Ok(String::from_utf8_lossy(&rest[..len]).into_owned())
    }

    /// A file: its size (of `size_len` bytes), then its bytes.
    fn file(&mut self, size_len: usize, what: &str) -> Result<String, String> {
        let size = self.number(size_len, what)?;
        let size = usize::try_from(size).map_err(|_| format!("{what} has a bad size {size}"))?;
        Ok(String::from_utf8_lossy(self.take(size, what)?).into_owned())
    }
}

/// The event formats of a HEADER_TRACING_DATA section (rprof's, or perf's with its ftrace formats, kallsyms
/// and printk formats after them, in either byte order), with the `ID:` of each.
pub fn decode_tracing_data(bytes: &[u8]) -> Result<Vec<DecodedEvent>, String> {
    if !bytes.starts_with(b"\x17\x08\x44tracing") {
        return Err(
            "the tracing data does not start with perf's magic (\\x17\\x08Dtracing)".into(),
        );
    }
    let mut c = Cursor {
        bytes,
        at: 10,
        big: false,
    };
    let _version = c.string("the version")?;
    c.big = c.take(1, "the byte order")?[0] != 0;
    let _long_size = c.take(1, "the size of a long")?;
    let _page_size = c.number(4, "the page size")?;
    for name in ["header_page", "header_event"] {
        let label = c.string(name)?;
        if label != name {
            return Err(format!(
                "the tracing data has `{label}` where `{name}` belongs"
            ));
        }
        c.file(8, name)?;
    }
    let mut out = Vec::new();
    let event = |system: &str, format: String| DecodedEvent {
        system: system.to_string(),
        id: format
            .lines()
            .find_map(|l| l.trim().strip_prefix("ID:")?.trim().parse().ok()),
        format,
    };
    for _ in 0..c.number(4, "the count of ftrace formats")? {
        out.push(event("ftrace", c.file(8, "an ftrace format")?));
    }
    for _ in 0..c.number(4, "the count of event systems")? {
        let system = c.string("a system name")?;
        for _ in 0..c.number(4, "a system's count of events")? {
            out.push(event(&system, c.file(8, "an event format")?));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check the layout around the events: the systems are counted once each, in order, with their events.
    #[test]
    fn systems_group_their_events() {
        let e = |s: &str, f: &str| TracingEvent {
            system: s.into(),
            format: f.into(),
        };
        let bytes = encode_tracing_data("P", "E", 4096, &[e("a", "x"), e("b", "yy"), e("a", "z")]);
        assert!(bytes.starts_with(b"\x17\x08\x44tracing0.6\0\0\x08"));
        let mut expected = Vec::new();
        expected.extend_from_slice(&2u32.to_le_bytes());
        expected.extend_from_slice(b"a\0");
        expected.extend_from_slice(&2u32.to_le_bytes());
        expected.extend_from_slice(&1u64.to_le_bytes());
        expected.extend_from_slice(b"x");
        expected.extend_from_slice(&1u64.to_le_bytes());
        expected.extend_from_slice(b"z");
        expected.extend_from_slice(b"b\0");
        expected.extend_from_slice(&1u32.to_le_bytes());
        expected.extend_from_slice(&2u64.to_le_bytes());
        expected.extend_from_slice(b"yy");
        expected.extend_from_slice(&[0; 16]);
        assert!(bytes.ends_with(&expected));
    }

    /// Check that what encode writes decodes back: each event's system, format and `ID:`, and that a
    /// section cut short is an error naming where.
    #[test]
    fn round_trip() {
        let format = |name: &str, id: u32| {
            format!("name: {name}\nID: {id}\nformat:\n\tfield:int x;\toffset:8;\tsize:4;\tsigned:1;\n\nprint fmt: \"x=%d\", REC->x\n")
        };
        let events = [
            TracingEvent {
                system: "sched".into(),
                format: format("sched_switch", 372),
            },
            TracingEvent {
                system: "syscalls".into(),
                format: format("sys_enter_openat", 782),
            },
            TracingEvent {
                system: "sched".into(),
                format: "name: no_id\n".into(),
            },
        ];
        let bytes = encode_tracing_data("page", "event", 4096, &events);
        let decoded = decode_tracing_data(&bytes).unwrap();
        let view: Vec<(&str, Option<u64>, &str)> = decoded
            .iter()
            .map(|e| (e.system.as_str(), e.id, e.format.as_str()))
            .collect();
        let f372 = format("sched_switch", 372);
        let f782 = format("sys_enter_openat", 782);
        assert_eq!(
            view,
            vec![
                ("sched", Some(372), f372.as_str()),
                ("sched", None, "name: no_id\n"),
                ("syscalls", Some(782), f782.as_str()),
            ]
        );
        let cut = decode_tracing_data(&bytes[..bytes.len() - 40]).unwrap_err();
        assert!(cut.contains("ends"), "{cut}");
        assert!(decode_tracing_data(b"nonsense").is_err());
    }
}
