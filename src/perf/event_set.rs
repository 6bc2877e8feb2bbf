//! One set of perf events: a list of attrs opened for each (CPU x task), one ring buffer per CPU with every
//! other event of that CPU redirected into it (SET_OUTPUT), and what the caller knows about each event, found
//! by the id the kernel puts in its records. `rprof record` and `rprof probe` both sample through it.
use super::{ring, Attr, PerfError, PerfEvent, RawRecord, Ring};
use std::collections::HashMap;
use std::os::fd::BorrowedFd;

/// What to do when the kernel refuses to open one of the attrs (the first time it is tried).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Fail the whole set with the kernel's error.
    Fail,
    /// Leave this attr out on every CPU and task; the caller has said why (e.g. a probe the kernel rejects).
    Skip,
}

/// The caller's facts about each open event, looked up by the event id in a record.
pub struct EventInfos<I> {
    by_id: HashMap<u64, I>,
}

impl<I> EventInfos<I> {
    /// The info of the event with this kernel id.
    pub fn get(&self, id: u64) -> Option<&I> {
        self.by_id.get(&id)
    }

    /// The info of the event that wrote `rec`, from its sample id (the attrs need IDENTIFIER, or ID with
    /// `sample_id_all` for non-sample records).
    pub fn of(&self, rec: &RawRecord<'_>) -> Option<&I> {
        let id = linux_perf_event_reader::get_record_identifier::<byteorder::NativeEndian>(
            linux_perf_event_reader::RecordType(rec.kind),
            rec.body(),
            true,
        )?;
        self.get(id)
    }

    /// How many events are open.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

/// Whom one event watches: a task (-1: every task on its CPU), or the tasks of a cgroup.
#[derive(Clone, Copy, Debug)]
enum Whom<'a> {
    Task(i32),
    Cgroup(BorrowedFd<'a>),
}

/// The open events of one session.
pub struct EventSet<I> {
    rings: Vec<Ring>,
    /// The events redirected into a ring.
    others: Vec<PerfEvent>,
    infos: EventInfos<I>,
    /// Every event id, in opening order (a recording's attr section lists them).
    ids: Vec<u64>,
    /// Which attrs were opened (false: refused and skipped).
    opened: Vec<bool>,
}

impl<I: Clone> EventSet<I> {
    /// Open each `(attr, info)` of `specs` on each CPU of `cpus` for each task of `tasks` (-1: every task),
    /// with `pages` data pages per ring. A task that ended between listing and opening is skipped; when the
    /// kernel refuses an attr the first time, `refused(index, error)` decides between failing and skipping it.
    pub fn open(
        specs: &[(Attr, I)],
        cpus: &[u32],
        tasks: &[i32],
        pages: usize,
        refused: &mut dyn FnMut(usize, &PerfError) -> Refused,
    ) -> Result<EventSet<I>, PerfError> {
        Self::open_mixed(specs, &[], cpus, tasks, pages, refused)
    }

    /// As [`EventSet::open`], but the specs flagged in `everywhere` watch every task on each CPU, whatever
    /// `tasks` are (events that fire in other tasks' contexts: a request's completion, a wakeup).
    pub fn open_mixed(
        specs: &[(Attr, I)],
        everywhere: &[bool],
        cpus: &[u32],
        tasks: &[i32],
        pages: usize,
        refused: &mut dyn FnMut(usize, &PerfError) -> Refused,
    ) -> Result<EventSet<I>, PerfError> {
        let whom: Vec<Whom<'_>> = tasks.iter().map(|&t| Whom::Task(t)).collect();
        Self::open_for(specs, cpus, &whom, everywhere, pages, refused)
    }

    /// Open each `(attr, info)` of `specs` on each CPU of `cpus` for the tasks of a cgroup (and of its
    /// descendants), given by its open directory (PERF_FLAG_PID_CGROUP). As [`EventSet::open`] otherwise.
    pub fn open_cgroup(
        specs: &[(Attr, I)],
        cpus: &[u32],
        cgroup: BorrowedFd<'_>,
        pages: usize,
        refused: &mut dyn FnMut(usize, &PerfError) -> Refused,
    ) -> Result<EventSet<I>, PerfError> {
        Self::open_for(specs, cpus, &[Whom::Cgroup(cgroup)], &[], pages, refused)
    }

