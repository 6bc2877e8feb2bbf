//! `--pair START,DONE [--key FIELDS]`: probe points timed as one call. Each end is one probe point (a user
//! function's entry, a USDT probe, a tracepoint, a kernel function's entry) with its own values and filter;
//! several STARTs (`A | B if EXPR`) each open a call. With `--key`, STARTs and DONEs are matched by the values
//! named there (fields, arguments) instead of by thread. START and DONE may be the same event, told apart by
//! their filters (or by their keys: a `sched_switch` opens a wait for the task it switches out and closes the
//! one of the task it switches in).
use super::args::{resolve_one, Formats};
use super::fetch::{split_spec, Fetch, FetchItem, FetchSource};
use super::filter::{parse as parse_filter, split_if, Expr};
use super::pattern::parse_spec;
use super::resolve::{resolve, ResolveOptions};
use crate::probe::target::{PairEnd, PairSpec, Target, TargetKind, MAX_STARTS};
use crate::probe::{PairOptions, ProbeError};
use crate::symbols::DebugSources;
use crate::tracefs::Tracefs;

/// One end as resolved: its probe point, the values asked of it (name to read, label to show it by) and its
/// filter.
struct End {
    target: Target,
    items: Vec<(FetchItem, String)>,
    cond: Option<Expr>,
    text: String,
}

/// The target of `--pair`: its ends, their values (each START's, then DONE's) and the key.
pub fn pair_target(
    pair: &PairOptions,
    values: &[FetchItem],
    opts: &ResolveOptions,
    tracefs: Option<&Tracefs>,
    formats: Formats<'_>,
    debug: &DebugSources,
) -> Result<Target, ProbeError> {
    let text = pair.text();
    let bad = |reason: String| ProbeError::Spec {
        spec: text.clone(),
        reason,
    };
    if pair.starts.len() > MAX_STARTS {
        return Err(bad(format!("a pair takes at most {MAX_STARTS} STARTs")));
    }
    let mut ends = pair
        .starts
        .iter()
        .chain(std::iter::once(&pair.done))
        .map(|e| end(e, opts, tracefs, &bad))
        .collect::<Result<Vec<End>, _>>()?;
    let done = ends.len() - 1;
    if let Some(ret) = ends.iter().flat_map(|e| &e.items).find(|(i, _)| i.is_ret()) {
        return Err(bad(format!(
            "`{}`: the ends of a pair are probe points, not calls; they have no return value",
            ret.1
        )));
    }
    let has = |e: &End, name: &str| {
        resolve_one(&e.target, &item(name), "v0".into(), &text, formats, debug).is_ok()
    };
    // `--by` and `--hist` values: `start.NAME` of the STARTs that have it, `done.NAME` of DONE; a bare name of
    // the STARTs that have it, or DONE's where none does (a completion's `error`).
    for v in values {
        let (on, name) = match v.name.split_once('.') {
            Some(("start", n)) => (Some(false), n),
            Some(("done", n)) => (Some(true), n),
            _ => (None, v.name.as_str()),
        };
        let named = FetchItem {
            name: name.to_string(),
            ty: v.ty,
            array: v.array,
        };
        let starts: Vec<usize> = (0..done).filter(|&i| has(&ends[i], name)).collect();
        let at: Vec<usize> = match on {
            Some(true) => vec![done],
            Some(false) => starts,
            None if starts.is_empty() && has(&ends[done], name) => vec![done],
            None => starts,
        };
        for i in at {
            ends[i].items.push((named.clone(), v.name.clone()));
        }
    }
    ask_keys(&mut ends, pair, &text, formats, debug).map_err(&bad)?;
    for e in &mut ends {
        // The values its filter reads (the process context is every event's).
        let names: Vec<String> = e
            .cond
            .iter()
            .flat_map(Expr::names)
            .map(String::from)
            .collect();
        for n in names {
            if !super::filters::is_context(&n) && !e.items.iter().any(|(_, l)| *l == n) {
                e.items.push((item(&n), n));
            }
        }
    }
    let (fetches, mut resolved) = resolve_ends(&ends, pair, &text, formats, debug, &bad)?;
    let done_end = resolved.pop().expect("a pair has a DONE");
    let names: Vec<&str> = ends.iter().map(|e| e.target.name.as_str()).collect();
    Ok(Target {
        name: pair_name(&names[..done], names[done]),
        aliases: Vec::new(),
        kind: TargetKind::Pair(Box::new(PairSpec {
            starts: resolved,
            done: done_end,
            keyed: !pair.key.is_empty(),
            keep: pair.keep,
        })),
        fetches,
        code: None,
        go: None,
        syscall_sites: Vec::new(),
        filter: None,
    })
}

