//! The load layout of an ELF file: its PT_LOAD segments, and the arithmetic between the three kinds of
//! address a mapped file has (runtime address, ELF virtual address, file offset).
//!
//! One type for everyone who maps a file onto addresses: the symbolizer (file offset -> ELF address), probe
//! (ELF address -> uprobe offset) and the unwinder (a mapping's load bias and code range).
use crate::addr::{ElfAddr, FileOffset};
use object::{Object, ObjectSegment, ReadRef, SegmentFlags};
use std::ops::Range;

/// A PT_LOAD segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadSegment {
    /// Where the segment's bytes start in the file.
    pub offset: u64,
    /// How many bytes of the segment the file holds.
    pub file_size: u64,
    /// The ELF virtual address the segment is linked at.
    pub vaddr: u64,
    /// The segment's size in memory (at least `file_size`: the rest is zero-filled, e.g. .bss).
    pub mem_size: u64,
    /// PF_X: the segment holds code.
    pub executable: bool,
}

/// The PT_LOAD segments of an ELF file, in program-header order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ElfLayout {
    pub segments: Vec<LoadSegment>,
}

impl ElfLayout {
    /// The layout of a parsed file (object lists only the PT_LOAD program headers as segments).
    pub fn of<'data, R: ReadRef<'data>>(file: &object::File<'data, R>) -> ElfLayout {
        let segments = file
            .segments()
            .map(|s| {
                let (offset, file_size) = s.file_range();
                let executable = match s.flags() {
                    SegmentFlags::Elf { p_flags } => p_flags & object::elf::PF_X != 0,
                    _ => false,
                };
                LoadSegment {
                    offset,
                    file_size,
                    vaddr: s.address(),
                    mem_size: s.size(),
                    executable,
                }
            })
            .collect();
        ElfLayout { segments }
    }

    /// The load bias of a mapping of this file at `start` with file offset `pgoff`: runtime address minus
    /// ELF virtual address, computed with the PT_LOAD segment that contains `pgoff`.
    pub fn bias(&self, start: u64, pgoff: u64) -> u64 {
        const PAGE: u64 = 4096;
        let contains = |s: &&LoadSegment| {
            let first = s.offset & !(PAGE - 1);
            first <= pgoff && pgoff < s.offset.saturating_add(s.file_size.max(1))
        };
        // The kernel maps each segment from its page-aligned offset, so an exact page match is the segment;
        // otherwise (a mapping split by mprotect) take the last segment that contains `pgoff`.
        let segment = self
            .segments
            .iter()
            .filter(contains)
            .max_by_key(|s| (s.offset & !(PAGE - 1) == pgoff, s.offset))
            .or_else(|| self.segments.first());
        match segment {
            // runtime(vaddr) = start + (vaddr - seg.vaddr) + (seg.offset - pgoff)
            Some(s) => start
                .wrapping_sub(pgoff)
                .wrapping_add(s.offset)
                .wrapping_sub(s.vaddr),
            None => start.wrapping_sub(pgoff),
        }
    }

    /// The ELF virtual address range of the executable segments (all segments if none is marked executable).
    pub fn code_range(&self) -> Range<u64> {
        let exec: Vec<&LoadSegment> = self.segments.iter().filter(|s| s.executable).collect();
        let segments: Vec<&LoadSegment> = if exec.is_empty() {
            self.segments.iter().collect()
        } else {
            exec
        };
        let start = segments.iter().map(|s| s.vaddr).min().unwrap_or(0);
        let end = segments
            .iter()
            .map(|s| s.vaddr.saturating_add(s.mem_size))
            .max()
            .unwrap_or(0);
        start..end
    }

    /// The file offset of an ELF address (a uprobe's offset): addr - segment vaddr + segment file offset.
    pub fn file_offset(&self, addr: ElfAddr) -> Option<FileOffset> {
        self.segments
            .iter()
            .find(|s| {
                addr.0
                    .checked_sub(s.vaddr)
                    .is_some_and(|at| at < s.mem_size.max(s.file_size))
            })
            .and_then(|s| (addr.0 - s.vaddr).checked_add(s.offset))
            .map(FileOffset)
    }

    /// The ELF address at a file offset (inverse of [`ElfLayout::file_offset`]).
    pub fn elf_addr(&self, offset: FileOffset) -> Option<ElfAddr> {
        self.segments
            .iter()
            .find(|s| {
                offset
                    .0
                    .checked_sub(s.offset)
                    .is_some_and(|at| at < s.file_size)
            })
            .and_then(|s| (offset.0 - s.offset).checked_add(s.vaddr))
            .map(ElfAddr)
    }
}

