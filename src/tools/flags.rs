//! A tool's flags, as a user gives them, turned into the `rprof probe` arguments they stand for.
use super::def::{Block, Tool};
use super::ToolError;

/// What a tool runs: `rprof probe ARGS [-- COMMAND]`, and the notes its header gives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recipe {
    pub args: Vec<String>,
    /// The command to launch and follow (after `--`), if any.
    pub command: Vec<String>,
    /// What this kernel cannot give (columns left out, values not shown).
    pub notes: Vec<String>,
}

/// The flags given: the tool's own (with values), the common ones, the positional interval and count.
#[derive(Default)]
struct Given {
    own: Vec<(String, Option<String>)>,
    pid: Option<String>,
    duration: Option<String>,
    timestamps: bool,
    interval: Option<String>,
    count: Option<String>,
    command: Vec<String>,
}

impl Tool {
    /// The `rprof probe` arguments for `words`, the flags given to the tool (bcc's: `-p PID`, `-x`, `1 10`,
    /// `-- CMD`).
    pub fn recipe(&self, words: &[String]) -> Result<Recipe, ToolError> {
        if let Some(reason) = &self.todo {
            return Err(ToolError::Todo {
                tool: self.name.clone(),
                reason: reason.clone(),
            });
        }
        let given = self.read(words)?;
        let mut b = self.base.clone();
        for f in &self.flags {
            if let Some((_, value)) = given.own.iter().find(|(g, _)| *g == f.flag) {
                let var = f.value.as_deref().zip(value.as_deref());
                apply(&mut b, &f.block, var);
            }
        }
        for (flags, block) in &self.combos {
            if flags.iter().all(|f| given.own.iter().any(|(g, _)| g == f)) {
                apply(&mut b, block, None);
            }
        }
        let mut args: Vec<String> = Vec::new();
        let filter = (!b.filters.is_empty()).then(|| {
            let parts: Vec<String> = b.filters.iter().map(|f| format!("({f})")).collect();
            parts.join(" && ")
        });
        for p in b.probes.iter().flatten() {
            args.push(match (&filter, p.split_once(" if ")) {
                (None, _) => p.clone(),
                (Some(f), None) => format!("{p} if {f}"),
                (Some(f), Some((pat, own))) => format!("{pat} if ({own}) && {f}"),
            });
        }
        // A `--pair` names its events in `args:`: the filters go where it says `$AND_FILTERS`.
        let and_filters = filter
            .as_ref()
            .map_or(String::new(), |f| format!(" && {f}"));
        let with_filters = |a: &String| a.replace("$AND_FILTERS", &and_filters);
        args.extend(b.args.iter().flatten().map(with_filters));
        args.extend(b.more_args.iter().map(with_filters));
        if let Some(p) = given.pid {
            args.extend(["-p".to_string(), p]);
        }
        let mut trace = b.trace.clone();
        if given.timestamps {
            match trace.as_mut() {
                Some(t) => t.insert_str(0, "{clock:<8|TIME} "),
                None => args.push("-T".into()),
            }
        }
        if let Some(i) = &given.interval {
            args.extend(["-i".to_string(), i.clone()]);
        }
        let duration = match (&given.interval, &given.count) {
            (Some(i), Some(c)) => Some(seconds_times(i, c)),
            _ => given.duration,
        };
        if let Some(d) = duration {
            args.extend(["-d".to_string(), d]);
        }
        if let Some(t) = trace {
            args.extend(["--trace-format".to_string(), t]);
        }
        Ok(Recipe {
            args,
            command: given.command,
            notes: b.cannot,
        })
    }

    /// Sort `words` into the tool's flags, the common ones, positionals and the command.
    fn read(&self, words: &[String]) -> Result<Given, ToolError> {
        let err = |reason: String| ToolError::Flag {
            tool: self.name.clone(),
            reason,
        };
        let common = |f: &str| self.common.iter().any(|c| c == f);
        let mut g = Given::default();
        let mut it = words.iter();
        while let Some(w) = it.next() {
            let mut value = |what: &str| -> Result<String, ToolError> {
                let v = it
                    .next()
                    .ok_or_else(|| err(format!("{w} needs a value ({what})")))?;
                checked(v).map_err(|reason| err(format!("{w} {v}: {reason}")))
            };
            match w.as_str() {
                "--" => {
                    g.command = it.by_ref().cloned().collect();
                }
                f if self.flag(f).is_some() => {
                    let def = self.flag(f).expect("checked");
                    let v = match &def.value {
                        Some(name) => Some(value(name)?),
                        None => None,
                    };
                    g.own.push((f.to_string(), v));
                }
                "-p" if common("-p") => g.pid = Some(number(&value("PID")?, &err)?),
                "-d" if common("-d") => g.duration = Some(number(&value("SECONDS")?, &err)?),
                "-T" if common("-T") => g.timestamps = true,
                n if common("interval") && !n.starts_with('-') => {
                    let n = number(n, &err)?;
                    match (&g.interval, &g.count) {
                        (None, _) => g.interval = Some(n),
                        (Some(_), None) => g.count = Some(n),
                        _ => {
                            return Err(err(format!(
                                "`{n}`: only [interval [count]] are positional"
                            )))
                        }
                    }
                }
                other => return Err(err(format!("unknown flag or argument `{other}`"))),
            }
        }
        Ok(g)
    }
}

