//! `rprof record --push` arguments and their mapping onto [`rprof::push::PushConfig`].
use super::parse;
use anyhow::Context;
use clap::Args;
use rprof::push::{Auth, PushBudget, PushConfig};
use rprof::record::{RecordConfig, Target};
use std::path::PathBuf;
use std::time::Duration;

/// Continuous profiling: push each period's profile to a store while recording goes on.
#[derive(Args, Debug, Default)]
#[command(next_help_heading = "Pushing to a profile store (continuous profiling)")]
#[command(group(clap::ArgGroup::new("pushing").args(["push", "push_otlp"]).multiple(true)))]
pub struct PushArgs {
    /// Send a profile of each period to this Pyroscope server (http(s)://HOST:PORT, its /ingest API) while
    /// recording; no recording file is written unless -o is given.
    #[arg(long = "push", value_name = "URL")]
    pub push: Option<String>,
    /// Send the same profiles to this OpenTelemetry collector (OTLP/HTTP protobuf, POST
    /// URL/v1development/profiles; the profiles signal of PyPI's opentelemetry-proto 1.45.2), with or
    /// without --push.
    #[arg(long = "push-otlp", value_name = "URL")]
    pub push_otlp: Option<String>,
    /// The period of each pushed profile, in seconds.
    #[arg(long = "every", value_name = "SECONDS", default_value = "15", requires = "pushing",
          value_parser = parse::above_zero)]
    pub every: u64,
    /// The application name in the store (default: the command's or the first process's name, else the
    /// host name).
    #[arg(long = "app", value_name = "NAME", requires = "pushing")]
    pub app: Option<String>,
    /// A label of every pushed profile (repeat for several); `host` is added.
    #[arg(long = "label", value_name = "KEY=VALUE", requires = "pushing", value_parser = label)]
    pub label: Vec<(String, String)>,
    /// Where profiles wait until the store takes them (kept across runs: the next rprof sends what is left).
    #[arg(long = "spool", value_name = "DIR", requires = "pushing")]
    pub spool: Option<PathBuf>,
    /// The most the spool holds, in MiB; past it the oldest profiles are dropped (and counted).
    #[arg(long = "spool-max-mb", value_name = "MIB", default_value = "256", requires = "pushing",
          value_parser = parse::above_zero)]
    pub spool_max_mb: u64,
    /// How long the end of a run keeps trying to empty the spool, in seconds.
    #[arg(long = "flush-timeout", value_name = "SECONDS", default_value = "5", requires = "pushing",
          value_parser = parse::seconds)]
    pub flush_timeout: Duration,
    /// Basic authentication: the user (the password comes from $RPROF_PUSH_PASSWORD or --push-password-file).
    #[arg(long = "push-user", value_name = "USER", requires = "pushing")]
    pub user: Option<String>,
    /// A file holding the basic-auth password.
    #[arg(long = "push-password-file", value_name = "FILE", requires = "user")]
    pub password_file: Option<PathBuf>,
    /// A file holding a bearer token (else $RPROF_PUSH_TOKEN when set).
    #[arg(
        long = "push-token-file",
        value_name = "FILE",
        requires = "pushing",
        conflicts_with = "user"
    )]
    pub token_file: Option<PathBuf>,
    /// The tenant (X-Scope-OrgID header) of a multi-tenant store.
    #[arg(long = "tenant", value_name = "ID", requires = "pushing")]
    pub tenant: Option<String>,
    /// Send addresses (file offsets), build ids and mappings without function names, for stores that
    /// symbolize centrally from debuginfod (kernel frames keep their names).
    #[arg(long = "push-unsymbolized", requires = "pushing")]
    pub unsymbolized: bool,
    /// The CPU the push may take, in % of one core averaged since its start (`none`: unbounded); over it, a
    /// period's binaries not yet read are pushed unsymbolized (build ids and offsets, labelled
    /// rprof_unsymbolized) instead of read.
    #[arg(long = "push-cpu-budget", value_name = "PERCENT", default_value = "1%",
          requires = "pushing", value_parser = cpu_budget)]
    pub cpu_budget: f64,
    /// The resident memory the push may take (e.g. 64M, 1G; `none`: unbounded); over it, as over the CPU
    /// budget.
    #[arg(long = "push-mem-budget", value_name = "SIZE", default_value = "64M",
          requires = "pushing", value_parser = mem_budget)]
    pub mem_budget: u64,
    /// Trust the CA certificates of this PEM file for https (instead of the bundled web roots).
    #[arg(long = "push-ca", value_name = "FILE", requires = "pushing")]
    pub ca: Option<PathBuf>,
}

fn label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v))
            if !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
        {
            Ok((k.to_string(), v.to_string()))
        }
        _ => Err(format!(
            "'{s}' is not KEY=VALUE with a KEY of letters, digits and _ (e.g. --label env=prod)"
        )),
    }
}

/// `--push-cpu-budget`: a percentage of one core (`1%`, `0.5`), as a fraction; `none` is unbounded.
fn cpu_budget(s: &str) -> Result<f64, String> {
    if s == "none" {
        return Ok(f64::INFINITY);
    }
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v / 100.0),
        _ => Err(format!(
            "'{s}' is not a share of a core: give a positive percentage like 1% or 0.5%, or none"
        )),
    }
}