    fn open_for(
        specs: &[(Attr, I)],
        cpus: &[u32],
        tasks: &[Whom<'_>],
        everywhere: &[bool],
        pages: usize,
        refused: &mut dyn FnMut(usize, &PerfError) -> Refused,
    ) -> Result<EventSet<I>, PerfError> {
        raise_nofile((specs.len() * cpus.len() * tasks.len()) as u64);
        let mut set = EventSet {
            rings: Vec::new(),
            others: Vec::new(),
            infos: EventInfos {
                by_id: HashMap::new(),
            },
            ids: Vec::new(),
            opened: vec![false; specs.len()],
        };
        let mut skipped = vec![false; specs.len()];
        for &cpu in cpus {
            let mut ring: Option<Ring> = None;
            for (n, &whom) in tasks.iter().enumerate() {
                for (i, (attr, info)) in specs.iter().enumerate() {
                    let all = everywhere.get(i).copied().unwrap_or(false);
                    if skipped[i] || (all && n > 0) {
                        continue;
                    }
                    let task = if all { Whom::Task(-1) } else { whom };
                    let opened = match task {
                        Whom::Task(task) => PerfEvent::open(attr, task, cpu as i32),
                        Whom::Cgroup(dir) => PerfEvent::open_cgroup(attr, dir, cpu as i32),
                    };
                    let ev = match opened {
                        Ok(ev) => ev,
                        // A thread that ended between listing and opening.
                        Err(PerfError::NoSuchProcess { .. }) if !matches!(task, Whom::Task(-1)) => {
                            break
                        }
                        Err(e) if !set.opened[i] && refused(i, &e) == Refused::Skip => {
                            skipped[i] = true;
                            continue;
                        }
                        Err(e) => return Err(e),
                    };
                    set.opened[i] = true;
                    set.ids.push(ev.id());
                    set.infos.by_id.insert(ev.id(), info.clone());
                    match &ring {
                        Some(r) => {
                            ev.set_output(r.event())?;
                            set.others.push(ev);
                        }
                        None => ring = Some(Ring::new(ev, pages)?),
                    }
                }
            }
            set.rings.extend(ring);
        }
        if set.ids.is_empty() && !skipped.iter().all(|s| *s) {
            let pid = match tasks.first() {
                Some(Whom::Task(pid)) => *pid,
                _ => -1,
            };
            return Err(PerfError::NoSuchProcess { pid });
        }
        Ok(set)
    }
}

impl<I> EventSet<I> {
    /// Whether the attr at `index` of the specs was opened (false: the kernel refused it and it was skipped).
    pub fn opened(&self, index: usize) -> bool {
        self.opened.get(index).copied().unwrap_or(false)
    }

    /// Call `f` on every open event with its info (to set filters before enabling); stops at the first error.
    pub fn try_each<E>(&self, mut f: impl FnMut(&PerfEvent, &I) -> Result<(), E>) -> Result<(), E> {
        let events = self.rings.iter().map(Ring::event).chain(&self.others);
        for ev in events {
            if let Some(info) = self.infos.get(ev.id()) {
                f(ev, info)?;
            }
        }
        Ok(())
    }

    /// Every event id, in opening order.
    pub fn ids(&self) -> &[u64] {
        &self.ids
    }

    pub fn infos(&self) -> &EventInfos<I> {
        &self.infos
    }

    /// How many events are open.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    fn all(&self) -> impl Iterator<Item = &PerfEvent> {
        self.rings.iter().map(Ring::event).chain(self.others.iter())
    }

    /// Start every event.
    pub fn enable(&self) -> Result<(), PerfError> {
        self.all().try_for_each(PerfEvent::enable)
    }

    /// Stop every event (errors ignored: a task's event may be gone with its task).
    pub fn disable(&self) {
        for ev in self.all() {
            let _ = ev.disable();
        }
    }

