//! bcc's memleak for user processes: libc's allocators traced by uprobes and uretprobes, each allocation kept
//! by address in rprof until its free, and every interval the stacks with the most outstanding bytes that are
//! older than `-o` milliseconds, in bcc's format. This module is the pure part: the flags, the allocators and
//! what each call means, the table of outstanding allocations and the report; `rprof tool memleak` (the CLI)
//! runs the probe session and feeds it.
use super::ToolError;
use std::collections::HashMap;

/// One allocator function of libc: how its size and address are found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allocator {
    /// `malloc(size)`, `valloc(size)`, `pvalloc(size)`: size arg0, address returned.
    Sized,
    /// `calloc(n, size)`: arg0 * arg1.
    Calloc,
    /// `realloc(ptr, size)`: frees ptr, allocates size.
    Realloc,
    /// `memalign(align, size)`, `aligned_alloc(align, size)`: size arg1.
    Aligned,
    /// `posix_memalign(&ptr, align, size)`: size arg2, the address written to *arg0 when it returns 0.
    PosixMemalign,
    /// `mmap(addr, length, ...)`: length arg1, address returned unless MAP_FAILED.
    Mmap,
    /// `free(ptr)`, `munmap(addr, length)`: frees arg0.
    Free,
}

/// The functions probed, each with what it is (bcc's list).
pub const FUNCTIONS: &[(&str, Allocator)] = &[
    ("malloc", Allocator::Sized),
    ("calloc", Allocator::Calloc),
    ("realloc", Allocator::Realloc),
    ("free", Allocator::Free),
    ("posix_memalign", Allocator::PosixMemalign),
    ("memalign", Allocator::Aligned),
    ("aligned_alloc", Allocator::Aligned),
    ("valloc", Allocator::Sized),
    ("pvalloc", Allocator::Sized),
    ("mmap", Allocator::Mmap),
    ("munmap", Allocator::Free),
];

/// The allocator a probed function (or one of its aliases) is.
pub fn allocator(names: &[&str]) -> Option<Allocator> {
    FUNCTIONS
        .iter()
        .find(|(n, _)| names.contains(n))
        .map(|(_, a)| *a)
}

/// The `rprof probe` pattern of each function: its arguments (and `ret`) fetched, in libc (`c:`).
pub fn patterns() -> Vec<String> {
    FUNCTIONS
        .iter()
        .map(|(name, a)| {
            let fetch = match a {
                Allocator::Sized | Allocator::Free => "arg0:x64",
                Allocator::Calloc | Allocator::Realloc | Allocator::Aligned | Allocator::Mmap => {
                    "arg0:x64,arg1:u64"
                }
                Allocator::PosixMemalign => "arg0:x64,arg1:u64,arg2:u64",
            };
            format!("c:{name}({fetch},ret:x64)")
        })
        .collect()
}

/// What an entry means once its return is known: the size it allocates, and what it frees at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    pub size: u64,
    /// realloc's old block, free's and munmap's address.
    pub frees: Option<u64>,
    /// posix_memalign: where the address is written.
    pub out_ptr: Option<u64>,
    /// posix_memalign: the alignment asked for (its block's address is a multiple of it).
    pub align: u64,
    /// The call allocates (false for free/munmap).
    pub allocates: bool,
}

impl Call {
    /// The call of `kind` with these entry arguments (missing ones are 0).
    pub fn at_entry(kind: Allocator, args: [u64; 3]) -> Call {
        let [a0, a1, a2] = args;
        let (size, frees, out_ptr, allocates) = match kind {
            Allocator::Sized => (a0, None, None, true),
            Allocator::Calloc => (a0.saturating_mul(a1), None, None, true),
            Allocator::Realloc => (a1, (a0 != 0).then_some(a0), None, true),
            Allocator::Aligned | Allocator::Mmap => (a1, None, None, true),
            Allocator::PosixMemalign => (a2, None, Some(a0), true),
            Allocator::Free => (0, (a0 != 0).then_some(a0), None, false),
        };
        Call {
            size,
            frees,
            out_ptr,
            align: if kind == Allocator::PosixMemalign {
                a1
            } else {
                0
            },
            allocates,
        }
    }
}