/// `--push-mem-budget`: bytes from a size with a unit (`64M`, `1G`, `512K`; a bare number is MiB); `none`
/// is unbounded.
fn mem_budget(s: &str) -> Result<u64, String> {
    if s == "none" {
        return Ok(u64::MAX);
    }
    let t = s.trim().trim_end_matches(['B', 'b']).trim_end_matches('i');
    let (num, shift) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 10),
        Some((i, 'M' | 'm')) => (&t[..i], 20),
        Some((i, 'G' | 'g')) => (&t[..i], 30),
        _ => (t, 20),
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok((v * (1u64 << shift) as f64) as u64),
        _ => Err(format!(
            "'{s}' is not a size: give e.g. 64M, 1G or 512K, or none"
        )),
    }
}

fn host_name() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.nodename().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// The default application name: the command's, or the first process's, else the host's.
fn default_app(cfg: &RecordConfig) -> String {
    let name = match &cfg.target {
        Target::Command(cmd) => cmd
            .to_string()
            .split_whitespace()
            .next()
            .map(|p| p.rsplit('/').next().unwrap_or(p).to_string()),
        Target::Pids(p) | Target::Tids(p) => p.first().and_then(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .ok()
                .map(|c| c.trim().to_string())
        }),
        _ => None,
    };
    name.filter(|n| !n.is_empty()).unwrap_or_else(host_name)
}

fn default_spool() -> PathBuf {
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/var/spool/rprof");
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(std::env::temp_dir);
    state.join("rprof/spool")
}

fn read_secret(path: &PathBuf, what: &str) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read the {what} file {} (give a readable file)",
            path.display()
        )
    })?;
    Ok(text.trim_end_matches(['\n', '\r']).to_string())
}

/// The push of these arguments, None without --push.
pub fn config(a: &PushArgs, record: &RecordConfig) -> anyhow::Result<Option<PushConfig>> {
    if a.push.is_none() && a.push_otlp.is_none() {
        return Ok(None);
    }
    for (flag, url) in [("--push", &a.push), ("--push-otlp", &a.push_otlp)] {
        if let Some(url) = url.as_deref() {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                anyhow::bail!(
                    "{flag} {url}: give the store's URL as http://HOST:PORT or https://HOST:PORT"
                );
            }
        }
    }
    let otlp_url = a.push_otlp.as_deref().map(|u| {
        let u = u.trim_end_matches('/');
        match u.ends_with("/v1development/profiles") {
            true => u.to_string(),
            false => format!("{u}/v1development/profiles"),
        }
    });
    let auth = match (&a.user, &a.token_file, std::env::var("RPROF_PUSH_TOKEN")) {
        (Some(user), _, _) => {
            let password = match &a.password_file {
                Some(f) => read_secret(f, "password")?,
                None => std::env::var("RPROF_PUSH_PASSWORD").context(
                    "--push-user needs a password: set RPROF_PUSH_PASSWORD or give --push-password-file",
                )?,
            };
            Auth::Basic {
                user: user.clone(),
                password,
            }
        }
        (None, Some(f), _) => Auth::Bearer(read_secret(f, "token")?),
        (None, None, Ok(token)) if !token.is_empty() => Auth::Bearer(token),
        _ => Auth::None,
    };
    let mut labels = a.label.clone();
    if !labels.iter().any(|(k, _)| k == "host") {
        labels.push(("host".into(), host_name()));
    }
    Ok(Some(PushConfig {
        url: a.push.clone(),
        otlp_url,
        every: Duration::from_secs(a.every),
        app: a.app.clone().unwrap_or_else(|| default_app(record)),
        labels,
        spool: a.spool.clone().unwrap_or_else(default_spool),
        spool_max_bytes: a.spool_max_mb << 20,
        flush_timeout: a.flush_timeout,
        timeout: Duration::from_secs(10),
        auth,
        tenant: a.tenant.clone(),
        ca_file: a.ca.clone(),
        symbolizer: symbolizer(record),
        unsymbolized: a.unsymbolized,
        kallsyms_copy: !record.no_buildid_cache,
        budget: (a.cpu_budget.is_finite() || a.mem_budget < u64::MAX).then_some(PushBudget {
            cpu: a.cpu_budget,
            mem: a.mem_budget,
        }),
    }))
}

/// The push's symbolizer: compressed debug sections (libc6-dbg's) are kept inflated in the build-id cache
/// (unless `-N`), within its bound: each period that meets new addresses in libc loads its DWARF again.
fn symbolizer(record: &RecordConfig) -> rprof::symbols::SymbolizerOptions {
    let mut options = rprof::symbols::SymbolizerOptions::default();
    if !record.no_buildid_cache {
        options.debug.inflated =
            rprof::buildid::buildid_dir().map(|dir| rprof::symbols::InflatedCache {
                dir,
                bound: record.buildid_cache_size,
            });
    }
    options
}
