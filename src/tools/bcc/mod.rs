//! bcc's multi-tools (funccount, funclatency, stackcount, trace, argdist) with bcc's own arguments, turned
//! into `rprof probe` arguments. Each is a parser of bcc's argument syntax, pure: what it cannot say in the probe
//! language is refused in one line ([`ToolError::Flag`]), never half-run.
mod argdist;
mod expr;
mod funcs;
mod spec;
mod trace;

use super::{Recipe, ToolError};

/// A multi-tool: its name, one line about it, bcc's output, and its translation.
pub struct MultiTool {
    pub name: &'static str,
    pub about: &'static str,
    pub columns: &'static str,
    /// The flags, one `FLAG  HELP` line each, for `--help`.
    pub usage: &'static str,
    translate: fn(&[String]) -> Result<MultiRecipe, ToolError>,
}

/// What a multi-tool runs, and the patterns to try instead where the first cannot be probed here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultiRecipe {
    pub recipe: Recipe,
    pub fallbacks: Vec<Fallback>,
}

/// A pattern of the recipe to replace with `instead` when `rprof probe -l` finds nothing for it (a USDT probe
/// of a library built without them, as Debian's glibc is), saying `why`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fallback {
    pub pattern: String,
    pub instead: String,
    pub why: String,
}

impl MultiTool {
    /// The recipe for bcc's arguments `words` (and `-- COMMAND`).
    pub fn recipe(&self, words: &[String]) -> Result<MultiRecipe, ToolError> {
        (self.translate)(words)
    }
}

/// The multi-tools, in `--list` order.
pub fn all() -> &'static [MultiTool] {
    &TOOLS
}

/// The multi-tool named `name`.
pub fn find(name: &str) -> Option<&'static MultiTool> {
    TOOLS.iter().find(|t| t.name == name)
}

static TOOLS: [MultiTool; 5] = [
    MultiTool {
        name: "funccount",
        about: "count calls of functions, tracepoints or USDT probes (bcc's funccount)",
        columns: "FUNC COUNT",
        usage: funcs::FUNCCOUNT_USAGE,
        translate: funcs::funccount,
    },
    MultiTool {
        name: "funclatency",
        about: "time functions, as a log2 histogram (bcc's funclatency)",
        columns: "a log2 histogram in nsecs (-u usecs, -m msecs), avg/total/count",
        usage: funcs::FUNCLATENCY_USAGE,
        translate: funcs::funclatency,
    },
    MultiTool {
        name: "stackcount",
        about: "count the stacks that call functions or reach tracepoints (bcc's stackcount)",
        columns: "stacks with counts; -f folded (`a;b;c COUNT`)",
        usage: funcs::STACKCOUNT_USAGE,
        translate: funcs::stackcount,
    },
    MultiTool {
        name: "trace",
        about: "print a line per event with values, as a printf format says (bcc's trace)",
        columns: "PID TID COMM FUNC then the formatted message",
        usage: trace::USAGE,
        translate: trace::trace,
    },
    MultiTool {
        name: "argdist",
        about:
            "count (-C) or histogram (-H) the values of an argument or return value (bcc's argdist)",
        columns: "COUNT per value (-C); a log2 histogram of the value (-H)",
        usage: argdist::USAGE,
        translate: argdist::argdist,
    },
];

/// bcc's arguments sorted: flags with their values, bare flags, positionals, and the command after `--`.
#[derive(Debug, Default)]
struct Given {
    flags: Vec<(String, Option<String>)>,
    positional: Vec<String>,
    command: Vec<String>,
}

impl Given {
    /// Whether `flag` was given.
    fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|(f, _)| f == flag)
    }

    /// The value of `flag`, if given (the last one).
    fn value(&self, flag: &str) -> Option<&str> {
        self.flags
            .iter()
            .rev()
            .find(|(f, _)| f == flag)
            .and_then(|(_, v)| v.as_deref())
    }

    /// Every value of a repeatable `flag`, in order.
    fn values(&self, flag: &str) -> Vec<&str> {
        self.flags
            .iter()
            .filter(|(f, _)| f == flag)
            .filter_map(|(_, v)| v.as_deref())
            .collect()
    }
}

/// Read `words`: `valued` flags take the next word (or the rest of their word, `-p185`), `bare` flags none
/// (and combine, `-KU`); `unsupported` flags are refused with their reason.
fn read(
    tool: &str,
    words: &[String],
    valued: &[&str],
    bare: &[&str],
    unsupported: &[(&str, &str)],
) -> Result<Given, ToolError> {
    let err = |reason: String| flag_error(tool, reason);
    let mut g = Given::default();
    let mut it = words.iter();
    while let Some(w) = it.next() {
        if w == "--" {
            g.command = it.by_ref().cloned().collect();
            break;
        }
        if !w.starts_with('-') || w.len() < 2 || w.parse::<f64>().is_ok() {
            g.positional.push(w.clone());
            continue;
        }
        let (flag, rest) = w.split_at(2);
        if let Some((_, why)) = unsupported.iter().find(|(f, _)| *f == flag) {
            return Err(err(format!("bcc's {flag} is not supported: {why}")));
        }
        if valued.contains(&flag) {
            let v = match rest {
                "" => it
                    .next()
                    .cloned()
                    .ok_or_else(|| err(format!("{flag} needs a value")))?,
                r => r.to_string(),
            };
            g.flags.push((flag.to_string(), Some(v)));
            continue;
        }
        for c in w[1..].chars() {
            let f = format!("-{c}");
            if !bare.contains(&f.as_str()) {
                return Err(err(format!("unknown flag `{f}` in `{w}`")));
            }
            g.flags.push((f, None));
        }
    }
    Ok(g)
}

/// A usage error of `tool`.
fn flag_error(tool: &str, reason: String) -> ToolError {
    ToolError::Flag {
        tool: tool.to_string(),
        reason,
    }
}

/// `-p PID`, `-i SECONDS`, `-d SECONDS` and `-T` as `rprof probe` arguments: each checked as a number.
fn common_args(tool: &str, g: &Given, map: &[(&str, &str)]) -> Result<Vec<String>, ToolError> {
    let mut args = Vec::new();
    for (bcc, rprof) in map {
        if !g.has(bcc) {
            continue;
        }
        args.push(rprof.to_string());
        if let Some(v) = g.value(bcc) {
            match v.parse::<f64>() {
                Ok(n) if n >= 0.0 => args.push(v.to_string()),
                _ => return Err(flag_error(tool, format!("{bcc} {v}: not a number"))),
            }
        }
    }
    Ok(args)
}

#[cfg(test)]
mod tests;
