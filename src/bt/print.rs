//! Output exactly as bpftrace 0.17 prints it: maps (`print(@x, top, div)` and at exit), histograms, `stats`,
//! values (`print(expr)`), messages (`printf`, `time`, `join`, `cat`, `system`), in text and `-f json`.
//!
//! Facts from bpftrace v0.17.0 (`src/output.cpp`, `BPFtrace::print_map*` in `src/bpftrace.cpp`, `main.cpp`),
//! each checked on this machine's bpftrace 0.17 (tests/bt_output.rs holds the outputs):
//! - at exit bpftrace writes `\n\n` to stdout ([`EXIT_PREAMBLE`], in json mode too), then every map in name
//!   order, an empty map as an empty line (text) or nothing (json);
//! - `count`, `sum`, `min`, `max` and integer maps are sorted by value, ascending; other maps by key (each key
//!   argument from the last to the first, stably: integers as unsigned, strings bytewise; other kinds not at
//!   all); `hist`/`lhist` by their total count and `avg`/`stats` by their average, from the order of the keys'
//!   bytes (little-endian integers). Where bpftrace's order is unspecified (ties after its unstable sorts, hash
//!   order), rprof keeps key order, then first insertion;
//! - a text map is its entries joined by `\n` (by nothing when the values are stacks, symbols or inet
//!   addresses), then `\n`; `stats`/`avg` maps end with a second `\n`; a histogram entry is `@h[k]: \n`, its
//!   bars, and the `\n` separator gives an empty line between histograms;
//! - `print(@x, top, div)`: only the last `top` entries; values divided by `div` (histogram counts but not their
//!   bars; not `lhist` nor `stats`, and `stats` ignores `top` too).

use super::maps::{min_shown, sum_type, Cell, Key, Linear, Map, MapKind};
use super::value::{json_escape, Int, Value};
use std::collections::BTreeMap;

/// What bpftrace writes to stdout after the run, before the maps (even in json mode, even with `-o`).
pub const EXIT_PREAMBLE: &str = "\n\n";

/// `-f text` (the default) or `-f json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Text,
    Json,
}

/// The kinds of message bpftrace's json output names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageType {
    Printf,
    Time,
    Cat,
    Join,
    Syscall,
}

impl MessageType {
    fn name(self) -> &'static str {
        match self {
            MessageType::Printf => "printf",
            MessageType::Time => "time",
            MessageType::Cat => "cat",
            MessageType::Join => "join",
            MessageType::Syscall => "syscall",
        }
    }
}

/// bpftrace's output (`TextOutput` / `JsonOutput`): every function returns the bytes to write.
#[derive(Clone, Copy, Debug)]
pub struct Printer {
    pub format: OutputFormat,
}

const BAR_WIDTH: usize = 52;

impl Printer {
    pub fn new(format: OutputFormat) -> Printer {
        Printer { format }
    }

    fn json(&self) -> bool {
        self.format == OutputFormat::Json
    }

    /// `Attaching N probes...`.
    pub fn attached_probes(&self, n: u64) -> String {
        if self.json() {
            format!("{{\"type\": \"attached_probes\", \"data\": {{\"probes\": {n}}}}}\n")
        } else if n == 1 {
            "Attaching 1 probe...\n".to_string()
        } else {
            format!("Attaching {n} probes...\n")
        }
    }

    /// `Lost N events`.
    pub fn lost_events(&self, n: u64) -> String {
        if self.json() {
            format!("{{\"type\": \"lost_events\", \"data\": {{\"events\": {n}}}}}\n")
        } else {
            format!("Lost {n} events\n")
        }
    }

    /// A message: printf's, time's and system's text as it is, join's with a newline; in json one object.
    pub fn message(&self, ty: MessageType, text: &str, newline: bool) -> String {
        if self.json() {
            format!(
                "{{\"type\": \"{}\", \"data\": \"{}\"}}\n",
                ty.name(),
                json_escape(text)
            )
        } else if newline {
            format!("{text}\n")
        } else {
            text.to_string()
        }
    }

    /// `print(expr)` of a value that is not a map.
    pub fn value(&self, v: &Value) -> String {
        if self.json() {
            format!("{{\"type\": \"value\", \"data\": {}}}\n", v.json())
        } else {
            format!("{}\n", v.text())
        }
    }

