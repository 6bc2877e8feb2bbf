//! `rprof record --push URL`: continuous profiling. While recording goes on, each period's samples become
//! one profile (symbolized, gzipped pprof) sent to a Pyroscope server's HTTP ingest API, through a spool on
//! disk that keeps what the store could not take yet.
//!
//! Three threads, none of them the sampling one: the sampling thread only copies each record into a batch
//! ([`tap`]); the profile thread resolves stacks and cuts periods ([`worker`], [`live`]); the sender thread
//! sends the spool ([`send`], [`spool`]). The push is output: it sits beside report's pprof writer (which it
//! uses) and is fed by record's loop; it never reaches the syscall layer.
mod budget;
mod destination;
pub(crate) mod live;
mod pyroscope;
mod send;
mod spool;
mod tap;
mod worker;

use crate::record::Tap;
use crate::symbols::SymbolizerOptions;
pub use budget::PushBudget;
pub use destination::Destination;
pub use send::SendCounts;
pub use spool::Elsewhere;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
pub use worker::MadeCounts;

/// How to authenticate to the store.
#[derive(Clone, Debug, Default)]
pub enum Auth {
    #[default]
    None,
    Basic {
        user: String,
        password: String,
    },
    Bearer(String),
}

/// Everything the push needs.
#[derive(Clone, Debug)]
pub struct PushConfig {
    /// The Pyroscope server (`http(s)://HOST:PORT`).
    pub url: Option<String>,
    /// An OTLP/HTTP profiles endpoint (`.../v1development/profiles`): each profile goes there too.
    pub otlp_url: Option<String>,
    /// The period of each profile (whole seconds).
    pub every: Duration,
    /// The application name.
    pub app: String,
    /// Labels of every profile (`host` among them).
    pub labels: Vec<(String, String)>,
    pub spool: PathBuf,
    pub spool_max_bytes: u64,
    /// How long the end of a run may try to empty the spool.
    pub flush_timeout: Duration,
    /// The longest one request may take.
    pub timeout: Duration,
    pub auth: Auth,
    /// `X-Scope-OrgID`.
    pub tenant: Option<String>,
    /// Trust these CA certificates (PEM) instead of the bundled roots.
    pub ca_file: Option<PathBuf>,
    pub symbolizer: SymbolizerOptions,
    /// Send file offsets, build ids and mappings instead of names (the store symbolizes).
    pub unsymbolized: bool,
    /// Keep a copy of /proc/kallsyms in the build-id cache (once per kernel build, as `record` does unless
    /// `-N`), and name the kernel's frames from it: a plain file read at each start instead of the kernel
    /// formatting every line of /proc/kallsyms.
    pub kallsyms_copy: bool,
    /// The CPU and memory the symbolizing may take (None: unbounded); over it, a period's binaries not yet
    /// read go out unsymbolized (build ids and offsets), labelled `rprof_unsymbolized`.
    pub budget: Option<PushBudget>,
}

impl PushConfig {
    /// The user that authenticates (basic auth), part of a destination's identity.
    fn user(&self) -> Option<&str> {
        match &self.auth {
            Auth::Basic { user, .. } => Some(user),
            _ => None,
        }
    }

    /// The Pyroscope store of this push (None without --push).
    pub fn pyroscope_destination(&self) -> Option<Destination> {
        let url = self.url.as_deref()?;
        Some(Destination::new(
            "pyroscope",
            url,
            self.tenant.as_deref(),
            self.user(),
        ))
    }

    /// The OTLP endpoint of this push (None without --push-otlp).
    pub fn otlp_destination(&self) -> Option<Destination> {
        let url = self.otlp_url.as_deref()?;
        Some(Destination::new(
            "otlp",
            url,
            self.tenant.as_deref(),
            self.user(),
        ))
    }

    /// Every store this push sends to; only their profiles leave the spool.
    pub fn destinations(&self) -> Vec<Destination> {
        [self.pyroscope_destination(), self.otlp_destination()]
            .into_iter()
            .flatten()
            .collect()
    }
}

/// Something the push says at its start, once (the caller prints it as one line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PushNotice {
    /// The spool holds profiles made for other stores: kept (within the spool's size), not sent here; an
    /// rprof pushing to their store sends them.
    OtherDestinations {
        spool: PathBuf,
        waiting: Vec<(Destination, usize)>,
    },
    /// The spool holds profiles of an older rprof, which did not record their store: never sent, kept until
    /// the size bound drops them (they are the oldest).
    Unkeyed { spool: PathBuf, count: usize },
}

impl std::fmt::Display for PushNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PushNotice::OtherDestinations { spool, waiting } => {
                let total: usize = waiting.iter().map(|w| w.1).sum();
                let each: Vec<String> = waiting.iter().map(|(d, n)| format!("{n} for {d}")).collect();
                write!(
                    f,
                    "the spool {} keeps {total} profiles made for other stores, not sent here ({}); \
                     an rprof pushing there sends them",
                    spool.display(),
                    each.join(", ")
                )
            }
            PushNotice::Unkeyed { spool, count } => write!(
                f,
                "the spool {0} holds {count} profiles of an older rprof that did not record their store: never \
                 sent, kept until the spool's size bound drops them (delete them with \
                 rm {0}/????????????????????-??????????-??????.push)",
                spool.display()
            ),
        }
    }
}

