//! `rprof bt`: bpftrace 0.17's language without BPF. The program is parsed and checked against this machine
//! (its tracepoints, kprobes, PMU; errors in bpftrace's format, exit status 1), planned into `rprof probe`
//! patterns, and run: maps and the interpreter in rprof, output as bpftrace prints it.
use clap::Args;
use rprof::bt::check::{Env, Kernel};
use rprof::bt::check::{TpField, TracepointFields};
use rprof::bt::print::OutputFormat;
use rprof::bt::run::{Io, Options, Runtime};
use rprof::bt::session::{self, SessionOptions};
use rprof::tracefs::Tracefs;
use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Run a bpftrace program (bpftrace 0.17's language and flags) without BPF: probes through rprof's engines,
/// maps in rprof.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  rprof bt -e 'tracepoint:syscalls:sys_enter_write { @[comm] = count(); }'\n  \
                        rprof bt /usr/sbin/opensnoop.bt\n  rprof bt oncpu.bt 1234 99 5"
)]
pub struct BtArgs {
    /// The program's text (instead of a file).
    #[arg(short = 'e', value_name = "PROGRAM")]
    pub program: Option<String>,
    /// Run CMD (for `cpid`); the program ends when it exits.
    #[arg(short = 'c', value_name = "CMD")]
    pub cmd: Option<String>,
    /// The process whose uprobes and USDT probes fire (bpftrace 0.17's -p).
    #[arg(short = 'p', value_name = "PID")]
    pub pid: Option<i32>,
    /// Write the program's output to FILE instead of standard output.
    #[arg(short = 'o', value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// Output format: text or json.
    #[arg(short = 'f', value_name = "FORMAT", default_value = "text")]
    pub format: String,
    /// Allow unsafe builtin functions (`system()`).
    #[arg(long = "unsafe")]
    pub unsafe_ok: bool,
    /// Keep messages quiet (no "Attaching N probes...").
    #[arg(short = 'q')]
    pub quiet: bool,
    /// List the probes matching the search (`-l 'tracepoint:sched:*'`; tracepoints only so far).
    #[arg(short = 'l')]
    pub list: bool,
    /// Verbose: with -l, each tracepoint's fields (`-lv`); with a program, its probes, the tasks they watch and
    /// the events received, on standard error.
    #[arg(short = 'v')]
    pub verbose: bool,
    /// The program file (without -e), then the positional parameters `$1`, `$2`... Options may follow the
    /// file, as with bpftrace (`rprof bt FILE -c CMD`); a parameter that starts with `-` goes after `--`.
    #[arg(value_name = "FILE ARGS")]
    pub rest: Vec<String>,
}

/// The numeric value of environment variable `name`, else `default`.
fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
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
    let format = match args.format.as_str() {
        "text" => OutputFormat::Text,
        "json" => OutputFormat::Json,
        other => {
            eprintln!("ERROR: Invalid output format \"{other}\"\nValid formats: 'text', 'json'");
            return Ok(1);
        }
    };
    let tracefs = Tracefs::find_or_mount()?;
    let fields = EventFields(tracefs.clone(), std::sync::OnceLock::new());
    let strlen = env_number("BPFTRACE_STRLEN", rprof::bt::value::DEFAULT_STRLEN);
    let env = Env {
        kernel: Kernel::detect(tracefs.root()),
        tracepoints: &fields,
        params: params.clone(),
        has_child: args.cmd.is_some(),
        unsafe_ok: args.unsafe_ok,
        strlen,
    };
    let front = match rprof::bt::front(&source, &file, &env) {
        Err(text) => {
            eprint!("{text}");
            return Ok(1);
        }
        Ok(front) => front,
    };
    let plan = match rprof::bt::plan::plan(&front.program, &front.checked, &fields, &params) {
        Err(diags) => {
            eprint!("{}", rprof::bt::diag::render_all(&diags, &file, &source));
            return Ok(1);
        }
        Ok(plan) => plan,
    };
    for w in &plan.warnings {
        eprintln!("{w}");
    }
    let mut plan = plan;
    skip_missing(&mut plan, args.pid);
    let (target, launch) = task_target(&args, &plan)?;
    // The process a predicate names (not -p's): the program goes on when it ends, as bpftrace's.
    let outlive_target = matches!(target, rprof::probe::TaskTarget::Pid(p) if args.pid != Some(p));
    if args.verbose {
        describe(&plan, &target);
    }
    let opts = Options {
        params,
        strlen,
        map_keys_max: env_number(
            "BPFTRACE_MAP_KEYS_MAX",
            rprof::bt::maps::DEFAULT_MAP_KEYS_MAX,
        ),
        format,
        cpid: None,
        unsafe_ok: args.unsafe_ok,
    };
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&interrupted))?;
    }
    let sopts = SessionOptions {
        target,
        launch,
        quiet: args.quiet,
        debug: rprof::symbols::DebugSources::default(),
        interrupted,
        format,
        strlen,
        outlive_target,
    };
    let mut out = output(&args)?;
    let mut err = std::io::stderr();
    let mut io = Io {
        out: &mut *out,
        err: &mut err,
    };
    let mut runtime = Runtime::new(&front.program, &front.checked, opts);
    // bpftrace exits 0 when the program ran, whatever `-c`'s command returned.
    let outcome = session::run(&mut runtime, &plan, &sopts, &mut io, &mut say)?;
    if args.verbose {
        eprintln!("rprof bt: {} events received", outcome.received);
    }
    Ok(0)
}