    /// Every map as bpftrace prints them at exit (after [`EXIT_PREAMBLE`]): in name order.
    pub fn maps_at_exit<'a>(&self, maps: impl IntoIterator<Item = &'a Map>) -> String {
        let mut all: Vec<&Map> = maps.into_iter().collect();
        all.sort_by(|a, b| a.name().as_bytes().cmp(b.name().as_bytes()));
        all.into_iter().map(|m| self.map(m, 0, 0)).collect()
    }

    /// `print(@x, top, div)` (`top` 0: all; `div` 0: 1).
    pub fn map(&self, map: &Map, top: u32, div: u32) -> String {
        let div = div.max(1);
        let (ty, elems) = match map.kind() {
            MapKind::Hist | MapKind::Lhist(_) => ("hist", self.hist_elems(map, top, div)),
            MapKind::Avg | MapKind::Stats => ("stats", self.stats_elems(map, top, div)),
            _ => ("map", self.scalar_elems(map, top, div)),
        };
        if self.json() {
            if elems.is_empty() {
                return String::new();
            }
            let (open, close) = if map.keyed() { ("{", "}") } else { ("", "") };
            let name = json_escape(map.name());
            return format!(
                "{{\"type\": \"{ty}\", \"data\": {{\"{name}\": {open}{}{close}}}}}\n",
                elems.join(", ")
            );
        }
        let delim = if no_delimiter(map) { "" } else { "\n" };
        let end = if ty == "stats" { "\n\n" } else { "\n" };
        format!("{}{end}", elems.join(delim))
    }

    /// `@x[k]: ` (text) or `"k": ` (json) before a value.
    fn elem(&self, map: &Map, key: &Key, value: String) -> String {
        if self.json() {
            if key.is_empty() {
                return value;
            }
            let args: Vec<String> = key.iter().map(Value::key_text).collect();
            return format!("\"{}\": {value}", json_escape(&args.join(",")));
        }
        let mut out = map.name().to_string();
        if !key.is_empty() {
            let args: Vec<String> = key.iter().map(Value::key_text).collect();
            out.push_str(&format!("[{}]", args.join(", ")));
        }
        out.push_str(": ");
        if matches!(map.kind(), MapKind::Hist | MapKind::Lhist(_)) {
            out.push('\n');
        }
        out + &value
    }

    fn scalar_elems(&self, map: &Map, top: u32, div: u32) -> Vec<String> {
        let rows = sorted_scalars(map);
        let skip = skip_for_top(rows.len(), top);
        rows.into_iter()
            .skip(skip)
            .map(|(key, v)| self.elem(map, key, self.scalar_text(&v, div)))
            .collect()
    }

    fn scalar_text(&self, v: &Value, div: u32) -> String {
        match v {
            Value::Int(i) => divided(*i, div),
            v if self.json() => v.json(),
            v => v.text(),
        }
    }

    fn stats_elems(&self, map: &Map, top: u32, div: u32) -> Vec<String> {
        let mut rows: Vec<(&Key, i64, i64, i64)> = by_key_bytes(map)
            .into_iter()
            .map(|(key, b)| {
                let count = b.get(&0).copied().unwrap_or(0);
                let total = b.get(&1).copied().unwrap_or(0);
                let average = if count != 0 {
                    total.wrapping_div(count)
                } else {
                    0
                };
                (key, count, average, total)
            })
            .collect();
        rows.sort_by_key(|r| r.2);
        let stats = map.kind() == MapKind::Stats;
        let skip = if stats {
            0
        } else {
            skip_for_top(rows.len(), top)
        };
        rows.into_iter()
            .skip(skip)
            .map(|(key, count, average, total)| {
                let text = match (stats, self.json()) {
                    (true, false) => format!("count {count}, average {average}, total {total}"),
                    (true, true) => format!(
                        "{{\"count\": {count}, \"average\": {average}, \"total\": {total}}}"
                    ),
                    (false, _) => average.wrapping_div(i64::from(div)).to_string(),
                };
                self.elem(map, key, text)
            })
            .collect()
    }

    fn hist_elems(&self, map: &Map, top: u32, div: u32) -> Vec<String> {
        let mut rows: Vec<(&Key, &BTreeMap<u64, i64>, u64)> = by_key_bytes(map)
            .into_iter()
            .map(|(key, b)| {
                (
                    key,
                    b,
                    b.values().fold(0i64, |a, v| a.wrapping_add(*v)) as u64,
                )
            })
            .collect();
        rows.sort_by_key(|r| r.2);
        let skip = skip_for_top(rows.len(), top);
        rows.into_iter()
            .skip(skip)
            .map(|(key, buckets, _)| {
                let text = match (map.kind(), self.json()) {
                    (MapKind::Lhist(lin), false) => lhist_text(buckets, lin),
                    (MapKind::Lhist(lin), true) => lhist_json(buckets, lin),
                    (_, false) => hist_text(buckets, div),
                    (_, true) => hist_json(buckets, div),
                };
                self.elem(map, key, text)
            })
            .collect()
    }
}

