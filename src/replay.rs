//! Replaying a recording, as every reader of one does (report, script, annotate): the one stack resolver set up
//! from the recording's build ids, kernel and namespace pids; the events streamed from a reading thread; and
//! what each event says about address spaces and the kernel, applied before samples are looked at.
use crate::process::{AddressSpaces, Mapping, TaskEvent};
use crate::recording::Sample;
use crate::recording::{CpuMode, Event, Reader, RecordingError};
use crate::resolve::{StackResolver, KERNEL_NAME};
use crate::symbols::{KernelRef, SymbolizerOptions};
use crate::text::thousands;
use crate::unwind::dwarf::{DwarfStats, DwarfUnwinder};
use std::collections::HashMap;
use std::sync::Arc;

/// The one stack resolver of a recording: its recorded build ids, its kernel and its namespace pids.
pub(crate) fn resolver_for(reader: &Reader, opts: SymbolizerOptions) -> StackResolver {
    let build_ids: HashMap<String, Vec<u8>> = reader
        .build_ids()
        .iter()
        .map(|b| (b.path.clone(), b.build_id.clone()))
        .collect();
    let kernel_build_id = build_ids.get(KERNEL_NAME).cloned();
    let mut resolver = StackResolver::new(opts, build_ids);
    resolver.symbolizer().set_kernel(KernelRef {
        build_id: kernel_build_id,
        text: None,
    });
    resolver.symbolizer().set_ns_pids(reader.ns_pids().clone());
    resolver
        .symbolizer()
        .set_python_names(crate::python::Names::from_vec(
            reader.python_names().to_vec(),
        ));
    resolver
}

/// Apply what an event says about address spaces and the kernel (every reader of a recording does this
/// before looking at samples): mappings, exec, fork and exit of processes, and the kernel's own mapping.
pub(crate) fn track(
    event: &Event,
    spaces: &mut AddressSpaces,
    resolver: &mut StackResolver,
    unwinder: Option<&mut DwarfUnwinder>,
) {
    if let Some(task) = task_event(event, resolver) {
        if let (TaskEvent::Exit { pid }, Some(unwinder)) = (&task, unwinder) {
            unwinder.forget(*pid);
        }
        spaces.apply(task);
    }
    if let Event::Mmap {
        path,
        pgoff,
        cpu_mode: CpuMode::Kernel,
        ..
    } = event
    {
        // The recording describes the kernel: its samples will need kallsyms. The kernel's own mapping
        // (`[kernel.kallsyms]_text`) starts at `_text`, its offset, which gives the KASLR offset against a
        // cached copy of kallsyms.
        if path.starts_with(KERNEL_NAME) {
            let build_id = resolver.build_id(KERNEL_NAME).cloned();
            resolver.symbolizer().set_kernel(KernelRef {
                build_id,
                text: Some(*pgoff),
            });
        }
        resolver.prefetch_kernel();
    }
}

/// Unwind a sample's user stack copy (recordings of `perf record --call-graph dwarf`) into its callchain: the
/// kernel part stays, the user part becomes PERF_CONTEXT_USER and the unwound frames (leaf IP first). The
/// outcome is counted in `stats`. Samples without a copy, or readers without an unwinder, are left as they are.
pub(crate) fn unwind_sample(
    unwinder: Option<&mut DwarfUnwinder>,
    spaces: &AddressSpaces,
    sample: &mut Sample,
    stats: &mut DwarfStats,
) {
    let (Some(unwinder), Some(user)) = (unwinder, sample.user_stack.take()) else {
        return;
    };
    let outcome = unwinder.unwind_callchain(
        sample.pid,
        spaces.get(sample.pid),
        &user.regs,
        &user.stack,
        user.dyn_size,
        &mut sample.callchain,
    );
    stats.count(outcome, user.stack.len() as u64, unwinder.last_stack_used());
}

