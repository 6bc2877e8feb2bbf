//! The profile thread: records into events, events into periods, each period into a gzipped pprof in the
//! spool.
//!
//! Periods are whole seconds of wall-clock time, contiguous: the first starts at the second rprof started in,
//! each ends `--every` seconds later where the next starts, and the last ends at the second after recording
//! stopped. The samples of a pushing session are timed by CLOCK_MONOTONIC, which maps onto wall-clock time
//! by the offset between the two clocks. A period is cut once three rounds have ended after its end: by then
//! every record timed before it has left the rings and the recorder's own time ordering (a round reads each
//! ring once; the ordering holds records back one round). Samples are put in the period of their time; one
//! that still arrives later goes into the next period and is counted as late.
use super::live::Live;
use super::pyroscope;
use super::send::Wake;
use super::spool::Request;
use super::spool::Spool;
use super::tap::{monotonic_ns, realtime_ns, Message};
use super::{PushConfig, PushError};
use crate::recording::{Decoder, SamplingPolicy};
use crate::report::{to_otlp, to_pprof_with, PprofLabels};
use std::collections::VecDeque;
use std::io::Write;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

const NS: u64 = 1_000_000_000;

/// What the profile thread made.
#[derive(Clone, Debug, Default)]
pub struct MadeCounts {
    pub profiles: u64,
    /// Bytes of the pushed bodies (the gzipped pprof with its form).
    pub bytes: u64,
    pub samples: u64,
    pub late: u64,
    pub lost: u64,
    pub resets: u64,
    /// Periods whose new binaries were (some) not read: the push was over its budget.
    pub unread_periods: u64,
}

pub(super) struct Worker {
    pub(super) cfg: Arc<PushConfig>,
    pub(super) spool: Arc<Spool>,
    pub(super) wake: Sender<Wake>,
    /// The names of the Python frames `record` reads (see [`crate::python::Names`]).
    pub(super) python_names: crate::python::Names,
}

/// The period being filled.
struct Period {
    /// Unix seconds.
    from: u64,
    /// Its start on the samples' clock (CLOCK_MONOTONIC ns).
    from_mono: u64,
}

impl Worker {
    pub(super) fn run(self, messages: Receiver<Message>) -> Result<MadeCounts, PushError> {
        let mut made = MadeCounts::default();
        let Ok(Message::Start(attrs)) = messages.recv() else {
            return Ok(made);
        };
        let decoder = Decoder::new(&attrs)?;
        let mut live = Live::new(
            self.cfg.symbolizer.clone(),
            decoder.sampling(),
            self.cfg.unsymbolized,
            running_kernel(self.cfg.kallsyms_copy),
        );
        live.set_python_names(self.python_names.clone());
        if !self.cfg.unsymbolized {
            live.keep_lean(self.cfg.budget);
        }
        let rate = match decoder.sampling().map(|s| s.policy) {
            Some(SamplingPolicy::Frequency(f)) => Some(f),
            _ => None,
        };
        // Wall-clock time minus the samples' clock.
        let offset = realtime_ns().saturating_sub(monotonic_ns());
        let from = realtime_ns() / NS;
        let mut period = Period {
            from,
            from_mono: (from * NS).saturating_sub(offset),
        };
        let every = self.cfg.every.as_secs().max(1);
        let mut ended: VecDeque<u64> = VecDeque::new();
        for message in messages {
            let Message::Round(round) = message else {
                continue;
            };
            let mut at = 0;
            while at + 8 <= round.records.len() {
                let size = usize::from(u16::from_le_bytes([
                    round.records[at + 6],
                    round.records[at + 7],
                ]));
                if size < 8 || at + size > round.records.len() {
                    break;
                }
                if let Ok((time, Some(event))) = decoder.decode(&round.records[at..at + size]) {
                    live.push(time, event);
                }
                at += size;
            }
            live.end_round();
            ended.push_back(round.ended);
            if ended.len() > 3 {
                ended.pop_front();
            }
            loop {
                let until = period.from + every;
                let until_mono = (until * NS).saturating_sub(offset);
                if round.last || ended.len() < 3 || ended[0] <= until_mono {
                    break;
                }
                live.release_before(Some(until_mono));
                self.cut(&mut live, &period, until, Some(until_mono), rate, &mut made)?;
                period = Period {
                    from: until,
                    from_mono: until_mono,
                };
            }
            if round.last {
                live.release_before(None);
                let until = (realtime_ns().div_ceil(NS)).max(period.from + 1);
                self.cut(&mut live, &period, until, None, rate, &mut made)?;
                break;
            }
        }
        made.samples = live.counts.samples;
        made.late = live.counts.late;
        made.lost = live.counts.lost + live.counts.lost_samples;
        made.resets = live.counts.resets;
        Ok(made)
    }

