//! perf's command lines as perf parses them. Before clap reads the arguments, each flag that perf's command of
//! the same name takes and rprof's does not get rprof's answer: the same meaning under rprof's spelling, no
//! effect (said on standard error), or a one-line refusal that says rprof's way (exit status 2). Flags that
//! rprof defines keep rprof's meaning; the few that perf spells the same with another meaning (`record -d`,
//! `report -n`, `probe -d`) are told apart by their value.
use clap::CommandFactory;
use std::ffi::OsString;

/// Whether a perf flag takes a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    Flag,
    /// A value in the next argument or after `=` (or right after a short flag).
    Required,
    /// A value only after `=` (or right after a short flag).
    Optional,
}

/// What rprof does with a perf flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The flag has no effect in rprof, for the reason given; the run goes on.
    Ignored(&'static str),
    /// rprof does not do this; the text says what it does instead.
    Refused(&'static str),
    /// The same meaning under rprof's spelling (the value, if any, follows it).
    Same(&'static str),
}

/// One of perf's flags.
#[derive(Clone, Copy, Debug)]
pub struct PerfFlag {
    pub short: Option<char>,
    pub long: &'static str,
    pub value: Value,
    pub answer: Answer,
}

/// A refused perf flag: the message to print (exit status 2).
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal(pub String);

/// How rprof's own flags of a subcommand parse: which take a value.
struct Own {
    cmd: clap::Command,
}

impl Own {
    fn short(&self, c: char) -> Option<bool> {
        let arg = self.cmd.get_arguments().find(|a| {
            a.get_short() == Some(c)
                || a.get_short_and_visible_aliases()
                    .is_some_and(|s| s.contains(&c))
        });
        arg.map(takes_value).or((c == 'h').then_some(false))
    }

    fn long(&self, name: &str) -> Option<bool> {
        let arg = self.cmd.get_arguments().find(|a| {
            a.get_long() == Some(name) || a.get_all_aliases().is_some_and(|v| v.contains(&name))
        });
        arg.map(takes_value).or((name == "help").then_some(false))
    }
}

/// Whether a clap argument takes a value in the next argument (flags and optional values do not).
fn takes_value(a: &clap::Arg) -> bool {
    a.get_action().takes_values() && a.get_num_args().is_none_or(|n| n.min_values() > 0)
}

/// The arguments with perf's flags answered: the list clap is to parse, and the notes to print for flags
/// that have no effect.
pub fn rewrite(args: Vec<OsString>) -> Result<(Vec<OsString>, Vec<String>), Refusal> {
    let Some(sub) = args.get(1).and_then(|s| s.to_str()).map(str::to_string) else {
        return Ok((args, Vec::new()));
    };
    let table = super::perf_table::of(&sub);
    let Some(cmd) = super::Cli::command().find_subcommand(&sub).cloned() else {
        return Ok((args, Vec::new()));
    };
    let own = Own { cmd };
    let mut out: Vec<OsString> = args[..2].to_vec();
    let mut notes = Vec::new();
    let mut rest = args.into_iter().skip(2).peekable();
    while let Some(arg) = rest.next() {
        let Some(text) = arg.to_str().map(str::to_string) else {
            out.push(arg);
            continue;
        };
        if text == "--" {
            out.push(arg);
            out.extend(rest);
            break;
        }
        let next = rest.peek().and_then(|n| n.to_str()).map(str::to_string);
        if let Some(long) = text.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            if let Some(message) = shadowed(
                &sub,
                None,
                Some(name),
                inline.as_deref().or(next.as_deref()),
            ) {
                return Err(refusal(&sub, &text, message));
            }
            match own.long(name) {
                Some(takes) => {
                    out.push(arg);
                    if takes && inline.is_none() {
                        out.extend(rest.next());
                    }
                }
                None => match table.iter().find(|f| f.long == name) {
                    Some(flag) => {
                        let value = match (flag.value, inline) {
                            (Value::Required, None) => {
                                rest.next().map(|v| v.to_string_lossy().into_owned())
                            }
                            (_, v) => v,
                        };
                        answer(
                            &sub,
                            flag,
                            &format!("--{name}"),
                            value,
                            &mut out,
                            &mut notes,
                        )?;
                    }
                    None => out.push(arg),
                },
            }
            continue;
        }
        match text
            .strip_prefix('-')
            .filter(|s| !s.is_empty() && !s.starts_with(|c: char| c.is_ascii_digit()))
        {
            Some(cluster) => {
                let command_follows = cluster_flags(
                    &sub, &own, table, cluster, &mut rest, next, &mut out, &mut notes,
                )?;
                if command_follows {
                    out.extend(rest);
                    break;
                }
            }
            // A positional: `record`'s command starts here (perf's `record ./test args`).
            None if sub == "record" => {
                out.push("--".into());
                out.push(arg);
                out.extend(rest);
                break;
            }
            None => out.push(arg),
        }
    }
    Ok((out, notes))
}

/// A cluster of short flags (`-aR`, `-g`, `-F99`): rprof's own stay, perf's get their answer. Returns
/// whether the rest of the arguments are a command (never, today; kept for symmetry with `--`).
#[allow(clippy::too_many_arguments)]
fn cluster_flags(
    sub: &str,
    own: &Own,
    table: &[PerfFlag],
    cluster: &str,
    rest: &mut std::iter::Peekable<impl Iterator<Item = OsString>>,
    next: Option<String>,
    out: &mut Vec<OsString>,
    notes: &mut Vec<String>,
) -> Result<bool, Refusal> {
    let mut kept = String::new();
    for (at, c) in cluster.char_indices() {
        let tail = &cluster[at + c.len_utf8()..];
        let value = (!tail.is_empty()).then_some(tail).or(next.as_deref());
        if let Some(message) = shadowed(sub, Some(c), None, value) {
            return Err(refusal(sub, &format!("-{c}"), message));
        }
        match own.short(c) {
            Some(true) => {
                // The rest of the cluster, or the next argument, is its value.
                kept.push_str(&cluster[at..]);
                out.push(format!("-{kept}").into());
                if tail.is_empty() {
                    out.extend(rest.next());
                }
                return Ok(false);
            }
            Some(false) => kept.push(c),
            None => match table.iter().find(|f| f.short == Some(c)) {
                Some(flag) => {
                    let value = match (flag.value, tail.is_empty()) {
                        (Value::Flag, _) => None,
                        (_, false) => Some(tail.to_string()),
                        (Value::Required, true) => {
                            rest.next().map(|v| v.to_string_lossy().into_owned())
                        }
                        (Value::Optional, true) => None,
                    };
                    answer(sub, flag, &format!("-{c}"), value, out, notes)?;
                    if flag.value != Value::Flag && !tail.is_empty() {
                        break;
                    }
                }
                None => kept.push(c),
            },
        }
    }
    if !kept.is_empty() {
        out.push(format!("-{kept}").into());
    }
    Ok(false)
}

/// Apply a perf flag's answer.
fn answer(
    sub: &str,
    flag: &PerfFlag,
    spelled: &str,
    value: Option<String>,
    out: &mut Vec<OsString>,
    notes: &mut Vec<String>,
) -> Result<(), Refusal> {
    match flag.answer {
        Answer::Same(ours) => {
            out.push(ours.into());
            out.extend(value.map(OsString::from));
            Ok(())
        }
        Answer::Ignored(why) => {
            notes.push(format!(
                "rprof {sub}: note: perf's {spelled} has no effect here: {why}"
            ));
            Ok(())
        }
        Answer::Refused(why) => Err(refusal(sub, spelled, why)),
    }
}

fn refusal(sub: &str, spelled: &str, why: &str) -> Refusal {
    Refusal(format!(
        "rprof {sub}: perf's {spelled} is not rprof's: {why}"
    ))
}

/// perf's meaning of a flag that rprof spells the same with another meaning, told apart by the value: the
/// message when the value is not one rprof's flag takes.
fn shadowed(
    sub: &str,
    short: Option<char>,
    long: Option<&str>,
    value: Option<&str>,
) -> Option<&'static str> {
    let number = value.is_some_and(|v| v.trim().parse::<f64>().is_ok());
    match (sub, short, long) {
        // perf's `-d` takes no value: a flag or nothing follows (`-d soon` is rprof's -d with a bad value).
        ("record", Some('d'), _) if value.is_none_or(|v| v.starts_with('-')) => Some(
            "rprof's -d is the duration in seconds (-d 10); perf's -d (--data, sample addresses) needs a hardware PMU",
        ),
        ("report" | "annotate", Some('n'), _) if value.is_none_or(|v| v.parse::<usize>().is_err()) => Some(
            "rprof's -n N is the number of rows (report) or functions (annotate); perf's Samples column is \
             rprof report --show-nr-samples",
        ),
        ("annotate", _, Some("show-nr-samples")) => {
            Some("rprof annotate prints no sample counts: the shares are of the samples kept; rprof report --show-nr-samples prints them by row")
        }
        ("probe", Some('d'), _) | ("probe", _, Some("duration")) if !number => {
            Some(super::perf_table::PERSISTENT_PROBES)
        }
        _ => None,
    }
}