/// The command of each thread as a recording's COMM, FORK and EXIT records give it, as perf's thread table
/// keeps it: a COMM names a thread; a FORK gives the new thread its parent's command; a thread keeps its
/// command after its EXIT (samples of its last moments may come after the record), until a FORK reuses its id:
/// that is a new thread, which takes its parent's command, not the dead one's (a system-wide recording of a
/// host that forks all the time reuses ids within seconds: perf named such a sample `bash`, rprof `exits`).
pub(crate) struct ThreadComms<C> {
    by_tid: crate::resolve::FastMap<u32, C>,
    exited: crate::resolve::FastSet<u32>,
}

impl<C: Clone> ThreadComms<C> {
    pub(crate) fn new() -> ThreadComms<C> {
        ThreadComms {
            by_tid: Default::default(),
            exited: Default::default(),
        }
    }

    pub(crate) fn comm(&mut self, tid: u32, name: C) {
        self.by_tid.insert(tid, name);
        self.exited.remove(&tid);
    }

    /// Thread `tid` forked from `ptid`. A thread already named keeps its name (a COMM can come before its FORK
    /// among the records synthesized at a recording's start), unless it had exited: then the id was reused.
    pub(crate) fn fork(&mut self, tid: u32, ptid: u32) {
        let reused = self.exited.remove(&tid);
        if reused {
            self.by_tid.remove(&tid);
        }
        if let Some(c) = self.by_tid.get(&ptid).cloned() {
            self.by_tid.entry(tid).or_insert(c);
        }
    }

    pub(crate) fn exit(&mut self, tid: u32) {
        self.exited.insert(tid);
    }
}

/// The command of a sample's thread, as perf names it: the one its thread was last given (else its process's),
/// or, when neither is known, the name perf gives: `:-1` for a sample whose thread id is -1 (a task the kernel
/// is reaping: `do_exit` after its pid was detached, even when the process id is still there), `swapper` for
/// the idle task, else `:TID`.
pub(crate) fn sample_comm<'a, C>(
    comms: &'a ThreadComms<C>,
    sample: &Sample,
) -> Result<&'a C, String> {
    if sample.tid == u32::MAX {
        return Err(":-1".into());
    }
    let comm_of_tid = &comms.by_tid;
    match comm_of_tid
        .get(&sample.tid)
        .or_else(|| comm_of_tid.get(&sample.pid))
    {
        Some(c) => Ok(c),
        None if sample.pid == 0 => Err("swapper".into()),
        None => Err(format!(":{}", sample.tid as i32)),
    }
}

/// Events per message from the reading thread.
pub(crate) const BATCH: usize = 1024;
/// Batches the reading thread may run ahead: enough to keep it busy while this thread loads a large binary's
/// DWARF or waits for kallsyms (tens of milliseconds, some 100k events), and bounded (tens of MiB).
pub(crate) const QUEUED_BATCHES: usize = 128;

