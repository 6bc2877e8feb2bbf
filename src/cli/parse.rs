//! clap value parsers. Each turns one argument into its typed value, or into a message that says what is wrong
//! and what works; clap puts the flag's name in front and exits with its usage status (2).
use rprof::record::CallGraph;
use std::time::Duration;

/// The kernel copies at most 65528 bytes of user stack per sample (a record is at most 64 KiB).
pub const MAX_STACK_COPY: u32 = 65528;

/// A positive, finite number of seconds, e.g. `5` or `0.5`.
pub fn seconds(s: &str) -> Result<Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(Duration::from_secs_f64(v)),
        _ => Err("give a positive number of seconds, like 5 or 0.5".to_string()),
    }
}

/// `--hist-unit`: ns, us or ms (also nsecs, usecs, msecs) as nanoseconds per unit.
pub fn hist_unit(s: &str) -> Result<u64, String> {
    match s {
        "ns" | "nsecs" => Ok(1),
        "us" | "usecs" => Ok(1_000),
        "ms" | "msecs" => Ok(1_000_000),
        _ => Err(format!("unknown histogram unit '{s}': use ns, us or ms")),
    }
}

/// A duration with a unit (`5ms`, `500us`, `2s`, `100ns`; a bare number is milliseconds, as funcslower's),
/// in nanoseconds.
pub fn duration_ns(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a duration: use e.g. 5ms, 500us, 2s"))?;
    let scale = match unit {
        "" | "ms" => 1e6,
        "ns" => 1.0,
        "us" => 1e3,
        "s" => 1e9,
        _ => {
            return Err(format!(
                "unknown unit '{unit}' in '{s}': use ns, us, ms or s"
            ))
        }
    };
    if v.is_nan() || v < 0.0 || !v.is_finite() {
        return Err(format!("'{s}' is not a duration"));
    }
    Ok((v * scale).round() as u64)
}

/// A value `--by`/`--hist` can take: `argN`, `ret`, `caller` or a parameter name, with an optional `:TYPE`.
pub fn value_name(s: &str) -> Result<String, String> {
    if s.contains(',') {
        // Several names of the process context, one column (`--by pid,comm`).
        let context = ["comm", "pid", "tid", "cpu", "ppid"];
        return match s.split(',').all(|n| context.contains(&n)) {
            true => Ok(s.to_string()),
            false => Err(format!(
                "`{s}`: only the process context's names (comm, pid, tid, cpu, ppid) go together, as `pid,comm`"
            )),
        };
    }
    rprof::probe::FetchItem::parse(s)?;
    Ok(s.to_string())
}

/// The characters of `s` outside double quotes and parentheses, with their offsets.
fn top_level(s: &str) -> impl Iterator<Item = (usize, char)> + '_ {
    let (mut depth, mut quoted) = (0i32, false);
    s.char_indices().filter(move |&(_, c)| {
        match c {
            '"' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth -= 1,
            _ => {}
        }
        depth == 0 && !quoted
    })
}

/// `START,DONE`: the probes of `--pair`, split at the first comma outside parentheses and quotes (each end may
/// name values: `t:block:block_rq_issue(bytes, comm),t:block:block_rq_complete(error)`). START may be several,
/// split at each lone `|` (not `||`): `A | B if EXPR, DONE`; each may have its filter (`SPEC if EXPR`).
pub fn pair(s: &str) -> Result<(Vec<String>, String), String> {
    let bad = || {
        format!(
            "'{s}' is not START,DONE (e.g. usdt:python:import__find__load__start,usdt:python:import__find__load__done; \
             several STARTs: 't:sched:sched_wakeup | t:sched:sched_wakeup_new,t:sched:sched_switch')"
        )
    };
    let comma = top_level(s).find(|&(_, c)| c == ',').map(|(i, _)| i);
    let (starts, done) = comma.map(|i| (&s[..i], &s[i + 1..])).ok_or_else(bad)?;
    let bytes = starts.as_bytes();
    let bars: Vec<usize> = top_level(starts)
        .filter(|&(i, c)| {
            c == '|' && bytes.get(i + 1) != Some(&b'|') && (i == 0 || bytes[i - 1] != b'|')
        })
        .map(|(i, _)| i)
        .collect();
    let mut parts = Vec::new();
    let mut from = 0;
    for i in bars.into_iter().chain(std::iter::once(starts.len())) {
        parts.push(starts[from..i].trim().to_string());
        from = i + 1;
    }
    if parts.iter().any(String::is_empty) || done.trim().is_empty() {
        return Err(bad());
    }
    Ok((parts, done.trim().to_string()))
}

