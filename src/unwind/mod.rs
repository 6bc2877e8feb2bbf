//! Unwinding: the kernel's frame-pointer callchain ([`fp`]) and DWARF CFI unwinding with framehop ([`dwarf`]:
//! the unwind loop; `modules`: ELF layout, unwind sections and the module cache's entries; `signal`: signal
//! frames; `stats`: how unwinds ended).
pub mod dwarf;
pub mod fp;
mod loader;
mod modules;
mod signal;
mod stats;