    /// The OTLP resource of every profile: `service.name` (the app), `host.name`, and the labels.
    fn resource(&self) -> Vec<(&str, &str)> {
        let mut attrs = vec![("service.name", self.cfg.app.as_str())];
        for (k, v) in &self.cfg.labels {
            attrs.push((
                if k == "host" { "host.name" } else { k.as_str() },
                v.as_str(),
            ));
        }
        attrs
    }

    /// Make the profile of `period` (the samples before `limit`, all of them with None) and spool it.
    fn cut(
        &self,
        live: &mut Live,
        period: &Period,
        until: u64,
        limit: Option<u64>,
        rate: Option<u64>,
        made: &mut MadeCounts,
    ) -> Result<(), PushError> {
        let samples = live.take_before(period.from_mono, limit);
        let mut pb = match self.cfg.unsymbolized {
            true => live.unsymbolized(&samples),
            false => {
                let (profile, by_pid, unread) = live.profile(&samples);
                if let Some(u) = unread {
                    // Said once for a run of periods refused alike; the end's summary counts them all.
                    if !u.repeat {
                        eprintln!(
                            "rprof record: push: the period from {} was {}: {} new binaries pushed \
                             unsymbolized (build ids and offsets, labelled rprof_unsymbolized={}); \
                             following periods refused alike are not logged",
                            period.from,
                            u.over,
                            u.binaries,
                            u.over.label()
                        );
                    }
                    made.unread_periods += 1;
                }
                let labels = PprofLabels {
                    no_tid: true,
                    by_pid,
                };
                to_pprof_with(&profile, &labels)?
            }
        };
        drop(samples);
        pb.time_nanos = (period.from * NS) as i64;
        pb.duration_nanos = ((until - period.from) * NS) as i64;
        if self.cfg.url.is_some() {
            let bytes = prost::Message::encode_to_vec(&pb);
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            gz.write_all(&bytes).map_err(PushError::Encode)?;
            let gz = gz.finish().map_err(PushError::Encode)?;
            let query = pyroscope::query(&self.cfg.app, &self.cfg.labels, period.from, until, rate);
            let (mut request, body) =
                pyroscope::request(query, &gz, period.from ^ u64::from(std::process::id()));
            request.to = self.cfg.pyroscope_destination();
            self.spool.put(period.from * NS, &request, &body)?;
            made.profiles += 1;
            made.bytes += body.len() as u64;
        }
        if self.cfg.otlp_url.is_some() {
            let body = prost::Message::encode_to_vec(&to_otlp(&pb, &self.resource()));
            let request = Request {
                kind: "otlp".into(),
                query: String::new(),
                content_type: "application/x-protobuf".into(),
                to: self.cfg.otlp_destination(),
            };
            self.spool.put(period.from * NS, &request, &body)?;
            made.profiles += 1;
            made.bytes += body.len() as u64;
        }
        let _ = self.wake.send(Wake::Spooled);
        live.bound_memory();
        Ok(())
    }
}

/// The running kernel's build id; with `copy`, a copy of its kallsyms is kept in the build-id cache first (once
/// per kernel build, as `record` keeps one), for the live resolver to read instead of /proc/kallsyms.
fn running_kernel(copy: bool) -> Option<Vec<u8>> {
    let id = crate::buildid::running_build_id()?;
    let visible = crate::buildid::running_text().is_some();
    if let Some(dir) = crate::buildid::buildid_dir().filter(|_| copy && visible) {
        crate::buildid::keep_kallsyms(&dir, &id);
    }
    Some(id)
}