/// The address a returned allocation has, from its return value (None: it failed).
pub fn returned_address(kind: Allocator, ret: u64) -> Option<u64> {
    match kind {
        Allocator::Mmap if ret == u64::MAX => None,
        // posix_memalign returns 0 on success; its address is read through the out pointer.
        Allocator::PosixMemalign => None,
        _ => (ret != 0).then_some(ret),
    }
}

/// One outstanding allocation.
#[derive(Clone, Debug)]
struct Block {
    size: u64,
    time_ns: u64,
    stack: usize,
}

/// Outstanding allocations of one process, by address, with their stacks interned.
#[derive(Debug, Default)]
pub struct Outstanding {
    blocks: HashMap<u64, Block>,
    /// posix_memalign's blocks, whose address is written to the caller's memory, which rprof can only read
    /// after the call (by when the program has often written something else there: a stale read made up
    /// leaks): kept with their alignment, oldest first, until a free of an unknown address that is a multiple
    /// of it. A block allocated before tracing began and freed meanwhile can be taken for one of them.
    unaddressed: std::collections::VecDeque<(u64, Block)>,
    stacks: Vec<Vec<String>>,
    stack_ids: HashMap<Vec<String>, usize>,
}

/// One line of the report: bytes, allocations, and the stack's frames (leaf first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackTotal {
    pub bytes: u64,
    pub count: u64,
    pub frames: Vec<String>,
}

impl Outstanding {
    /// An allocation at `addr` (one at the same address that was never freed is replaced, as in bcc).
    pub fn alloc(&mut self, addr: u64, size: u64, time_ns: u64, frames: Vec<String>) {
        let stack = self.intern(frames);
        self.blocks.insert(
            addr,
            Block {
                size,
                time_ns,
                stack,
            },
        );
    }

    /// The id of stack `frames`, kept once however many blocks share it.
    fn intern(&mut self, frames: Vec<String>) -> usize {
        let next = self.stacks.len();
        let stack = *self.stack_ids.entry(frames.clone()).or_insert(next);
        if stack == next {
            self.stacks.push(frames);
        }
        stack
    }

    /// An allocation whose address is not known (posix_memalign's), aligned to `align`.
    pub fn alloc_unaddressed(&mut self, align: u64, size: u64, time_ns: u64, frames: Vec<String>) {
        let stack = self.intern(frames);
        let block = Block {
            size,
            time_ns,
            stack,
        };
        self.unaddressed.push_back((align.max(1), block));
    }

    /// A free of `addr`: of a known block, else of the oldest unaddressed one it is aligned for (other unknown
    /// addresses are ignored: allocated before tracing began, or not by libc).
    pub fn free(&mut self, addr: u64) {
        if self.blocks.remove(&addr).is_some() {
            return;
        }
        if let Some(i) = self
            .unaddressed
            .iter()
            .position(|(a, _)| addr.is_multiple_of(*a))
        {
            self.unaddressed.remove(i);
        }
    }

