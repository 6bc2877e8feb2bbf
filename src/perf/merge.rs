//! Time-ordered merge of records from several ring buffers.
//!
//! Each buffer is ordered by time, but one thread's events can land in two buffers (it migrated between CPUs).
//! We read every buffer once per round. Anything that arrives in a later round was written after the previous
//! round ended, so once round N has been read, every event up to the newest time seen in round N-1 is in, and
//! can be released in order (the same rule as perf's FINISHED_ROUND).
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A queue that releases items in time order once it is safe to.
pub struct OrderedMerge<T> {
    heap: BinaryHeap<Reverse<Entry<T>>>,
    seq: u64,
    newest_this_round: u64,
    newest_last_round: u64,
}

struct Entry<T> {
    time: u64,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.time, self.seq) == (other.time, other.seq)
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.time, self.seq).cmp(&(other.time, other.seq))
    }
}

impl<T> Default for OrderedMerge<T> {
    fn default() -> Self {
        OrderedMerge {
            heap: BinaryHeap::new(),
            seq: 0,
            newest_this_round: 0,
            newest_last_round: 0,
        }
    }
}

impl<T> OrderedMerge<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queue an item read in the current round. Items with equal times keep their arrival order.
    pub fn push(&mut self, time: u64, item: T) {
        self.newest_this_round = self.newest_this_round.max(time);
        self.heap.push(Reverse(Entry {
            time,
            seq: self.seq,
            item,
        }));
        self.seq += 1;
    }

    /// End a round (every buffer has been read once): release, in time order, what is now safe.
    pub fn finish_round(&mut self, mut out: impl FnMut(u64, T)) {
        let limit = self.newest_last_round;
        while self.heap.peek().is_some_and(|e| e.0.time <= limit) {
            let e = self.heap.pop().expect("peeked").0;
            out(e.time, e.item);
        }
        self.newest_last_round = self.newest_this_round;
    }

    /// Release everything (at the end, after the last read).
    pub fn drain(&mut self, mut out: impl FnMut(u64, T)) {
        while let Some(Reverse(e)) = self.heap.pop() {
            out(e.time, e.item);
        }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
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
}
