//! A debuginfod client: debug files, executables and source files by build id, from the servers the user
//! named (`DEBUGINFOD_URLS`), kept in rprof's own cache ([`cache`]).
//!
//! Requests are blocking (ureq) and run on the callers' threads: the symbolizer opens binaries on a pool of
//! threads, so the files of several modules download at once. Each request has a timeout (connecting, the
//! answer, and every read); a server that fails (timeout, refused connection, an error status other than
//! "not found", a file with another build id) is said once and not asked again in this run, so a run never
//! waits for a dead server twice. What the servers sent stays in the cache, which later runs read first, also
//! without a network. The library prints nothing: it reports through [`Event`]s.
//!
//! Downloads may be bounded as elfutils' client bounds them ([`Limits`]: `DEBUGINFOD_MAXSIZE`,
//! `DEBUGINFOD_MAXTIME`): a larger file is refused (the request says the bound in `X-DEBUGINFOD-MAXSIZE`, to
//! which elfutils' server answers 406; else by the answer's Content-Length, else by the bytes read), and a
//! download is stopped when the time is up. A refused file is said once ([`Event::Refused`]), neither cached
//! nor marked missing (a later run with other bounds may fetch it), and no other server is asked for it.
mod cache;

pub use cache::Kind;
use cache::{Cache, Download};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which servers, which cache, which timeout (plain config: the command line reads the environment).
#[derive(Clone, Debug)]
pub struct DebuginfodConfig {
    /// Server URLs, asked in order.
    pub urls: Vec<String>,
    /// rprof's cache directory.
    pub cache: PathBuf,
    /// How long a server may take to connect, to answer, and for each read of the answer.
    pub timeout: Duration,
    /// Bounds on each download.
    pub limits: Limits,
}

/// Bounds on each download (elfutils' `DEBUGINFOD_MAXSIZE` and `DEBUGINFOD_MAXTIME`); None: unbounded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Bytes: a larger file is not downloaded.
    pub max_size: Option<u64>,
    /// The whole download (connecting, the answer and its body) must end within this time.
    pub max_time: Option<Duration>,
}

/// Why a file was not downloaded although a server has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Larger than [`Limits::max_size`]: its size when the server said it (Content-Length); None when the
    /// server refused it for the size the request gave, or the bytes read went past the bound.
    TooLarge { max: u64, size: Option<u64> },
    /// Not whole within [`Limits::max_time`].
    TooSlow { max: Duration },
}

/// What the client tells while it works.
#[derive(Debug)]
pub enum Event<'a> {
    /// A download began: what, for which build id, and its size when the server says it.
    Started {
        what: &'static str,
        build_id: &'a str,
        size: Option<u64>,
    },
    /// Bytes of a download arrived.
    Bytes(u64),
    /// A download ended: whether it brought the file.
    Finished { fetched: bool },
    /// A server failed; it is not asked again in this run.
    ServerFailed { url: &'a str, error: String },
    /// A file was not downloaded: it is past the [`Limits`]. Said once per file.
    Refused {
        what: &'static str,
        build_id: &'a str,
        why: Refusal,
    },
}

