//! What is probed: the one table of targets, each named by a [`TargetId`], and [`PerTarget`] for a value per
//! target (statistics, per-call state) indexed by that id.
use super::spec::code::FunctionCode;
use super::spec::fetch::{ArgSource, Fetch};
use super::spec::go::GoFunction;
use crate::addr::{ElfAddr, FileOffset};
use crate::perf::software::{Sample, SoftwareEvent};
use std::ops::{Index, IndexMut};
use std::path::{Path, PathBuf};

/// A probed target: its index in the session's [`Targets`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TargetId(u32);

impl TargetId {
    /// The id of the `i`th target.
    pub fn new(i: usize) -> TargetId {
        TargetId(i as u32)
    }

    /// Its index in the table.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What is probed for one target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// A function in a binary: a uprobe (and a uretprobe) at `offset` of `path`.
    User {
        path: PathBuf,
        addr: ElfAddr,
        offset: FileOffset,
    },
    /// A kernel function: a kprobe (and a kretprobe).
    Kernel { symbol: String },
    /// A syscall: `syscalls:sys_enter_NAME` paired with `syscalls:sys_exit_NAME`.
    Syscall { name: String },
    /// A tracepoint, counted.
    Tracepoint { category: String, event: String },
    /// A USDT probe (`.note.stapsdt`): a uprobe at `offset` of `path`, with its semaphore's file offset (the
    /// kernel counts it up while the probe is enabled, so "is enabled" guards fire), counted.
    Usdt {
        path: PathBuf,
        offset: FileOffset,
        semaphore: Option<u64>,
        args: Vec<ArgSource>,
    },
    /// A perf software event sampled (`profile:hz:99`: `cpu-clock` 99 times a second; `software:page-faults:1`:
    /// every fault), on every CPU or in the session's tasks. Its hits are samples, counted, never timed: for a
    /// clock, COUNT is samples of CPU time, not calls.
    Software {
        event: &'static SoftwareEvent,
        sample: Sample,
    },
    /// `--pair START,DONE`: probe points timed as one call: a START opens it, DONE closes it, on the same thread
    /// innermost first, or with a key the open START whose key values DONE's equal, on any thread or CPU.
    Pair(Box<PairSpec>),
}

/// A pair's ends: one or more STARTs (`A | B if EXPR`), each with its own filter and key names, and the DONE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairSpec {
    pub starts: Vec<PairEnd>,
    pub done: PairEnd,
    /// Matched by key values (`--key`), else by thread.
    pub keyed: bool,
    /// A START of a key already open: replaces it (latest, as bcc's maps do) or is dropped (first).
    pub keep: Keep,
}

/// Which START of a key a keyed pair times from, when several come before its DONE.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Keep {
    /// The latest: a START replaces the open one (bcc's maps).
    #[default]
    Latest,
    /// The first: later STARTs of an open key are dropped (counted).
    First,
}

/// One end of a pair: a user function's or kernel function's entry, a USDT probe or a tracepoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairEnd {
    pub kind: TargetKind,
    /// Its values: these of the pair target's fetches.
    pub fetches: std::ops::Range<usize>,
    /// Its key values, in `--key` order: positions in the pair target's fetches.
    pub key: Vec<usize>,
    /// `END if EXPR`: which of its events are this end (all of it evaluated by rprof; the kernel's part
    /// filters the event where every end on it has one).
    pub filter: Option<crate::probe::spec::filters::TargetFilter>,
}

impl PairSpec {
    /// The ends, STARTs first, each with its bit in [`crate::probe::plan::Role::Pair`]'s mask.
    pub fn ends(&self) -> impl Iterator<Item = (u32, &PairEnd)> {
        self.starts
            .iter()
            .enumerate()
            .map(|(i, e)| (1u32 << i, e))
            .chain(std::iter::once((DONE_BIT, &self.done)))
    }
}

/// The bit of a pair's DONE in [`crate::probe::plan::Role::Pair`]'s mask (STARTs are bits 0..).
pub const DONE_BIT: u32 = 1 << 31;

/// STARTs a pair may have (bits of [`crate::probe::plan::Role::Pair`]'s mask).
pub const MAX_STARTS: usize = 16;

impl TargetKind {
    /// The probed file and offset of a uprobe (user functions and USDT probes), with its semaphore.
    pub fn uprobe_at(&self) -> Option<(&Path, u64, Option<u64>)> {
        match self {
            TargetKind::User { path, offset, .. } => Some((path, offset.0, None)),
            TargetKind::Usdt {
                path,
                offset,
                semaphore,
                ..
            } => Some((path, offset.0, *semaphore)),
            _ => None,
        }
    }
}