/// The key values asked of each end: of each key part, the first of its names that each START has, DONE's
/// name; a part an end lacks is an error naming the names to give.
fn ask_keys(
    ends: &mut [End],
    pair: &PairOptions,
    text: &str,
    formats: Formats<'_>,
    debug: &DebugSources,
) -> Result<(), String> {
    let done = ends.len() - 1;
    let has = |e: &End, name: &str| {
        resolve_one(&e.target, &item(name), "v0".into(), text, formats, debug).is_ok()
    };
    for (s, d) in &pair.key {
        for (i, e) in ends.iter_mut().enumerate() {
            let names = if i == done {
                std::slice::from_ref(d)
            } else {
                s
            };
            let Some(name) = names.iter().find(|n| has(e, n)).cloned() else {
                // A key is a field of the event itself: the process context (`pid`, `comm`) is no key.
                let reason = match resolve_one(
                    &e.target,
                    &item(&names[0]),
                    "v0".into(),
                    text,
                    formats,
                    debug,
                ) {
                    Err(ProbeError::Spec { reason, .. }) => reason,
                    _ => format!(
                        "`{}` is the process context, not a value of the event",
                        names[0]
                    ),
                };
                let which = if i == done {
                    "DONE".to_string()
                } else {
                    start_name(i, done)
                };
                return Err(format!(
                "key `{}` is missing from {which}: {reason}; name both sides where they differ \
                 (--key START_NAME=DONE_NAME), and with several STARTs the name each has \
                 (--key pid|prev_pid=next_pid)",
                names.join("|")
            ));
            };
            e.items.push((item(&name), name));
        }
    }
    Ok(())
}

/// Each end's fetches, in order (its range of them, its key's positions, its filter placed): the pair's fetches
/// and its ends.
fn resolve_ends(
    ends: &[End],
    pair: &PairOptions,
    text: &str,
    formats: Formats<'_>,
    debug: &DebugSources,
    bad: &dyn Fn(String) -> ProbeError,
) -> Result<(Vec<Fetch>, Vec<PairEnd>), ProbeError> {
    let done = ends.len() - 1;
    let mut fetches: Vec<Fetch> = Vec::new();
    let mut resolved = Vec::with_capacity(ends.len());
    for (i, e) in ends.iter().enumerate() {
        let which = if i == done {
            "DONE".to_string()
        } else {
            start_name(i, done)
        };
        let mut own = resolve_end(e, text, formats, debug)
            .map_err(|r| bad(format!("{which} `{}`: {r}", e.text)))?;
        if let Some(f) = own
            .iter()
            .find(|f| matches!(f.source, FetchSource::UserString { .. }))
        {
            return Err(bad(format!(
                "`{}` is a string the event only points to; a pair reads the events' own fields",
                f.label
            )));
        }
        let range = fetches.len()..fetches.len() + own.len();
        let key = key_positions(pair, i == done, &own, range.start, &which)?;
        let mut t = e.target.clone();
        t.fetches = own.clone();
        let filter = match &e.cond {
            Some(c) => Some(super::target_filter(&t, c, formats, &e.text)?),
            None => None,
        };
        // rprof evaluates each end's filter whole (see `pair_hit`).
        if let Some(f) = &filter {
            super::filters::check_strings([&f.expr], &own)
                .map_err(|r| bad(format!("{which} `{}`: filter: {r}", e.text)))?;
        }
        for f in &mut own {
            f.on_return = i == done;
        }
        fetches.extend(own);
        resolved.push(PairEnd {
            kind: e.target.kind.clone(),
            fetches: range,
            key,
            filter,
        });
    }
    Ok((fetches, resolved))
}

