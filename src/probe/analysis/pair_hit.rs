//! A `--pair`'s events in the sink: one event may be several of the pair's ends (`sched_switch` opens a wait
//! for the task it switches out and closes the one of the task it switches in; `inet_sock_set_state` is a
//! socket's birth or its close by its filter). Each end on the event whose filter passes is applied, the DONE
//! first: a START opens a call under its key values (or on its thread), the DONE closes the open one.
use super::calls::Call;
use super::filter::UserFilter;
use super::pairing::StackKey;
use super::sink::Sink;
use crate::probe::target::{PairEnd, TargetId, Targets, DONE_BIT};
use crate::probe::value::Value;
use crate::resolve::FastMap;

/// The filters of every pair's ends, by (pair, end's bit): rprof evaluates each whole, since one event may
/// carry ends whose kernel filters were joined by `||`.
pub(super) fn end_filters(targets: &Targets) -> FastMap<(TargetId, u32), UserFilter> {
    let mut out = FastMap::default();
    for (id, t) in targets.iter() {
        for (bit, end) in t.pair().into_iter().flat_map(|p| p.ends()) {
            if let Some(f) = &end.filter {
                out.insert((id, bit), UserFilter::new(&f.expr));
            }
        }
    }
    out
}

impl Sink<'_> {
    /// An event of a pair that is the ends in `mask`: the DONE first, then the STARTs, each whose filter passes.
    pub(super) fn pair_hit(&mut self, call: Call, mask: u32, stack: Option<&[u64]>, pid: u32) {
        let targets = self.targets;
        let t = &targets[call.target];
        let Some(pair) = t.pair() else {
            return;
        };
        let mut ends: Vec<(u32, &PairEnd)> = pair.ends().filter(|(b, _)| mask & b != 0).collect();
        ends.sort_by_key(|&(bit, _)| bit != DONE_BIT);
        for (bit, end) in ends {
            let range = end.fetches.clone();
            if let Some(f) = self.pair_filters.get(&(call.target, bit)) {
                let values = call.values.get(range.clone()).unwrap_or(&[]);
                if !f.keeps_values(&t.fetches[range.clone()], values, &call.ctx) {
                    continue;
                }
            }
            // The end's own values only (the event may hold another end's too).
            let mut own = call.clone();
            for (i, v) in own.values.iter_mut().enumerate() {
                if !range.contains(&i) {
                    *v = None;
                }
            }
            let key: Option<Box<[Value]>> = match pair.keyed {
                true => match end
                    .key
                    .iter()
                    .map(|&k| own.values.get(k).cloned().flatten())
                    .collect()
                {
                    Some(key) => Some(key),
                    None => {
                        self.stats.keyed.no_key += 1;
                        continue;
                    }
                },
                false => None,
            };
            match bit {
                DONE_BIT => self.pair_done(own, key, pid),
                _ => self.pair_start(own, key, pair.keep, stack, pid),
            }
        }
    }

    /// A START: opens a call under its key (keyed), else on its thread.
    fn pair_start(
        &mut self,
        call: Call,
        key: Option<Box<[Value]>>,
        keep: crate::probe::target::Keep,
        stack: Option<&[u64]>,
        pid: u32,
    ) {
        if let Some(chain) = stack {
            self.stacks
                .add(call.target, pid, self.spaces.get(pid), chain);
        }
        match key {
            Some(key) => self.keyed.start(&mut self.stats, call, key, keep),
            None => {
                let on = StackKey::Thread(call.tid);
                self.pairer.entry(&mut self.stats, call, on, None);
            }
        }
    }

    /// The DONE: closes the call open under its key (keyed), else the innermost one of its thread.
    fn pair_done(&mut self, call: Call, key: Option<Box<[Value]>>, pid: u32) {
        let (target, time) = (call.target, call.time);
        let closed = match &key {
            Some(k) => self.keyed.done(&mut self.stats, target, k.clone(), time),
            None => {
                let on = StackKey::Thread(call.tid);
                self.pairer.ret(&mut self.stats, on, target, time, None)
            }
        };
        if let Some(mut closed) = closed {
            closed.join_return(call.values);
            self.done(&closed, pid, key.as_deref());
        }
    }
}
