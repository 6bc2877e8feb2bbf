//! `rprof tool memleak`: bcc's memleak for a user process. libc's allocators are probed at entry and return
//! (rprof::tools::memleak lists them); each allocation is kept by address until its free, and every interval
//! the stacks with the most outstanding bytes older than `-o` are printed as bcc prints them.
use rprof::probe::{self, HitRole, ObservedHit, Observer, TargetKind, Targets};
use rprof::tools::memleak::{self, Allocator, Call, MemleakArgs, Outstanding};
use std::collections::HashMap;
use std::io::Write;

/// Run memleak with bcc's arguments; returns the launched command's exit status (0 without one).
pub fn run(words: &[String], recipe_only: bool) -> anyhow::Result<u8> {
    let args = MemleakArgs::parse(words)?;
    let patterns = memleak::patterns();
    if recipe_only {
        let mut line = vec!["probe".to_string(), "-g".into()];
        line.extend(patterns);
        println!(
            "# memleak pairs these entries and returns by address in rprof: no rprof probe flag does"
        );
        println!("rprof {}", rprof::tools::shell_line(&line));
        return Ok(0);
    }
    let target = match args.pid {
        Some(pid) => probe::TaskTarget::Pid(pid),
        None => {
            println!(
                "Executing '{}' and tracing the resulting process.",
                args.command.join(" ")
            );
            probe::TaskTarget::Command(probe::Command::find(
                &args.command,
                std::env::var_os("PATH").as_deref(),
            ))
        }
    };
    let popts = probe::ProbeOptions {
        patterns,
        target,
        count_only: false,
        each_hit: true,
        stacks: true,
        folded: true,
        ..probe::ProbeOptions::default()
    };
    let mut state = Leaks {
        args: &args,
        kinds: Vec::new(),
        pid: args.pid.map(|p| p as u32),
        open: HashMap::new(),
        table: Outstanding::default(),
        next_report: 0,
        reports: 0,
    };
    let summary = probe::run_observed(&popts, &mut std::io::sink(), &mut say, &mut state)?;
    Ok(summary.exit_code.unwrap_or(0).clamp(0, 255) as u8)
}

/// The probe session's warnings, on standard error.
fn say(n: probe::Notice) {
    use probe::Notice::*;
    if matches!(
        n,
        StaleRemoved(_) | Refused { .. } | Unresolved(_) | NotRemoved(_) | Lost(_)
    ) {
        eprintln!("rprof: memleak: {}", super::probe::notice(&n));
    }
}

/// A call entered and not returned yet.
struct Open {
    target: usize,
    kind: Allocator,
    call: Call,
    time_ns: u64,
    frames: Vec<String>,
}

/// The observer: calls open per thread, the outstanding allocations of the process, the reports.
struct Leaks<'a> {
    args: &'a MemleakArgs,
    /// Each target's allocator.
    kinds: Vec<Option<Allocator>>,
    /// The traced process (the command's, once launched).
    pid: Option<u32>,
    /// Per thread, its allocator calls in progress, outermost first: a call made inside another (realloc's
    /// malloc, malloc's mmap) is that call's own work, not an allocation of the program.
    open: HashMap<u32, Vec<Open>>,
    table: Outstanding,
    /// CLOCK_MONOTONIC ns of the next report.
    next_report: u64,
    reports: u64,
}

impl Observer for Leaks<'_> {
    fn targets(&mut self, targets: &Targets) {
        self.kinds = targets
            .iter()
            .map(|(_, t)| match t.kind {
                TargetKind::User { .. } => {
                    let mut names = vec![t.name.as_str()];
                    names.extend(t.aliases.iter().map(String::as_str));
                    memleak::allocator(&names)
                }
                _ => None,
            })
            .collect();
    }

    fn started(&mut self, command: Option<u32>) {
        if let Some(pid) = command {
            self.pid = Some(pid);
        }
        if let Some(pid) = self.pid {
            println!("Attaching to pid {pid}, Ctrl+C to quit.");
        }
        let _ = std::io::stdout().flush();
        self.next_report =
            rprof::bt::session::monotonic_ns() + self.args.interval_s * 1_000_000_000;
    }

    fn hit(&mut self, hit: &ObservedHit, _names: &mut dyn probe::AddrNames) -> bool {
        if self.pid.is_some_and(|p| hit.pid != Some(p)) {
            return true;
        }
        let target = hit.target.index();
        let Some(Some(kind)) = self.kinds.get(target).copied() else {
            return true;
        };
        let arg = |i: usize| {
            hit.values
                .get(i)
                .and_then(|v| v.as_ref())
                .and_then(|v| v.as_u64())
                .unwrap_or(0)
        };
        let open = self.open.entry(hit.tid).or_default();
        match hit.role {
            HitRole::Entry => {
                let call = Call::at_entry(kind, [arg(0), arg(1), arg(2)]);
                if open.is_empty() {
                    if let Some(addr) = call.frees {
                        self.table.free(addr);
                    }
                }
                open.push(Open {
                    target,
                    kind,
                    call,
                    time_ns: hit.time,
                    frames: user_frames(hit),
                });
            }
            HitRole::Return => {
                // The innermost open call of this function returned (calls whose return was lost are closed).
                let Some(at) = open.iter().rposition(|o| o.target == target) else {
                    return true;
                };
                let done = open.drain(at..).next();
                let outermost = open.is_empty();
                if let Some(done) = done.filter(|d| outermost && d.call.allocates) {
                    let ret = hit.values.last().and_then(|v| v.as_ref());
                    let ret = ret.and_then(|v| v.as_u64()).unwrap_or(0);
                    self.returned(done, ret);
                }
            }
            HitRole::Hit => {}
        }
        true
    }

    fn round(&mut self) -> bool {
        let now = rprof::bt::session::monotonic_ns();
        if self.next_report == 0 || now < self.next_report {
            return true;
        }
        self.next_report = now + self.args.interval_s * 1_000_000_000;
        let before = now.saturating_sub(self.args.older_ms * 1_000_000);
        let totals = self.table.report(before, self.args.top);
        let mut out = std::io::stdout().lock();
        let written = memleak::write_report(&mut out, &clock(), self.args.top, &totals)
            .and_then(|_| out.flush());
        self.reports += 1;
        written.is_ok() && self.args.count.is_none_or(|c| self.reports < c)
    }
}

impl Leaks<'_> {
    /// An allocation call returned `ret`: its block is outstanding from the call's entry on.
    fn returned(&mut self, done: Open, ret: u64) {
        if !self.args.keeps(done.call.size) {
            return;
        }
        if done.kind == Allocator::PosixMemalign {
            // Its address is in the caller's memory, which a read now would find changed (Outstanding says).
            if ret == 0 {
                let c = done.call;
                self.table
                    .alloc_unaddressed(c.align, c.size, done.time_ns, done.frames);
            }
            return;
        }
        if let Some(addr) = memleak::returned_address(done.kind, ret) {
            self.table
                .alloc(addr, done.call.size, done.time_ns, done.frames);
        }
    }
}

/// The user frames of a hit's stack, leaf first, as bcc prints them.
fn user_frames(hit: &ObservedHit) -> Vec<String> {
    hit.stack
        .iter()
        .flatten()
        .filter(|f| !f.kernel)
        .map(|f| memleak::frame_text(f.addr, f.name.as_deref(), f.offset, &f.module))
        .collect()
}

/// The wall clock as `HH:MM:SS` (UTC, as rprof's other clocks).
fn clock() -> String {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
        % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}
