//! `--debuginfod[=URLS]` and the environment elfutils' clients read (`DEBUGINFOD_URLS`,
//! `DEBUGINFOD_CACHE_PATH`, `DEBUGINFOD_TIMEOUT`, `DEBUGINFOD_MAXSIZE`, `DEBUGINFOD_MAXTIME`): the library's
//! client, with its progress and warnings on stderr. The environment is read here only; the library gets
//! plain config.
use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rprof::symbols::debuginfod::{Debuginfod, DebuginfodConfig, Event, Limits, Refusal};
use rprof::symbols::DebugSources;
use rprof::text::thousands;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Once};
use std::time::Duration;

/// elfutils' default for `DEBUGINFOD_TIMEOUT`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(90);

#[derive(Args, Debug, Clone, Default)]
pub struct DebuginfodArgs {
    /// Fetch what the local files lack from debuginfod servers, by build id: debug files of stripped
    /// binaries, binaries gone from disk (and annotate's source files). URLS (space-separated), else those of
    /// DEBUGINFOD_URLS, which also turns this on without the flag. Kept in DEBUGINFOD_CACHE_PATH/rprof (else
    /// ~/.cache/rprof/debuginfod); DEBUGINFOD_TIMEOUT seconds (default 90) to connect and for each read;
    /// DEBUGINFOD_MAXSIZE bytes at most per file and DEBUGINFOD_MAXTIME seconds at most per download (0 or
    /// unset: no bound), past which a file is not fetched (one warning says so).
    #[arg(long = "debuginfod", value_name = "URLS", num_args = 0..=1, require_equals = true,
          default_missing_value = "")]
    pub debuginfod: Option<String>,
}

/// The downloads of one run: a progress line on a terminal, warnings, and a closing count.
pub struct Downloads {
    command: &'static str,
    /// Drawn from the first download on, only when stderr is a terminal.
    bar: ProgressBar,
    shown: Once,
    /// Downloads under way: the line shows while there are any (probe prints its report after them).
    in_flight: AtomicU64,
    files: AtomicU64,
    bytes: AtomicU64,
}

impl DebuginfodArgs {
    /// Whether debuginfod is on: the flag, or `DEBUGINFOD_URLS`.
    pub fn is_on(&self) -> bool {
        self.debuginfod.is_some()
            || std::env::var("DEBUGINFOD_URLS").is_ok_and(|u| !u.trim().is_empty())
    }

    /// Where debug files come from for `command`: `dirs`, and the debuginfod client when it is on, with the
    /// downloads it reports to (None when it is off).
    pub fn sources(
        &self,
        dirs: Vec<PathBuf>,
        command: &'static str,
    ) -> anyhow::Result<(DebugSources, Option<Arc<Downloads>>)> {
        let env = |name| {
            std::env::var(name)
                .ok()
                .filter(|v: &String| !v.trim().is_empty())
        };
        let urls = match &self.debuginfod {
            Some(given) if !given.trim().is_empty() => given.clone(),
            Some(_) => env("DEBUGINFOD_URLS").context(
                "--debuginfod names no server: give --debuginfod=URL, or set DEBUGINFOD_URLS",
            )?,
            None => match env("DEBUGINFOD_URLS") {
                Some(urls) => urls,
                None => {
                    return Ok((
                        DebugSources {
                            dirs,
                            debuginfod: None,
                            inflated: None,
                        },
                        None,
                    ))
                }
            },
        };
        let timeout = match env("DEBUGINFOD_TIMEOUT") {
            Some(t) => Duration::from_secs(t.trim().parse().with_context(|| {
                format!("DEBUGINFOD_TIMEOUT={t} is not a whole number of seconds")
            })?),
            None => DEFAULT_TIMEOUT,
        };
        let limits = limits(env("DEBUGINFOD_MAXSIZE"), env("DEBUGINFOD_MAXTIME"))?;
        let cache = match (
            env("DEBUGINFOD_CACHE_PATH"),
            env("XDG_CACHE_HOME"),
            env("HOME"),
        ) {
            (Some(dir), _, _) => PathBuf::from(dir).join("rprof"),
            (None, Some(dir), _) => PathBuf::from(dir).join("rprof/debuginfod"),
            (None, None, Some(home)) => PathBuf::from(home).join(".cache/rprof/debuginfod"),
            _ => anyhow::bail!(
                "debuginfod needs a cache directory: set DEBUGINFOD_CACHE_PATH (or HOME)"
            ),
        };
        let config = DebuginfodConfig {
            urls: urls.split_whitespace().map(str::to_string).collect(),
            cache,
            timeout,
            limits,
        };
        let downloads = Arc::new(Downloads::new(command));
        let events = Arc::clone(&downloads);
        let client = Debuginfod::new(config, Arc::new(move |event| events.event(event)));
        let sources = DebugSources {
            dirs,
            debuginfod: Some(Arc::new(client)),
            inflated: None,
        };
        Ok((sources, Some(downloads)))
    }
}

