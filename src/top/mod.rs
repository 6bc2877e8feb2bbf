//! `rprof top`: perf top's live view. The recorder samples as `rprof record` does (no file: every record goes
//! to a tap); a second thread decodes the records, symbolizes each sample's function with the live resolver
//! the push keeps ([`crate::push::live`]), and at each refresh (`-d SECONDS`) adds the period's samples to a
//! [`Table`] (perf top's 7/8 decay, or only the last period) and hands a [`Screen`] to the caller to show.
pub mod table;

use crate::push::live::top::Leaf;
use crate::push::live::Live;
use crate::record::{self, RecordConfig, RecordError, RecordSummary, Started, Tap, Target};
use crate::recording::{Decoder, FileAttr};
use crate::symbols::SymbolizerOptions;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};
pub use table::{format_rows, short_name, Hide, Process, Row, SortKey, Table, Zoom};

/// Everything `rprof top` needs.
#[derive(Clone, Debug)]
pub struct TopConfig {
    /// What to sample (`write_file` false, `clock_monotonic`: set by [`run`]).
    pub record: RecordConfig,
    /// The refresh period (perf top's `-d`).
    pub delay: Duration,
    pub sort: Vec<SortKey>,
    /// Keep earlier periods at 7/8 a refresh (perf top's default); false: the last period only (`-z`).
    pub decay: bool,
    pub hide: Hide,
    /// Rows with fewer samples (decayed) are not shown (perf top's `-f`, default 5).
    pub count_filter: u64,
    /// Rows shown.
    pub rows: usize,
    /// Stop after this many refreshes.
    pub refreshes: Option<u64>,
    /// The event's name in the header line.
    pub event_name: String,
}

/// One refresh: perf top's header line and the rows.
#[derive(Clone, Debug)]
pub struct Screen {
    pub header: String,
    /// The rows not zoomed.
    pub rows: Vec<Row>,
    /// The counts the rows came from, for a view that zooms ([`Table::rows`] with a [`Zoom`]).
    pub table: Table,
    /// Refreshes so far, this one included.
    pub refresh: u64,
}

/// How the caller shows a screen.
pub type Show = Box<dyn FnMut(&Screen) + Send>;

/// Errors of `rprof top`.
#[derive(Debug, thiserror::Error)]
pub enum TopError {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error("rprof top: the thread that builds the table failed: {0}")]
    Table(String),
}

/// Sample and show a screen every `cfg.delay` until `stop` is set (or SIGINT/SIGTERM, the duration, the
/// refresh count, the target's exit); while `paused` is set the screens are not shown.
pub fn run(
    cfg: &TopConfig,
    stop: Arc<AtomicBool>,
    paused: Arc<AtomicBool>,
    show: Show,
    on_start: &mut dyn FnMut(&Started),
) -> Result<RecordSummary, TopError> {
    let mut rcfg = cfg.record.clone();
    rcfg.write_file = false;
    rcfg.clock_monotonic = true;
    let (sender, receiver) = sync_channel(QUEUED_ROUNDS);
    let tap = TopTap {
        sender,
        records: Vec::new(),
    };
    let view = View {
        cfg: cfg.clone(),
        stop: Arc::clone(&stop),
        paused,
        show,
    };
    let worker = std::thread::Builder::new()
        .name("rprof-top".into())
        .spawn(move || view.run(receiver))
        .map_err(|e| TopError::Table(e.to_string()))?;
    let summary = record::record_with_tap(&rcfg, &stop, on_start, Some(Box::new(tap)));
    worker
        .join()
        .map_err(|_| TopError::Table("it panicked".into()))?;
    Ok(summary?)
}

/// Rounds queued between the sampling thread and the table's.
const QUEUED_ROUNDS: usize = 100;

enum Message {
    Start(Vec<FileAttr>),
    Round(Vec<u8>),
}

struct TopTap {
    sender: SyncSender<Message>,
    records: Vec<u8>,
}

