//! funccount, funclatency and stackcount: one pattern (`tcp_send*`, `c:str*`, `t:block:block_rq_insert`,
//! `u:lib:probe`) counted, timed or counted by stack.
use super::spec::{self, Spec};
use super::{common_args, flag_error, read, Fallback, Given, MultiRecipe};
use crate::tools::{Recipe, ToolError};

pub const FUNCCOUNT_USAGE: &str = "\
  -p PID         only this process
  -i INTERVAL    print the counts every INTERVAL seconds (and reset them)
  -d DURATION    stop after DURATION seconds
  -T             a time with each output
  -r             the pattern is a regular expression (anchored at its start, as bcc's)
  PATTERN        func* (kernel), lib:func* (c:str*), p:lib:func, t:category:event, u:lib:probe (USDT)";

pub const FUNCLATENCY_USAGE: &str = "\
  -p PID         only this process
  -i INTERVAL    print the histograms every INTERVAL seconds (and reset them)
  -d DURATION    stop after DURATION seconds
  -T             a time with each output
  -u             microsecond histograms
  -m             millisecond histograms
  -F             a histogram per function (rprof always prints one per function)
  -r             the pattern is a regular expression
  PATTERN        func* (kernel), lib:func* (c:getaddrinfo), p:lib:func";

pub const STACKCOUNT_USAGE: &str = "\
  -p PID         only this process
  -i INTERVAL    print the stacks every INTERVAL seconds (and reset them)
  -D DURATION    stop after DURATION seconds
  -T             a time with each output
  -f             folded output (`frame;frame;frame COUNT`), for flame graphs
  -r             the pattern is a regular expression
  PATTERN        func* (kernel), lib:func*, t:category:event, u:lib:probe";

/// The one pattern of `g` as a probe specifier (with `-r` applied), and its USDT fallback.
fn pattern(tool: &str, g: &Given) -> Result<(Spec, Vec<Fallback>), ToolError> {
    let [p] = g.positional.as_slice() else {
        return Err(flag_error(
            tool,
            format!("one PATTERN is needed, not {}", g.positional.len()),
        ));
    };
    let mut s = spec::parse(p).map_err(|e| flag_error(tool, e))?;
    if s.kind == 'r' {
        return Err(flag_error(
            tool,
            format!("`{p}`: {tool} takes entries, not r: returns"),
        ));
    }
    if g.has("-r") {
        spec::with_regex(&mut s).map_err(|e| flag_error(tool, e))?;
    }
    let fallbacks = s
        .usdt_fallback(&[])
        .map(|f| Fallback {
            pattern: s.pattern(&[]),
            instead: f.pattern(&[]),
            why: format!(
                "{p} is a USDT probe, which the library lacks (built without SystemTap notes)"
            ),
        })
        .into_iter()
        .collect();
    Ok((s, fallbacks))
}

/// The recipe of `args` (with the pattern first) and `g`'s common flags and command.
fn finish(g: Given, args: Vec<String>, fallbacks: Vec<Fallback>) -> MultiRecipe {
    MultiRecipe {
        recipe: Recipe {
            args,
            command: g.command,
            notes: Vec::new(),
        },
        fallbacks,
    }
}

/// bcc's funccount: `--count PATTERN`.
pub fn funccount(words: &[String]) -> Result<MultiRecipe, ToolError> {
    let t = "funccount";
    let g = read(
        t,
        words,
        &["-p", "-i", "-d"],
        &["-T", "-r"],
        &[
            ("-c", "rprof probes every CPU"),
            ("-D", "rprof prints no BPF program"),
        ],
    )?;
    let (s, fallbacks) = pattern(t, &g)?;
    let mut args = vec!["--count".to_string(), s.pattern(&[])];
    if g.has("-r") {
        args.push("-r".into());
    }
    args.extend(common_args(
        t,
        &g,
        &[("-p", "-p"), ("-i", "-i"), ("-d", "-d"), ("-T", "-T")],
    )?);
    Ok(finish(g, args, fallbacks))
}

/// bcc's funclatency: `PATTERN --hist --hist-only`, in the unit asked for.
pub fn funclatency(words: &[String]) -> Result<MultiRecipe, ToolError> {
    let t = "funclatency";
    let g = read(
        t,
        words,
        &["-p", "-i", "-d"],
        &["-T", "-u", "-m", "-F", "-r"],
        &[
            (
                "-l",
                "rprof times every call of the functions, at any nesting level",
            ),
            ("-v", "rprof prints no BPF program"),
        ],
    )?;
    let (s, fallbacks) = pattern(t, &g)?;
    if matches!(
        s.place,
        spec::Place::Tracepoint { .. } | spec::Place::Usdt { .. }
    ) {
        return Err(flag_error(
            t,
            "funclatency times functions: a tracepoint or USDT probe has no return".into(),
        ));
    }
    let mut args = vec![s.pattern(&[])];
    if g.has("-r") {
        args.push("-r".into());
    }
    args.extend(["--hist".to_string(), "--hist-only".into()]);
    match (g.has("-u"), g.has("-m")) {
        (true, true) => return Err(flag_error(t, "-u and -m exclude each other".into())),
        (true, false) => args.extend(["--hist-unit".to_string(), "us".into()]),
        (false, true) => args.extend(["--hist-unit".to_string(), "ms".into()]),
        (false, false) => {}
    }
    args.extend(common_args(
        t,
        &g,
        &[("-p", "-p"), ("-i", "-i"), ("-d", "-d"), ("-T", "-T")],
    )?);
    Ok(finish(g, args, fallbacks))
}

/// bcc's stackcount: `--count -g PATTERN` (`-f`: `--folded`).
pub fn stackcount(words: &[String]) -> Result<MultiRecipe, ToolError> {
    let t = "stackcount";
    let g = read(
        t,
        words,
        &["-p", "-i", "-D"],
        &["-T", "-r", "-f"],
        &[
            (
                "-P",
                "rprof counts stacks per probed function, not per process",
            ),
            ("-K", "rprof's stacks hold user and kernel frames together"),
            ("-U", "rprof's stacks hold user and kernel frames together"),
            ("-s", "rprof names frames by function"),
            ("-v", "rprof names frames by function"),
            ("-d", "rprof's stacks hold user and kernel frames together"),
            ("-c", "rprof probes every CPU"),
        ],
    )?;
    let (s, fallbacks) = pattern(t, &g)?;
    let mut args = vec!["--count".to_string(), "-g".into(), s.pattern(&[])];
    if g.has("-r") {
        args.push("-r".into());
    }
    if g.has("-f") {
        args.push("--folded".into());
    }
    args.extend(common_args(
        t,
        &g,
        &[("-p", "-p"), ("-i", "-i"), ("-D", "-d"), ("-T", "-T")],
    )?);
    Ok(finish(g, args, fallbacks))
}
