//! The sender thread: sends the spooled profiles oldest first, removes each once the store took it, and
//! backs off (1 s, doubling up to 30 s) while the store fails; at the end it tries once more, for at most the
//! flush timeout, and leaves what is still spooled for the next rprof.
//!
//! Only the profiles made for this push's destinations are sent, each to its own: the spool's other
//! profiles (other stores, tenants, users; an older rprof's, whose store is unknown) stay for their own.
use super::destination::Destination;
use super::spool::{Entry, Spool};
use super::{Auth, PushConfig, PushError};
use base64::Engine;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What the sender did.
#[derive(Clone, Debug, Default)]
pub struct SendCounts {
    /// Profiles the store took.
    pub pushed: u64,
    /// Of those, how many needed more than one try (or were left by an earlier rprof).
    pub retried: u64,
    /// Failed tries.
    pub failures: u64,
    /// The store refused them (a 4xx other than 408 and 429): dropped, never retried.
    pub rejected: u64,
    /// The last failure, for the closing line.
    pub last_error: Option<String>,
}

/// What the profile thread tells the sender.
pub(super) enum Wake {
    /// A profile was spooled.
    Spooled,
}

pub(super) struct Sender {
    agent: ureq::Agent,
    cfg: Arc<PushConfig>,
    spool: Arc<Spool>,
    pub(super) counts: SendCounts,
    /// Spooled files that failed at least once.
    failed_once: std::collections::HashSet<std::path::PathBuf>,
    /// Files found in the spool at the start (left by an earlier rprof).
    inherited: std::collections::HashSet<std::path::PathBuf>,
    /// This push's destinations, and the keys of their spool files.
    destinations: Vec<Destination>,
    keys: Vec<u64>,
}

impl Sender {
    pub(super) fn new(cfg: Arc<PushConfig>, spool: Arc<Spool>) -> Result<Sender, PushError> {
        let mut config = ureq::Agent::config_builder()
            .timeout_global(Some(cfg.timeout))
            .http_status_as_error(false)
            .user_agent(concat!("rprof/", env!("CARGO_PKG_VERSION")));
        if let Some(ca) = &cfg.ca_file {
            let pem = std::fs::read(ca).map_err(|source| PushError::CaFile {
                path: ca.clone(),
                reason: source.to_string(),
            })?;
            let certs: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                    _ => None,
                })
                .collect();
            if certs.is_empty() {
                return Err(PushError::CaFile {
                    path: ca.clone(),
                    reason: "it holds no PEM certificate".into(),
                });
            }
            let tls = ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::Specific(Arc::new(certs)))
                .build();
            config = config.tls_config(tls);
        }
        let destinations = cfg.destinations();
        let keys: Vec<u64> = destinations.iter().map(Destination::key).collect();
        let inherited = spool.list_for(&keys).into_iter().map(|f| f.path).collect();
        Ok(Sender {
            destinations,
            keys,
            agent: config.build().into(),
            cfg,
            spool,
            counts: SendCounts::default(),
            failed_once: Default::default(),
            inherited,
        })
    }

    /// Send until the profile thread hangs up, then flush for at most the flush timeout.
    pub(super) fn run(mut self, wake: Receiver<Wake>) -> (SendCounts, u64) {
        let mut backoff = Duration::ZERO;
        let mut next_try = Instant::now();
        loop {
            let now = Instant::now();
            if now >= next_try {
                match self.send_all(None) {
                    true => {
                        backoff = Duration::ZERO;
                        next_try = now + Duration::from_secs(3600);
                    }
                    false => {
                        backoff = (backoff * 2).clamp(FIRST_BACKOFF, MAX_BACKOFF);
                        next_try = now + backoff;
                    }
                }
            }
            match wake.recv_timeout(next_try.saturating_duration_since(Instant::now())) {
                // A healthy store gets each profile at once; a failing one at the next try.
                Ok(Wake::Spooled) if backoff.is_zero() => next_try = Instant::now(),
                Ok(Wake::Spooled) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        let deadline = Instant::now() + self.cfg.flush_timeout;
        while Instant::now() < deadline && !self.send_all(Some(deadline)) {
            std::thread::sleep(
                Duration::from_millis(200).min(deadline - Instant::now().min(deadline)),
            );
        }
        let dropped = self.dropped();
        (self.counts, dropped)
    }

    /// Send this push's spooled profiles oldest first; false when a destination failed (its later profiles
    /// wait for the next try; another destination's go on).
    fn send_all(&mut self, deadline: Option<Instant>) -> bool {
        let mut failed: Vec<u64> = Vec::new();
        for file in self.spool.list_for(&self.keys) {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            let key = file.key.unwrap_or_default();
            if failed.contains(&key) {
                continue;
            }
            let Some(entry) = self.spool.read(&file.path) else {
                continue;
            };
            // The name's key says where; the header must say the same (else the file is not ours to send).
            let Some(url) = self.url_of(&entry) else {
                continue;
            };
            if !self.send_one(entry, &url) {
                failed.push(key);
            }
        }
        failed.is_empty()
    }

    /// Where to POST a spooled profile: None unless it was made for one of this push's destinations.
    fn url_of(&self, entry: &Entry) -> Option<String> {
        let to = entry.request.to.as_ref()?;
        if !self.destinations.contains(to) {
            return None;
        }
        match to.kind.as_str() {
            "pyroscope" => self
                .cfg
                .url
                .as_ref()
                .map(|u| format!("{}/ingest?{}", u.trim_end_matches('/'), entry.request.query)),
            "otlp" => self.cfg.otlp_url.clone(),
            _ => None,
        }
    }

    /// One try; true when the profile left the spool (taken, or refused for good).
    fn send_one(&mut self, entry: Entry, url: &str) -> bool {
        let mut request = self
            .agent
            .post(url)
            .header("Content-Type", &entry.request.content_type);
        match &self.cfg.auth {
            Auth::None => {}
            Auth::Basic { user, password } => {
                let token = base64::engine::general_purpose::STANDARD
                    .encode(format!("{user}:{password}").as_bytes());
                request = request.header("Authorization", format!("Basic {token}"));
            }
            Auth::Bearer(token) => {
                request = request.header("Authorization", format!("Bearer {token}"));
            }
        }
        if let Some(tenant) = &self.cfg.tenant {
            request = request.header("X-Scope-OrgID", tenant);
        }
        let status = request.send(&entry.body[..]).map(|r| r.status().as_u16());
        // The closing line names the URL, never a password in it.
        let url = super::destination::without_credentials(url).0;
        match status {
            Ok(s) if (200..300).contains(&s) => {
                self.spool.remove(&entry.path);
                self.counts.pushed += 1;
                let retried = self.failed_once.remove(&entry.path);
                if retried || self.inherited.remove(&entry.path) {
                    self.counts.retried += 1;
                }
                true
            }
            Ok(s) if (400..500).contains(&s) && s != 408 && s != 429 => {
                self.spool.remove(&entry.path);
                self.counts.rejected += 1;
                self.counts.last_error = Some(format!("{url}: HTTP {s}"));
                true
            }
            other => {
                self.counts.failures += 1;
                self.counts.last_error = Some(match other {
                    Ok(s) => format!("{url}: HTTP {s}"),
                    Err(e) => format!("{url}: {e}"),
                });
                self.failed_once.insert(entry.path);
                false
            }
        }
    }

    pub(super) fn dropped(&self) -> u64 {
        self.spool.dropped.load(Ordering::Relaxed)
    }
}