/// Apply a flag's (or combination's) block, `$NAME` replaced by the flag's value (`var`: name and value):
/// probes, args and the trace format replace; filters and notes add.
fn apply(b: &mut Block, flag: &Block, var: Option<(&str, &str)>) {
    let sub = |s: &str, v: &str| match var {
        Some((name, _)) => s.replace(&format!("${name}"), v),
        None => s.to_string(),
    };
    let whole = var.map_or("", |(_, v)| v);
    if let Some(p) = &flag.probes {
        b.probes = Some(p.iter().map(|p| sub(p, whole)).collect());
    }
    if let Some(a) = &flag.args {
        b.args = Some(a.iter().map(|a| sub(a, whole)).collect());
    }
    b.more_args
        .extend(flag.more_args.iter().map(|a| sub(a, whole)));
    for f in &flag.filters {
        // A list of values (`-P 80,443`) is any of them.
        let alts: Vec<String> = whole.split(',').map(|v| sub(f, v)).collect();
        b.filters.push(match alts.len() {
            1 => alts.into_iter().next().unwrap_or_default(),
            _ => alts
                .iter()
                .map(|a| format!("({a})"))
                .collect::<Vec<_>>()
                .join(" || "),
        });
    }
    if let Some(t) = &flag.trace {
        b.trace = Some(t.clone());
    }
    b.cannot.extend(flag.cannot.iter().cloned());
}

/// A flag's value, refused where it could change a filter's meaning (quotes, spaces, operators).
fn checked(v: &str) -> Result<String, String> {
    let ok = !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.,:+-/".contains(c));
    match ok {
        true => Ok(v.to_string()),
        false => Err("use letters, digits and _ . , : + - / only".into()),
    }
}

/// A number (of seconds, a PID), as given.
fn number(v: &str, err: &dyn Fn(String) -> ToolError) -> Result<String, ToolError> {
    match v.parse::<f64>() {
        Ok(n) if n >= 0.0 => Ok(v.to_string()),
        _ => Err(err(format!("`{v}` is not a number"))),
    }
}

/// `interval` × `count` seconds, as text.
fn seconds_times(interval: &str, count: &str) -> String {
    let i: f64 = interval.parse().unwrap_or(0.0);
    let c: f64 = count.parse().unwrap_or(0.0);
    format!("{}", i * c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool() -> Tool {
        Tool::parse(
            "name: t\nabout: a\ncommon: -p -d -T interval\nprobe: syscall:openat(filename:str) ret\n\
             trace: {pid} {filename}\nflag -x: failed\n  filter: ret < 0\nflag -P PORT: port\n  \
             filter: dport == $PORT\nflag -L: timed\n  args: --hist\nwhen -x -L:\n  +args: --csv\n\
             cannot: PPID\n",
        )
        .unwrap()
    }

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    /// Check flags, filters, a list of values, the common flags and the command.
    #[test]
    fn recipe_of_flags() {
        let r = tool()
            .recipe(&words("-x -P 80,443 -p 42 -T -- ls -l"))
            .unwrap();
        assert_eq!(
            r.args,
            words("x -p 42 --trace-format x")
                .into_iter()
                .enumerate()
                .map(|(i, w)| match i {
                    0 => "syscall:openat(filename:str) ret if (ret < 0) && ((dport == 80) || (dport == 443))"
                        .to_string(),
                    4 => "{clock:<8|TIME} {pid} {filename}".to_string(),
                    _ => w,
                })
                .collect::<Vec<_>>()
        );
        assert_eq!(r.command, ["ls", "-l"]);
        assert_eq!(r.notes, ["PPID"]);
        let r = tool().recipe(&words("-x -L 1 5")).unwrap();
        assert!(r.args.ends_with(
            &words("--hist --csv -i 1 -d 5 --trace-format")
                .into_iter()
                .chain(["{pid} {filename}".to_string()])
                .collect::<Vec<_>>()
        ));
        assert!(tool().recipe(&words("-q")).is_err());
        assert!(tool().recipe(&words("-P 80\"")).is_err());
        assert!(tool().recipe(&words("1 2 3")).is_err());
    }
}