/// One thing to count (and time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The display name (demangled, without Rust hash).
    pub name: String,
    /// Other names at the same address (probed once).
    pub aliases: Vec<String>,
    pub kind: TargetKind,
    /// Values fetched at its entry or return (arguments, `ret`, `caller`).
    pub fetches: Vec<Fetch>,
    /// What its machine code says about probe placement (user functions whose code could be read).
    pub code: Option<FunctionCode>,
    /// A function of a Go binary: how it can be probed.
    pub go: Option<GoFunction>,
    /// A syscall whose user strings are read: the files that make it and the file offsets of their `syscall`
    /// instructions for it (see `spec::syscall_sites`).
    pub syscall_sites: Vec<(PathBuf, Vec<u64>)>,
    /// `PATTERN if EXPR`: which of its events count, and where each part of the test runs.
    pub filter: Option<crate::probe::spec::filters::TargetFilter>,
}

impl Target {
    /// A pair's ends (None for every other target).
    pub fn pair(&self) -> Option<&PairSpec> {
        match &self.kind {
            TargetKind::Pair(p) => Some(p),
            _ => None,
        }
    }

    /// A pair matched by key values.
    pub fn is_keyed(&self) -> bool {
        self.pair().is_some_and(|p| p.keyed)
    }

    /// A kernel function (its addresses, `caller` among them, are kernel addresses).
    pub fn is_kernel(&self) -> bool {
        matches!(self.kind, TargetKind::Kernel { .. })
    }

    /// True when the target has a return event to pair with (user and kernel functions, syscalls, pairs).
    pub fn can_time(&self) -> bool {
        !matches!(
            self.kind,
            TargetKind::Tracepoint { .. } | TargetKind::Usdt { .. } | TargetKind::Software { .. }
        )
    }

    /// A sampled software event (`profile:`, `software:`): what it is, and how it samples.
    pub fn software(&self) -> Option<(&'static SoftwareEvent, Sample)> {
        match self.kind {
            TargetKind::Software { event, sample } => Some((event, sample)),
            _ => None,
        }
    }

    /// A target whose hits are samples of time (`profile:`, `software:cpu-clock`): COUNT is samples, not calls.
    pub fn samples_time(&self) -> bool {
        self.software().is_some_and(|(e, _)| e.is_clock())
    }

    /// True when the target is a function whose return value can be fetched.
    pub fn can_return(&self) -> bool {
        matches!(
            self.kind,
            TargetKind::User { .. } | TargetKind::Kernel { .. }
        )
    }
}

/// The targets of a session, in pattern order, each address or event once.
#[derive(Clone, Debug, Default)]
pub struct Targets {
    list: Vec<Target>,
}

impl Targets {
    /// The table of `list`.
    pub fn new(list: Vec<Target>) -> Targets {
        Targets { list }
    }

    /// Add `t` unless a target probes the same thing already.
    pub fn add(&mut self, t: Target) {
        if !self.list.iter().any(|o| o.kind == t.kind) {
            self.list.push(t);
        }
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Each target with its id.
    pub fn iter(&self) -> impl Iterator<Item = (TargetId, &Target)> {
        self.list
            .iter()
            .enumerate()
            .map(|(i, t)| (TargetId::new(i), t))
    }

    /// The display name of `id`.
    pub fn name(&self, id: TargetId) -> &str {
        &self.list[id.index()].name
    }

    /// The targets with display name `name` (`sched:sched_process_exec`, `_dl_start`).
    pub fn named(&self, name: &str) -> Vec<TargetId> {
        self.iter()
            .filter(|(_, t)| t.name == name)
            .map(|(id, _)| id)
            .collect()
    }

    /// A fresh value per target.
    pub fn per_target<T: Clone>(&self, value: T) -> PerTarget<T> {
        PerTarget(vec![value; self.list.len()])
    }
}

impl Index<TargetId> for Targets {
    type Output = Target;
    fn index(&self, id: TargetId) -> &Target {
        &self.list[id.index()]
    }
}

/// One value per target, indexed by [`TargetId`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerTarget<T>(Vec<T>);

impl<T> PerTarget<T> {
    /// Each value with its target.
    pub fn iter(&self) -> impl Iterator<Item = (TargetId, &T)> {
        self.0
            .iter()
            .enumerate()
            .map(|(i, v)| (TargetId::new(i), v))
    }

    /// The values, in target order.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.0.iter()
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.0.iter_mut()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<T> PerTarget<T> {
    /// A value per target made from each of these.
    pub fn map<U>(&self, f: impl FnMut(&T) -> U) -> PerTarget<U> {
        PerTarget(self.0.iter().map(f).collect())
    }
}

impl<T> FromIterator<T> for PerTarget<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        PerTarget(iter.into_iter().collect())
    }
}

impl<T: Clone> PerTarget<T> {
    /// `n` copies of `value`.
    pub fn filled(n: usize, value: T) -> PerTarget<T> {
        PerTarget(vec![value; n])
    }
}

impl<T> Index<TargetId> for PerTarget<T> {
    type Output = T;
    fn index(&self, id: TargetId) -> &T {
        &self.0[id.index()]
    }
}

impl<T> IndexMut<TargetId> for PerTarget<T> {
    fn index_mut(&mut self, id: TargetId) -> &mut T {
        &mut self.0[id.index()]
    }
}