/// The most one compressed byte expands to: zlib's limit (1032:1). Zstandard can go further in theory, but DWARF
/// compresses 3 to 10 times.
const MAX_EXPANSION: u64 = 1032;

/// True when the compressed bytes can hold the uncompressed size their header claims.
pub fn fits_expansion(compressed: &object::CompressedData<'_>) -> bool {
    let most = (compressed.data.len() as u64)
        .saturating_mul(MAX_EXPANSION)
        .saturating_add(64);
    compressed.uncompressed_size <= most
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(offset: u64, file_size: u64, vaddr: u64, mem_size: u64, x: bool) -> LoadSegment {
        LoadSegment {
            offset,
            file_size,
            vaddr,
            mem_size,
            executable: x,
        }
    }

    /// Check that the load bias comes from the PT_LOAD segment holding the mapping's file offset.
    #[test]
    fn bias_uses_segment_of_pgoff() {
        let layout = ElfLayout {
            segments: vec![
                segment(0, 0x5f8, 0, 0x5f8, false),
                segment(0x1000, 0x1d5, 0x1000, 0x1d5, true),
                segment(0x2df0, 0x228, 0x3df0, 0x230, false),
            ],
        };
        assert_eq!(layout.bias(0x5555_5555_5000, 0x1000), 0x5555_5555_4000);
        assert_eq!(layout.bias(0x5555_5555_7000, 0x2000), 0x5555_5555_4000);
        assert_eq!(layout.code_range(), 0x1000..0x11d5);
        // A Rust-style layout: the first (read-only) segment's file range reaches into the page of the code.
        let rust = ElfLayout {
            segments: vec![
                segment(0, 0x142f8, 0, 0x142f8, false),
                segment(0x14300, 0x423b0, 0x15300, 0x423b0, true),
            ],
        };
        assert_eq!(rust.bias(0x5635_f096_b000, 0x14000), 0x5635_f095_6000);
        assert_eq!(rust.bias(0x5635_f095_6000, 0), 0x5635_f095_6000);
        // Non-PIE: vaddr 0x401000 at offset 0x1000, mapped at its own address.
        let fixed = ElfLayout {
            segments: vec![segment(0x1000, 0x100, 0x401000, 0x100, true)],
        };
        assert_eq!(fixed.bias(0x401000, 0x1000), 0);
    }

    /// Check that file offsets and ELF addresses convert both ways through the segment that holds them, and
    /// that addresses outside every segment (or in .bss, for offsets) have none.
    #[test]
    fn file_offsets_and_elf_addresses() {
        let layout = ElfLayout {
            segments: vec![
                segment(0x1000, 0x1d5, 0x1000, 0x1d5, true),
                segment(0x2df0, 0x228, 0x3df0, 0x300, false),
            ],
        };
        assert_eq!(
            layout.file_offset(ElfAddr(0x1010)),
            Some(FileOffset(0x1010))
        );
        assert_eq!(
            layout.file_offset(ElfAddr(0x3e00)),
            Some(FileOffset(0x2e00))
        );
        assert_eq!(layout.elf_addr(FileOffset(0x2e00)), Some(ElfAddr(0x3e00)));
        assert_eq!(layout.elf_addr(FileOffset(0x1010)), Some(ElfAddr(0x1010)));
        // In memory but not in the file (.bss): an address has an offset past the file part, no inverse.
        assert_eq!(
            layout.file_offset(ElfAddr(0x40a0)),
            Some(FileOffset(0x30a0))
        );
        assert_eq!(layout.elf_addr(FileOffset(0x30a0)), None);
        assert_eq!(layout.file_offset(ElfAddr(0x9000)), None);
        assert_eq!(layout.elf_addr(FileOffset(0x500)), None);
    }

    /// Check that a real ELF file (this test binary) has an executable segment whose code range is inside it.
    #[test]
    fn parses_own_executable() {
        let data = std::fs::read("/proc/self/exe").unwrap();
        let file = object::File::parse(&*data).unwrap();
        let layout = ElfLayout::of(&file);
        assert!(layout.segments.iter().any(|s| s.executable));
        let code = layout.code_range();
        assert!(code.start < code.end);
        let entry = file.entry();
        assert!(code.contains(&entry), "entry {entry:#x} in {code:x?}");
        let offset = layout.file_offset(ElfAddr(entry)).unwrap();
        assert_eq!(layout.elf_addr(offset), Some(ElfAddr(entry)));
    }
}
