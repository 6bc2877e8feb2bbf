//! Whether a chain of interpreter frames, read field by field while the thread ran, is one stack. The thread
//! can return and call again during the walk; its frames live in a reused data stack, so the outer frames read
//! can be another call's (a torn chain: `loads <- parse_json.<lambda> <- spend <- regex_scan`). Every word the
//! walk went by (the thread's current frame, each frame's `previous`, code, and instruction but the leaf's,
//! which moves as the leaf runs) is read again after the walk, in one `process_vm_readv`: when each still holds
//! its value, the chain read is the thread's stack at that instant (give or take the microseconds of that copy).
use super::memory::Memory;

/// The words a walk read, by address, with the values it read.
#[derive(Debug, Default)]
pub struct Words(Vec<(u64, u64)>);

impl Words {
    /// Note that the word at `addr` was read as `value`; returns `value`.
    pub fn saw(&mut self, addr: u64, value: u64) -> u64 {
        self.0.push((addr, value));
        value
    }

    /// Whether every word still holds the value read (false when one is no longer readable).
    pub fn hold(&self, mem: &Memory) -> bool {
        let addrs: Vec<u64> = self.0.iter().map(|&(a, _)| a).collect();
        mem.words(&addrs)
            .is_ok_and(|now| now.iter().zip(&self.0).all(|(n, &(_, was))| *n == was))
    }
}

/// Run `read` (a stack read, and the words it went by) until its words hold after it, twice at most: the last
/// read's result, and whether its words held (false: the thread moved under both reads, the result may be a
/// torn chain).
pub fn settled<T, E>(
    mem: &Memory,
    mut read: impl FnMut() -> Result<(T, Words), E>,
) -> Result<(T, bool), E> {
    let (first, words) = read()?;
    if words.hold(mem) {
        return Ok((first, true));
    }
    let (second, words) = read()?;
    let held = words.hold(mem);
    Ok((second, held))
}

#[cfg(test)]
mod tests {
    use super::{settled, Memory, Words};
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A chain of three frames (each word: a frame's `previous`) in this process's own memory, read through
    /// `process_vm_readv` as a target's: the head and the links as first read.
    fn walk(mem: &Memory, head: &AtomicU64) -> (Vec<u64>, Words) {
        let mut words = Words::default();
        let mut frame = words.saw(head.as_ptr() as u64, mem.u64(head.as_ptr() as u64).unwrap());
        let mut chain = Vec::new();
        while frame != 0 && chain.len() < 8 {
            chain.push(frame);
            frame = words.saw(frame, mem.u64(frame).unwrap());
        }
        (chain, words)
    }

    /// Check that a chain whose memory changed after the walk (the thread returned and called again: the head
    /// moved, or a frame's `previous` now names another frame) does not hold, and an unchanged one does.
    #[test]
    fn a_changed_chain_does_not_hold() {
        let mem = Memory::new(std::process::id());
        let frames: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
        let at = |i: usize| frames[i].as_ptr() as u64;
        // head -> frame 1 -> frame 2 -> frame 3 (outermost).
        frames[1].store(at(2), Ordering::SeqCst);
        frames[2].store(at(3), Ordering::SeqCst);
        let head = AtomicU64::new(at(1));
        let (chain, words) = walk(&mem, &head);
        assert_eq!(chain, [at(1), at(2), at(3)]);
        assert!(words.hold(&mem));
        // Frame 2's slot reused by another call whose caller is frame 0.
        frames[2].store(at(0), Ordering::SeqCst);
        assert!(!words.hold(&mem));
        frames[2].store(at(3), Ordering::SeqCst);
        assert!(words.hold(&mem));
        // The thread runs another frame.
        head.store(at(2), Ordering::SeqCst);
        assert!(!words.hold(&mem));
    }

    /// Check the reads of a thread whose current frame changes between reads (a fake thread: each read of its
    /// chain moves its head after the walk): a chain that moved under the first read only is read again and
    /// kept; one that moved under both reads is given back as not held (the caller marks it late); a quiet one
    /// is read once.
    #[test]
    fn a_chain_moving_under_both_reads_is_refused() {
        let mem = Memory::new(std::process::id());
        let frames: Vec<AtomicU64> = (0..3).map(|_| AtomicU64::new(0)).collect();
        let at = |i: usize| frames[i].as_ptr() as u64;
        let head = AtomicU64::new(at(0));
        for (moves, reads, held) in [(0, 1, true), (1, 2, true), (2, 2, false), (9, 2, false)] {
            head.store(at(0), Ordering::SeqCst);
            let mut n = 0;
            let (chain, ok) = settled(&mem, || {
                let read = walk(&mem, &head);
                n += 1;
                if n <= moves {
                    // The thread returned and called another function, whose frame is the next slot.
                    head.store(at(n % 3), Ordering::SeqCst);
                }
                Ok::<_, ()>(read)
            })
            .unwrap();
            assert_eq!((n, ok), (reads, held), "{moves} moves");
            // The chain given back is the last read's.
            assert_eq!(chain, [at((reads - 1) % 3)], "{moves} moves");
        }
    }
}
