//! Reading the DIEs of a file's DWARF with gimli: units parsed when first needed (a bounded number kept),
//! references followed across units (`DW_FORM_ref_addr`, as LTO output has them) without a context over the
//! whole file, names through abstract origins and specifications. Used by the inline lookup (`dwarf/`) and by
//! `params`.
use gimli::{AttributeValue, DwTag, Reader, UnitOffset};
use std::ops::Range;

/// A DIE: the offset of its unit's header in `.debug_info`, and its offset in the unit.
pub(crate) type DieRef = (usize, UnitOffset);

/// How deep references (type chains, origins) are followed: DWARF can be cyclic.
pub(crate) const MAX_DEPTH: u8 = 24;

/// A parsed unit.
struct Parsed<R: Reader<Offset = usize>> {
    /// Its header's offset in `.debug_info`.
    start: usize,
    unit: gimli::Unit<R>,
    /// Its language is C++ (type names go without `struct`).
    cxx: bool,
}

/// The DIEs of one file.
pub(crate) struct Dies<R: Reader<Offset = usize>> {
    pub dwarf: gimli::Dwarf<R>,
    /// Every unit's bytes in `.debug_info`, in order (read on first need: one header read per unit).
    bounds: Option<Vec<Range<usize>>>,
    /// Parsed units, the most recently used last; at most `keep`.
    units: Vec<Parsed<R>>,
    keep: usize,
    /// Split DWARF (a `.dwo` file): the skeleton unit's attributes that its units take (addresses are
    /// relocated in the skeleton only).
    skeleton: Option<Skeleton>,
}

/// What a split unit takes from its skeleton (see `gimli::Unit::copy_relocated_attributes`).
#[derive(Clone, Copy)]
struct Skeleton {
    low_pc: u64,
    addr_base: gimli::DebugAddrBase<usize>,
    rnglists_base: gimli::DebugRngListsBase<usize>,
}

impl<R: Reader<Offset = usize>> Dies<R> {
    /// The DIEs of `dwarf`, keeping at most `keep` parsed units (the least recently used is dropped).
    pub fn new(dwarf: gimli::Dwarf<R>, keep: usize) -> Dies<R> {
        Dies {
            dwarf,
            bounds: None,
            units: Vec::new(),
            keep: keep.max(1),
            skeleton: None,
        }
    }

    /// These are the DIEs of a `.dwo` file whose skeleton unit is `skeleton`.
    pub fn split_from(&mut self, skeleton: &gimli::Unit<R>) {
        self.skeleton = Some(Skeleton {
            low_pc: skeleton.low_pc,
            addr_base: skeleton.addr_base,
            rnglists_base: skeleton.rnglists_base,
        });
        self.units.clear();
    }

    /// The bytes of every unit in `.debug_info`, in order.
    pub fn bounds(&mut self) -> gimli::Result<&[Range<usize>]> {
        if self.bounds.is_none() {
            let mut bounds = Vec::new();
            let mut headers = self.dwarf.units();
            while let Some(header) = headers.next()? {
                let start = header.debug_info_offset().map_or(0, |o| o.0);
                bounds.push(start..start + header.length_including_self());
            }
            self.bounds = Some(bounds);
        }
        Ok(self.bounds.as_deref().unwrap_or_default())
    }

    /// The unit whose header is at `start` in `.debug_info`, parsed on first need.
    pub fn unit(&mut self, start: usize) -> gimli::Result<&gimli::Unit<R>> {
        let i = self.load(start)?;
        Ok(&self.units[i].unit)
    }

