//! `--trace-out FILE.json`: every call as a complete event (`"ph":"X"`) on its thread's track, with its values
//! as args; hits without a duration (USDT probes, tracepoints) as instant events; keyed pairs on a track per
//! key, under a process of their own. The Chrome trace-event format's JSON array, written as calls end: a run
//! cut short leaves a file without its closing `]`, which the Chrome trace viewer and Perfetto accept.
//!
//! Memory stays bounded: at most [`MAX_NAMED`] threads are named, and at most [`MAX_KEY_TRACKS`] keys get a
//! track; later keys' calls go on one track per `--by` value (or one `[more keys]` track), counted.
use crate::probe::analysis::Call;
use crate::probe::target::Target;
use crate::probe::value::Value;
use serde_json::{json, Map, Value as Json};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Keys with a track of their own at most.
pub const MAX_KEY_TRACKS: usize = 10_000;
/// Threads and processes named at most.
pub const MAX_NAMED: usize = 100_000;
/// The pid of the keyed pairs' tracks (a pid no process has: above the kernel's pid_max limit of 2^22).
pub const KEYED_PID: u32 = 0x7fff_ffff;

/// The trace-event file being written.
pub struct TraceOut {
    w: BufWriter<File>,
    path: PathBuf,
    first: bool,
    /// Threads (pid, tid) and processes (pid, 0) whose names were written.
    named: HashSet<(u32, u32)>,
    /// Keyed tracks: key values (or, past the cap, the overflow track's name) -> tid.
    keys: HashMap<String, u32>,
    /// Keyed calls written on an overflow track.
    pub overflowed: u64,
    pub written: u64,
    error: Option<io::Error>,
}

/// A value as a JSON arg: numbers as numbers, the rest as text.
fn arg(v: &Value) -> Json {
    match v {
        Value::Int(i) => json!(i),
        Value::UInt(u) => json!(u),
        Value::Str(s) => json!(s),
        v => json!(v.to_string()),
    }
}

