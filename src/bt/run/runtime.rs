//! The runtime: the program's maps and what lives across blocks (the start time, the clocks, the printer,
//! whether `exit()` ran), and the entry points the session calls: BEGIN, each event, blocks without an event
//! (`interval`), END.
//!
//! bpftrace 0.17's order of things, checked on this machine: `exit()` ends its block there (the statements
//! after it do not run) and asks bpftrace to stop; from then on bpftrace's reader drops every message still
//! coming (`perf_event_printer` returns early while `finalize_` is set: printf, print, time, clear...) while
//! map updates, done in the kernel, still happen; then END runs with its output shown again, then
//! `\n\n` and every map ([`super::super::print::EXIT_PREAMBLE`]).
use super::exec::Exec;
use super::setup;
use super::{Event, Flow, Io, Options};
use crate::bt::ast::Program;
use crate::bt::attach::ProbeType;
use crate::bt::check::Checked;
use crate::bt::maps::Map;
use crate::bt::print::{Printer, EXIT_PREAMBLE};
use crate::bt::strftime::Zone;
use std::collections::{BTreeMap, BTreeSet};

/// A program's run: its maps and state, fed blocks by the session.
pub struct Runtime<'p> {
    pub(super) program: &'p Program,
    pub(super) checked: &'p Checked,
    pub(super) opts: Options,
    pub(super) maps: BTreeMap<String, Map>,
    pub(super) printer: Printer,
    /// CLOCK_MONOTONIC at BEGIN (`elapsed`).
    pub(super) start_ns: Option<u64>,
    /// The wall-clock time of boot, ns (CLOCK_REALTIME - CLOCK_MONOTONIC): `strftime()`'s base.
    pub(super) boot_ns: u64,
    pub(super) zone: Zone,
    /// `exit()` ran: messages are dropped until END, as bpftrace's reader drops them.
    pub(super) exiting: bool,
    /// Warnings already given (each once).
    warned: BTreeSet<String>,
    /// `rand`'s counter.
    pub(super) rand_seq: u64,
    /// The buffer of the last map key built (see `Exec::key`).
    pub(super) key_buf: crate::bt::maps::Key,
}

impl<'p> Runtime<'p> {
    /// Maps created from `checked.maps` (key types and value type give the kind; `opts.map_keys_max` bounds
    /// each).
    pub fn new(program: &'p Program, checked: &'p Checked, opts: Options) -> Runtime<'p> {
        let maps = setup::maps(program, checked, opts.map_keys_max);
        Runtime {
            program,
            checked,
            printer: Printer::new(opts.format),
            opts,
            maps,
            start_ns: None,
            boot_ns: boot_ns(),
            zone: Zone::local(),
            exiting: false,
            warned: BTreeSet::new(),
            rand_seq: 0,
            key_buf: Vec::new(),
        }
    }

    /// Run every BEGIN block (in program order). `now_ns`: CLOCK_MONOTONIC.
    pub fn begin(&mut self, now_ns: u64, io: &mut Io<'_>) -> Flow {
        self.start_ns = Some(now_ns);
        let mut flow = Flow::Continue;
        for b in self.begin_blocks() {
            if self.run_block(b, now_ns, io) == Flow::Exit {
                flow = Flow::Exit;
            }
        }
        flow
    }

    /// Run `ev.blocks` for one probe hit. After an `exit()` the other blocks still run (bpftrace's BPF
    /// programs do: their map updates happen), their messages dropped.
    pub fn event(&mut self, ev: &Event<'_>, io: &mut Io<'_>) -> Flow {
        let mut flow = Flow::Continue;
        for &b in ev.blocks {
            if self.exec(b, Some(ev), ev.time_ns, io) == Flow::Exit {
                flow = Flow::Exit;
            }
        }
        flow
    }

    /// Run one block that has no probe context (`interval:...`, and where the session says so), at `now_ns`.
    pub fn run_block(&mut self, block: usize, now_ns: u64, io: &mut Io<'_>) -> Flow {
        self.exec(block, None, now_ns, io)
    }

    /// Run END blocks, then print what bpftrace prints at exit: `\n\n`, then every map in name order.
    pub fn end(&mut self, now_ns: u64, io: &mut Io<'_>) {
        self.exiting = false;
        for b in self.end_blocks() {
            self.run_block(b, now_ns, io);
        }
        self.exiting = false;
        let text = self.printer.maps_at_exit(self.maps.values());
        let _ = io.out.write_all(EXIT_PREAMBLE.as_bytes());
        let _ = io.out.write_all(text.as_bytes());
        let _ = io.out.flush();
    }

    /// `cpid`: the pid of `-c`'s command, known once the session forked it.
    pub fn set_cpid(&mut self, pid: u32) {
        self.opts.cpid = Some(pid);
    }

    /// Indices of the BEGIN blocks.
    pub fn begin_blocks(&self) -> Vec<usize> {
        setup::blocks_of(self.checked, ProbeType::Begin)
    }

    /// Indices of the END blocks.
    pub fn end_blocks(&self) -> Vec<usize> {
        setup::blocks_of(self.checked, ProbeType::End)
    }

    /// `interval:UNIT:N` blocks with their period in ns, one entry per such attach point.
    pub fn interval_blocks(&self) -> Vec<(usize, u64)> {
        let mut out = Vec::new();
        for (i, specs) in self.checked.probes.iter().enumerate() {
            for s in specs.iter().filter(|s| s.kind == ProbeType::Interval) {
                out.push((i, setup::interval_ns(s)));
            }
        }
        out
    }

    /// The maps (for the session's and tests' eyes).
    pub fn maps(&self) -> impl Iterator<Item = &Map> {
        self.maps.values()
    }

    fn exec(&mut self, block: usize, ev: Option<&Event<'_>>, now_ns: u64, io: &mut Io<'_>) -> Flow {
        let Some(probe) = self.program.probes.get(block) else {
            return Flow::Continue;
        };
        let mut x = Exec::new(self, ev, io, now_ns, block);
        x.run(probe)
    }

    /// A message (printf, print, time...): written unless `exit()` ran (bpftrace's reader drops it then).
    pub(super) fn emit(&mut self, io: &mut Io<'_>, text: &str) {
        if !self.exiting {
            let _ = io.out.write_all(text.as_bytes());
        }
    }

    /// One line on stderr, the first time only.
    pub(super) fn warn_once(&mut self, io: &mut Io<'_>, text: &str) {
        if self.warned.insert(text.to_string()) {
            let _ = writeln!(io.err, "WARNING: {text}");
        }
    }
}

/// CLOCK_REALTIME - CLOCK_MONOTONIC, ns: when the monotonic clock read 0.
fn boot_ns() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    let ns = |id| {
        clock_gettime(id)
            .map(|t| t.tv_sec() as i128 * 1_000_000_000 + t.tv_nsec() as i128)
            .unwrap_or(0)
    };
    let real = ns(ClockId::CLOCK_REALTIME);
    let mono = ns(ClockId::CLOCK_MONOTONIC);
    (real - mono).max(0) as u64
}
