//! Time-ordered merge of records from several ring buffers.
//!
//! Each buffer is ordered by time, but one thread's events can land in two buffers (it migrated between CPUs).
//! We read every buffer once per round. Anything that arrives in a later round was written after the previous
//! round ended, so once round N has been read, every event up to the newest time seen in round N-1 is in, and
//! can be released in order (the same rule as perf's FINISHED_ROUND).
//!
//! A round's items are sorted once when the round ends (a stable sort: equal times keep their arrival order).
//! What stays queued is sorted already, and each buffer's items arrive in order, so the sort merges a few runs.

/// A queue that releases items in time order once it is safe to.
pub struct OrderedMerge<T> {
    items: Vec<(u64, T)>,
    newest_this_round: u64,
    newest_last_round: u64,
    /// The newest times of the rounds before the last, newest last (`lag` of them).
    older: std::collections::VecDeque<u64>,
    lag: usize,
    /// This round released nothing after this time (a buffer read only up to it).
    cap: Option<u64>,
    /// The cap of the last round that ended.
    last_cap: Option<u64>,
}

impl<T> Default for OrderedMerge<T> {
    fn default() -> Self {
        OrderedMerge {
            items: Vec::new(),
            newest_this_round: 0,
            newest_last_round: 0,
            older: std::collections::VecDeque::new(),
            lag: 0,
            cap: None,
            last_cap: None,
        }
    }
}