/// Why an end never fires, when it is known not to: CPython 3.11's `function__entry` probe (gh-98894: its
/// evaluator never reaches it; `function__return` fires), so that a pair with it would time nothing.
fn never_fires(t: &Target) -> Option<String> {
    let TargetKind::Usdt { path, .. } = &t.kind else {
        return None;
    };
    if t.name != "usdt:python:function__entry" {
        return None;
    }
    let (major, minor) = crate::python::version_of_file(path)?;
    ((major, minor) == (3, 11)).then(|| {
        "CPython 3.11 never fires function__entry (CPython gh-98894), so a pair with it times nothing; \
         count usdt:python:function__return alone, or see Python functions with `rprof record -g` \
         (docs/python.md)"
            .to_string()
    })
}

/// What is known of a probe that rprof still places: CPython 3.11's `line` probe, which CPython gh-98894
/// reports crashes the interpreter; measured here, it did not (so it is not refused).
pub fn known_issue(t: &Target) -> Option<String> {
    let TargetKind::Usdt { path, .. } = &t.kind else {
        return None;
    };
    if t.name != "usdt:python:line" {
        return None;
    }
    let (major, minor) = crate::python::version_of_file(path)?;
    ((major, minor) == (3, 11)).then(|| {
        "CPython gh-98894 reports that 3.11's line probe crashes the interpreter; measured on Debian's 3.11.2 \
         with rprof and bpftrace: no crash (counts in docs/python.md)"
            .to_string()
    })
}

fn item(name: &str) -> FetchItem {
    FetchItem {
        name: name.to_string(),
        ty: None,
        array: None,
    }
}

/// `START` (the only one), or `START 2` of several.
fn start_name(i: usize, starts: usize) -> String {
    match starts {
        1 => "START".into(),
        _ => format!("START {}", i + 1),
    }
}