/// The parts of `--key`: (START's names, one of which each START has; DONE's name) each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyParts(pub Vec<(Vec<String>, String)>);

/// `--key NAME[,NAME]`, `START_NAME=DONE_NAME`, or with several STARTs naming it differently
/// `NAME|NAME=DONE_NAME`: the values a keyed pair matches by.
pub fn pair_key(s: &str) -> Result<KeyParts, String> {
    let ident = |n: &str| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    s.split(',')
        .map(|part| {
            let (a, b) = part.split_once('=').unwrap_or((part, part));
            let starts: Vec<String> = a.split('|').map(|n| n.trim().to_string()).collect();
            let b = b.trim();
            match starts.iter().all(|n| ident(n)) && ident(b) && (starts.len() == 1 || a != b) {
                true => Ok((starts, b.to_string())),
                false => Err(format!(
                    "'{part}' is not a key part: write a field or argument name present in both events \
                     (dev,sector), START_NAME=DONE_NAME where they differ (pid=next_pid), or with several \
                     STARTs the names they have, each START taking the first it has (pid|prev_pid=next_pid)"
                )),
            }
        })
        .collect::<Result<_, _>>()
        .map(KeyParts)
}

/// `fp`, or `dwarf[,SIZE]` with SIZE in 8..=65528 bytes (rounded down to a multiple of 8; default 16384).
pub fn call_graph(s: &str) -> Result<CallGraph, String> {
    let (mode, size) = match s.split_once(',') {
        Some((m, sz)) => (m, Some(sz)),
        None => (s, None),
    };
    match (mode, size) {
        ("fp", None) => Ok(CallGraph::Fp),
        ("dwarf", None) => Ok(CallGraph::Dwarf { stack_size: 16384 }),
        ("dwarf", Some(sz)) => match sz.parse::<u32>() {
            Ok(n) if (8..=MAX_STACK_COPY).contains(&n) => {
                Ok(CallGraph::Dwarf { stack_size: n & !7 })
            }
            _ => Err(format!(
                "the DWARF stack copy size must be 8..={MAX_STACK_COPY} bytes, like dwarf,16384"
            )),
        },
        _ => Err("use fp or dwarf[,SIZE]".to_string()),
    }
}

/// One `-e` of `rprof stat`, as the event layer parses it (a software, hardware or cache event with its
/// modifiers, a tracepoint or a probe point, which the plan resolves).
pub fn event(s: &str) -> Result<String, String> {
    rprof::events::parse(&rprof::events::EventSpec::new(s))
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

/// One `-e` of `rprof record`: as [`event`], and a hardware event is refused in one line where the machine
/// has no PMU (a sampled event must open).
pub fn record_event(s: &str) -> Result<String, String> {
    let parsed =
        rprof::events::parse(&rprof::events::EventSpec::new(s)).map_err(|e| e.to_string())?;
    match parsed.needs_pmu() && !rprof::events::hardware::pmu_present() {
        true => Err(rprof::events::hardware::pmu_missing(s)),
        false => Ok(s.to_string()),
    }
}

/// A list of CPUs, as `0,1` or `0-3` or `0-1,3`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList(pub Vec<u32>);

/// Parse a CPU list such as `0-1,3`.
pub fn cpu_list(s: &str) -> Result<CpuList, String> {
    match rprof::perf::parse_cpu_list(s) {
        Some(cpus) if !cpus.is_empty() => Ok(CpuList(cpus)),
        _ => Err("give CPUs as a list like 0,1 or 0-3 or 0-1,3".to_string()),
    }
}

/// A percentage, 0 to 100 (`0.5`).
pub fn percent(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('%').parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err("give a percentage from 0 to 100, like 0.5".to_string()),
    }
}

