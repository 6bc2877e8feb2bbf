//! perf's event-list grammar: `-e a,b -e c`, each event with its modifiers (`cycles:u`, `cs:k`, `cycles:ppp`)
//! and the `--filter` that follows it; what each name is (software, hardware, cache, raw, tracepoint, probe).
use super::hardware;
use super::EventError;
use crate::perf::software::{self, SoftwareEvent};
use crate::perf::Attr;

/// One event as written, with the `--filter` that followed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSpec {
    pub name: String,
    pub filter: Option<String>,
}

impl EventSpec {
    /// An event without a filter.
    pub fn new(name: &str) -> EventSpec {
        EventSpec {
            name: name.to_string(),
            filter: None,
        }
    }

    /// A software clock (`cpu-clock`, `task-clock`, with or without modifiers).
    pub fn is_clock(&self) -> bool {
        matches!(
            parse(self).map(|e| e.kind),
            Ok(Kind::Software(s)) if s.is_clock()
        )
    }
}

/// The events of a command line, in order, each with the `--filter` that follows it (as perf pairs them):
/// `-e a,b --filter X -e c` gives a, b (filtered by X), c. `argv` is the words before `--`.
pub fn specs_from_args(argv: &[String]) -> Vec<EventSpec> {
    let mut specs: Vec<EventSpec> = Vec::new();
    let mut words = argv.iter().take_while(|w| *w != "--");
    while let Some(w) = words.next() {
        let (event, filter) = match w.as_str() {
            "-e" | "--event" => (words.next().cloned(), None),
            "--filter" => (None, words.next().cloned()),
            w if w.starts_with("--event=") => (Some(w["--event=".len()..].to_string()), None),
            w if w.starts_with("--filter=") => (None, Some(w["--filter=".len()..].to_string())),
            w if w.starts_with("-e") && w.len() > 2 && !w.starts_with("-e=") => {
                (Some(w[2..].to_string()), None)
            }
            _ => (None, None),
        };
        for e in event.iter().flat_map(|e| split_list(e)) {
            specs.push(EventSpec::new(&e));
        }
        if let (Some(f), Some(last)) = (filter, specs.last_mut()) {
            last.filter = Some(f);
        }
    }
    specs
}

/// One `-e` value split at its commas (`cs,faults`), keeping commas inside a PMU's `/.../` or braces.
pub fn split_list(text: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth, mut slashes) = (Vec::new(), String::new(), 0i32, 0);
    for c in text.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            '/' => slashes += 1,
            ',' if depth == 0 && slashes % 2 == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.retain(|s| !s.is_empty());
    out
}

/// perf's event modifiers: `u` user, `k` kernel, `h` hypervisor (the first of them excludes the others), `p`
/// precision (repeated), `G`/`H` guest/host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Modifiers {
    pub exclude_user: bool,
    pub exclude_kernel: bool,
    pub exclude_hv: bool,
    pub exclude_guest: bool,
    pub precise: u8,
    /// Whether any modifier was written.
    pub given: bool,
}

impl Modifiers {
    /// Parse `ukhpGH...` as perf does; None for a letter perf does not take here.
    pub fn parse(text: &str) -> Option<Modifiers> {
        // No modifier: perf excludes the guest (perf_guest is off); a modifier string excludes it only with
        // `u` or `p` (what `perf stat -vv -e cycles:k` and `-e cycles:u` print).
        let mut m = Modifiers {
            exclude_guest: text.is_empty(),
            given: !text.is_empty(),
            ..Modifiers::default()
        };
        let mut excluded = false;
        let mut exclude_all = |m: &mut Modifiers| {
            if !excluded {
                excluded = true;
                (m.exclude_user, m.exclude_kernel, m.exclude_hv) = (true, true, true);
            }
        };
        for c in text.chars() {
            match c {
                'u' => {
                    exclude_all(&mut m);
                    m.exclude_user = false;
                    m.exclude_guest = true;
                }
                'k' => {
                    exclude_all(&mut m);
                    m.exclude_kernel = false;
                }
                'h' => {
                    exclude_all(&mut m);
                    m.exclude_hv = false;
                }
                'p' if m.precise < 3 => {
                    m.precise += 1;
                    m.exclude_guest = true;
                }
                'P' => m.precise = 3,
                'G' => m.exclude_guest = false,
                'H' => m.exclude_guest = true,
                'S' | 'D' | 'W' | 'e' => {}
                _ => return None,
            }
        }
        Some(m)
    }

