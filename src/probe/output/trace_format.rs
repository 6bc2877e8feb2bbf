//! `--trace-format`: `--trace` lines in a layout of the user's, as bcc's tools print their columns:
//! `'{time:<9} {comm:<16} {pid:>7} {ret:>4|RET} {filename|PATH}'`. Each `{NAME[:SPEC][|HEADER]}` is a value of
//! the call; the header line names each column by HEADER (or NAME in capitals), padded like its values.
use crate::probe::analysis::Call;
use crate::probe::spec::fetch::Fetch;
use crate::probe::value::Value;

/// The names a format may use besides the probes' own values.
pub const SPECIAL: [&str; 7] = ["time", "clock", "dur", "dur_us", "dur_ms", "event", "ctx"];

/// A parsed `--trace-format`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceFormat {
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Column(Column),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Column {
    name: String,
    header: String,
    align: Align,
    width: usize,
    precision: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Align {
    Left,
    Right,
}

impl TraceFormat {
    /// Parse `text`: literal text, `{{`/`}}` for braces, and `{NAME[:SPEC][|HEADER]}` columns, where SPEC is
    /// `<W` or `>W` (left or right in W characters) and `.P` (P decimals, for `time`, `dur_us`, `dur_ms`).
    pub fn parse(text: &str) -> Result<TraceFormat, String> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    lit.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    lit.push('}');
                }
                '{' => {
                    let inner: String = chars.by_ref().take_while(|&c| c != '}').collect();
                    if !lit.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut lit)));
                    }
                    parts.push(Part::Column(Column::parse(&inner)?));
                }
                '}' => return Err("a `}` without its `{` (write `}}` for a brace)".into()),
                c => lit.push(c),
            }
        }
        if !lit.is_empty() {
            parts.push(Part::Text(lit));
        }
        Ok(TraceFormat { parts })
    }

    /// The value names the format uses (`ctx.pid` as `ctx.pid`; each of a column's alternatives).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.parts
            .iter()
            .filter_map(|p| match p {
                Part::Column(c) => Some(c.name.split(',')),
                Part::Text(_) => None,
            })
            .flatten()
    }

    /// The first name that is neither special, nor the process context, nor one of `labels` (the probes'
    /// values), if any.
    pub fn unknown<'a>(&'a self, labels: &[&str]) -> Option<&'a str> {
        self.names().find(|n| {
            let base = n.strip_prefix("ctx.").unwrap_or(n);
            !(SPECIAL.contains(n)
                || n.parse::<i64>().is_ok()
                || crate::probe::spec::filters::is_context(base)
                || labels.contains(n)
                || labels.contains(&format!("{n}[0]").as_str()))
        })
    }

    /// The header line: each column's header padded like its values, the literal text kept.
    pub fn header(&self) -> String {
        let mut s = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => s.push_str(t),
                Part::Column(c) => s.push_str(&c.pad(&c.header)),
            }
        }
        s.trim_end().to_string()
    }

    /// One call's line. `time` is the call's time (ns since the first event); `event` its probe's name;
    /// `then`, a call joined to it (`--trace-join`) and its fetches: a value the call lacks is taken from it.
    pub fn line(
        &self,
        call: &Call,
        fetches: &[Fetch],
        event: &str,
        then: Option<(&Call, &[Fetch])>,
    ) -> String {
        let mut s = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => s.push_str(t),
                Part::Column(c) => s.push_str(&c.pad(&c.value(call, fetches, event, then))),
            }
        }
        s.trim_end().to_string()
    }
}