/// The bounds of `DEBUGINFOD_MAXSIZE` (bytes) and `DEBUGINFOD_MAXTIME` (seconds), as elfutils reads them: 0
/// (or unset) is no bound.
fn limits(max_size: Option<String>, max_time: Option<String>) -> anyhow::Result<Limits> {
    let number = |name: &str, value: Option<String>, unit: &str| -> anyhow::Result<Option<u64>> {
        let Some(v) = value else {
            return Ok(None);
        };
        let n: u64 = v.trim().parse().with_context(|| {
            format!("{name}={v} is not a whole number of {unit}: set it to one (0: no bound), or unset it")
        })?;
        Ok((n > 0).then_some(n))
    };
    Ok(Limits {
        max_size: number("DEBUGINFOD_MAXSIZE", max_size, "bytes")?,
        max_time: number("DEBUGINFOD_MAXTIME", max_time, "seconds")?.map(Duration::from_secs),
    })
}

/// Why a file was not fetched, naming the variable that bounds it.
fn refusal(why: Refusal) -> String {
    match why {
        Refusal::TooLarge { max, size } => {
            let size = size.map_or(String::new(), |n| format!(" ({} bytes)", thousands(n)));
            format!("it is larger{size} than DEBUGINFOD_MAXSIZE={max} bytes")
        }
        Refusal::TooSlow { max } => format!(
            "its download did not end within DEBUGINFOD_MAXTIME={} seconds",
            max.as_secs()
        ),
    }
}

impl Downloads {
    fn new(command: &'static str) -> Downloads {
        let bar = ProgressBar::hidden();
        bar.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("a valid template"));
        Downloads {
            command,
            bar,
            shown: Once::new(),
            in_flight: AtomicU64::new(0),
            files: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    fn event(&self, event: Event<'_>) {
        match event {
            Event::Started { what, build_id, .. } => {
                self.shown.call_once(|| {
                    // A hidden target when stderr is not a terminal.
                    self.bar.set_draw_target(ProgressDrawTarget::stderr());
                });
                if self.in_flight.fetch_add(1, Ordering::Relaxed) == 0 {
                    self.bar.reset();
                    self.bar.enable_steady_tick(Duration::from_millis(200));
                }
                self.bar.set_message(format!(
                    "debuginfod: {} so far; fetching the {what} of {build_id}",
                    self.so_far()
                ));
            }
            Event::Bytes(n) => {
                self.bytes.fetch_add(n, Ordering::Relaxed);
                self.bar.set_message(format!("debuginfod: {}", self.so_far()));
            }
            Event::Finished { fetched } => {
                self.files.fetch_add(u64::from(fetched), Ordering::Relaxed);
                if self.in_flight.fetch_sub(1, Ordering::Relaxed) == 1 {
                    self.bar.disable_steady_tick();
                    self.bar.finish_and_clear();
                }
            }
            Event::ServerFailed { url, error } => self.bar.suspend(|| {
                eprintln!(
                    "rprof {}: warning: debuginfod server {url} failed ({error}); going on without it",
                    self.command
                )
            }),
            Event::Refused {
                what,
                build_id,
                why,
            } => self.bar.suspend(|| {
                eprintln!(
                    "rprof {}: warning: debuginfod: the {what} of build id {build_id} was not fetched: {}; \
                     going on without it",
                    self.command,
                    refusal(why)
                )
            }),
        }
    }

    /// `3 files, 12.3 MiB`.
    fn so_far(&self) -> String {
        let files = self.files.load(Ordering::Relaxed);
        let bytes = rprof::record::human_size(self.bytes.load(Ordering::Relaxed));
        match files {
            1 => format!("1 file, {bytes}"),
            n => format!("{} files, {bytes}", thousands(n)),
        }
    }

    /// Clear the progress line, and say what was fetched, if anything.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
        if self.files.load(Ordering::Relaxed) > 0 {
            eprintln!(
                "rprof {}: debuginfod: fetched {} (in the cache for later runs)",
                self.command,
                self.so_far()
            );
        }
    }
}