/// `trace --duration MSEC`: milliseconds, 0 or more (`0.5`).
pub fn msec(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches("ms").parse::<f64>() {
        Ok(v) if v >= 0.0 && v.is_finite() => Ok(v),
        _ => Err("give milliseconds, like 1 or 0.5".to_string()),
    }
}

/// `-F`: a frequency above zero, or `max`: the kernel's limit (kernel.perf_event_max_sample_rate), as perf's.
pub fn freq(s: &str) -> Result<u64, String> {
    if s != "max" {
        return above_zero(s).map_err(|_| "give a frequency in Hz above 0, or max".to_string());
    }
    let path = rprof::record::MAX_SAMPLE_RATE_PATH;
    std::fs::read_to_string(path)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&v| v > 0)
        .ok_or_else(|| {
            format!("cannot read the kernel's limit from {path}: give a frequency in Hz")
        })
}

/// A count above zero (a frequency or a period).
pub fn above_zero(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("give a whole number above 0".to_string()),
    }
}

/// A size in bytes: a whole number, with K, M or G (powers of 1024) after it or not: `512M`, `2G`.
pub fn bytes(s: &str) -> Result<u64, String> {
    let (digits, shift) = match s.as_bytes().last().map(u8::to_ascii_uppercase) {
        Some(b'K') => (&s[..s.len() - 1], 10),
        Some(b'M') => (&s[..s.len() - 1], 20),
        Some(b'G') => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| {
            "give a size in bytes, with K, M or G after it or not, like 512M or 2G".to_string()
        })
}

/// A number of ring buffer pages: a power of two.
pub fn pages(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n.is_power_of_two() => Ok(n),
        _ => Err("the number of ring buffer pages must be a power of two, like 128".to_string()),
    }
}

/// `RPROF_DEBUG_COST`: `1` (or any value but `0`) reports each measurement of the calibration.
pub fn debug_cost(s: &str) -> Result<rprof::probe::DebugCost, String> {
    Ok(match s {
        "" | "0" => rprof::probe::DebugCost::Off,
        _ => rprof::probe::DebugCost::On,
    })
}

/// `report --sort`: the table's keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SortKeys(pub Vec<rprof::report::SortKey>, pub bool);

/// `--sort KEYS`: the table's keys, and whether `event` was one of them (a row or a section per event).
pub fn sort_keys(s: &str) -> Result<SortKeys, String> {
    let event = s.split(',').any(|k| k.trim() == "event");
    let rest: Vec<&str> = s.split(',').filter(|k| k.trim() != "event").collect();
    match rest.is_empty() {
        true => Ok(SortKeys(Vec::new(), event)),
        false => rprof::report::SortKey::parse_list(&rest.join(",")).map(|k| SortKeys(k, event)),
    }
}

/// `report -g`: perf's `--call-graph` spelling, a comma-separated list of which rprof reads `graph` (the only
/// layout), `caller` or `callee`, and a threshold in percent (`0.5`); `none` turns the graph off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GraphSpec {
    pub on: bool,
    /// None: perf's default (`caller` with --children, else `callee`).
    pub order: Option<rprof::report::CallOrder>,
    pub threshold: f64,
}

pub fn graph_spec(s: &str) -> Result<GraphSpec, String> {
    let mut spec = GraphSpec {
        on: true,
        order: None,
        threshold: 0.5,
    };
    for word in s.split(',').map(str::trim) {
        match word {
            "graph" | "" => {}
            "none" => spec.on = false,
            "caller" => spec.order = Some(rprof::report::CallOrder::Caller),
            "callee" => spec.order = Some(rprof::report::CallOrder::Callee),
            _ => match word.parse::<f64>() {
                Ok(t) if (0.0..=100.0).contains(&t) => spec.threshold = t,
                _ => {
                    return Err(format!(
                        "'{word}' is not something -g takes here: use caller, callee, none, graph or a \
                         threshold in percent, e.g. -g caller or -g graph,0.5,callee"
                    ))
                }
            },
        }
    }
    Ok(spec)
}