    /// Allocations outstanding.
    pub fn len(&self) -> usize {
        self.blocks.len() + self.unaddressed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `top` stacks with the most outstanding bytes among allocations made at or before `before_ns`,
    /// fewest bytes first (bcc prints the largest last).
    pub fn report(&self, before_ns: u64, top: usize) -> Vec<StackTotal> {
        let mut by_stack: HashMap<usize, (u64, u64)> = HashMap::new();
        let unaddressed = self.unaddressed.iter().map(|(_, b)| b);
        for b in self
            .blocks
            .values()
            .chain(unaddressed)
            .filter(|b| b.time_ns <= before_ns)
        {
            let e = by_stack.entry(b.stack).or_default();
            e.0 += b.size;
            e.1 += 1;
        }
        let mut totals: Vec<StackTotal> = by_stack
            .into_iter()
            .map(|(s, (bytes, count))| StackTotal {
                bytes,
                count,
                frames: self.stacks[s].clone(),
            })
            .collect();
        totals.sort_by(|a, b| (a.bytes, &a.frames).cmp(&(b.bytes, &b.frames)));
        let skip = totals.len().saturating_sub(top);
        totals.split_off(skip)
    }
}

/// bcc's report: `[HH:MM:SS] Top N stacks with outstanding allocations:`, then per stack
/// `\tB bytes in C allocations from stack` and its frames, each `\t\tFRAME`.
pub fn write_report(
    out: &mut dyn std::io::Write,
    clock: &str,
    top: usize,
    totals: &[StackTotal],
) -> std::io::Result<()> {
    writeln!(
        out,
        "[{clock}] Top {top} stacks with outstanding allocations:"
    )?;
    for t in totals {
        write!(
            out,
            "\t{} bytes in {} allocations from stack",
            t.bytes, t.count
        )?;
        for f in &t.frames {
            write!(out, "\n\t\t{f}")?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// A frame as bcc prints it: `0xADDRESS\tname+0xOFFSET [module]` (`[unknown]` without a name).
pub fn frame_text(addr: u64, name: Option<&str>, offset: u64, module: &str) -> String {
    let module = module.rsplit('/').next().unwrap_or(module);
    match name {
        Some(n) => format!("0x{addr:016x}\t{n}+0x{offset:x} [{module}]"),
        None => format!("0x{addr:016x}\t[unknown] [{module}]"),
    }
}

/// memleak's flags, bcc's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemleakArgs {
    pub pid: Option<i32>,
    /// `-- COMMAND` (or bcc's `-c "COMMAND"`).
    pub command: Vec<String>,
    pub interval_s: u64,
    pub count: Option<u64>,
    /// `-o`: allocations younger than this are not shown.
    pub older_ms: u64,
    /// `-T`: stacks shown.
    pub top: usize,
    /// `-z`/`-Z`: sizes kept.
    pub min_size: Option<u64>,
    pub max_size: Option<u64>,
}

pub const USAGE: &str = "\
  -p PID          the process to trace (or `-- COMMAND`, or bcc's -c \"COMMAND\")
  -o OLDER        allocations younger than this many ms are not shown (500)
  -T TOP          the stacks shown (10)
  -z MIN, -Z MAX  only allocations of at least / at most this many bytes
  [interval [count]]  a report every interval seconds (5), count times";

impl MemleakArgs {
    /// bcc's arguments: `-p PID`, `-o MS`, `-T N`, `-z`/`-Z`, `-c CMD`, `[interval [count]]`, `-- COMMAND`.
    pub fn parse(words: &[String]) -> Result<MemleakArgs, ToolError> {
        let bad = |reason: String| ToolError::Flag {
            tool: "memleak".into(),
            reason,
        };
        let number = |flag: &str, v: Option<&String>| -> Result<u64, ToolError> {
            v.and_then(|v| v.parse().ok())
                .ok_or_else(|| bad(format!("{flag} takes a number")))
        };
        let mut a = MemleakArgs {
            pid: None,
            command: Vec::new(),
            interval_s: 5,
            count: None,
            older_ms: 500,
            top: 10,
            min_size: None,
            max_size: None,
        };
        let mut positional = Vec::new();
        let mut it = words.iter();
        while let Some(w) = it.next() {
            match w.as_str() {
                "--" => {
                    a.command = it.by_ref().cloned().collect();
                }
                "-p" | "--pid" => a.pid = Some(number("-p", it.next())? as i32),
                "-o" | "--older" => a.older_ms = number("-o", it.next())?,
                "-T" | "--top" => a.top = number("-T", it.next())? as usize,
                "-z" | "--min-size" => a.min_size = Some(number("-z", it.next())?),
                "-Z" | "--max-size" => a.max_size = Some(number("-Z", it.next())?),
                "-c" | "--command" => {
                    let cmd = it.next().ok_or_else(|| bad("-c takes a command".into()))?;
                    a.command = shlex::split(cmd)
                        .ok_or_else(|| bad(format!("cannot split the command '{cmd}'")))?;
                }
                f if f.starts_with('-') => {
                    return Err(bad(format!("unknown or unsupported flag '{f}'")))
                }
                _ => positional.push(number("interval", Some(w))?),
            }
        }
        match positional.as_slice() {
            [] => {}
            [i] => a.interval_s = *i,
            [i, c] => (a.interval_s, a.count) = (*i, Some(*c)),
            _ => return Err(bad("at most [interval [count]]".into())),
        }
        if a.interval_s == 0 {
            return Err(bad("the interval is at least 1 second".into()));
        }
        if a.pid.is_some() != a.command.is_empty() {
            return Err(bad(
                "give -p PID or -- COMMAND (kernel allocations need kprobes)".into(),
            ));
        }
        Ok(a)
    }

    /// Whether an allocation of `size` is kept (`-z`/`-Z`).
    pub fn keeps(&self, size: u64) -> bool {
        self.min_size.is_none_or(|m| size >= m) && self.max_size.is_none_or(|m| size <= m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    /// Check bcc's flags and their defaults.
    #[test]
    fn flags() {
        let a = MemleakArgs::parse(&words("-p 42")).unwrap();
        assert_eq!(
            (a.pid, a.interval_s, a.older_ms, a.top),
            (Some(42), 5, 500, 10)
        );
        let a = MemleakArgs::parse(&words("-o 100 -T 3 -- ./x 1 2")).unwrap();
        assert_eq!((a.older_ms, a.top), (100, 3));
        assert_eq!(a.command, words("./x 1 2"));
        let a = MemleakArgs::parse(&words("-p 1 1 3")).unwrap();
        assert_eq!((a.interval_s, a.count), (1, Some(3)));
        assert!(MemleakArgs::parse(&words("")).is_err());
        assert!(MemleakArgs::parse(&words("-p 1 --percpu")).is_err());
    }

    /// Check that posix_memalign's blocks (address unknown) are freed by the oldest aligned free of an unknown
    /// address, never by a known block's or a misaligned one, and that the rest are reported.
    #[test]
    fn unaddressed_blocks_freed_by_aligned_unknown_frees() {
        let mut t = Outstanding::default();
        let f = |s: &str| vec![s.to_string()];
        t.alloc(0x1000, 16, 0, f("known"));
        t.alloc_unaddressed(64, 1024, 0, f("pm"));
        t.alloc_unaddressed(64, 1024, 0, f("pm"));
        t.free(0x1000);
        assert_eq!(t.len(), 2, "the known block's free is its own");
        t.free(0x2010);
        assert_eq!(t.len(), 2, "0x2010 is not 64-aligned");
        t.free(0x2040);
        assert_eq!(t.len(), 1);
        let r = t.report(0, 10);
        assert_eq!(
            (r[0].bytes, r[0].count, r[0].frames.clone()),
            (1024, 1, f("pm"))
        );
    }

    /// Check what each allocator's entry and return mean.
    #[test]
    fn calls() {
        let c = Call::at_entry(Allocator::Calloc, [10, 24, 0]);
        assert_eq!((c.size, c.frees), (240, None));
        let c = Call::at_entry(Allocator::Realloc, [0x1000, 64, 0]);
        assert_eq!((c.size, c.frees), (64, Some(0x1000)));
        let c = Call::at_entry(Allocator::PosixMemalign, [0x7ff0, 64, 4096]);
        assert_eq!((c.size, c.out_ptr, c.align), (4096, Some(0x7ff0), 64));
        assert_eq!(returned_address(Allocator::Mmap, u64::MAX), None);
        assert_eq!(returned_address(Allocator::Sized, 0), None);
        assert_eq!(returned_address(Allocator::Sized, 0x10), Some(0x10));
        assert!(!Call::at_entry(Allocator::Free, [0x10, 0, 0]).allocates);
    }

    /// Check the table: frees remove, young allocations are not shown, the largest stack is last.
    #[test]
    fn outstanding_and_age() {
        let mut o = Outstanding::default();
        let leak = vec!["leak".to_string(), "main".to_string()];
        let other = vec!["other".to_string()];
        for i in 0..10 {
            o.alloc(0x1000 + i * 0x400, 1024, 100, leak.clone());
        }
        o.alloc(0x9000, 16, 100, other.clone());
        o.alloc(0xa000, 99999, 900, other.clone());
        o.alloc(0xb000, 7, 100, other.clone());
        o.free(0xb000);
        let r = o.report(500, 10);
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].bytes, r[0].count), (16, 1));
        assert_eq!((r[1].bytes, r[1].count, &r[1].frames), (10240, 10, &leak));
        assert_eq!(o.report(1000, 1)[0].bytes, 99999 + 16);
        let mut text = Vec::new();
        write_report(&mut text, "12:00:00", 10, &r[1..]).unwrap();
        assert_eq!(
            String::from_utf8(text).unwrap(),
            "[12:00:00] Top 10 stacks with outstanding allocations:\n\
             \t10240 bytes in 10 allocations from stack\n\t\tleak\n\t\tmain\n"
        );
    }

    /// Check bcc's frame format.
    #[test]
    fn frames() {
        assert_eq!(
            frame_text(0x401136, Some("leak"), 0x1d, "/tmp/memleak_fixture"),
            "0x0000000000401136\tleak+0x1d [memleak_fixture]"
        );
    }
}
