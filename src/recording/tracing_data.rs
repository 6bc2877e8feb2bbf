//! The HEADER_TRACING_DATA feature section: the formats of a recording's tracepoint events, in the layout of
//! perf's `trace-event-info.c` (version 0.6), so that `perf script` and `perf report` name the events of
//! PERF_TYPE_TRACEPOINT attrs and print their fields from the samples' PERF_SAMPLE_RAW data.
//!
//! Layout: the magic `\x17\x08\x44tracing`, the version `0.6\0`, the byte order (0: little), the size of a
//! long, the page size (u32); `header_page\0` and `header_event\0`, each with a u64 size and tracefs's file of
//! that name; the ftrace events (a u32 count: none); the event systems (a u32 count, then each system's name
//! with its NUL, a u32 count of its events, and each event's `format` file with a u64 size); kallsyms and
//! ftrace_printk (u32 sizes: empty) and the saved command lines (a u64 size: empty).

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
}
