//! `rprof script`: every sample of a recording as text, in `perf script`'s default layout, so that the tools
//! that read perf script's output (FlameGraph's stackcollapse-perf.pl, inferno-collapse-perf, speedscope,
//! Hotspot's importers) read it unchanged:
//!
//! ```text
//! calltree  4711 27112.851749:    1001001 cpu-clock:
//! \t            11bc hot_a+0x2c (/tmp/calltree)
//! \t            11f0 work_a+0x14 (/tmp/calltree)
//! ```
//!
//! It streams: the file is parsed on a thread of its own in bounded batches, each sample is symbolized as it
//! comes through the one [`StackResolver`], and the text of each distinct return address is made once and
//! kept (memory follows the distinct addresses, not the samples).
pub use super::script_fields::{Fields, FIELD_NAMES};
use super::tracepoint_fields::{EventPrinter, TraceEvents};
use super::{resolver_for, stream_events, track, ReportError, Salvaged, StackResolver};
use crate::process::AddressSpaces;
use crate::recording::{CpuMode, Event, Reader, Sample};
use crate::resolve::{short_name, FastMap, Origin, KERNEL_NAME};
use crate::symbols::SymbolizerOptions;
use crate::unwind::dwarf::{DwarfStats, DwarfUnwinder};
use crate::unwind::fp::{self, ChainPart};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

/// What `rprof script` prints.
#[derive(Clone, Debug)]
pub struct ScriptOptions {
    pub fields: Fields,
    pub symbolizer: SymbolizerOptions,
    /// Only the samples of these commands (perf script's -c/--comms); empty: all.
    pub comms: Vec<String>,
}

/// What a run of [`script`] read.
#[derive(Debug, Default)]
pub struct ScriptSummary {
    pub samples: u64,
    /// The recording was not finished or is damaged: what was read of it.
    pub salvaged: Option<Salvaged>,
}

/// Batches the reading thread may run ahead. Printing is slower than parsing, so the queue stays full: it is
/// what memory grows with, and a few batches keep the reader busy.
const QUEUED_BATCHES: usize = 4;

/// A frame address as looked up: (pid or u32::MAX for the kernel, address-space generation, address, exact).
type AddrKey = (u32, u64, u64, bool);

/// The state of streaming a recording.
struct Script<'o, W: Write> {
    out: &'o mut W,
    fields: Fields,
    comms: Vec<String>,
    resolver: StackResolver,
    spaces: AddressSpaces,
    unwinder: Option<DwarfUnwinder>,
    comm_of_tid: crate::replay::ThreadComms<Arc<str>>,
    /// The event names, padded to one width as perf pads them.
    events: Vec<String>,
    /// The printer of each attr's tracepoint fields (from the recording's formats), by attr index.
    trace: Vec<Option<EventPrinter>>,
    /// `-F` was not given: tracepoint samples take perf's default fields for them.
    default_fields: bool,
    /// The frame lines of each address, made once.
    lines: FastMap<AddrKey, Box<[u8]>>,
    /// The text of the sample being printed.
    buf: Vec<u8>,
    samples: u64,
}

/// Print every sample of `input` to `out` as it is read.
pub fn script(
    input: &Path,
    opts: &ScriptOptions,
    out: &mut impl Write,
) -> Result<ScriptSummary, ReportError> {
    let reader = Reader::open(input)?;
    let width = reader
        .event_names()
        .iter()
        .map(String::len)
        .max()
        .unwrap_or(0);
    let events = reader
        .event_names()
        .iter()
        .map(|n| format!("{n:>width$}"))
        .collect();
    let formats = TraceEvents::from_tracing_data(reader.tracing_data());
    let trace = reader
        .tracepoint_ids()
        .iter()
        .map(|id| id.and_then(|id| formats.get(id)).cloned())
        .collect();
    let mut s = Script {
        out,
        fields: opts.fields,
        trace,
        default_fields: opts.fields == Fields::default(),
        comms: opts.comms.clone(),
        resolver: resolver_for(&reader, opts.symbolizer.clone()),
        spaces: AddressSpaces::new(),
        unwinder: reader
            .has_user_stacks()
            .then(|| DwarfUnwinder::new(opts.symbolizer.debug.dirs.clone())),
        comm_of_tid: crate::replay::ThreadComms::new(),
        events,
        lines: FastMap::default(),
        buf: Vec::with_capacity(4096),
        samples: 0,
    };
    let salvaged =
        stream_events::<ReportError>(reader, QUEUED_BATCHES, |event| Ok(s.handle(event)?))?;
    s.out.flush()?;
    Ok(ScriptSummary {
        samples: s.samples,
        salvaged: salvaged.map(|error| Salvaged {
            samples: s.samples,
            error,
        }),
    })
}