/// A thread's or process's name from /proc (empty when it is gone).
fn comm(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

impl TraceOut {
    /// Create `path` and start the array.
    pub fn create(path: &Path) -> io::Result<TraceOut> {
        let mut w = BufWriter::with_capacity(1 << 16, File::create(path)?);
        w.write_all(b"[\n")?;
        Ok(TraceOut {
            w,
            path: path.to_path_buf(),
            first: true,
            named: HashSet::new(),
            keys: HashMap::new(),
            overflowed: 0,
            written: 0,
            error: None,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn event(&mut self, e: &Json) {
        if self.error.is_some() {
            return;
        }
        let sep: &[u8] = if self.first { b"" } else { b",\n" };
        self.first = false;
        let r = self
            .w
            .write_all(sep)
            .and_then(|_| serde_json::to_writer(&mut self.w, e).map_err(io::Error::from));
        if let Err(e) = r {
            self.error = Some(e);
        }
    }

    /// Name a process or thread track once (`thread_name`, `process_name` metadata), from /proc when its first
    /// call is written.
    fn name(&mut self, pid: u32, tid: u32, name: impl FnOnce() -> String) {
        if self.named.len() >= MAX_NAMED || !self.named.insert((pid, tid)) {
            return;
        }
        let (kind, tid_field) = match tid {
            0 => ("process_name", pid),
            t => ("thread_name", t),
        };
        // A task gone before its first call was read keeps the viewer's default name (its pid or tid).
        let name = name();
        if name.is_empty() {
            return;
        }
        let e =
            json!({"ph": "M", "name": kind, "pid": pid, "tid": tid_field, "args": {"name": name}});
        self.event(&e);
    }

    /// One call of `target` (in process `pid`): a slice on its thread's track (or its key's, with `key`), or
    /// an instant event without a duration. `by` names the overflow track of keys past the cap.
    pub fn call(
        &mut self,
        call: &Call,
        pid: u32,
        target: &Target,
        key: Option<&[Value]>,
        by: Option<&Value>,
    ) {
        let mut args = Map::new();
        for (f, v) in target.fetches.iter().zip(&call.values) {
            if let Some(v) = v {
                args.entry(f.label.clone()).or_insert_with(|| arg(v));
                // A name's number beside it.
                if let Some(raw) = v.raw() {
                    args.entry(format!("{}_raw", f.label))
                        .or_insert_with(|| json!(raw));
                }
            }
        }
        if key.is_some() {
            // On a key's track, who opened the call: its START's process (none for one in an interrupt).
            for name in ["comm", "pid", "tid"] {
                if let Some(v) = call.ctx.value(name) {
                    args.entry(name.to_string()).or_insert_with(|| arg(&v));
                }
            }
        }
        let (pid, tid) = match key {
            Some(key) => (KEYED_PID, self.key_track(target, key, by)),
            None => {
                let tid = call.tid;
                // Named as the kernel's records named the task when it made the call (a process that lived a
                // few milliseconds, or exec'd, is gone from /proc or has another name by now).
                let seen = call.ctx.comm.as_deref().map(str::to_string);
                let own = seen.clone();
                self.name(pid, 0, || match comm(&format!("/proc/{pid}/comm")) {
                    c if c.is_empty() || pid == tid => own.unwrap_or(c),
                    c => c,
                });
                self.name(pid, tid, || {
                    seen.unwrap_or_else(|| comm(&format!("/proc/{pid}/task/{tid}/comm")))
                });
                (pid, tid)
            }
        };
        let ts = call.time as f64 / 1e3;
        let mut e = match call.dur {
            Some((dur, _)) => json!({
                "name": target.name, "ph": "X", "ts": ts, "dur": dur as f64 / 1e3, "pid": pid, "tid": tid,
            }),
            None => {
                json!({"name": target.name, "ph": "i", "s": "t", "ts": ts, "pid": pid, "tid": tid})
            }
        };
        // No values, no `args`: viewers such as speedscope append the args to the slice's name.
        if !args.is_empty() {
            e["args"] = Json::Object(args);
        }
        self.event(&e);
        self.written += 1;
    }

    /// Events were lost: a global instant event `events lost` at the hole's start, with its end and count;
    /// the calls open across it are not in the file (they were not timed).
    pub fn hole(&mut self, hole: &crate::probe::engine::holes::Hole) {
        let mut args = json!({"cpu": hole.cpu, "until_us": hole.until as f64 / 1e3});
        if let Some(n) = hole.count {
            args["lost"] = json!(n);
        }
        let e = json!({
            "name": "events lost", "ph": "i", "s": "g", "ts": hole.after as f64 / 1e3, "pid": 0, "tid": 0,
            "args": args,
        });
        self.event(&e);
    }

    /// The track of a keyed pair's key: its own (named `pid=1234`), or past [`MAX_KEY_TRACKS`] the one of its
    /// `--by` value.
    fn key_track(&mut self, target: &Target, key: &[Value], by: Option<&Value>) -> u32 {
        let parts = target
            .pair()
            .map_or(&[][..], |p| p.starts[0].key.as_slice());
        let names: Vec<String> = parts
            .iter()
            .zip(key)
            .map(|(&k, v)| format!("{}={v}", target.fetches[k].label))
            .collect();
        let mut name = names.join(" ");
        if !self.keys.contains_key(&name) && self.keys.len() >= MAX_KEY_TRACKS {
            self.overflowed += 1;
            name = match by {
                Some(v) => format!("more keys, {v}"),
                None => "[more keys]".to_string(),
            };
        }
        if let Some(&tid) = self.keys.get(&name) {
            return tid;
        }
        let tid = self.keys.len() as u32 + 1;
        self.keys.insert(name.clone(), tid);
        self.name(KEYED_PID, 0, || "rprof: keyed pairs".into());
        self.name(KEYED_PID, tid, || name);
        tid
    }

    /// Close the array and flush; the first write error, if any.
    pub fn finish(mut self) -> io::Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.w.write_all(b"\n]\n")?;
        self.w.flush()
    }
}