/// Leave out the uprobes of functions their binary lacks, as bpftrace 0.17 does without a word (sslsnoop.bt's
/// libcrypto functions that this OpenSSL does not export, threadsnoop.bt's `libpthread:pthread_create`, now in
/// libc), one line on stderr each; unless nothing would be left to attach (then the session refuses it).
fn skip_missing(plan: &mut rprof::bt::plan::BtPlan, pid: Option<i32>) {
    use rprof::bt::attach::ProbeType;
    let lacks = |p: &rprof::bt::plan::PlannedProbe| {
        let path = rprof::probe::find_library(&p.spec.target, pid.map(|p| p as u32));
        let debug = rprof::symbols::DebugSources::default();
        let found = path.map(|path| rprof::probe::resolve_user(&path, &p.spec.func, false, &debug));
        matches!(found, Ok(Err(rprof::probe::ProbeError::NoMatch { .. })))
    };
    let missing: Vec<usize> = (0..plan.probes.len())
        .filter(|&i| {
            let p = &plan.probes[i];
            p.kind == ProbeType::Uprobe && p.spec.address == 0 && lacks(p)
        })
        .collect();
    let counted: usize = missing
        .iter()
        .map(|&i| plan.probes[i].blocks.len() + plan.probes[i].return_blocks.len())
        .sum();
    if missing.is_empty() || counted >= plan.attached {
        return;
    }
    for &i in &missing {
        let s = &plan.probes[i].spec;
        eprintln!(
            "rprof bt: skipped uprobe:{}:{}: no such function (bpftrace skips it too)",
            s.target, s.func
        );
    }
    for &i in missing.iter().rev() {
        plan.remove_probe(i);
    }
}

/// `-v`: where each part of the program runs, on standard error: the probes in `rprof probe`'s language (with
/// the part of a predicate the kernel's event filter takes after `if`), and the tasks they watch.
fn describe(plan: &rprof::bt::plan::BtPlan, target: &rprof::probe::TaskTarget) {
    use rprof::probe::TaskTarget;
    for p in plan.patterns() {
        eprintln!("rprof bt: probe {p}");
    }
    use rprof::bt::plan::OnlyProcess;
    let tasks = match (target, plan.only) {
        (TaskTarget::SystemWide, Some(o)) => format!(
            "every process (`{}` is tested in rprof: no such process now)",
            o.text()
        ),
        (TaskTarget::SystemWide, None) => "every process".into(),
        (TaskTarget::Pid(p), Some(OnlyProcess::Pid(n))) if *p == n => format!(
            "process {p}'s threads and the tasks they create (per-process events: `pid == {p}` runs in the \
             kernel)"
        ),
        (TaskTarget::Pid(p), _) => format!("process {p}'s threads (-p)"),
        (TaskTarget::Command(_), _) => {
            "-c's command and the tasks it creates (per-process events: `pid == cpid` runs in the kernel)"
                .into()
        }
    };
    eprintln!("rprof bt: tasks: {tasks}");
}

/// Where the program's output goes: `-o FILE`, else standard output.
fn output(args: &BtArgs) -> anyhow::Result<Box<dyn Write>> {
    Ok(match &args.output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|e| {
                anyhow::anyhow!("cannot create the output file {}: {e}", path.display())
            })?,
        )),
        None => Box::new(std::io::stdout().lock()),
    })
}

/// The probe session's warnings, on standard error (its progress lines are not bpftrace's).
fn say(n: rprof::probe::Notice) {
    use rprof::probe::Notice::*;
    if matches!(
        n,
        StaleRemoved(_)
            | Refused { .. }
            | Unresolved(_)
            | NotRemoved(_)
            | NoSupervisor(_)
            | Lost(_)
    ) {
        eprintln!("rprof bt: {}", super::probe::notice(&n));
    }
}