impl Column {
    fn parse(inner: &str) -> Result<Column, String> {
        let (spec, header) = match inner.split_once('|') {
            Some((s, h)) => (s, Some(h.to_string())),
            None => (inner, None),
        };
        let (name, fmt) = match spec.split_once(':') {
            Some((n, f)) => (n.trim(), f.trim()),
            None => (spec.trim(), ""),
        };
        let ident = |s: &str| {
            s.split(',').all(|n| {
                !n.is_empty()
                    && n.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_.+->".contains(c))
            })
        };
        if !ident(name) {
            return Err(format!(
                "`{{{inner}}}` does not name a value (write {{NAME}}, {{NAME:<16}}, {{NAME:>7|HEADER}})"
            ));
        }
        let bad =
            || format!("`{fmt}` in `{{{inner}}}` is no column spec (use <W, >W, .P, or >W.P)");
        let (align, rest) = match fmt.chars().next() {
            Some('<') => (Some(Align::Left), &fmt[1..]),
            Some('>') => (Some(Align::Right), &fmt[1..]),
            _ => (None, fmt),
        };
        let (width, precision) = match rest.split_once('.') {
            Some((w, p)) => (w, Some(p.parse::<usize>().map_err(|_| bad())?)),
            None => (rest, None),
        };
        let width = match width {
            "" => 0,
            w => w.parse::<usize>().map_err(|_| bad())?,
        };
        let numeric = matches!(name, "time" | "dur_us" | "dur_ms" | "pid" | "tid" | "cpu");
        Ok(Column {
            name: name.to_string(),
            header: header.unwrap_or_else(|| default_header(name)),
            align: align.unwrap_or(if numeric { Align::Right } else { Align::Left }),
            width,
            precision,
        })
    }

    fn pad(&self, text: &str) -> String {
        match self.align {
            Align::Left => format!("{text:<w$}", w = self.width),
            Align::Right => format!("{text:>w$}", w = self.width),
        }
    }

    /// The column's text for one call: `-` where the value is missing (an event in an interrupt has no
    /// process; a value not fetched for this probe).
    fn value(
        &self,
        call: &Call,
        fetches: &[Fetch],
        event: &str,
        then: Option<(&Call, &[Fetch])>,
    ) -> String {
        let text = self.name.split(',').find_map(|n| {
            self.one(n, call, fetches, event)
                .or_else(|| then.and_then(|(c, f)| self.one(n, c, f, event)))
        });
        text.unwrap_or_else(|| "-".into())
    }

    /// The text of value `name` (one of the column's alternatives), if the call has it.
    fn one(&self, name: &str, call: &Call, fetches: &[Fetch], event: &str) -> Option<String> {
        let fixed =
            |v: f64, default: usize| format!("{v:.p$}", p = self.precision.unwrap_or(default));
        let dur = call.dur.map(|(d, _)| d);
        match name {
            "time" => Some(fixed(call.time as f64 / 1e9, 6)),
            "clock" => Some(super::clock()),
            "dur" => dur.map(super::human_ns),
            "dur_us" => dur.map(|d| fixed(d as f64 / 1e3, 2)),
            "dur_ms" => dur.map(|d| fixed(d as f64 / 1e6, 2)),
            "event" => Some(event.to_string()),
            n if n.parse::<i64>().is_ok() => Some(n.to_string()),
            name => match name.strip_prefix("ctx.") {
                Some(ctx) => call.ctx.value(ctx).map(|v| v.word()),
                None => fetched(call, fetches, name)
                    .or_else(|| call.ctx.value(name))
                    .map(|v| v.word()),
            },
        }
    }
}

/// A column's header when the format gives none: a plain name in capitals, as bcc's are (`comm` heads
/// `COMM`); a value through pointers as written (`req->tv_sec`, `arg0+8`), where case is part of the name.
fn default_header(name: &str) -> String {
    let first = name.split(',').next().unwrap_or(name);
    let first = first.trim_start_matches("ctx.");
    match first.contains("->") || first.contains('+') {
        true => first.to_string(),
        false => first.to_uppercase(),
    }
}

