//! From the command line's specs to the session's [`Targets`]: what each pattern names ([`pattern`]), the
//! values it fetches ([`fetch`]), the functions, syscalls, tracepoints, kernel functions and USDT probes it
//! matches ([`resolve`], [`library`], [`usdt`]), and each target's fetch arguments ([`args`]).
pub mod args;
pub mod code;
pub mod fetch;
pub mod go;
pub mod library;
pub mod pattern;
pub mod resolve;
pub mod sysno;
pub mod usdt;

use crate::probe::target::Targets;
use crate::probe::{ProbeError, ProbeOptions, TaskTarget};
use crate::tracefs::Tracefs;
use pattern::Spec;

/// Each pattern of `opts` with the values it fetches (its own, then those of `--by` and `--hist`).
pub fn parse(
    opts: &ProbeOptions,
) -> Result<Vec<(String, Spec, Vec<fetch::FetchItem>)>, ProbeError> {
    let mut specs = Vec::new();
    for p in &opts.patterns {
        let split = fetch::split_spec(p)?;
        let spec = pattern::parse_spec(split.pattern, opts.binary.is_some())?;
        let mut items = split.items;
        items.extend(opts.values.iter().cloned());
        specs.push((p.clone(), spec, items));
    }
    if specs.is_empty() && opts.pair.is_none() {
        return Err(pattern::PatternError::Bad {
            pattern: String::new(),
            reason: "give at least one pattern, e.g. `rprof probe -x ./bin 'func_*'`".into(),
        }
        .into());
    }
    Ok(specs)
}

/// Whether resolving these specs needs tracefs (syscalls, tracepoints, kernel functions).
pub fn needs_tracefs(specs: &[(String, Spec, Vec<fetch::FetchItem>)]) -> bool {
    specs
        .iter()
        .any(|(_, s, _)| !matches!(s, Spec::User { .. } | Spec::Usdt { .. }))
}

/// Resolve the specs (and `--pair`) into the session's targets, each address or event once, with their fetch
/// arguments; refuse what cannot be probed as asked (return values with `--count`).
pub fn targets(
    opts: &ProbeOptions,
    specs: &[(String, Spec, Vec<fetch::FetchItem>)],
    tracefs: Option<&Tracefs>,
) -> Result<Targets, ProbeError> {
    let ropts = resolve::ResolveOptions {
        binary: opts.binary.clone(),
        pid: match &opts.target {
            TaskTarget::Pid(p) => Some(*p as u32),
            _ => None,
        },
        regex: opts.regex,
        debug_dirs: opts.debug_dirs.clone(),
    };
    let mut targets = Targets::default();
    for (text, spec, items) in specs {
        let found =
            resolve::resolve(std::slice::from_ref(spec), &ropts, tracefs).map_err(|e| match e {
                ProbeError::Usdt(e) => ProbeError::Spec {
                    spec: text.clone(),
                    reason: e.to_string(),
                },
                e => e,
            })?;
        for mut t in found {
            t.fetches = args::resolve_fetches(&t, items, text)?;
            targets.add(t);
        }
    }
    if let Some((start, done)) = &opts.pair {
        let mut pair = resolve::resolve_pair(start, done, &ropts)?;
        let mut items = fetch::split_spec(start)?.items;
        items.extend(opts.values.iter().cloned());
        pair.fetches = args::resolve_fetches(&pair, &items, &format!("--pair {start},{done}"))?;
        targets.add(pair);
    }
    check(opts, &targets)?;
    Ok(targets)
}

/// Refuse return values with `--count`.
fn check(opts: &ProbeOptions, targets: &Targets) -> Result<(), ProbeError> {
    if opts.count_only
        && targets
            .iter()
            .any(|(_, t)| t.fetches.iter().any(|f| f.on_return))
    {
        return Err(ProbeError::Spec {
            spec: "ret".into(),
            reason: "return values need return probes: drop --count".into(),
        });
    }
    Ok(())
}
