//! bcc's trace: `[p|r|t|u]:[lib]:func[(signature)] [(filter)] "format", values...` as `rprof probe` patterns
//! with fetches and a filter, and bcc's columns (`PID TID COMM FUNC -`, then the message) as a
//! `--trace-format`.
use super::expr::{self, Names};
use super::spec::{self, Spec};
use super::{common_args, flag_error, read, Fallback, MultiRecipe};
use crate::tools::{Recipe, ToolError};

pub const USAGE: &str = "\
  -p PID         only this process
  -L TID         only this thread
  -n NAME        only processes whose name contains NAME
  -T             a TIME column (HH:MM:SS)
  -t             a TIME column (seconds since the first event)
  -C             a CPU column
  -K, -U         count the stacks (kernel and user together) of each function, after the trace
  PROBE          [p|r|t|u]:[lib]:func[(signature)] [(filter)] [\"format\"[, value...]]: values arg1..arg6
                 (bcc's, 1-based), retval, a signature's names (req->tv_sec), args->field of a tracepoint";

/// One translated probe: its pattern, the message in `--trace-format` syntax, whether it needs the return.
struct Translated {
    pattern: String,
    message: String,
    returns: bool,
    fallback: Option<Fallback>,
}

/// A probe's text in its parts: specifier, signature, filter and action.
type ProbeParts<'a> = (&'a str, Option<&'a str>, Option<&'a str>, &'a str);

/// Split a probe's text into its specifier, signature, filter and action (bcc's `_parse_probe`).
fn split(text: &str) -> Result<ProbeParts<'_>, String> {
    let text = text.trim();
    let spec_end = text.find([' ', '\t', '(']).unwrap_or(text.len());
    let (spec, mut rest) = text.split_at(spec_end);
    let mut sig = None;
    if let Some(r) = rest.strip_prefix('(') {
        let end = r.find(')').ok_or("the signature has no `)`")?;
        sig = Some(&r[..end]);
        rest = &r[end + 1..];
    }
    rest = rest.trim_start();
    let mut filter = None;
    if rest.starts_with('(') {
        let mut depth = 0;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                depth += match c {
                    '(' => 1,
                    ')' => -1,
                    _ => 0,
                };
                depth == 0
            })
            .map(|(i, _)| i)
            .ok_or("unmatched end of predicate")?;
        filter = Some(&rest[1..end]);
        rest = rest[end + 1..].trim_start();
    }
    Ok((spec, sig, filter, rest))
}

/// The format string and its values: `"%d sec", req->tv_sec` as (`%d sec`, [`req->tv_sec`]).
fn action(text: &str) -> Result<(String, Vec<String>), String> {
    if text.is_empty() {
        return Ok((String::new(), Vec::new()));
    }
    let body = text
        .strip_prefix('"')
        .ok_or("the action must start with a \"format string\"")?;
    let end = body
        .find('"')
        .ok_or("the format string has no closing \"")?;
    let values = body[end + 1..].trim_start().trim_start_matches(',');
    let values = values
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    Ok((body[..end].to_string(), values))
}

/// bcc's printf conversions in `fmt`, with the text around them: (text before, conversion) pairs and the tail.
fn conversions(fmt: &str) -> Result<(Vec<(String, String)>, String), String> {
    let re = regex::Regex::new(r"%(%|s|u|d|lu|llu|ld|lld|hu|hd|x|lx|llx|c|K|U|p)")
        .map_err(|e| e.to_string())?;
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut at = 0;
    for m in re.captures_iter(fmt) {
        let whole = m.get(0).expect("match");
        text.push_str(&fmt[at..whole.start()]);
        at = whole.end();
        match &m[1] {
            "%" => text.push('%'),
            conv => parts.push((std::mem::take(&mut text), conv.to_string())),
        }
    }
    text.push_str(&fmt[at..]);
    Ok((parts, text))
}

/// Text as literal `--trace-format` text.
fn literal(s: &str) -> String {
    s.replace('{', "{{").replace('}', "}}")
}

/// Translate one probe.
fn probe(text: &str) -> Result<Translated, String> {
    let (spec_text, sig, filter, act) = split(text)?;
    let spec = spec::parse(spec_text)?;
    if sig.is_some() && matches!(spec.kind, 't' | 'u') {
        return Err(
            "USDT and tracepoint probes can't have a function signature; use arg1, arg2, ..."
                .into(),
        );
    }
    let names = Names {
        params: expr::signature(sig.unwrap_or(""))?,
        one_based_args: true,
    };
    let (fmt, values) = action(act)?;
    let (convs, tail) = conversions(&fmt)?;
    if convs.len() != values.len() {
        return Err(format!(
            "the format has {} conversions for {} values",
            convs.len(),
            values.len()
        ));
    }
    let mut fetches: Vec<String> = Vec::new();
    let mut returns = spec.kind == 'r';
    let mut message = String::new();
    for ((before, conv), value) in convs.iter().zip(&values) {
        let (name, _) = names.value(value)?;
        let ty = expr::printf_type(conv)?;
        message.push_str(&literal(before));
        // The column is headed by the user's own expression (`req->tv_sec`), where it can be written there.
        let header: String = value.chars().filter(|c| !"{}|".contains(*c)).collect();
        message.push_str(&format!("{{{name}|{header}}}"));
        match name.as_str() {
            "ret" => returns = true,
            "tid" | "pid" | "cpu" => {}
            _ if fetches
                .iter()
                .any(|f| f.split(':').next() == Some(name.as_str())) => {}
            _ => fetches.push(format!("{name}:{ty}")),
        }
    }
    message.push_str(&literal(&tail));
    let filter = filter.map(|f| names.filter(f)).transpose()?;
    for s in filter.iter().flat_map(|(_, strings)| strings) {
        if !fetches
            .iter()
            .any(|f| f.split(':').next() == Some(s.as_str()))
        {
            fetches.push(format!("{s}:str"));
        }
    }
    if returns && spec.kind != 'r' {
        return Err("retval is read at the return: use r: instead of p:".into());
    }
    let suffix = |p: String| {
        let p = if returns { format!("{p} ret") } else { p };
        match &filter {
            Some((f, _)) => format!("{p} if {f}"),
            None => p,
        }
    };
    let fallback = spec.usdt_fallback(&fetches).map(|f: Spec| Fallback {
        pattern: suffix(spec.pattern(&fetches)),
        instead: suffix(f.pattern(&fetches)),
        why: format!(
            "{spec_text} is a USDT probe, which the library lacks (built without SystemTap notes)"
        ),
    });
    Ok(Translated {
        pattern: suffix(spec.pattern(&fetches)),
        message,
        returns,
        fallback,
    })
}