/// The call's value labelled `name`, when it has one; a `:str[N]` array (`name[0]`, `name[1]`...) as its
/// strings joined by spaces up to the first missing or empty one (bcc's ARGS).
fn fetched(call: &Call, fetches: &[Fetch], name: &str) -> Option<Value> {
    if let Some(i) = fetches.iter().position(|f| f.label == name) {
        return call.values.get(i).cloned().flatten();
    }
    let mut words = Vec::new();
    for n in 0.. {
        let label = format!("{name}[{n}]");
        let Some(i) = fetches.iter().position(|f| f.label == label) else {
            break;
        };
        match call.values.get(i).cloned().flatten() {
            Some(v) if !v.plain().is_empty() => words.push(v.plain()),
            _ => break,
        }
    }
    (!words.is_empty()).then(|| Value::Str(words.join(" ").into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::analysis::Ctx;
    use crate::probe::target::TargetId;

    /// Check columns, headers, alignment, escapes, and the process context beside an event's own `pid`.
    #[test]
    fn columns_and_header() {
        let f =
            TraceFormat::parse("{time:<9.3} {comm:<6} {ctx.pid:>5} {pid:>5|TPID} {ret|R} {{x}}")
                .unwrap();
        assert_eq!(f.header(), "TIME      COMM     PID  TPID R {x}");
        // A value through pointers heads its column as written (C's members have case), literal text kept.
        let t = TraceFormat::parse("{req->tv_sec} sec {arg0->Len:>8}").unwrap();
        assert_eq!(t.header(), "req->tv_sec sec arg0->Len");
        let fetches = vec![
            Fetch::field(
                "pid",
                "pid",
                crate::probe::value::ValueKind::Int {
                    size: 4,
                    signed: true,
                },
                false,
            ),
            Fetch::field(
                "ret",
                "ret",
                crate::probe::value::ValueKind::Int {
                    size: 8,
                    signed: true,
                },
                true,
            ),
        ];
        let call = Call {
            values: vec![Some(Value::Int(99)), None],
            ctx: Ctx {
                pid: Some(7),
                tid: Some(7),
                comm: Some("sh".into()),
                cpu: Some(0),
                ppid: Some(1),
            },
            ..Call::entry(TargetId::new(0), 7, 1_500_000_000)
        };
        assert_eq!(
            f.line(&call, &fetches, "syscall:kill", None),
            "1.500     sh         7    99 - {x}"
        );
        assert_eq!(f.unknown(&["pid", "ret"]), None);
        assert_eq!(f.unknown(&["pid"]), Some("ret"));
        assert!(TraceFormat::parse("{a b}").is_err());
        assert!(TraceFormat::parse("{x:<z}").is_err());
        assert!(TraceFormat::parse("a } b").is_err());
    }

    /// Check a `:str[N]` array as one column: its strings joined up to the first empty one, by a name with `+`.
    #[test]
    fn string_array_column() {
        let f = TraceFormat::parse("{arg0->0:>2} {arg0+8|ARGS}").unwrap();
        let s = |label: &str| Fetch::user_string(label, "x", None);
        let fetches = vec![
            Fetch::field(
                "arg0->0",
                "x",
                crate::probe::value::ValueKind::Int {
                    size: 8,
                    signed: false,
                },
                false,
            ),
            s("arg0+8[0]"),
            s("arg0+8[1]"),
            s("arg0+8[2]"),
        ];
        let str_of = |t: &str| Some(Value::Str(t.into()));
        let call = Call {
            values: vec![Some(Value::Int(2)), str_of("ls"), str_of("-l"), str_of("")],
            ..Call::entry(TargetId::new(0), 7, 0)
        };
        assert_eq!(f.unknown(&["arg0->0", "arg0+8[0]"]), None);
        assert_eq!(f.line(&call, &fetches, "_dl_start", None), " 2 ls -l");
        // Joined to an exec's line: the path where the argv is missing, a number as itself.
        let g =
            TraceFormat::parse("{ppid:>3} {0:>3|RET} {arg0+8,filename|ARGS} {arg0+8} sec").unwrap();
        assert_eq!(g.header(), "PPID RET ARGS arg0+8 sec");
        let exec = Call::entry(TargetId::new(1), 7, 0);
        let path = vec![Fetch::user_string("filename", "x", None)];
        let exec = Call {
            values: vec![str_of("/bin/ls")],
            ..exec
        };
        assert_eq!(g.line(&exec, &path, "e", None), "  -   0 /bin/ls - sec");
        assert_eq!(
            g.line(&exec, &path, "e", Some((&call, &fetches))),
            "  -   0 ls -l ls -l sec"
        );
    }
}
