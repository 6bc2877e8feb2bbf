//! bcc's argdist: `-C|-H 'p|r|t|u:[lib]:func[(signature)]:type:expr[:filter][#label]'`, a value counted per
//! distinct value (`--by`) or as a log2 histogram (`--hist=VALUE`).
use super::expr::{self, Names};
use super::spec;
use super::{flag_error, read, Fallback, Given, MultiRecipe};
use crate::tools::{Recipe, ToolError};

pub const USAGE: &str = "\
  -C SPEC        count each distinct value: p|r|t|u:[lib]:func[(signature)][:type:expr[:filter]][#label]
  -H SPEC        a log2 histogram of the value
  -p PID         only this process
  -t TID         only this thread
  -i INTERVAL    print every INTERVAL seconds (and reset); without it, once at the end
  -n COUNT       print COUNT times (every second without -i), then stop
  -d DURATION    stop after DURATION seconds
  -T TOP         show the TOP most frequent values of each function";

/// One spec's parts: the specifier with its signature, type, expression and filter.
struct Parts<'a> {
    kind: &'a str,
    lib: &'a str,
    func: &'a str,
    sig: &'a str,
    ty: Option<&'a str>,
    expr: Option<&'a str>,
    filter: Option<&'a str>,
}

/// Split a spec at its colons (the label after `#` dropped: rprof names each row by its function).
fn parts(spec: &str) -> Result<Parts<'_>, String> {
    let spec = spec.split_once('#').map_or(spec, |(s, _)| s);
    let p: Vec<&str> = spec.splitn(6, ':').collect();
    if p.len() < 3 {
        return Err("expected p|r|t|u:[lib]:func[(signature)][:type:expr[:filter]]".into());
    }
    let (func, sig) = match p[2].split_once('(') {
        Some((f, s)) => (f, s.strip_suffix(')').ok_or("the signature has no `)`")?),
        None => (p[2], ""),
    };
    if p.len() == 4 {
        return Err("a type needs its expression (`:u32:size`)".into());
    }
    Ok(Parts {
        kind: p[0],
        lib: p[1],
        func,
        sig,
        ty: p.get(3).copied(),
        expr: p.get(4).copied(),
        filter: p.get(5).copied().filter(|f| !f.is_empty()),
    })
}

/// The probe arguments of one spec: `--by` for a count, `--hist=` for a histogram.
fn translate(spec: &str, hist: bool) -> Result<(Vec<String>, Option<Fallback>), String> {
    let p = parts(spec)?;
    if !matches!(p.kind, "p" | "r" | "t" | "u") {
        return Err(format!(
            "the probe type must be p, r, t or u, not `{}`",
            p.kind
        ));
    }
    let place = spec::parse(&format!("{}:{}:{}", p.kind, p.lib, p.func))?;
    let names = Names {
        params: expr::signature(p.sig)?,
        one_based_args: true,
    };
    let (types, exprs) = (p.ty.unwrap_or(""), p.expr.unwrap_or(""));
    if types.contains(',') || exprs.contains(',') {
        return Err(
            "several expressions: rprof splits a function's calls by one value (--by)".into(),
        );
    }
    if exprs.contains("$entry") {
        return Err(
            "$entry(): rprof pairs entries and returns, but keeps no entry values for the return"
                .into(),
        );
    }
    let filter = p.filter.map(|f| names.filter(f)).transpose()?;
    let mut fetches: Vec<String> = filter
        .iter()
        .flat_map(|(_, s)| s.iter().map(|s| format!("{s}:str")))
        .collect();
    let mut args = Vec::new();
    let mut returns = p.kind == 'r'.to_string().as_str();
    let value = match exprs {
        "" => None,
        "$latency" => {
            returns = true;
            None
        }
        e => {
            let (name, _) = names.value(e)?;
            let ty = expr::c_type(types)?;
            if name == "ret" {
                returns = true;
            } else if !fetches.iter().any(|f| f.starts_with(&format!("{name}:"))) {
                fetches.push(format!("{name}:{ty}"));
            }
            Some((name, ty))
        }
    };
    if returns && p.kind != "r" {
        return Err("$retval and $latency are read at the return: use r: instead of p:".into());
    }
    let mut pattern = place.pattern(&fetches);
    if let Some((name, ty)) = value.as_ref().filter(|(n, _)| n == "ret") {
        pattern = format!("{pattern} {name}:{ty}");
    }
    if let Some((f, _)) = &filter {
        pattern = format!("{pattern} if {f}");
    }
    if !returns {
        args.push("--count".to_string());
    }
    args.push(pattern.clone());
    match (value, hist) {
        (Some((name, _)), false) => args.extend(["--by".to_string(), name]),
        (Some((name, _)), true) => args.extend([format!("--hist={name}"), "--hist-only".into()]),
        (None, true) if exprs == "$latency" => {
            args.extend(["--hist".to_string(), "--hist-only".into()])
        }
        (None, _) if exprs == "$latency" => {
            return Err("-C $latency: count latencies with -H".into())
        }
        (None, _) => {}
    }
    let fallback = place.usdt_fallback(&fetches).map(|f| Fallback {
        pattern: pattern.clone(),
        instead: pattern.replacen(&place.pattern(&fetches), &f.pattern(&fetches), 1),
        why: format!(
            "{spec} is a USDT probe, which the library lacks (built without SystemTap notes)"
        ),
    });
    Ok((args, fallback))
}