    /// The unit at `start` with the sections, to read its attributes (addresses, ranges, strings).
    pub fn unit_ref(&mut self, start: usize) -> gimli::Result<gimli::UnitRef<'_, R>> {
        let i = self.load(start)?;
        Ok(gimli::UnitRef::new(&self.dwarf, &self.units[i].unit))
    }

    /// The position in `units` of the unit at `start` (parsed and made the most recently used).
    fn load(&mut self, start: usize) -> gimli::Result<usize> {
        if let Some(i) = self.units.iter().position(|u| u.start == start) {
            let used = self.units.remove(i);
            self.units.push(used);
            return Ok(self.units.len() - 1);
        }
        let header = self
            .dwarf
            .debug_info
            .header_from_offset(gimli::DebugInfoOffset(start))?;
        let mut unit = self.dwarf.unit(header)?;
        if let Some(skeleton) = self.skeleton {
            unit.low_pc = skeleton.low_pc;
            unit.addr_base = skeleton.addr_base;
            if unit.header.version() < 5 {
                unit.rnglists_base = skeleton.rnglists_base;
            }
        }
        let language = unit
            .entries()
            .next_dfs()?
            .and_then(|root| root.attr_value(gimli::DW_AT_language));
        let cxx = matches!(
            language,
            Some(AttributeValue::Language(
                gimli::DW_LANG_C_plus_plus
                    | gimli::DW_LANG_C_plus_plus_03
                    | gimli::DW_LANG_C_plus_plus_11
                    | gimli::DW_LANG_C_plus_plus_14
                    | gimli::DW_LANG_C_plus_plus_17
                    | gimli::DW_LANG_C_plus_plus_20
            ))
        );
        if self.units.len() == self.keep {
            self.units.remove(0);
        }
        self.units.push(Parsed { start, unit, cxx });
        Ok(self.units.len() - 1)
    }

    /// The header offset of the unit holding `.debug_info` offset `at`.
    pub fn unit_holding(&mut self, at: usize) -> gimli::Result<Option<usize>> {
        if let Some(u) = self
            .units
            .iter()
            .find(|u| u.start <= at && at < u.start + u.unit.header.length_including_self())
        {
            return Ok(Some(u.start));
        }
        let bounds = self.bounds()?;
        let i = bounds.partition_point(|r| r.start <= at);
        Ok(i.checked_sub(1)
            .map(|i| &bounds[i])
            .filter(|r| r.contains(&at))
            .map(|r| r.start))
    }

    /// Whether the unit of `at` is C++.
    pub fn is_cxx(&mut self, at: DieRef) -> gimli::Result<bool> {
        let i = self.load(at.0)?;
        Ok(self.units[i].cxx)
    }

    pub fn entry(&mut self, at: DieRef) -> gimli::Result<gimli::DebuggingInformationEntry<R>> {
        self.unit(at.0)?.entry(at.1)
    }

    /// The DIE an attribute value of a DIE of unit `unit` refers to.
    pub fn reference(
        &mut self,
        unit: usize,
        value: AttributeValue<R>,
    ) -> gimli::Result<Option<DieRef>> {
        match value {
            AttributeValue::UnitRef(offset) => Ok(Some((unit, offset))),
            AttributeValue::DebugInfoRef(offset) => {
                let Some(start) = self.unit_holding(offset.0)? else {
                    return Ok(None);
                };
                let header = &self.unit(start)?.header;
                Ok(offset.to_unit_offset(header).map(|o| (start, o)))
            }
            _ => Ok(None),
        }
    }

    /// The DIE `at` refers to through `attr`.
    pub fn follow(&mut self, at: DieRef, attr: gimli::DwAt) -> gimli::Result<Option<DieRef>> {
        match self.entry(at)?.attr_value(attr) {
            Some(value) => self.reference(at.0, value),
            None => Ok(None),
        }
    }

    /// The value of `attr` on the DIE or, failing that, on its abstract origin or specification.
    pub fn inherited(
        &mut self,
        at: DieRef,
        attr: gimli::DwAt,
    ) -> gimli::Result<Option<(DieRef, AttributeValue<R>)>> {
        let mut at = at;
        for _ in 0..MAX_DEPTH {
            if let Some(value) = self.entry(at)?.attr_value(attr) {
                return Ok(Some((at, value)));
            }
            let origin = match self.follow(at, gimli::DW_AT_abstract_origin)? {
                Some(o) => Some(o),
                None => self.follow(at, gimli::DW_AT_specification)?,
            };
            match origin {
                Some(o) => at = o,
                None => return Ok(None),
            }
        }
        Ok(None)
    }

    /// A string attribute value of a DIE of unit `unit`.
    pub fn string(&mut self, unit: usize, value: AttributeValue<R>) -> gimli::Result<String> {
        let unit = self.load(unit)?;
        let s = self.dwarf.attr_string(&self.units[unit].unit, value)?;
        Ok(s.to_string_lossy()?.into_owned())
    }

    /// The DIE's `DW_AT_name`, its own or inherited.
    pub fn name(&mut self, at: DieRef) -> gimli::Result<Option<String>> {
        match self.inherited(at, gimli::DW_AT_name)? {
            Some(((unit, _), value)) => self.string(unit, value).map(Some),
            None => Ok(None),
        }
    }

    /// A function's name as the binary stores it: its linkage (mangled) name, else its name, through
    /// abstract origins and specifications, as addr2line names functions.
    pub fn function_name(&mut self, at: DieRef) -> gimli::Result<Option<String>> {
        let mut at = at;
        for _ in 0..MAX_DEPTH {
            let entry = self.entry(at)?;
            let value = entry
                .attr_value(gimli::DW_AT_linkage_name)
                .or_else(|| entry.attr_value(gimli::DW_AT_MIPS_linkage_name))
                .or_else(|| entry.attr_value(gimli::DW_AT_name));
            if let Some(value) = value {
                return self.string(at.0, value).map(Some);
            }
            let origin = entry
                .attr_value(gimli::DW_AT_abstract_origin)
                .or_else(|| entry.attr_value(gimli::DW_AT_specification));
            match origin {
                Some(origin) => match self.reference(at.0, origin)? {
                    Some(next) => at = next,
                    None => return Ok(None),
                },
                None => return Ok(None),
            }
        }
        Ok(None)
    }

    /// The children of a DIE (their offsets and tags), in order.
    pub fn children(&mut self, (unit, offset): DieRef) -> gimli::Result<Vec<(UnitOffset, DwTag)>> {
        let unit = self.unit(unit)?;
        let mut cursor = unit.entries_at_offset(offset)?;
        let Some(first) = cursor.next_dfs()? else {
            return Ok(Vec::new());
        };
        let depth = first.depth();
        let mut out = Vec::new();
        while let Some(entry) = cursor.next_dfs()? {
            if entry.depth() <= depth {
                break;
            }
            if entry.depth() == depth + 1 {
                out.push((entry.offset(), entry.tag()));
            }
        }
        Ok(out)
    }
}
