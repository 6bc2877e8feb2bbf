//! `rprof bt`: bpftrace 0.17's language without BPF. So far the front end: the program is parsed and checked
//! against this machine (its tracepoints, kprobes, PMU), errors print in bpftrace's format with exit status 1;
//! running programs is not built yet, and `rprof bt` says so in one line.
use clap::Args;
use rprof::bt::check::{Env, Kernel};
use rprof::bt::check::{TpField, TracepointFields};
use rprof::tracefs::Tracefs;

/// Parse and check a bpftrace program (bpftrace 0.17's language and flags); running it is not built yet.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  rprof bt -e 'tracepoint:syscalls:sys_enter_write { @[comm] = count(); }'\n  \
                        rprof bt /usr/sbin/opensnoop.bt\n  rprof bt oncpu.bt 1234 99 5"
)]
pub struct BtArgs {
    /// The program's text (instead of a file).
    #[arg(short = 'e', value_name = "PROGRAM")]
    pub program: Option<String>,
    /// Run CMD (for `cpid` and its USDT probes).
    #[arg(short = 'c', value_name = "CMD")]
    pub cmd: Option<String>,
    /// Allow unsafe builtin functions (`system()`).
    #[arg(long = "unsafe")]
    pub unsafe_ok: bool,
    /// Keep messages quiet.
    #[arg(short = 'q')]
    pub quiet: bool,
    /// List the probes matching the search (`-l 'tracepoint:sched:*'`; tracepoints only so far).
    #[arg(short = 'l')]
    pub list: bool,
    /// Verbose: with -l, each tracepoint's fields (`-lv`).
    #[arg(short = 'v')]
    pub verbose: bool,
    /// The program file (without -e), then the positional parameters `$1`, `$2`...
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "FILE ARGS"
    )]
    pub rest: Vec<String>,
}

pub fn run(args: BtArgs) -> anyhow::Result<u8> {
    if args.list {
        return list(&args);
    }
    let (file, source, params) = match &args.program {
        Some(p) => ("stdin".to_string(), p.clone(), args.rest.clone()),
        None => {
            let Some(path) = args.rest.first() else {
                eprintln!("ERROR: USAGE: filename or -e 'program' required.");
                return Ok(1);
            };
            let source = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("cannot read the program {path}: {e}"))?;
            (path.clone(), source, args.rest[1..].to_vec())
        }
    };
    let tracefs = Tracefs::find_or_mount()?;
    let fields = EventFields(tracefs.clone());
    let env = Env {
        kernel: Kernel::detect(tracefs.root()),
        tracepoints: &fields,
        params,
        has_child: args.cmd.is_some(),
        unsafe_ok: args.unsafe_ok,
        strlen: std::env::var("BPFTRACE_STRLEN")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(64),
    };
    match rprof::bt::front(&source, &file, &env) {
        Err(text) => {
            eprint!("{text}");
            Ok(1)
        }
        Ok(front) => {
            let probes: usize = front.checked.probes.iter().map(|p| p.len()).sum();
            if !args.quiet {
                eprintln!("{file}: {probes} attach point(s) parsed and checked");
            }
            eprintln!(
                "rprof bt: running bpftrace programs is not built yet (parse and check only)"
            );
            Ok(1)
        }
    }
}

/// Tracepoint fields from the `format` files of this tracefs (the plan layer will own this reading).
struct EventFields(Tracefs);

impl TracepointFields for EventFields {
    fn fields(&self, category: &str, event: &str) -> Option<Vec<TpField>> {
        let text = self.0.event_format(category, event).ok()?;
        let fields = rprof::tracefs::parse_format(&text)
            .into_iter()
            .filter(|f| !f.is_common())
            .map(|f| TpField {
                name: f.name,
                decl: f.ty,
                size: f.size,
                signed: f.signed,
            })
            .collect();
        Some(fields)
    }

    fn expand(&self, category: &str, event: &str) -> Vec<(String, String)> {
        let glob = |g: &str| globset::Glob::new(g).map(|g| g.compile_matcher()).ok();
        let (Some(c), Some(e)) = (glob(category), glob(event)) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for cat in self.0.categories().unwrap_or_default() {
            if !c.is_match(&cat) {
                continue;
            }
            for ev in self.0.events(&cat).unwrap_or_default() {
                if e.is_match(&ev) {
                    found.push((cat.clone(), ev));
                }
            }
        }
        found
    }
}

/// `-l [SEARCH]` and `-lv`: the tracepoints matching `tracepoint:CATEGORY:EVENT` (globs; `t:` as short form), as
/// bpftrace lists them, with `-v` their fields declared as the format files declare them.
fn list(args: &BtArgs) -> anyhow::Result<u8> {
    let search = args
        .program
        .clone()
        .or_else(|| args.rest.first().cloned())
        .unwrap_or("tracepoint:*:*".into());
    let mut parts = search.splitn(3, ':');
    let (kind, category, event) = (parts.next(), parts.next(), parts.next());
    if !matches!(kind, Some("tracepoint" | "t")) {
        eprintln!("rprof bt -l lists tracepoints only so far (tracepoint:CATEGORY:EVENT)");
        return Ok(1);
    }
    let (category, event) = match (category, event) {
        (Some(c), Some(e)) => (c, e),
        (Some(e), None) => ("*", e),
        _ => ("*", "*"),
    };
    let fields = EventFields(Tracefs::find_or_mount()?);
    let mut out = String::new();
    for (c, e) in fields.expand(category, event) {
        out.push_str(&format!("tracepoint:{c}:{e}\n"));
        if args.verbose {
            for f in fields.fields(&c, &e).unwrap_or_default() {
                out.push_str(&format!("    {}\n", declaration(&f)));
            }
        }
    }
    print!("{out}");
    Ok(0)
}

/// A field declared as C (and bpftrace's -lv) writes it: `char prev_comm[16]`, `const char * filename`,
/// `__data_loc char[] name`.
fn declaration(f: &TpField) -> String {
    match f.decl.rsplit_once('[') {
        Some((base, len)) if !f.decl.starts_with("__data_loc") => {
            format!("{base} {}[{len}", f.name)
        }
        _ => format!("{} {}", f.decl, f.name),
    }
}