    /// Wait up to `timeout_ms` for data in a ring or on one of `extra`; returns whether every ring hung up
    /// (all traced tasks are gone).
    pub fn poll(&self, extra: &[BorrowedFd<'_>], timeout_ms: u16) -> Result<bool, PerfError> {
        let rings: Vec<&Ring> = self.rings.iter().collect();
        ring::poll_rings(&rings, extra, timeout_ms)
    }

    /// Read every ring once, handing each record and the event infos to `f`. Returns the records read.
    pub fn read(&mut self, mut f: impl FnMut(&EventInfos<I>, RawRecord<'_>)) -> usize {
        let infos = &self.infos;
        self.rings
            .iter_mut()
            .map(|r| r.read(|rec| f(infos, rec)))
            .sum()
    }

    /// The number of rings, for [`EventSet::read_ring`].
    pub fn ring_count(&self) -> usize {
        self.rings.len()
    }

    /// Read at most `max` records of ring `i`, handing each with the event infos to `f`. Returns the records
    /// read and whether more were left.
    pub fn read_ring(
        &mut self,
        i: usize,
        max: usize,
        mut f: impl FnMut(&EventInfos<I>, RawRecord<'_>),
    ) -> (usize, bool) {
        let infos = &self.infos;
        match self.rings.get_mut(i) {
            Some(r) => r.read_at_most(max, |rec| f(infos, rec)),
            None => (0, false),
        }
    }
}

impl<I> Drop for EventSet<I> {
    /// Close every event (and ring) from many threads at once (see [`close_all`]).
    fn drop(&mut self) {
        close_all(std::mem::take(&mut self.others));
        close_all(std::mem::take(&mut self.rings));
    }
}

/// Threads used to close perf events.
const CLOSE_THREADS: usize = 256;

/// Close (drop) perf events, or what holds them, from many threads at once. Closing the last perf event of a
/// tracepoint or uprobe waits for RCU grace periods (tens of ms each here, under a global mutex); concurrent
/// waiters share grace periods, so 1,000 probes close in about a second instead of a minute and a half.
pub fn close_all<T: Send>(items: Vec<T>) {
    if items.len() <= 1 {
        return;
    }
    let threads = CLOSE_THREADS.min(items.len());
    let mut buckets: Vec<Vec<T>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, item) in items.into_iter().enumerate() {
        buckets[i % threads].push(item);
    }
    std::thread::scope(|s| {
        for b in buckets {
            let spawned = std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn_scoped(s, move || drop(b));
            // Without a thread (out of resources), the bucket was dropped here: closed serially.
            drop(spawned);
        }
    });
}

/// Raise RLIMIT_NOFILE to the hard limit, and higher (as root) when `need` descriptors do not fit.
pub fn raise_nofile(need: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    let want = need + 256;
    if want <= soft {
        return;
    }
    if want > hard {
        let nr_open: u64 = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(hard);
        let new = want.min(nr_open).max(hard);
        if setrlimit(Resource::RLIMIT_NOFILE, new, new).is_ok() {
            return;
        }
    }
    if soft < hard {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::attr::sample;

    /// Check that a set opens an attr on every CPU for this thread, skips an attr the kernel refuses when
    /// told to, and finds the info of the event behind each sample by its id.
    #[test]
    fn opens_skips_and_finds_infos() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("opens_skips_and_finds_infos: skipped: needs root for perf_event_open");
            return;
        }
        let clock = Attr::software_clock(true)
            .period(100_000)
            .sample_type(sample::IDENTIFIER | sample::TID | sample::TIME)
            .sample_id_all();
        let bogus = Attr::tracepoint(u64::MAX).sample_type(sample::IDENTIFIER);
        let cpus = crate::perf::online_cpus().unwrap();
        let me = nix::unistd::gettid().as_raw();
        let mut refusals = Vec::new();
        let mut set = EventSet::open(
            &[(clock, "clock"), (bogus, "bogus")],
            &cpus,
            &[me],
            8,
            &mut |i, _| {
                refusals.push(i);
                Refused::Skip
            },
        )
        .unwrap();
        assert_eq!(refusals, vec![1]);
        assert!(set.opened(0) && !set.opened(1));
        assert_eq!(set.len(), cpus.len());
        set.enable().unwrap();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        set.disable();
        let (mut samples, mut named) = (0, 0);
        set.read(|infos, rec| {
            if rec.kind == crate::perf::record_type::SAMPLE {
                samples += 1;
                named += usize::from(infos.of(&rec) == Some(&"clock"));
            }
        });
        assert!(samples > 0, "no samples after 20M iterations");
        assert_eq!(named, samples);
    }
}