    /// `attr` with these modifiers.
    pub fn apply(&self, attr: Attr) -> Attr {
        attr.modifiers(
            self.exclude_user,
            self.exclude_kernel,
            self.exclude_hv,
            self.exclude_guest,
            self.precise,
        )
    }
}

/// What an event name is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A `PERF_TYPE_SOFTWARE` event.
    Software(&'static SoftwareEvent),
    /// A `PERF_TYPE_HARDWARE` event (`cycles`) by config.
    Hardware(u64),
    /// A `PERF_TYPE_HW_CACHE` event (`L1-dcache-load-misses`) by config.
    Cache(u64),
    /// A `PERF_TYPE_RAW` event (`r1a8`) by config.
    Raw(u64),
    /// Tracepoints (`sched:sched_switch`, `syscalls:sys_enter_*`; globs).
    Tracepoint { system: String, event: String },
    /// A user function probed for the session (`u:BIN:FUNC`, `uprobe:BIN:FUNC`).
    UserProbe { binary: String, function: String },
    /// A kernel function probed for the session (`k:FUNC`, `kprobe:FUNC`).
    KernelProbe { function: String },
    /// `probe:FUNC` or `probe_X:FUNC`: an existing probe event, or a function of `-x BINARY` (or the kernel).
    ProbeNamed { system: String, event: String },
}

/// One event, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// As written (`cs:u`): perf stat prints this name.
    pub written: String,
    pub kind: Kind,
    pub modifiers: Modifiers,
    pub filter: Option<String>,
}

impl Event {
    /// The attr of a perf-type event (software, hardware, cache, raw) with its modifiers, counting (give it a
    /// period or frequency to sample); None for tracepoints and probes, whose id comes from tracefs.
    pub fn attr(&self) -> Option<Attr> {
        let base = match &self.kind {
            Kind::Software(s) => s.attr(),
            Kind::Hardware(c) => Attr::typed(sys_type::HARDWARE, *c),
            Kind::Cache(c) => Attr::typed(sys_type::HW_CACHE, *c),
            Kind::Raw(c) => Attr::typed(sys_type::RAW, *c),
            _ => return None,
        };
        Some(self.modifiers.apply(base))
    }

    /// Whether the event needs the CPU's PMU (hardware, cache, raw).
    pub fn needs_pmu(&self) -> bool {
        matches!(self.kind, Kind::Hardware(_) | Kind::Cache(_) | Kind::Raw(_))
    }

    /// Whether the event comes from tracefs (tracepoints and probes).
    pub fn is_trace(&self) -> bool {
        self.attr().is_none()
    }
}

mod sys_type {
    use perf_event_open_sys::bindings as sys;
    pub const HARDWARE: u32 = sys::PERF_TYPE_HARDWARE;
    pub const HW_CACHE: u32 = sys::PERF_TYPE_HW_CACHE;
    pub const RAW: u32 = sys::PERF_TYPE_RAW;
}

/// Parse one event.
pub fn parse(spec: &EventSpec) -> Result<Event, EventError> {
    let text = spec.name.as_str();
    let event = |kind, modifiers| Event {
        written: text.to_string(),
        kind,
        modifiers,
        filter: spec.filter.clone(),
    };
    // A perf-type name, with modifiers after its last colon (`cs:u`, `cycles:ppp`) or none.
    let (base, mods) = match text.rsplit_once(':') {
        Some((b, m)) if !b.contains(':') && perf_kind(b).is_some() => (b, m),
        _ => (text, ""),
    };
    if let Some(kind) = perf_kind(base) {
        let Some(m) = Modifiers::parse(mods) else {
            return Err(EventError::Parse(format!(
                "{text}: unknown modifier in `{mods}`; perf's modifiers are u (user), k (kernel), h, p (precise, \
                 up to ppp), G, H"
            )));
        };
        if spec.filter.is_some() {
            return Err(EventError::Parse(format!(
                "--filter applies to tracepoints and probes, not to {text}; put it after the -e it filters"
            )));
        }
        return Ok(event(kind, m));
    }
    let parts: Vec<&str> = text.split(':').collect();
    let none = Modifiers::parse("").expect("empty modifiers parse");
    let kind = match parts.as_slice() {
        ["u" | "uprobe", binary, function] if !binary.is_empty() && !function.is_empty() => {
            Kind::UserProbe {
                binary: binary.to_string(),
                function: function.to_string(),
            }
        }
        ["k" | "kprobe", function] if !function.is_empty() => Kind::KernelProbe {
            function: function.to_string(),
        },
        ["t" | "tracepoint", system, event] => Kind::Tracepoint {
            system: system.to_string(),
            event: event.to_string(),
        },
        [system, event] if system.starts_with("probe") && !event.is_empty() => Kind::ProbeNamed {
            system: system.to_string(),
            event: event.to_string(),
        },
        [system, event] if !system.is_empty() && !event.is_empty() => Kind::Tracepoint {
            system: system.to_string(),
            event: event.to_string(),
        },
        _ => return Err(EventError::Parse(unknown(text))),
    };
    Ok(event(kind, none))
}