/// An end's fetches, each label once: the process context where the event has no value of its name.
fn resolve_end(
    e: &End,
    text: &str,
    formats: Formats<'_>,
    debug: &DebugSources,
) -> Result<Vec<Fetch>, String> {
    let mut out: Vec<Fetch> = Vec::new();
    for (it, label) in &e.items {
        if out.iter().any(|f| f.label == *label) {
            continue;
        }
        let field = format!("v{}", out.len());
        match resolve_one(&e.target, it, field, text, formats, debug) {
            Ok(mut f) => {
                f.label = label.clone();
                out.push(f);
            }
            Err(_) if it.ty.is_none() && super::filters::is_context(&it.name) => {}
            Err(ProbeError::Spec { reason, .. }) => return Err(reason),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(out)
}

/// Where an end's key values are among the pair's fetches (its own start at `base`); a key part it lacks
/// is an error naming the names to give.
fn key_positions(
    pair: &PairOptions,
    is_done: bool,
    own: &[Fetch],
    base: usize,
    which: &str,
) -> Result<Vec<usize>, ProbeError> {
    pair.key
        .iter()
        .map(|(s, d)| {
            let names = if is_done { std::slice::from_ref(d) } else { s.as_slice() };
            names
                .iter()
                .find_map(|n| own.iter().position(|f| f.label == *n))
                .map(|p| base + p)
                .ok_or_else(|| ProbeError::Spec {
                    spec: pair.text(),
                    reason: format!(
                        "key `{}` is missing from {which}: a key is a field or argument of the event itself \
                         (not the process context); name both sides where they differ (--key START_NAME=DONE_NAME), \
                         and with several STARTs the name each has (--key pid|prev_pid=next_pid)",
                        names.join("|")
                    ),
                })
        })
        .collect()
}

/// One end of a pair: exactly one probe point, with the values its spec names and its filter.
fn end(
    text: &str,
    opts: &ResolveOptions,
    tracefs: Option<&Tracefs>,
    bad: &dyn Fn(String) -> ProbeError,
) -> Result<End, ProbeError> {
    let (head, cond) = split_if(text);
    let cond = cond
        .map(parse_filter)
        .transpose()
        .map_err(|r| bad(format!("`{text}`: filter: {r}")))?;
    let split = split_spec(head)?;
    let spec = parse_spec(split.pattern, opts.binary.is_some())?;
    let found = resolve(std::slice::from_ref(&spec), opts, tracefs)?;
    let t = match found.as_slice() {
        [t] => t.clone(),
        [] => return Err(bad(format!("`{head}` matches nothing"))),
        many => {
            return Err(bad(format!(
                "`{head}` matches {} probe points; name exactly one",
                many.len()
            )))
        }
    };
    if let Some(reason) = never_fires(&t) {
        return Err(bad(format!("`{head}`: {reason}")));
    }
    let items = split
        .items
        .into_iter()
        .map(|i| {
            let label = i.name.clone();
            (i, label)
        })
        .collect();
    match &t.kind {
        TargetKind::User { .. }
        | TargetKind::Usdt { .. }
        | TargetKind::Tracepoint { .. }
        | TargetKind::Kernel { .. } => Ok(End {
            target: t,
            items,
            cond,
            text: text.to_string(),
        }),
        TargetKind::Syscall { name } => Err(bad(format!(
            "`{head}` is two events; name one: t:syscalls:sys_enter_{name} or t:syscalls:sys_exit_{name}"
        ))),
        TargetKind::Software { .. } => Err(bad(format!(
            "`{head}` is a sampled perf event, which opens or closes no call: pair probe points of the program \
             or the kernel (functions, USDT probes, tracepoints)"
        ))),
        TargetKind::Pair { .. } => unreachable!("patterns do not make pairs"),
    }
}

/// `import__find__load__{start..done}`: the common prefix of the short names once; several STARTs joined by
/// `|` (`sched_{wakeup|wakeup_new|switch..switch}`).
fn pair_name(starts: &[&str], done: &str) -> String {
    let short = |n: &str| n.rsplit(':').next().unwrap_or(n).to_string();
    let names: Vec<String> = starts.iter().map(|s| short(s)).collect();
    let b = short(done);
    let common = names
        .iter()
        .map(|a| common_prefix(a, &b))
        .min()
        .unwrap_or(0);
    if common >= 4 && common < b.len() && names.iter().all(|a| common < a.len()) {
        let parts: Vec<&str> = names.iter().map(|a| &a[common..]).collect();
        format!("{}{{{}..{}}}", &b[..common], parts.join("|"), &b[common..])
    } else {
        format!("{}..{b}", names.join("|"))
    }
}

/// The length in bytes of the longest common prefix of `a` and `b`.
fn common_prefix(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .take_while(|((_, x), y)| x == y)
        .map(|((i, c), _)| i + c.len_utf8())
        .last()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check the names of pairs: a shared prefix written once, else both names.
    #[test]
    fn names() {
        assert_eq!(
            pair_name(
                &["usdt:python:import__find__load__start"],
                "usdt:python:import__find__load__done"
            ),
            "import__find__load__{start..done}"
        );
        assert_eq!(
            pair_name(&["block:block_rq_issue"], "block:block_rq_complete"),
            "block_rq_{issue..complete}"
        );
        assert_eq!(
            pair_name(&["sched:sched_wakeup"], "sched:sched_switch"),
            "sched_{wakeup..switch}"
        );
        assert_eq!(pair_name(&["begin"], "end"), "begin..end");
        assert_eq!(
            pair_name(
                &[
                    "sched:sched_wakeup",
                    "sched:sched_wakeup_new",
                    "sched:sched_switch"
                ],
                "sched:sched_switch"
            ),
            "sched_{wakeup|wakeup_new|switch..switch}"
        );
        assert_eq!(
            pair_name(&["sock:inet_sock_set_state"], "sock:inet_sock_set_state"),
            "inet_sock_set_state..inet_sock_set_state"
        );
    }
}