/// Where [`Event`]s go.
pub type Events = Arc<dyn Fn(Event<'_>) + Send + Sync>;

/// The client: shared by the threads that open binaries.
pub struct Debuginfod {
    urls: Vec<String>,
    cache: Cache,
    agent: ureq::Agent,
    limits: Limits,
    /// Servers that failed in this run.
    failed: Mutex<Vec<String>>,
    events: Events,
}

impl std::fmt::Debug for Debuginfod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Debuginfod")
            .field("urls", &self.urls)
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

/// Why one request brought no file.
enum Miss {
    /// The server has no such file.
    NotFound,
    /// The server failed.
    Failed(String),
    /// The file is past the limits.
    Refused(Refusal),
}

impl Debuginfod {
    pub fn new(config: DebuginfodConfig, events: Events) -> Debuginfod {
        let agent = ureq::Agent::config_builder()
            .timeout_connect(Some(config.timeout))
            .timeout_recv_response(Some(config.timeout))
            .timeout_per_read(Some(config.timeout))
            .http_status_as_error(false)
            .user_agent(concat!("rprof/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Debuginfod {
            urls: config
                .urls
                .iter()
                .map(|u| u.trim_end_matches('/').to_string())
                .filter(|u| !u.is_empty())
                .collect(),
            cache: Cache::new(config.cache),
            agent,
            limits: config.limits,
            failed: Mutex::new(Vec::new()),
            events,
        }
    }

    /// The separate debug file of a build id.
    pub fn debuginfo(&self, build_id: &[u8]) -> Option<PathBuf> {
        self.fetch(build_id, Kind::Debuginfo)
    }

    /// The executable (or library) of a build id.
    pub fn executable(&self, build_id: &[u8]) -> Option<PathBuf> {
        self.fetch(build_id, Kind::Executable)
    }

    /// A source file of a build id, by its path as DWARF names it.
    pub fn source(&self, build_id: &[u8], path: &str) -> Option<PathBuf> {
        self.fetch(build_id, Kind::Source(path))
    }

    /// The file from the cache, else from the first server that has it (then cached).
    fn fetch(&self, build_id: &[u8], kind: Kind<'_>) -> Option<PathBuf> {
        let hex = crate::buildid::hex(build_id);
        let path = self.cache.path(&hex, kind)?;
        if let Some(cached) = self.cache.get(&path) {
            return Some(cached);
        }
        if self.cache.known_missing(&path) {
            return None;
        }
        let mut all_said_none = true;
        for url in &self.urls {
            if self.has_failed(url) {
                all_said_none = false;
                continue;
            }
            match self.download(url, &hex, build_id, kind, &path) {
                Ok(fetched) => return Some(fetched),
                Err(Miss::NotFound) => {}
                Err(Miss::Refused(why)) => {
                    (self.events)(Event::Refused {
                        what: kind.what(),
                        build_id: &hex,
                        why,
                    });
                    return None;
                }
                Err(Miss::Failed(error)) => {
                    all_said_none = false;
                    self.fail(url, error);
                }
            }
        }
        if all_said_none && !self.urls.is_empty() {
            self.cache.mark_missing(&path);
        }
        None
    }

    /// Ask one server, and cache what it sends.
    fn download(
        &self,
        url: &str,
        hex: &str,
        build_id: &[u8],
        kind: Kind<'_>,
        path: &Path,
    ) -> Result<PathBuf, Miss> {
        let request = format!("{url}/buildid/{hex}/{}", kind.url_path());
        let started = Instant::now();
        let response = self
            .request(&request)
            .call()
            .map_err(|e| self.miss(started, e.to_string()))?;
        let size = response.body().content_length();
        match response.status().as_u16() {
            200 => {}
            404 | 410 => return Err(Miss::NotFound),
            // elfutils' server: the file is larger than X-DEBUGINFOD-MAXSIZE.
            406 if self.limits.max_size.is_some() => return Err(self.too_large(None)),
            status => return Err(Miss::Failed(format!("HTTP status {status} for {request}"))),
        }
        if let Some(size) = size.filter(|&n| self.limits.max_size.is_some_and(|max| n > max)) {
            return Err(self.too_large(Some(size)));
        }
        (self.events)(Event::Started {
            what: kind.what(),
            build_id: hex,
            size,
        });
        let mut body = response.into_body().into_reader();
        let mut download = self
            .cache
            .download(path)
            .map_err(|e| Miss::Failed(format!("cannot write into the cache: {e}")))?;
        let copied = self.copy(&mut body, &mut download, started);
        let kept = copied.and_then(|()| match kind {
            Kind::Source(_) => Ok(()),
            _ => check_build_id(download.temp_path(), build_id),
        });
        let kept = kept.and_then(|()| {
            download
                .keep()
                .map_err(|e| Miss::Failed(format!("cannot write into the cache: {e}")))
        });
        (self.events)(Event::Finished {
            fetched: kept.is_ok(),
        });
        kept
    }

    /// A GET of `url`, bounded by [`Limits::max_time`] from DNS to the body's end, and saying
    /// [`Limits::max_size`] to the server as elfutils' client does.
    fn request(&self, url: &str) -> ureq::RequestBuilder<ureq::typestate::WithoutBody> {
        let mut request = self.agent.get(url);
        if let Some(max) = self.limits.max_size {
            request = request.header("X-DEBUGINFOD-MAXSIZE", max.to_string());
        }
        match self.limits.max_time {
            Some(max) => request.config().timeout_global(Some(max)).build(),
            None => request,
        }
    }

    /// Why a request or a read that began at `started` failed: the time limit when it is up, else `error`.
    fn miss(&self, started: Instant, error: String) -> Miss {
        match self.limits.max_time {
            Some(max) if started.elapsed() >= max => Miss::Refused(Refusal::TooSlow { max }),
            _ => Miss::Failed(error),
        }
    }

    fn too_large(&self, size: Option<u64>) -> Miss {
        Miss::Refused(Refusal::TooLarge {
            max: self.limits.max_size.unwrap_or(0),
            size,
        })
    }

    /// Copy a body into a download, telling the bytes as they come, within the limits.
    fn copy(
        &self,
        body: &mut impl Read,
        download: &mut Download,
        started: Instant,
    ) -> Result<(), Miss> {
        let mut buf = vec![0u8; 1 << 16];
        let mut read = 0u64;
        loop {
            let n = body
                .read(&mut buf)
                .map_err(|e| self.miss(started, format!("the download broke off: {e}")))?;
            if n == 0 {
                return Ok(());
            }
            read += n as u64;
            if self.limits.max_size.is_some_and(|max| read > max) {
                return Err(self.too_large(None));
            }
            if let Some(max) = self.limits.max_time.filter(|&max| started.elapsed() > max) {
                return Err(Miss::Refused(Refusal::TooSlow { max }));
            }
            download
                .writer()
                .write_all(&buf[..n])
                .map_err(|e| Miss::Failed(format!("cannot write into the cache: {e}")))?;
            (self.events)(Event::Bytes(n as u64));
        }
    }

    fn has_failed(&self, url: &str) -> bool {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|f| f == url)
    }

    /// Mark a server failed, and say so the first time.
    fn fail(&self, url: &str, error: String) {
        let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        if !failed.iter().any(|f| f == url) {
            failed.push(url.to_string());
            drop(failed);
            (self.events)(Event::ServerFailed { url, error });
        }
    }
}

/// A downloaded ELF file must have the build id it was asked for.
fn check_build_id(path: &Path, build_id: &[u8]) -> Result<(), Miss> {
    match crate::buildid::file_build_id(path) {
        Some(found) if found == build_id => Ok(()),
        _ => Err(Miss::Failed(format!(
            "it sent a file without build id {}",
            crate::buildid::hex(build_id)
        ))),
    }
}

#[cfg(test)]
mod tests;
