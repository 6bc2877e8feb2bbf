//! Unwinding: the kernel's frame-pointer callchain ([`fp`]) and DWARF CFI unwinding with framehop ([`dwarf`]).
pub mod dwarf;
pub mod fp;