impl<T> OrderedMerge<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// A merge that releases `lag` rounds later than it must: up to the newest time of the round `lag + 1`
    /// rounds back. Items that come late but belong before what is read now (a hole in a ring, learnt a round
    /// after the events that bound it) still take their place in the order.
    pub fn with_lag(lag: usize) -> Self {
        OrderedMerge {
            lag,
            ..Self::default()
        }
    }

    /// Queue an item read in the current round. Items with equal times keep their arrival order.
    pub fn push(&mut self, time: u64, item: T) {
        self.newest_this_round = self.newest_this_round.max(time);
        self.items.push((time, item));
    }

    /// The time of the item pushed last (before the round ends and sorts them).
    pub fn last_pushed(&self) -> Option<u64> {
        self.items.last().map(|(time, _)| *time)
    }

    /// A buffer was read this round only up to an item at `time` (a bounded read; the rest of it comes in
    /// later rounds and is not older): the round releases nothing after it.
    pub fn cap_round(&mut self, time: u64) {
        self.cap = Some(self.cap.map_or(time, |c| c.min(time)));
    }

    /// Whether the merge holds more than `items` that the last round's cap kept back, and what a buffer read
    /// past the cap would add to them: a buffer whose last item read is after `Some(time)` is ahead of the
    /// one that set the cap. None when not so full, or the last round was not capped.
    pub fn held_back(&self, items: usize) -> Option<u64> {
        self.last_cap.filter(|_| self.items.len() > items)
    }

    /// End a round (every buffer has been read once, or up to [`OrderedMerge::cap_round`]): release, in time
    /// order, what is now safe.
    pub fn finish_round(&mut self, mut out: impl FnMut(u64, T)) {
        self.older.push_back(self.newest_last_round);
        let limit = match self.older.len() > self.lag {
            true => self.older.pop_front().unwrap_or(0),
            false => 0,
        };
        // Items at the cap's time wait too: what is left of that buffer may hold more at the same time.
        self.last_cap = self.cap.take();
        let limit = self
            .last_cap
            .map_or(limit, |c| c.saturating_sub(1).min(limit));
        self.items.sort_by_key(|(time, _)| *time);
        let safe = self.items.partition_point(|(time, _)| *time <= limit);
        for (time, item) in self.items.drain(..safe) {
            out(time, item);
        }
        self.newest_last_round = self.newest_this_round;
        self.shrink();
    }

    /// Give back the room a burst made (rounds that held many items), once the queue holds under a quarter
    /// of it: the queue's room is the largest backlog met so far, which would otherwise only grow.
    fn shrink(&mut self) {
        const KEEP: usize = 4096;
        if self.items.capacity() > KEEP && self.items.len() * 4 < self.items.capacity() {
            self.items.shrink_to((self.items.len() * 2).max(KEEP));
        }
    }

    /// Release, in time order, every item timed before `limit` (a period of `rprof record --push` ends there and
    /// every record before it has been read).
    pub fn drain_before(&mut self, limit: u64, mut out: impl FnMut(u64, T)) {
        self.items.sort_by_key(|(time, _)| *time);
        let before = self.items.partition_point(|(time, _)| *time < limit);
        for (time, item) in self.items.drain(..before) {
            out(time, item);
        }
    }

    /// Release everything (at the end, after the last read).
    pub fn drain(&mut self, mut out: impl FnMut(u64, T)) {
        self.items.sort_by_key(|(time, _)| *time);
        for (time, item) in self.items.drain(..) {
            out(time, item);
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that items from two interleaved sources come out in time order, and only once safe.
    #[test]
    fn releases_in_order_after_a_round() {
        let mut m = OrderedMerge::new();
        let mut out = Vec::new();
        m.push(10, "a10");
        m.push(30, "a30");
        m.push(20, "b20");
        m.finish_round(|t, x| out.push((t, x)));
        assert!(out.is_empty(), "nothing is safe after the first round");
        m.push(25, "b25"); // late arrival older than the newest of round 1
        m.push(40, "a40");
        m.finish_round(|t, x| out.push((t, x)));
        assert_eq!(
            out,
            vec![(10, "a10"), (20, "b20"), (25, "b25"), (30, "a30")]
        );
        m.drain(|t, x| out.push((t, x)));
        assert_eq!(out.last(), Some(&(40, "a40")));
    }

    /// Check that a capped round releases nothing at or after the cap, and the next round what it holds back.
    #[test]
    fn capped_round_holds_back_what_a_buffer_left_unread_could_precede() {
        let mut m = OrderedMerge::new();
        let mut out = Vec::new();
        m.push(10, "a10");
        m.push(50, "b50");
        m.finish_round(|t, x| out.push((t, x)));
        m.push(20, "a20"); // buffer a is read only up to 20; b is read fully
        m.push(60, "b60");
        assert_eq!(m.last_pushed(), Some(60));
        m.cap_round(20);
        m.finish_round(|t, x| out.push((t, x)));
        assert_eq!(
            out,
            vec![(10, "a10")],
            "a's unread records may be older than b50"
        );
        m.push(30, "a30"); // the rest of a; b had nothing new
        m.finish_round(|t, x| out.push((t, x)));
        let times: Vec<u64> = out.iter().map(|o| o.0).collect();
        assert_eq!(times, [10, 20, 30, 50, 60], "up to round 2's newest, b60");
    }

    /// Check that a lagged merge releases a round later, so that an item pushed late at an older time still
    /// comes out in order.
    #[test]
    fn lag_keeps_a_round_back() {
        let mut m = OrderedMerge::with_lag(1);
        let mut out = Vec::new();
        m.push(10, "a10");
        m.finish_round(|t, x| out.push((t, x)));
        m.push(20, "a20");
        m.finish_round(|t, x| out.push((t, x)));
        assert!(
            out.is_empty(),
            "nothing is released before two rounds: {out:?}"
        );
        m.push(15, "late15");
        m.push(30, "a30");
        m.finish_round(|t, x| out.push((t, x)));
        assert_eq!(out, vec![(10, "a10")]);
        m.push(40, "a40");
        m.finish_round(|t, x| out.push((t, x)));
        assert_eq!(out, vec![(10, "a10"), (15, "late15"), (20, "a20")]);
    }

    /// Check that the queue gives back the room of a burst once it has released it.
    #[test]
    fn room_of_a_burst_is_given_back() {
        let mut m = OrderedMerge::new();
        for t in 0..100_000 {
            m.push(t, ());
        }
        m.finish_round(|_, _| {});
        m.push(100_000, ());
        m.finish_round(|_, _| {});
        assert_eq!(m.len(), 1);
        assert!(m.items.capacity() <= 4096, "{}", m.items.capacity());
    }

    /// Check that items with equal times come out in the order they were pushed, across rounds.
    #[test]
    fn equal_times_keep_arrival_order() {
        let mut m = OrderedMerge::new();
        let mut out = Vec::new();
        m.push(5, "first");
        m.push(7, "x");
        m.push(5, "second");
        m.finish_round(|_, x| out.push(x));
        m.push(5, "third");
        m.push(9, "y");
        m.finish_round(|_, x| out.push(x));
        m.drain(|_, x| out.push(x));
        assert_eq!(out, vec!["first", "second", "third", "x", "y"]);
    }
}