impl<W: Write> Script<'_, W> {
    fn handle(&mut self, event: Event) -> std::io::Result<()> {
        track(
            &event,
            &mut self.spaces,
            &mut self.resolver,
            self.unwinder.as_mut(),
        );
        match event {
            Event::Comm { tid, name, .. } => {
                self.comm_of_tid.comm(tid, Arc::from(name));
            }
            Event::Fork { tid, ptid, .. } => self.comm_of_tid.fork(tid, ptid),
            Event::Exit { tid, .. } => self.comm_of_tid.exit(tid),
            Event::Sample(sample) => {
                if !self.comms.is_empty() && !self.comms.iter().any(|c| **c == *self.comm(&sample))
                {
                    return Ok(());
                }
                self.samples += 1;
                self.sample(sample)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// The command of a sample's thread, named as report names it.
    fn comm(&self, sample: &Sample) -> Arc<str> {
        match crate::replay::sample_comm(&self.comm_of_tid, sample) {
            Ok(c) => Arc::clone(c),
            Err(name) => Arc::from(name),
        }
    }

    fn sample(&mut self, mut sample: Sample) -> std::io::Result<()> {
        crate::replay::unwind_sample(
            self.unwinder.as_mut(),
            &self.spaces,
            &mut sample,
            &mut DwarfStats::default(),
        );
        let printer = self
            .trace
            .get(usize::from(sample.attr))
            .and_then(Option::as_ref);
        let f = match (printer.is_some(), self.default_fields) {
            (true, true) => Fields::tracepoint_default(!sample.callchain.is_empty()),
            _ => self.fields,
        };
        let chain = f.callchain && f.frames() && !sample.callchain.is_empty();
        // The sample's text is made in one buffer (formatting through `write!` costs more than the rest).
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        if f.comm {
            let comm = self.comm(&sample);
            // perf pads the command to 16 unless the frames follow on lines of their own.
            if !chain {
                pad(&mut buf, 16usize.saturating_sub(comm.len()));
            }
            buf.extend_from_slice(comm.as_bytes());
            buf.push(b' ');
        }
        ids_and_time(&mut buf, &sample, &f);
        if f.period {
            number(&mut buf, sample.period, 10, 0);
            buf.push(b' ');
        }
        if f.event {
            let name = self
                .events
                .get(sample.attr as usize)
                .map_or("[unknown]", String::as_str);
            buf.extend_from_slice(name.as_bytes());
            buf.extend_from_slice(b": ");
        }
        if let (true, Some(printer)) = (f.trace, printer) {
            buf.extend_from_slice(printer.render(&sample.raw).as_bytes());
        }
        let kernel = sample.cpu_mode == CpuMode::Kernel;
        if !f.frames() {
            buf.push(b'\n');
        } else if !chain {
            // The sampled IP alone, on the header line.
            let lines = self.lines_of(sample.pid, kernel, sample.ip, true);
            let leaf = lines.rsplit(|&b| b == b'\t').next().unwrap_or(&[]);
            buf.push(b' ');
            buf.extend_from_slice(leaf);
        } else {
            buf.push(b'\n');
            let generation = self.spaces.generation(sample.pid);
            for part in fp::split(&sample.callchain, kernel) {
                let ChainPart {
                    addr,
                    kernel,
                    exact,
                } = part;
                let key = match kernel || addr >= 0xffff_8000_0000_0000 {
                    true => (u32::MAX, 0, addr, exact),
                    false => (sample.pid, generation, addr, exact),
                };
                if let Some(text) = self.lines.get(&key) {
                    buf.extend_from_slice(text);
                    continue;
                }
                let text = self.make_lines(sample.pid, kernel, addr, exact);
                buf.extend_from_slice(&text);
                self.lines.insert(key, text);
            }
            buf.push(b'\n');
        }
        let written = self.out.write_all(&buf);
        self.buf = buf;
        written
    }

    fn key(&self, pid: u32, kernel: bool, addr: u64, exact: bool) -> AddrKey {
        if kernel || addr >= 0xffff_8000_0000_0000 {
            (u32::MAX, 0, addr, exact)
        } else {
            (pid, self.spaces.generation(pid), addr, exact)
        }
    }

    /// The frame lines of an address (made and kept on first use).
    fn lines_of(&mut self, pid: u32, kernel: bool, addr: u64, exact: bool) -> Box<[u8]> {
        let key = self.key(pid, kernel, addr, exact);
        if let Some(text) = self.lines.get(&key) {
            return text.clone();
        }
        let text = self.make_lines(pid, kernel, addr, exact);
        self.lines.insert(key, text.clone());
        text
    }

    /// perf script's lines for one address, leaf first: `\t    ADDR inlined (inlined)` for each function
    /// inlined there, innermost first, then `\t    ADDR name+0xOFF (dso)`.
    fn make_lines(&mut self, pid: u32, kernel: bool, addr: u64, exact: bool) -> Box<[u8]> {
        let space = self.spaces.get(pid);
        let ids = self.resolver.resolve_addr(pid, space, addr, kernel, exact);
        if self.resolver.has_pending() {
            self.resolver.finish();
        }
        // A return address is looked up one byte back: perf prints the address itself and its offset.
        let back = u64::from(!exact);
        let mut text = Vec::new();
        for &id in ids.iter().rev() {
            let offset = self.resolver.symbol_offset(id).map(|o| o + back);
            let (shown, dso, frames): (u64, String, Vec<u32>) = match self.resolver.origin(id) {
                Origin::File {
                    path,
                    offset: at,
                    frames,
                    ..
                } => (
                    at.0 + back,
                    path.to_string_lossy().into_owned(),
                    frames.to_vec(),
                ),
                Origin::Kernel { frames, .. } => (addr, KERNEL_NAME.to_string(), frames.to_vec()),
                Origin::Frame(frame) => {
                    let module = &self.resolver.frame(frame).module;
                    let dso = match module.as_str() {
                        m if m.starts_with("perf-") && m.ends_with(".map") => format!("/tmp/{m}"),
                        m => short_name(m),
                    };
                    (addr, dso, vec![frame])
                }
            };
            let f = self.fields;
            for (depth, &frame) in frames.iter().enumerate().rev() {
                let inlined = depth > 0;
                text.push(b'\t');
                let mut parts: Vec<String> = Vec::with_capacity(3);
                if f.ip {
                    parts.push(format!("{shown:16x}"));
                }
                if f.sym {
                    let name = &self.resolver.frame(frame).name;
                    match (f.symoff && !inlined && name != "[unknown]", offset) {
                        (true, Some(off)) => parts.push(format!("{name}+{off:#x}")),
                        _ => parts.push(name.clone()),
                    }
                }
                if inlined && (f.sym || f.dso) {
                    parts.push("(inlined)".into());
                } else if f.dso {
                    parts.push(format!("({dso})"));
                }
                text.extend_from_slice(parts.join(" ").as_bytes());
                text.push(b'\n');
            }
        }
        text.into_boxed_slice()
    }
}

/// `n` spaces.
fn pad(buf: &mut Vec<u8>, n: usize) {
    buf.resize(buf.len() + n, b' ');
}

/// The pid/tid, `[CPU]` and time columns of a sample's header line, as `-F` asks.
fn ids_and_time(buf: &mut Vec<u8>, sample: &Sample, f: &Fields) {
    match (f.pid, f.tid) {
        (true, true) => {
            task_id(buf, sample.pid, 5);
            buf.push(b'/');
            let at = buf.len();
            task_id(buf, sample.tid, 0);
            let width = buf.len() - at;
            pad(buf, 5usize.saturating_sub(width));
            buf.push(b' ');
        }
        (true, false) => {
            task_id(buf, sample.pid, 5);
            buf.push(b' ');
        }
        (false, true) => {
            task_id(buf, sample.tid, 5);
            buf.push(b' ');
        }
        (false, false) => {}
    }
    if let (true, Some(cpu)) = (f.cpu, sample.cpu) {
        buf.push(b'[');
        number(buf, cpu.into(), 0, 3);
        buf.extend_from_slice(b"] ");
    }
    if let (true, Some(time)) = (f.time, sample.time) {
        number(buf, time / 1_000_000_000, 5, 0);
        buf.push(b'.');
        number(buf, time % 1_000_000_000 / 1000, 0, 6);
        buf.extend_from_slice(b": ");
    }
}

/// A pid or tid as perf prints it (`%5d`: -1 for none), right-aligned in `width` columns.
fn task_id(buf: &mut Vec<u8>, id: u32, width: usize) {
    match id {
        u32::MAX => {
            pad(buf, width.saturating_sub(2));
            buf.extend_from_slice(b"-1");
        }
        id => number(buf, id.into(), width, 0),
    }
}

/// `n` in decimal, right-aligned in `width` columns with spaces, with at least `zeros` digits (`%*lu`,
/// `%0*lu`).
fn number(buf: &mut Vec<u8>, n: u64, width: usize, zeros: usize) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut v = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let len = (digits.len() - i).max(zeros);
    pad(buf, width.saturating_sub(len));
    buf.resize(buf.len() + len - (digits.len() - i), b'0');
    buf.extend_from_slice(&digits[i..]);
}

#[cfg(test)]
mod tests {
    /// Check that numbers are laid out as printf's `%5lu`, `%-5lu` (done by the caller), `%03d` and `%06lu`.
    #[test]
    fn numbers_as_printf() {
        let show = |n, width, zeros| {
            let mut buf = Vec::new();
            super::number(&mut buf, n, width, zeros);
            String::from_utf8(buf).unwrap()
        };
        assert_eq!(show(42, 5, 0), "   42");
        assert_eq!(show(123456, 5, 0), "123456");
        assert_eq!(show(7, 0, 3), "007");
        assert_eq!(show(0, 0, 6), "000000");
        assert_eq!(show(1001001, 10, 0), "   1001001");
        assert_eq!(show(u64::MAX, 0, 0), u64::MAX.to_string());
    }
}