/// bpftrace joins entries without a separator when the values are stacks, symbols or inet addresses.
fn no_delimiter(map: &Map) -> bool {
    map.entries().first().is_some_and(|(_, c)| {
        matches!(
            c,
            Cell::Value(Value::Stack(_) | Value::Sym(_) | Value::Inet(_))
        )
    })
}

/// `print(@x, top)` shows the last `top` of `n` sorted entries.
fn skip_for_top(n: usize, top: u32) -> usize {
    let top = top as usize;
    if top > 0 && n > top {
        n - top
    } else {
        0
    }
}

/// An integer value divided as bpftrace's `value_to_str` divides it (in the value's own type).
fn divided(i: Int, div: u32) -> String {
    if div == 1 {
        return i.value_text();
    }
    if i.ty.signed {
        let d = Int::new(i64::from(div), i.ty).as_i64();
        if d == 0 {
            return i.value_text();
        }
        i.as_i64().wrapping_div(d).to_string()
    } else {
        (i.raw() / u64::from(div)).to_string()
    }
}

/// The scalar entries as values, in bpftrace's print order.
fn sorted_scalars(map: &Map) -> Vec<(&Key, Value)> {
    let mut rows: Vec<(&Key, Value)> = map
        .entries()
        .into_iter()
        .filter_map(|(key, cell)| {
            let v = match cell {
                Cell::Value(v) => v.clone(),
                Cell::Count(n) => Value::uint(*n),
                Cell::Sum(t) => Value::typed(*t, sum_type(map.kind())),
                Cell::MinInverted(m) => Value::int(min_shown(*m)),
                Cell::Max(m) => Value::uint(*m as u64),
                Cell::Buckets(_) => return None,
            };
            Some((key, v))
        })
        .collect();
    sort_by_key(&mut rows);
    if let Some(signed) = rows.first().and_then(|(_, v)| match v {
        Value::Int(i) => Some(i.ty.signed),
        _ => None,
    }) {
        rows.sort_by(|(_, a), (_, b)| match (a, b) {
            (Value::Int(a), Value::Int(b)) if signed => a.as_i64().cmp(&b.as_i64()),
            (Value::Int(a), Value::Int(b)) => a.extended().cmp(&b.extended()),
            _ => std::cmp::Ordering::Equal,
        });
    }
    rows
}

/// bpftrace's `sort_by_key`: a stable sort per key argument, the last first; integers as unsigned, strings
/// bytewise, other kinds left in place.
fn sort_by_key<T>(rows: &mut [(&Key, T)]) {
    let arity = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for i in (0..arity).rev() {
        rows.sort_by(|(a, _), (b, _)| match (a.get(i), b.get(i)) {
            (Some(Value::Int(x)), Some(Value::Int(y))) => x.raw().cmp(&y.raw()),
            (Some(Value::Str(x)), Some(Value::Str(y))) => x.cmp(y),
            _ => std::cmp::Ordering::Equal,
        });
    }
}

/// Bucketed entries in the order of bpftrace's `std::map` of key bytes (first insertion where bytes are
/// unknown).
fn by_key_bytes(map: &Map) -> Vec<(&Key, &BTreeMap<u64, i64>)> {
    type Row<'a> = (&'a Key, &'a BTreeMap<u64, i64>, Option<Vec<u8>>);
    let mut rows: Vec<Row> = map
        .entries()
        .into_iter()
        .filter_map(|(key, cell)| match cell {
            Cell::Buckets(b) => Some((key, b, Value::Tuple(key.clone()).key_bytes())),
            _ => None,
        })
        .collect();
    if rows.iter().all(|r| r.2.is_some()) {
        rows.sort_by(|a, b| a.2.cmp(&b.2));
    }
    rows.into_iter().map(|(k, b, _)| (k, b)).collect()
}