/// bcc's argdist.
pub fn argdist(words: &[String]) -> Result<MultiRecipe, ToolError> {
    let t = "argdist";
    let g = read(
        t,
        words,
        &["-p", "-t", "-i", "-n", "-d", "-T", "-C", "-H", "-z", "-I"],
        &[],
        &[
            ("-c", "rprof resets the counts at each interval"),
            ("-v", "rprof prints no BPF program"),
        ],
    )?;
    let specs: Vec<(&str, bool)> = g
        .values("-C")
        .into_iter()
        .map(|s| (s, false))
        .chain(g.values("-H").into_iter().map(|s| (s, true)))
        .collect();
    let [(spec, hist)] = specs.as_slice() else {
        return Err(flag_error(
            t,
            format!(
                "one -C or -H SPEC is supported (rprof's --by and --hist are one per run), not {}",
                specs.len()
            ),
        ));
    };
    if g.has("-z") || g.has("-I") {
        return Err(flag_error(t, "-z and -I are not supported: rprof reads strings up to the kernel's fetch limit and needs no headers".into()));
    }
    let (mut args, fallback) =
        translate(spec, *hist).map_err(|e| flag_error(t, format!("`{spec}`: {e}")))?;
    args.extend(times(t, &g)?);
    if let Some(tid) = g.value("-t") {
        tid.parse::<u32>()
            .map_err(|_| flag_error(t, format!("-t {tid}: not a thread id")))?;
        let at = args.iter().position(|a| !a.starts_with("--")).unwrap_or(0);
        args[at] = match args[at].split_once(" if ") {
            Some((p, f)) => format!("{p} if ({f}) && tid == {tid}"),
            None => format!("{} if tid == {tid}", args[at]),
        };
    }
    Ok(MultiRecipe {
        recipe: Recipe {
            args,
            command: g.command,
            notes: Vec::new(),
        },
        fallbacks: fallback.into_iter().collect(),
    })
}

/// `-p`, `-i`, `-n`, `-d` and `-T TOP` as probe arguments.
fn times(t: &str, g: &Given) -> Result<Vec<String>, ToolError> {
    let num = |flag: &str| -> Result<Option<f64>, ToolError> {
        g.value(flag)
            .map(|v| {
                v.parse::<f64>()
                    .ok()
                    .filter(|n| *n >= 0.0)
                    .ok_or_else(|| flag_error(t, format!("{flag} {v}: not a number")))
            })
            .transpose()
    };
    let mut args = Vec::new();
    if let Some(pid) = num("-p")? {
        args.extend(["-p".to_string(), format!("{pid}")]);
    }
    let interval = num("-i")?;
    let count = num("-n")?;
    if let Some(top) = num("-T")? {
        args.extend(["--top".to_string(), format!("{top}")]);
    }
    let interval = match (interval, count) {
        (None, Some(_)) => Some(1.0),
        (i, _) => i,
    };
    if let Some(i) = interval {
        args.extend(["-i".to_string(), format!("{i}")]);
    }
    let duration = match (interval, count, num("-d")?) {
        (_, _, Some(d)) => Some(d),
        (Some(i), Some(n), None) => Some(i * n),
        _ => None,
    };
    if let Some(d) = duration {
        args.extend(["-d".to_string(), format!("{d}")]);
    }
    Ok(args)
}
