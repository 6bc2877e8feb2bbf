//! `--pair START,DONE [--key FIELDS]`: two probe points timed as one call. Each end is one probe point (a user
//! function's entry, a USDT probe, a tracepoint, a kernel function's entry) with its own values; with `--key`,
//! the two are matched by the values named there (fields, arguments) instead of by thread.
use super::args::{resolve_fetches, Formats};
use super::fetch::{split_spec, Fetch, FetchItem, FetchSource};
use super::pattern::parse_spec;
use super::resolve::{resolve, ResolveOptions};
use crate::probe::target::{PairKey, Target, TargetKind};
use crate::probe::{PairOptions, ProbeError};
use crate::symbols::DebugSources;
use crate::tracefs::Tracefs;

/// The target of `--pair`: its two ends, their values (START's, with `values`, then DONE's) and the key.
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
    let (start, mut start_items) = end(&pair.start, opts, tracefs, &bad)?;
    let (done, mut done_items) = end(&pair.done, opts, tracefs, &bad)?;
    if start.kind == done.kind && !pair.key.is_empty() {
        return Err(bad(
            "START and DONE are the same event: a key cannot tell a start from a done".into(),
        ));
    }
    if let Some(ret) = done_items.iter().chain(&start_items).find(|i| i.is_ret()) {
        return Err(bad(format!(
            "`{}`: the ends of a pair are probe points, not calls; they have no return value",
            ret.name
        )));
    }
    // `--by` and `--hist` values: START's, or DONE's where only DONE has them (a completion's `error`).
    for v in values {
        let on_start = resolve_fetches(&start, std::slice::from_ref(v), &text, formats, debug);
        let on_done = resolve_fetches(&done, std::slice::from_ref(v), &text, formats, debug);
        match (on_start, on_done) {
            (Err(_), Ok(_)) => done_items.push(v.clone()),
            _ => start_items.push(v.clone()),
        }
    }
    for (s, d) in &pair.key {
        let (s, d) = (key_item(s, &start_items), key_item(d, &done_items));
        for (end, t, item) in [("START", &start, &s), ("DONE", &done, &d)] {
            // A key is a field of the event itself: the process context (`pid`, `comm`) is no key.
            let fetched =
                super::args::resolve_one(t, item, "v0".into(), &text, formats, debug).map(|_| ());
            if let Err(ProbeError::Spec { reason, .. }) = fetched {
                return Err(bad(format!(
                    "key `{}` is missing from {end}: {reason}; name both sides where they differ \
                     (--key START_NAME=DONE_NAME)",
                    item.name
                )));
            }
        }
        start_items.push(s);
        done_items.push(d);
    }
    let in_key = |end: &str, e: ProbeError| match e {
        ProbeError::Spec { reason, .. } => bad(format!("{end}: {reason}")),
        e => e,
    };
    let mut fetches = resolve_fetches(&start, &start_items, &text, formats, debug)
        .map_err(|e| in_key("START", e))?;
    let mut done_fetches = resolve_fetches(&done, &done_items, &text, formats, debug)
        .map_err(|e| in_key("DONE", e))?;
    if let Some(f) = fetches
        .iter()
        .chain(&done_fetches)
        .find(|f| matches!(f.source, FetchSource::UserString { .. }))
    {
        return Err(bad(format!(
            "`{}` is a string the event only points to; a pair reads the events' own fields",
            f.label
        )));
    }
    let starts = fetches.len();
    for f in &mut done_fetches {
        f.on_return = true;
    }
    fetches.extend(done_fetches);
    let key = pair
        .key
        .iter()
        .map(|(s, d)| PairKey {
            start: position(&fetches[..starts], s),
            done: starts + position(&fetches[starts..], d),
        })
        .collect();
    Ok(Target {
        name: pair_name(&start.name, &done.name),
        aliases: Vec::new(),
        kind: TargetKind::Pair {
            start: Box::new(start.kind),
            done: Box::new(done.kind),
            key,
        },
        fetches,
        code: None,
        go: None,
        syscall_sites: Vec::new(),
        filter: None,
    })
}

/// The item of a key part: the value of that name already asked for (with its type), or the name itself.
fn key_item(name: &str, items: &[FetchItem]) -> FetchItem {
    items
        .iter()
        .find(|i| i.name == name)
        .cloned()
        .unwrap_or_else(|| FetchItem {
            name: name.to_string(),
            ty: None,
            array: None,
        })
}

fn position(fetches: &[Fetch], label: &str) -> usize {
    fetches
        .iter()
        .position(|f| f.label == label)
        .expect("every key part is fetched")
}

/// One end of a pair: exactly one probe point, with the values its spec names.
fn end(
    text: &str,
    opts: &ResolveOptions,
    tracefs: Option<&Tracefs>,
    bad: &dyn Fn(String) -> ProbeError,
) -> Result<(Target, Vec<FetchItem>), ProbeError> {
    let split = split_spec(text)?;
    let spec = parse_spec(split.pattern, opts.binary.is_some())?;
    let found = resolve(std::slice::from_ref(&spec), opts, tracefs)?;
    let t = match found.as_slice() {
        [t] => t.clone(),
        [] => return Err(bad(format!("`{text}` matches nothing"))),
        many => {
            return Err(bad(format!(
                "`{text}` matches {} probe points; name exactly one",
                many.len()
            )))
        }
    };
    match &t.kind {
        TargetKind::User { .. }
        | TargetKind::Usdt { .. }
        | TargetKind::Tracepoint { .. }
        | TargetKind::Kernel { .. } => Ok((t, split.items)),
        TargetKind::Syscall { name } => Err(bad(format!(
            "`{text}` is two events; name one: t:syscalls:sys_enter_{name} or t:syscalls:sys_exit_{name}"
        ))),
        TargetKind::Pair { .. } => unreachable!("patterns do not make pairs"),
    }
}

/// `import__find__load__{start..done}`: the common prefix of the two short names once.
fn pair_name(start: &str, done: &str) -> String {
    let short = |n: &str| n.rsplit(':').next().unwrap_or(n).to_string();
    let (a, b) = (short(start), short(done));
    let common = a
        .char_indices()
        .zip(b.chars())
        .take_while(|((_, x), y)| x == y)
        .map(|((i, c), _)| i + c.len_utf8())
        .last()
        .unwrap_or(0);
    if common >= 4 && common < a.len() && common < b.len() {
        format!("{}{{{}..{}}}", &a[..common], &a[common..], &b[common..])
    } else {
        format!("{a}..{b}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check the names of pairs: a shared prefix written once, else both names.
    #[test]
    fn names() {
        assert_eq!(
            pair_name(
                "usdt:python:import__find__load__start",
                "usdt:python:import__find__load__done"
            ),
            "import__find__load__{start..done}"
        );
        assert_eq!(
            pair_name("block:block_rq_issue", "block:block_rq_complete"),
            "block_rq_{issue..complete}"
        );
        assert_eq!(
            pair_name("sched:sched_wakeup", "sched:sched_switch"),
            "sched_{wakeup..switch}"
        );
        assert_eq!(pair_name("begin", "end"), "begin..end");
    }
}