/// The dense bucket counts `0..len` (bpftrace's vectors of 65 for hist, 1002 for lhist).
fn dense(buckets: &BTreeMap<u64, i64>, len: usize) -> Vec<u64> {
    let mut v = vec![0u64; len];
    for (&i, &c) in buckets {
        if let Some(slot) = v.get_mut(i as usize) {
            *slot = c as u64;
        }
    }
    v
}

/// `hist_prepare`: first and last non-empty bucket and the largest count (bpftrace compares them as `int`).
fn hist_range(values: &[u64]) -> Option<(usize, usize, u64)> {
    let first = values.iter().position(|&v| v as i32 > 0)?;
    let last = values.iter().rposition(|&v| v as i32 > 0)?;
    Some((first, last, values.iter().copied().max().unwrap_or(0)))
}

fn bar_line(header: &str, shown: u64, count: u64, max: u64) -> String {
    let width = (count as f32 / max as f32 * BAR_WIDTH as f32) as usize;
    format!(
        "{header:<16}{shown:>8} |{:<BAR_WIDTH$}|\n",
        "@".repeat(width)
    )
}

/// `hist_index_label`: a power of two with K, M, G or T.
fn power_label(power: u64) -> String {
    let (p, suffix) = match power {
        40.. => (power - 40, "T"),
        30.. => (power - 30, "G"),
        20.. => (power - 20, "M"),
        10.. => (power - 10, "K"),
        _ => (power, ""),
    };
    format!("{}{suffix}", 1i64 << p)
}

/// `lhist_index_label`: a number, in M or K when a multiple of them.
fn linear_label(n: i64) -> String {
    match n {
        0 => "0".to_string(),
        n if n % 1_048_576 == 0 => format!("{}M", n / 1_048_576),
        n if n % 1024 == 0 => format!("{}K", n / 1024),
        n => n.to_string(),
    }
}

/// A `hist()`'s bars.
pub fn hist_text(buckets: &BTreeMap<u64, i64>, div: u32) -> String {
    let values = dense(buckets, 65);
    let Some((first, last, max)) = hist_range(&values) else {
        return String::new();
    };
    let mut out = String::new();
    for (i, &count) in values.iter().enumerate().take(last + 1).skip(first) {
        let header = match i {
            0 => "(..., 0)".to_string(),
            1 => "[0]".to_string(),
            2 => "[1]".to_string(),
            i => format!(
                "[{}, {})",
                power_label(i as u64 - 2),
                power_label(i as u64 - 1)
            ),
        };
        out.push_str(&bar_line(&header, count / u64::from(div), count, max));
    }
    out
}

/// The buckets `lhist_prepare` shows: from the first to the last non-empty of the `buckets + 2`.
fn lhist_range(values: &[u64], lin: Linear) -> Option<(usize, usize, u64, usize)> {
    let buckets = ((lin.max - lin.min) / lin.step.max(1)) as usize;
    values.iter().rposition(|&v| v != 0)?;
    let max = values.iter().copied().max().unwrap_or(0);
    let shown = &values[..(buckets + 2).min(values.len())];
    let first = shown.iter().position(|&v| v > 0).unwrap_or(0);
    let last = shown.iter().rposition(|&v| v > 0).unwrap_or(0);
    Some((first, last, max, buckets))
}

/// An `lhist()`'s bars.
pub fn lhist_text(buckets: &BTreeMap<u64, i64>, lin: Linear) -> String {
    let values = dense(buckets, 1002);
    let Some((first, last, max, n)) = lhist_range(&values, lin) else {
        return String::new();
    };
    let mut out = String::new();
    for (i, &count) in values.iter().enumerate().take(last + 1).skip(first) {
        let header = if i == 0 {
            format!("(..., {})", linear_label(lin.min))
        } else if i == n + 1 {
            format!("[{}, ...)", linear_label(lin.max))
        } else {
            let low = (i as i64 - 1) * lin.step + lin.min;
            format!("[{}, {})", linear_label(low), linear_label(low + lin.step))
        };
        out.push_str(&bar_line(&header, count, count, max));
    }
    out
}