/// bcc's trace.
pub fn trace(words: &[String]) -> Result<MultiRecipe, ToolError> {
    let t = "trace";
    let g = read(
        t,
        words,
        &["-p", "-L", "-n"],
        &["-T", "-t", "-C", "-K", "-U"],
        &[
            ("-M", "rprof traces until the end (-d, Ctrl-C or the command's exit), not for N events"),
            ("-A", "rprof prints every event"),
            ("-f", "rprof filters events by their values (a (filter) after the probe), not by the message"),
            ("-Z", "rprof reads strings up to the kernel's fetch limit"),
            ("-u", "rprof's times are HH:MM:SS (-T) or seconds since the first event (-t)"),
            ("-c", "rprof has no cgroup filter here (rprof record -G has one)"),
            ("-B", "rprof compares strings with ==, not bytes"),
            ("-s", "rprof finds symbols in the probed files"),
            ("-a", "rprof names frames by function"),
            ("-S", "rprof never traces itself"),
            ("-I", "rprof needs no C headers"),
            ("-b", "rprof sizes its buffers with rprof probe --mmap-pages"),
            ("-v", "rprof prints no BPF program"),
        ],
    )?;
    if g.positional.is_empty() {
        return Err(flag_error(t, "a PROBE is needed".into()));
    }
    let probes: Vec<Translated> = g
        .positional
        .iter()
        .map(|p| probe(p).map_err(|e| flag_error(t, format!("`{p}`: {e}"))))
        .collect::<Result<_, _>>()?;
    if probes.iter().any(|p| p.message != probes[0].message) {
        return Err(flag_error(
            t,
            "probes with different messages: rprof's --trace-format is one layout for all probes; run one \
             rprof tool trace per message"
                .into(),
        ));
    }
    let mut filters = Vec::new();
    if let Some(tid) = g.value("-L") {
        tid.parse::<u32>()
            .map_err(|_| flag_error(t, format!("-L {tid}: not a thread id")))?;
        filters.push(format!("tid == {tid}"));
    }
    if let Some(name) = g.value("-n") {
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
        {
            return Err(flag_error(
                t,
                format!("-n {name}: use letters, digits, _ . - only"),
            ));
        }
        filters.push(format!("comm ~ \"*{name}*\""));
    }
    let mut args: Vec<String> = probes
        .iter()
        .map(|p| with_filters(&p.pattern, &filters))
        .collect();
    if !probes.iter().any(|p| p.returns) {
        // Entries only, as bcc's p:, t: and u: probes: no return probes, each line printed at the entry.
        args.insert(0, "--count".into());
    }
    if g.has("-K") || g.has("-U") {
        args.push("-g".into());
    }
    args.extend(common_args(t, &g, &[("-p", "-p")])?);
    let mut columns = String::new();
    if g.has("-T") {
        columns.push_str("{clock:<8|TIME} ");
    } else if g.has("-t") {
        columns.push_str("{time:<8.6|TIME} ");
    }
    if g.has("-C") {
        columns.push_str("{cpu:<3|CPU} ");
    }
    columns.push_str("{pid:<7|PID} {tid:<7|TID} {comm:<15|COMM} {event:<16|FUNC} ");
    columns.push_str(&probes[0].message);
    args.extend(["--trace-format".to_string(), columns]);
    let fallbacks = probes
        .iter()
        .filter_map(|p| p.fallback.clone())
        .map(|f| Fallback {
            pattern: with_filters(&f.pattern, &filters),
            instead: with_filters(&f.instead, &filters),
            why: f.why,
        })
        .collect();
    Ok(MultiRecipe {
        recipe: Recipe {
            args,
            command: g.command,
            notes: Vec::new(),
        },
        fallbacks,
    })
}

/// `pattern` with the flags' `filters` joined onto its own with `&&`.
fn with_filters(pattern: &str, filters: &[String]) -> String {
    if filters.is_empty() {
        return pattern.to_string();
    }
    let more = filters.join(" && ");
    match pattern.split_once(" if ") {
        Some((p, own)) => format!("{p} if ({own}) && {more}"),
        None => format!("{pattern} if {more}"),
    }
}
