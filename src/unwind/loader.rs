//! Loading modules off the unwinding thread.
//!
//! Loading a module reads files: the ELF file's layout and unwind sections, and a separate debug file's
//! `.debug_frame` when it has one. On a machine whose disk is busy (a build writing gigabytes, a cold page
//! cache), one such read can take seconds. While recording, the unwinding thread is the one that drains the
//! rings and writes the recording: a stall there leaves every sample since in the rings, and a recorder killed
//! meanwhile (SIGKILL, OOM) loses them all. So the reads happen on a loader thread; while recording, the
//! unwinding thread waits for a load at most [`LOAD_WAIT`] (on an idle machine a load takes milliseconds, and
//! nothing changes), then unwinds without that module (the stack stops at its frame, counted as cut while
//! loading) and picks the module up when it is there. A recording's reader (`report`, `script`) has no ring to
//! drain: it waits for every load.
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use framehop::Module;

use super::modules::{self, ModuleKey};
use crate::elf_layout::ElfLayout;

/// The longest the unwinding thread waits for one module: below what fills a ring meanwhile (DWARF mode's
/// default ring holds about 60 ms of samples at 999 Hz with 16 KiB stack copies). An idle machine loads
/// libc's module in about 5 ms, cold.
pub(super) const LOAD_WAIT: Duration = Duration::from_millis(50);

/// A mapping whose module is wanted.
pub(super) struct Request {
    pub(super) pid: u32,
    pub(super) path: Arc<str>,
    pub(super) start: u64,
    pub(super) pgoff: u64,
    /// The file's layout when it is known already (else it is read).
    pub(super) layout: Option<Arc<ElfLayout>>,
    /// This process's vDSO image, for `[vdso]`.
    pub(super) vdso: Option<Arc<[u8]>>,
}

/// What a load found.
pub(super) struct Loaded {
    pub(super) path: Arc<str>,
    /// The file's layout (None: not a readable ELF file).
    pub(super) layout: Option<Arc<ElfLayout>>,
    /// The module's key and the module (None: its unwind sections could not be read).
    pub(super) module: Option<(ModuleKey, Option<Module<Vec<u8>>>)>,
}

/// The loader thread, started at the first request, and the paths it is loading.
pub(super) struct Loader {
    debug_dirs: Vec<PathBuf>,
    thread: Option<(Sender<Request>, Receiver<Loaded>)>,
    /// Loads done without a thread (it could not start), waiting to be collected.
    done: Vec<Loaded>,
    pending: HashSet<Arc<str>>,
}

impl Loader {
    pub(super) fn new(debug_dirs: Vec<PathBuf>) -> Loader {
        Loader {
            debug_dirs,
            thread: None,
            done: Vec::new(),
            pending: HashSet::new(),
        }
    }

    /// Whether a module of `path` is being loaded.
    pub(super) fn pending(&self, path: &str) -> bool {
        self.pending.contains(path)
    }

    /// Whether any module is being loaded (a new request waits behind it).
    pub(super) fn busy(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Ask for a module (on the loader thread; here when the thread cannot start).
    pub(super) fn request(&mut self, req: Request) {
        self.pending.insert(req.path.clone());
        if self.thread.is_none() {
            self.thread = spawn(self.debug_dirs.clone());
        }
        let req = match &self.thread {
            Some((tx, _)) => match tx.send(req) {
                Ok(()) => return,
                Err(mpsc::SendError(req)) => req,
            },
            None => req,
        };
        self.done.push(load(req, &self.debug_dirs));
    }

    /// The loads finished by now, waiting for `path`'s (None: for none) up to `wait` (None: until it is done).
    pub(super) fn collect(&mut self, path: Option<&str>, wait: Option<Duration>) -> Vec<Loaded> {
        let mut out = std::mem::take(&mut self.done);
        let deadline = wait.map(|w| Instant::now() + w);
        if let Some((_, rx)) = &self.thread {
            loop {
                let waiting = path.is_some_and(|p| {
                    self.pending.contains(p) && !out.iter().any(|l| &*l.path == p)
                });
                let next = match (waiting, deadline) {
                    (true, Some(d)) => rx.recv_timeout(d.saturating_duration_since(Instant::now())),
                    (true, None) => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                    (false, _) => rx.try_recv().map_err(|_| RecvTimeoutError::Timeout),
                };
                match next {
                    Ok(loaded) => out.push(loaded),
                    Err(_) => break,
                }
            }
        }
        for loaded in &out {
            self.pending.remove(&loaded.path);
        }
        out
    }
}

/// Start the loader thread (None when it cannot start: loads then happen on the caller's thread).
fn spawn(debug_dirs: Vec<PathBuf>) -> Option<(Sender<Request>, Receiver<Loaded>)> {
    let (req_tx, req_rx) = mpsc::channel::<Request>();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("rprof-unwind-load".into())
        .spawn(move || {
            for req in req_rx {
                if done_tx.send(load(req, &debug_dirs)).is_err() {
                    break;
                }
            }
        })
        .ok()?;
    Some((req_tx, done_rx))
}

/// Read the layout (unless known) and the module of one mapping.
fn load(req: Request, debug_dirs: &[PathBuf]) -> Loaded {
    let mut vdso = Some(req.vdso.clone());
    let layout = req.layout.clone().or_else(|| {
        modules::read_layout(&mut vdso, req.pid, &req.path)
            .ok()
            .map(Arc::new)
    });
    let module = layout.as_ref().map(|layout| {
        let key = ModuleKey {
            path: req.path.clone(),
            bias: layout.bias(req.start, req.pgoff),
        };
        let module =
            modules::load_module(req.pid, &key, layout, req.vdso.as_deref(), debug_dirs).ok();
        (key, module)
    });
    Loaded {
        path: req.path,
        layout,
        module,
    }
}
