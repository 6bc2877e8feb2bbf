//! A small pool of threads that open binaries (symbols and DWARF) while a recording is read, and the slots
//! their results arrive in.
use std::sync::{mpsc, Arc, Mutex};

/// A value being made by a [`Pool`] thread, or made.
pub(crate) enum Slot<T> {
    Loading(mpsc::Receiver<T>),
    Ready(T),
}

impl<T> Slot<T> {
    /// The value, waiting for it when it is still being made (`lost()` when its thread died).
    pub fn get(&mut self, lost: impl FnOnce() -> T) -> &mut T {
        if let Slot::Loading(made) = self {
            *self = Slot::Ready(made.recv().unwrap_or_else(|_| lost()));
        }
        match self {
            Slot::Ready(value) => value,
            Slot::Loading(_) => unreachable!("a loading slot was just made ready"),
        }
    }
}

/// A job for a [`Pool`] thread.
type Job = Box<dyn FnOnce() + Send>;

/// Threads that make values (open binaries) off the reading thread: at most one per core (up to 8), because
/// parsing is CPU-bound, and a system-wide recording samples hundreds of binaries. Threads start on demand and
/// end when the pool is dropped.
pub(crate) struct Pool {
    jobs: mpsc::Sender<Job>,
    queue: Arc<Mutex<mpsc::Receiver<Job>>>,
    threads: usize,
    /// The most threads: one per core the process may use (asked once: std reads the cgroup's CPU quota files
    /// each time, which was two opens per binary read).
    most: usize,
}

impl Pool {
    pub fn new() -> Pool {
        let (jobs, queue) = mpsc::channel();
        Pool {
            jobs,
            queue: Arc::new(Mutex::new(queue)),
            threads: 0,
            most: std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8)),
        }
    }

    /// Make a value with `make` on a thread of the pool (here, when no thread can be had).
    pub fn submit<T: Send + 'static>(
        &mut self,
        make: impl FnOnce() -> T + Send + 'static,
    ) -> Slot<T> {
        if self.threads < self.most {
            let queue = Arc::clone(&self.queue);
            let spawned = std::thread::Builder::new()
                .name("rprof-symbols".into())
                .spawn(move || loop {
                    // The lock is held only to take a job; the thread ends when the pool is dropped.
                    let job = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    match job {
                        Ok(job) => job(),
                        Err(_) => break,
                    }
                });
            if spawned.is_ok() {
                self.threads += 1;
            }
        }
        if self.threads == 0 {
            return Slot::Ready(make());
        }
        let (done, made) = mpsc::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(make());
        });
        match self.jobs.send(job) {
            Ok(()) => Slot::Loading(made),
            // No thread takes jobs any more: make it here.
            Err(returned) => {
                (returned.0)();
                Slot::Loading(made)
            }
        }
    }
}