/// A `hist()` in json: `[{"min": 4, "max": 7, "count": 1}, ...]` (bpftrace's `int` shifts included: the
/// `[2G, 4G)` bucket reads `"min": -2147483648, "max": 0`).
pub fn hist_json(buckets: &BTreeMap<u64, i64>, div: u32) -> String {
    let values = dense(buckets, 65);
    let Some((first, last, _)) = hist_range(&values) else {
        return "[]".to_string();
    };
    let mut parts = Vec::new();
    for (i, &count) in values.iter().enumerate().take(last + 1).skip(first) {
        let range = match i {
            0 => "\"max\": -1, ".to_string(),
            1 => "\"min\": 0, \"max\": 0, ".to_string(),
            2 => "\"min\": 1, \"max\": 1, ".to_string(),
            i => {
                let low = 1i32.wrapping_shl(i as u32 - 2);
                let high = 1i32.wrapping_shl(i as u32 - 1).wrapping_sub(1);
                format!("\"min\": {low}, \"max\": {high}, ")
            }
        };
        parts.push(format!("{{{range}\"count\": {}}}", count / u64::from(div)));
    }
    format!("[{}]", parts.join(", "))
}

/// An `lhist()` in json.
pub fn lhist_json(buckets: &BTreeMap<u64, i64>, lin: Linear) -> String {
    let values = dense(buckets, 1002);
    let Some((first, last, _, n)) = lhist_range(&values, lin) else {
        return "[]".to_string();
    };
    let mut parts = Vec::new();
    for (i, &count) in values.iter().enumerate().take(last + 1).skip(first) {
        let range = if i == 0 {
            format!("\"max\": {}, ", lin.min - 1)
        } else if i == n + 1 {
            format!("\"min\": {}, ", lin.max)
        } else {
            let low = (i as i64 - 1) * lin.step + lin.min;
            format!("\"min\": {low}, \"max\": {}, ", low + lin.step - 1)
        };
        parts.push(format!("{{{range}\"count\": {count}}}"));
    }
    format!("[{}]", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bt::value::{Frame, Stack, StackKind, StackMode};

    fn user(limit: usize) -> Value {
        let frames = vec![
            Frame::named(0x7f00, "syscall", 25, None),
            Frame::unresolved(0x7ffc75fd3888),
        ];
        Value::Stack(Stack::new(
            StackKind::User,
            StackMode::Bpftrace,
            limit,
            7,
            frames,
        ))
    }

    #[test]
    fn stacks_in_json_as_bpftrace() {
        // bpftrace -f json -e 'BEGIN { @[ustack(2)] = count(); @u = ustack(1); print(ustack(1)); exit(); }'
        let p = Printer::new(OutputFormat::Json);
        assert_eq!(
            p.value(&user(1)),
            "{\"type\": \"value\", \"data\": \"\\n        syscall+25\\n\"}\n"
        );
        let mut keyed = Map::new("@", MapKind::Count, true, 10);
        keyed.count(&[user(2)]).unwrap();
        assert_eq!(
            p.map(&keyed, 0, 0),
            "{\"type\": \"map\", \"data\": {\"@\": {\"\\n    syscall+25\\n    0x7ffc75fd3888\\n\": 1}}}\n"
        );
        let mut plain = Map::new("@u", MapKind::Plain, false, 10);
        plain.set(&[], user(1)).unwrap();
        assert_eq!(
            p.map(&plain, 0, 0),
            "{\"type\": \"map\", \"data\": {\"@u\": \"\\n        syscall+25\\n\"}}\n"
        );
    }

    #[test]
    fn labels_and_messages() {
        assert_eq!(power_label(9), "512");
        assert_eq!(power_label(10), "1K");
        assert_eq!(power_label(31), "2G");
        assert_eq!(power_label(45), "32T");
        assert_eq!(linear_label(3072), "3K");
        assert_eq!(linear_label(2_097_152), "2M");
        assert_eq!(linear_label(-1024), "-1K");
        let t = Printer::new(OutputFormat::Text);
        assert_eq!(t.attached_probes(2), "Attaching 2 probes...\n");
        assert_eq!(t.lost_events(3), "Lost 3 events\n");
        assert_eq!(t.message(MessageType::Join, "a b", true), "a b\n");
        let j = Printer::new(OutputFormat::Json);
        assert_eq!(
            j.lost_events(3),
            "{\"type\": \"lost_events\", \"data\": {\"events\": 3}}\n"
        );
        assert_eq!(
            j.message(MessageType::Join, "a b", true),
            "{\"type\": \"join\", \"data\": \"a b\"}\n"
        );
        // An empty map: an empty line in text, nothing in json.
        let empty = Map::new("@e", MapKind::Count, true, 10);
        assert_eq!(t.map(&empty, 0, 0), "\n");
        assert_eq!(j.map(&empty, 0, 0), "");
    }
}