impl Tap for TopTap {
    fn start(&mut self, attrs: &[FileAttr]) {
        let _ = self.sender.send(Message::Start(attrs.to_vec()));
    }

    fn record(&mut self, parts: &[&[u8]]) {
        parts.iter().for_each(|p| self.records.extend_from_slice(p));
    }

    fn end_round(&mut self, _last: bool) {
        let _ = self
            .sender
            .send(Message::Round(std::mem::take(&mut self.records)));
    }
}

/// The table's thread.
struct View {
    cfg: TopConfig,
    stop: Arc<AtomicBool>,
    paused: Arc<AtomicBool>,
    show: Show,
}

impl View {
    fn run(mut self, messages: Receiver<Message>) {
        let Ok(Message::Start(attrs)) = messages.recv() else {
            return;
        };
        let Ok(decoder) = Decoder::new(&attrs) else {
            return;
        };
        let mut live = Live::new(
            SymbolizerOptions::default(),
            decoder.sampling(),
            false,
            None,
        );
        let mut table = Table::new(self.cfg.sort.clone(), self.cfg.decay);
        let mut period_start = Instant::now();
        let mut refresh = 0;
        let mut lost_total = 0;
        for message in messages {
            let Message::Round(records) = message else {
                continue;
            };
            let mut at = 0;
            while at + 8 <= records.len() {
                let size = usize::from(u16::from_le_bytes([records[at + 6], records[at + 7]]));
                if size < 8 || at + size > records.len() {
                    break;
                }
                if let Ok((time, Some(event))) = decoder.decode(&records[at..at + size]) {
                    live.push(time, event);
                }
                at += size;
            }
            live.end_round();
            if period_start.elapsed() < self.cfg.delay {
                continue;
            }
            let seconds = period_start.elapsed().as_secs_f64();
            period_start = Instant::now();
            live.release_before(None);
            let lost = live.counts.lost + live.counts.lost_samples;
            let lost_now = lost - lost_total;
            lost_total = lost;
            let held = live.take_before(0, None);
            let leaves = live.leaves(&held);
            live.bound_memory();
            table.add_period(&leaves);
            refresh += 1;
            let screen = Screen {
                header: self.header(&leaves, seconds, lost_now, lost_total),
                rows: table.rows(
                    self.cfg.hide,
                    self.cfg.count_filter as f64,
                    self.cfg.rows,
                    &Zoom::default(),
                ),
                table: table.clone(),
                refresh,
            };
            if !self.paused.load(Ordering::Relaxed) {
                (self.show)(&screen);
            }
            if self.cfg.refreshes.is_some_and(|n| refresh >= n) {
                self.stop.store(true, Ordering::Relaxed);
            }
        }
    }

    /// perf top's first line: samples a second, the kernel's share, samples lost in this period and in all,
    /// the event and the target.
    fn header(&self, leaves: &[Leaf], seconds: f64, lost: u64, all: u64) -> String {
        let n = leaves.len();
        let kernel = leaves.iter().filter(|l| l.kernel).count();
        let pct = if n > 0 {
            100.0 * kernel as f64 / n as f64
        } else {
            0.0
        };
        let rate = match &self.cfg.record.rate {
            record::Rate::Frequency(f) => format!("{f}Hz "),
            record::Rate::Period(_) => String::new(),
        };
        let target = match &self.cfg.record.target {
            Target::Pids(p) | Target::Tids(p) => format!(
                "target_pid: {}",
                p.iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            _ => match &self.cfg.record.cpus {
                Some(c) => format!(
                    "all, {} CPU{}",
                    c.len(),
                    if c.len() == 1 { "" } else { "s" }
                ),
                None => format!(
                    "all, {} CPUs",
                    crate::perf::online_cpus().map_or(0, |c| c.len())
                ),
            },
        };
        format!(
            "   PerfTop: {:>7.0} irqs/sec  kernel:{pct:4.1}%  exact:  0.0% lost: {lost}/{all} drop: 0/0 [{rate}{}],  ({target})",
            n as f64 / seconds.max(1e-3),
            self.cfg.event_name
        )
    }
}
