//! Typed addresses. A runtime address in a process, an offset into a mapped file and an address as the ELF
//! file states it (what symbol tables and DWARF use) are different spaces; these newtypes keep them apart.

/// An address in a process's virtual memory at run time (what the kernel reports in samples).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuntimeAddr(pub u64);

/// A byte offset into a file (what mmap's `pgoff` and uprobe_events use).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileOffset(pub u64);

/// An address in the ELF file's own virtual address space (`st_value`, `p_vaddr`, DWARF `DW_AT_low_pc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ElfAddr(pub u64);