/// The tasks the session probes: `-p`'s process where every probe is a uprobe or USDT probe (bpftrace 0.17's
/// -p names the process whose uprobes attach; its tracepoints stay system-wide); the process every probe's
/// predicate names (`pid == N`, `pid == cpid`: per-process events); else every process; and `-c`'s command,
/// launched beside them (bpftrace's probes are not limited to it; `cpid` names it).
fn task_target(
    args: &BtArgs,
    plan: &rprof::bt::plan::BtPlan,
) -> anyhow::Result<(rprof::probe::TaskTarget, Option<rprof::perf::Command>)> {
    use rprof::bt::attach::ProbeType;
    use rprof::bt::plan::OnlyProcess;
    use rprof::probe::TaskTarget;
    let launch = match &args.cmd {
        Some(cmd) => {
            let words = shlex::split(cmd)
                .ok_or_else(|| anyhow::anyhow!("cannot split -c's command: {cmd}"))?;
            Some(rprof::perf::Command::find(
                &words,
                std::env::var_os("PATH").as_deref(),
            ))
        }
        None => None,
    };
    let user_only = !plan.probes.is_empty()
        && plan
            .probes
            .iter()
            .all(|p| matches!(p.kind, ProbeType::Uprobe | ProbeType::Usdt));
    // Every probe tests `pid == N`: per-process events (a process that does not exist now is tested in rprof,
    // as bpftrace would, matching nothing until a process of that pid exists).
    let target = match (args.pid, plan.only) {
        (Some(pid), _) if user_only => TaskTarget::Pid(pid),
        (_, Some(OnlyProcess::Pid(n))) if rprof::process::exists(n) => TaskTarget::Pid(n),
        (_, Some(OnlyProcess::Cpid)) => match launch {
            Some(cmd) => return Ok((TaskTarget::Command(cmd), None)),
            None => TaskTarget::SystemWide,
        },
        _ => TaskTarget::SystemWide,
    };
    Ok((target, launch))
}

impl EventFields {
    /// The kernel functions kprobes can take (`available_filter_functions`), read once.
    fn kernel_functions(&self) -> &std::collections::HashSet<String> {
        self.1.get_or_init(|| {
            let found = self.0.available_functions().unwrap_or_default();
            found.into_iter().collect()
        })
    }
}

/// Tracepoint fields from the `format` files of this tracefs (the plan layer will own this reading), and the
/// kernel functions kprobes can take, read once when a kprobe asks.
struct EventFields(
    Tracefs,
    std::sync::OnceLock<std::collections::HashSet<String>>,
);

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

    fn kernel_function(&self, name: &str) -> bool {
        let functions = self.kernel_functions();
        // Without the list (no kprobes here: the checker has refused them already), the attach tells.
        functions.is_empty() || functions.contains(name)
    }

    fn kernel_functions_matching(&self, pattern: &str) -> usize {
        let Ok(glob) = globset::Glob::new(pattern).map(|g| g.compile_matcher()) else {
            return 1;
        };
        self.kernel_functions()
            .iter()
            .filter(|f| glob.is_match(f.as_str()))
            .count()
    }
}

/// `-l [SEARCH]` and `-lv`: the tracepoints matching `tracepoint:CATEGORY:EVENT` (globs; `t:` as short form), as
/// bpftrace lists them, with `-v` their fields declared as the format files declare them; the USDT probes of
/// a binary or library matching `usdt:PATH:[PROVIDER:]NAME`.
fn list(args: &BtArgs) -> anyhow::Result<u8> {
    let search = args
        .program
        .clone()
        .or_else(|| args.rest.first().cloned())
        .unwrap_or("tracepoint:*:*".into());
    let mut parts = search.splitn(3, ':');
    let (kind, category, event) = (parts.next(), parts.next(), parts.next());
    if matches!(kind, Some("usdt" | "U")) {
        print!("{}", list_usdt(&search)?);
        return Ok(0);
    }
    if !matches!(kind, Some("tracepoint" | "t")) {
        eprintln!(
            "rprof bt -l lists tracepoints and USDT probes only so far \
             (tracepoint:CATEGORY:EVENT, usdt:PATH:[PROVIDER:]NAME)"
        );
        return Ok(1);
    }
    let (category, event) = match (category, event) {
        (Some(c), Some(e)) => (c, e),
        (Some(e), None) => ("*", e),
        _ => ("*", "*"),
    };
    let fields = EventFields(Tracefs::find_or_mount()?, std::sync::OnceLock::new());
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

/// `-l 'usdt:PATH:[PROVIDER:]NAME'` (globs): the binary's (or library's) USDT probes, sorted, one line each as
/// bpftrace 0.17 lists them (`usdt:PATH:PROVIDER:NAME`; with `-v` alike: it shows no arguments).
fn list_usdt(search: &str) -> anyhow::Result<String> {
    use rprof::probe::usdt;
    let parts: Vec<&str> = search.split(':').collect();
    let (path, provider, name) = match parts[..] {
        [_, path] | [_, path, ""] => (path, "*", "*"),
        [_, path, name] => (path, "*", name),
        [_, path, provider, name] => (path, provider, name),
        _ => anyhow::bail!("cannot list `{search}`: write usdt:PATH:[PROVIDER:]NAME"),
    };
    let file = rprof::probe::find_library(path, None)?;
    let probes = usdt::read_probes(&file)?;
    let mut lines: Vec<String> = usdt::matching(&probes, provider, name)
        .iter()
        .map(|p| format!("usdt:{}:{}:{}\n", file.display(), p.provider, p.name))
        .collect();
    lines.sort();
    lines.dedup();
    Ok(lines.concat())
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