/// The perf-type event `name` is (software, hardware, cache, raw), if any.
fn perf_kind(name: &str) -> Option<Kind> {
    if let Some(s) = software::find(name).filter(|_| name != "cpu") {
        return Some(Kind::Software(s));
    }
    if let Some(c) = hardware::hardware(name) {
        return Some(Kind::Hardware(c));
    }
    if let Some(c) = hardware::cache(name) {
        return Some(Kind::Cache(c));
    }
    hardware::raw(name).map(Kind::Raw)
}

fn unknown(text: &str) -> String {
    format!(
        "{text}: unknown event; rprof takes software events ({}), hardware and cache events (cycles, \
         instructions, L1-dcache-load-misses, rNNNN; they need a PMU), tracepoints CATEGORY:EVENT \
         (sched:sched_switch, globs allowed), user functions u:BINARY:FUNCTION and kernel functions \
         kprobe:FUNCTION; `rprof list` lists them",
        software::names()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that lists split at commas, and filters pair with the event before them.
    #[test]
    fn lists_and_filters() {
        let argv: Vec<String> = [
            "-e",
            "cs,faults",
            "--filter",
            "x",
            "-e",
            "sched:sched_switch",
            "--filter=prev_pid == 1",
            "-ecpu-clock",
            "--",
            "-e",
            "no",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let specs = specs_from_args(&argv);
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["cs", "faults", "sched:sched_switch", "cpu-clock"]);
        assert_eq!(specs[1].filter.as_deref(), Some("x"));
        assert_eq!(specs[0].filter, None);
        assert_eq!(specs[2].filter.as_deref(), Some("prev_pid == 1"));
        assert_eq!(
            split_list("cpu/event=1,umask=2/,cs"),
            ["cpu/event=1,umask=2/", "cs"]
        );
    }

    /// Check what names are: aliases, modifiers, tracepoints, probes, and refusals.
    #[test]
    fn kinds_and_modifiers() {
        let p = |s: &str| parse(&EventSpec::new(s));
        assert!(matches!(p("cs").unwrap().kind, Kind::Software(e) if e.name == "context-switches"));
        assert!(matches!(p("migrations").unwrap().kind, Kind::Software(e) if e.config == 4));
        let u = p("cs:u").unwrap().modifiers;
        assert!(u.exclude_kernel && u.exclude_hv && !u.exclude_user && u.exclude_guest);
        let k = p("cycles:k").unwrap();
        assert_eq!(k.kind, Kind::Hardware(0));
        assert!(k.modifiers.exclude_user && !k.modifiers.exclude_guest);
        assert_eq!(p("cycles:ppp").unwrap().modifiers.precise, 3);
        assert_eq!(p("r1a8").unwrap().kind, Kind::Raw(0x1a8));
        assert_eq!(
            p("sched:sched_*").unwrap().kind,
            Kind::Tracepoint {
                system: "sched".into(),
                event: "sched_*".into()
            }
        );
        assert!(matches!(
            p("u:/bin/x:f*").unwrap().kind,
            Kind::UserProbe { .. }
        ));
        assert!(matches!(
            p("probe:f").unwrap().kind,
            Kind::ProbeNamed { .. }
        ));
        assert!(p("nonsense").is_err());
        assert!(p("cs:q").is_err());
        let filtered = EventSpec {
            name: "cs".into(),
            filter: Some("x".into()),
        };
        assert!(parse(&filtered).is_err());
        assert!(EventSpec::new("task-clock:u").is_clock() && !EventSpec::new("cs").is_clock());
    }
}