/// Errors of the push.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("cannot use the spool directory {path}: {source} (choose another with --spool DIR)")]
    Spool {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the spool directory {path} is locked by another rprof ({errno}): give each rprof its own --spool DIR")]
    SpoolBusy {
        path: PathBuf,
        errno: nix::errno::Errno,
    },
    #[error(
        "cannot use the CA file {path}: {reason} (give a PEM file of CA certificates to --push-ca)"
    )]
    CaFile { path: PathBuf, reason: String },
    #[error("cannot encode a profile: {0}")]
    Encode(std::io::Error),
    #[error(transparent)]
    Recording(#[from] crate::recording::RecordingError),
    #[error(transparent)]
    Report(#[from] crate::report::ReportError),
    #[error("the push thread could not start: {0}")]
    Thread(std::io::Error),
    #[error("the push thread failed: it panicked")]
    Panicked,
}

/// What the push did, for the closing line.
#[derive(Clone, Debug, Default)]
pub struct PushSummary {
    pub made: MadeCounts,
    pub sent: SendCounts,
    /// Profiles for this push's stores still in the spool at the end, and where.
    pub spooled: usize,
    /// Profiles in the spool for other stores (and of older rprofs), kept for them.
    pub elsewhere: usize,
    pub spool: PathBuf,
    /// Profiles dropped from the spool (oldest first) to keep it within its size.
    pub dropped: u64,
}

impl std::fmt::Display for PushSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rprof record: push: {} profiles made ({} samples, {} bytes sent each on average); pushed {}, \
             retried {}, still spooled {} (in {}{}), dropped {}",
            self.made.profiles,
            self.made.samples,
            self.made.bytes.checked_div(self.made.profiles).unwrap_or(0),
            self.sent.pushed,
            self.sent.retried,
            self.spooled,
            self.spool.display(),
            match self.elsewhere {
                0 => String::new(),
                n => format!(", beside {n} for other stores"),
            },
            self.dropped
        )?;
        if self.sent.rejected > 0 {
            write!(f, ", rejected by the store {}", self.sent.rejected)?;
        }
        if self.made.unread_periods > 0 {
            write!(
                f,
                "; {} periods over the budget pushed their new binaries unsymbolized",
                self.made.unread_periods
            )?;
        }
        if self.made.late > 0 {
            write!(
                f,
                "; {} samples came after their period and went into the next",
                self.made.late
            )?;
        }
        if let (Some(e), true) = (&self.sent.last_error, self.sent.failures > 0) {
            write!(f, "; {} failed tries, the last: {e}", self.sent.failures)?;
        }
        Ok(())
    }
}

/// A running push: its tap (for [`crate::record::record_with_tap`]) and its threads.
pub struct Pusher {
    tap: Option<tap::PushTap>,
    worker: JoinHandle<Result<MadeCounts, PushError>>,
    sender: JoinHandle<(SendCounts, u64)>,
    spool: Arc<spool::Spool>,
    path: PathBuf,
    /// The keys of this push's destinations.
    keys: Vec<u64>,
    notices: Vec<PushNotice>,
}

impl Pusher {
    /// Open the spool and start the threads (the sender starts on what an earlier rprof left at once).
    pub fn start(cfg: PushConfig) -> Result<Pusher, PushError> {
        crate::mapped::bound_heap();
        let cfg = Arc::new(cfg);
        let spool = Arc::new(spool::Spool::open(&cfg.spool, cfg.spool_max_bytes)?);
        let keys: Vec<u64> = cfg.destinations().iter().map(Destination::key).collect();
        let notices = notices(&cfg.spool, spool.elsewhere(&keys));
        let sender = send::Sender::new(Arc::clone(&cfg), Arc::clone(&spool))?;
        let (wake_tx, wake_rx) = mpsc::channel();
        let (tx, rx) = mpsc::sync_channel(tap::QUEUED_ROUNDS);
        let python_names = crate::python::Names::default();
        let worker = worker::Worker {
            cfg: Arc::clone(&cfg),
            spool: Arc::clone(&spool),
            wake: wake_tx,
            python_names: python_names.clone(),
        };
        let sender = std::thread::Builder::new()
            .name("rprof-push-send".into())
            .spawn(move || sender.run(wake_rx))
            .map_err(PushError::Thread)?;
        let worker = std::thread::Builder::new()
            .name("rprof-push".into())
            .spawn(move || worker.run(rx))
            .map_err(PushError::Thread)?;
        Ok(Pusher {
            tap: Some(tap::PushTap {
                sender: tx,
                records: Vec::new(),
                python_names,
            }),
            worker,
            sender,
            spool,
            path: cfg.spool.clone(),
            keys,
            notices,
        })
    }

    /// What to say at the start (once): profiles the spool keeps for other stores.
    pub fn notices(&self) -> &[PushNotice] {
        &self.notices
    }

    /// The tap to hand to the recorder (once).
    pub fn tap(&mut self) -> Option<Box<dyn Tap>> {
        self.tap.take().map(|t| Box::new(t) as Box<dyn Tap>)
    }

    /// Wait for the last profile and the final flush (the recorder has dropped the tap).
    pub fn finish(mut self) -> Result<PushSummary, PushError> {
        drop(self.tap.take());
        let made = self.worker.join().map_err(|_| PushError::Panicked)?;
        let (sent, dropped) = self.sender.join().map_err(|_| PushError::Panicked)?;
        let made = made?;
        let spooled = self.spool.list_for(&self.keys).len();
        Ok(PushSummary {
            made,
            sent,
            spooled,
            elsewhere: self.spool.list().len() - spooled,
            spool: self.path,
            dropped,
        })
    }
}

/// The notices of what a spool holds for other stores.
fn notices(spool: &std::path::Path, elsewhere: Elsewhere) -> Vec<PushNotice> {
    let mut out = Vec::new();
    if !elsewhere.others.is_empty() {
        out.push(PushNotice::OtherDestinations {
            spool: spool.to_path_buf(),
            waiting: elsewhere.others,
        });
    }
    if elsewhere.unkeyed > 0 {
        out.push(PushNotice::Unkeyed {
            spool: spool.to_path_buf(),
            count: elsewhere.unkeyed,
        });
    }
    out
}
