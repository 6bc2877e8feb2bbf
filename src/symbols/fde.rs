//! The code range around an address that the unwind tables bound: the `.eh_frame` FDE found through
//! `.eh_frame_hdr`'s sorted table. An FDE covers about one function (compilers emit one per function, and one
//! per cold part), so unnamed code of a stripped binary can be grouped by it without guessing.
use crate::mapped::MappedFile;
use gimli::{BaseAddresses, EhFrame, EhFrameHdr, EndianSlice, RunTimeEndian, UnwindSection};
use object::{Object, ObjectSection};
use std::ops::Range;

/// Where a section lies: its ELF address and its bytes in the file.
#[derive(Clone)]
struct Placed {
    addr: u64,
    bytes: Range<usize>,
}

/// The `.eh_frame_hdr` table and `.eh_frame` of one file, read on demand from its mapped bytes.
pub(crate) struct Fdes {
    data: MappedFile,
    hdr: Placed,
    eh_frame: Placed,
    endian: RunTimeEndian,
    address_size: u8,
}

impl Fdes {
    /// The tables of the ELF file `file` whose bytes are `data`; None without `.eh_frame_hdr` and `.eh_frame`
    /// stored in the file.
    pub fn of(data: &MappedFile, file: &object::File<'_>) -> Option<Fdes> {
        let placed = |name: &str| {
            let section = file.section_by_name(name)?;
            let (offset, size) = section.file_range()?;
            let start = usize::try_from(offset).ok()?;
            let end = start.checked_add(usize::try_from(size).ok()?)?;
            (end <= data.len()).then_some(Placed {
                addr: section.address(),
                bytes: start..end,
            })
        };
        Some(Fdes {
            data: data.clone(),
            hdr: placed(".eh_frame_hdr")?,
            eh_frame: placed(".eh_frame")?,
            endian: if file.is_little_endian() {
                RunTimeEndian::Little
            } else {
                RunTimeEndian::Big
            },
            address_size: if file.is_64() { 8 } else { 4 },
        })
    }

    /// The ELF address range of the FDE that covers `addr`; None when none does.
    pub fn range(&self, addr: u64) -> Option<Range<u64>> {
        let bases = BaseAddresses::default()
            .set_eh_frame_hdr(self.hdr.addr)
            .set_eh_frame(self.eh_frame.addr);
        let hdr = EhFrameHdr::new(&self.data[self.hdr.bytes.clone()], self.endian)
            .parse(&bases, self.address_size)
            .ok()?;
        let mut eh_frame = EhFrame::from(EndianSlice::new(
            &self.data[self.eh_frame.bytes.clone()],
            self.endian,
        ));
        eh_frame.set_address_size(self.address_size);
        let fde = hdr
            .table()?
            .fde_for_address(&eh_frame, &bases, addr, EhFrame::cie_from_offset)
            .ok()?;
        Some(fde.initial_address()..fde.end_address())
    }
}