/// `--trace-join FIRST,THEN`: two probe names.
pub fn name_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once(',') {
        Some((a, b)) if !a.trim().is_empty() && !b.trim().is_empty() => {
            Ok((a.trim().to_string(), b.trim().to_string()))
        }
        _ => Err(format!(
            "`{s}` is not FIRST,THEN (two probe names as -l lists them, `sched:sched_process_exec,_dl_start`)"
        )),
    }
}

/// `--trace-format FORMAT`.
pub fn trace_format(s: &str) -> Result<rprof::probe::TraceFormat, String> {
    rprof::probe::TraceFormat::parse(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check `--pair`'s split: STARTs at a lone `|` (not a filter's `||`, nor inside quotes or parentheses),
    /// DONE after the first top-level comma; and `--key`'s names per START.
    #[test]
    fn pair_and_key() {
        let (starts, done) =
            pair("t:a:x | t:a:y if s == R || s == \"R+|\", t:a:z(f, g) if f == 1").unwrap();
        assert_eq!(starts, ["t:a:x", "t:a:y if s == R || s == \"R+|\""]);
        assert_eq!(done, "t:a:z(f, g) if f == 1");
        assert!(pair("t:a:x | ,t:a:z").is_err());
        assert!(pair("t:a:x").is_err());
        let k = pair_key("pid|prev_pid=next_pid,dev").unwrap();
        assert_eq!(
            k.0,
            [
                (
                    vec!["pid".to_string(), "prev_pid".to_string()],
                    "next_pid".to_string()
                ),
                (vec!["dev".to_string()], "dev".to_string())
            ]
        );
        assert!(pair_key("pid|prev_pid").is_err());
    }

    /// Check sizes: bytes, K, M and G (either case), and no fractions, signs, other units or overflow.
    #[test]
    fn sizes_in_bytes() {
        assert_eq!(bytes("1000"), Ok(1000));
        assert_eq!(bytes("4k"), Ok(4096));
        assert_eq!(bytes("512M"), Ok(512 << 20));
        assert_eq!(bytes("2G"), Ok(2 << 30));
        for bad in ["", "G", "1.5G", "-1", "2T", "99999999999G"] {
            assert!(bytes(bad).is_err(), "{bad}");
        }
    }

    /// Check that -g takes perf's words and threshold, and names what it does not take.
    #[test]
    fn graph_specs() {
        use rprof::report::CallOrder;
        assert_eq!(graph_spec("caller").unwrap().order, Some(CallOrder::Caller));
        let full = graph_spec("graph,1.5,callee").unwrap();
        assert_eq!((full.order, full.threshold), (Some(CallOrder::Callee), 1.5));
        assert!(!graph_spec("none").unwrap().on);
        assert!(graph_spec("fractal")
            .unwrap_err()
            .contains("caller, callee"));
    }

    #[test]
    fn seconds_take_positive_finite_numbers() {
        assert_eq!(seconds("2.5"), Ok(Duration::from_millis(2500)));
        for bad in ["0", "-1", "inf", "NaN", "", "1s"] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn call_graph_modes_and_sizes() {
        assert_eq!(call_graph("fp"), Ok(CallGraph::Fp));
        assert_eq!(
            call_graph("dwarf"),
            Ok(CallGraph::Dwarf { stack_size: 16384 })
        );
        assert_eq!(
            call_graph("dwarf,65535"),
            Err("the DWARF stack copy size must be 8..=65528 bytes, like dwarf,16384".to_string())
        );
        assert_eq!(
            call_graph("dwarf,1001"),
            Ok(CallGraph::Dwarf { stack_size: 1000 })
        );
        for bad in ["lbr", "fp,8", "dwarf,", "dwarf,4", "dwarf,x"] {
            assert!(call_graph(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cpu_lists_events_and_counts() {
        assert_eq!(cpu_list("0-1,3"), Ok(CpuList(vec![0, 1, 3])));
        assert!(cpu_list("3-1").is_err());
        assert!(cpu_list("").is_err());
        assert_eq!(record_event("cs:u"), Ok("cs:u".to_string()));
        assert!(record_event("nonsense").is_err());
        assert!(above_zero("0").is_err());
        assert!(pages("100").is_err());
        assert_eq!(pages("64"), Ok(64));
    }
}