/// Read every event of `reader` on a thread of its own, in bounded batches, and hand each to `each` on this
/// thread, in file order, with at most `queued` batches read ahead: the one streaming loop of report, script and
/// annotate. Returns why the file ended early when it was not finished (a killed recorder), after the events
/// before that point.
pub(crate) fn stream_events<E: From<RecordingError> + From<std::io::Error>>(
    reader: Reader,
    queued: usize,
    mut each: impl FnMut(Event) -> Result<(), E>,
) -> Result<Option<RecordingError>, E> {
    std::thread::scope(|scope| {
        let (sender, batches) = std::sync::mpsc::sync_channel(queued);
        std::thread::Builder::new()
            .name("rprof-reader".into())
            .spawn_scoped(scope, move || read_batches(reader, sender))
            .map_err(E::from)?;
        for batch in batches {
            match batch {
                Ok(batch) => batch.into_iter().try_for_each(&mut each)?,
                Err(error @ RecordingError::Incomplete { .. }) => return Ok(Some(error)),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(None)
    })
}

/// Send the recording's events in batches until the end, an error (sent after the events before it), or until
/// the receiver is gone.
fn read_batches(
    mut reader: Reader,
    sender: std::sync::mpsc::SyncSender<Result<Vec<Event>, RecordingError>>,
) {
    loop {
        let mut batch = Vec::with_capacity(BATCH);
        let mut error = None;
        while batch.len() < BATCH {
            match reader.next_event() {
                Ok(Some(event)) => batch.push(event),
                Ok(None) => break,
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        let last = batch.len() < BATCH;
        if sender.send(Ok(batch)).is_err() {
            return;
        }
        if let Some(e) = error {
            let _ = sender.send(Err(e));
            return;
        }
        if last {
            return;
        }
    }
}

/// The address-space change a recording's event makes, if any (kernel mappings are not part of a process).
fn task_event(event: &Event, resolver: &StackResolver) -> Option<TaskEvent> {
    task_event_with(event, |path| resolver.build_id(path))
}

/// [`task_event`], with the recorded build ids by path from `recorded`.
pub(crate) fn task_event_with<'a>(
    event: &'a Event,
    recorded: impl FnOnce(&str) -> Option<&'a Vec<u8>>,
) -> Option<TaskEvent> {
    match event {
        Event::Comm {
            pid, exec: true, ..
        } => Some(TaskEvent::Exec { pid: *pid }),
        Event::Mmap {
            pid,
            start,
            len,
            pgoff,
            path,
            build_id,
            cpu_mode,
            ..
        } if *cpu_mode != CpuMode::Kernel && *pid >= 0 => {
            let build_id = build_id.as_ref().or_else(|| recorded(path));
            Some(TaskEvent::Mmap {
                pid: *pid as u32,
                mapping: Mapping {
                    start: *start,
                    end: start.saturating_add(*len),
                    pgoff: *pgoff,
                    path: Arc::from(path.as_str()),
                    file: None,
                    build_id: build_id.map(|b| Arc::from(b.as_slice())),
                    prot: 0,
                },
            })
        }
        Event::Fork { pid, ppid, .. } if pid != ppid => Some(TaskEvent::Fork {
            parent: *ppid,
            child: *pid,
        }),
        Event::Exit { pid, tid } if pid == tid => Some(TaskEvent::Exit { pid: *pid }),
        _ => None,
    }
}

/// What was read of a recording that was not finished (its recorder was killed) or is damaged.
#[derive(Debug)]
pub struct Salvaged {
    /// The samples read from the file (before the pid, tid and comm filters).
    pub samples: u64,
    /// The recording error that ended the reading ([`RecordingError::Incomplete`]).
    pub error: RecordingError,
}

impl Salvaged {
    /// An error when no sample could be read at all: a damaged recording that would show an empty table.
    pub fn check(&self) -> Result<(), RecordingError> {
        match self.samples {
            0 => Err(RecordingError::NothingRead {
                warning: self.warning(),
            }),
            _ => Ok(()),
        }
    }

    /// The one warning line: what happened, how much was read, and what may be missing.
    pub fn warning(&self) -> String {
        let RecordingError::Incomplete {
            path,
            reason,
            unfinished,
            read_to,
        } = &self.error
        else {
            return self.error.to_string();
        };
        let what = if *unfinished {
            "was not finished (was its recorder killed?)".to_string()
        } else {
            format!("is incomplete ({reason})")
        };
        let missing = if *unfinished {
            "; symbols of mappings not yet written may be missing, binaries are taken from this system \
             unchecked (no build ids), and the command line was not recorded"
        } else {
            ""
        };
        format!(
            "{} {what}: read {} samples up to byte {}{missing}",
            path.display(),
            thousands(self.samples),
            thousands(*read_to)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::ThreadComms;

    /// Check perf's thread table's rule: a thread id reused after its EXIT is a new thread with its parent's
    /// command (the dead thread's is kept until then), and a COMM that came before its thread's FORK stays.
    #[test]
    fn a_reused_thread_id_takes_its_parents_command() {
        let mut c = ThreadComms::new();
        c.comm(7, "bash");
        c.comm(5, "exits");
        c.exit(5);
        assert_eq!(c.by_tid.get(&5), Some(&"exits"), "kept after its EXIT");
        c.fork(5, 7);
        assert_eq!(c.by_tid.get(&5), Some(&"bash"), "the id was reused");
        c.comm(9, "rprof-reader");
        c.fork(9, 7);
        assert_eq!(c.by_tid.get(&9), Some(&"rprof-reader"));
    }
}
