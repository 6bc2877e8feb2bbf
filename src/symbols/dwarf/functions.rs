//! The functions of one unit (their code ranges and DIEs), and the chain of functions inlined at an address,
//! read from the DIEs under the function that holds it: nothing else of the unit is kept.
use super::Reader;
use gimli::{AttributeValue, UnitOffset};

/// The code ranges of a unit's functions, each with its DIE, sorted by start.
pub(super) struct Functions {
    ranges: Vec<(u64, u64, UnitOffset)>,
}

/// A function inlined at an address: its DIE and where it was called from (file index, line).
pub(super) struct Inlined {
    pub die: UnitOffset,
    pub call_file: Option<u64>,
    pub call_line: u32,
}

/// The attributes that give a DIE's code ranges.
#[derive(Default)]
struct Ranges {
    low: Option<u64>,
    high: Option<u64>,
    size: Option<u64>,
    list: Option<gimli::RangeListsOffset>,
}

impl Ranges {
    /// Take in an attribute if it is one of the range attributes.
    fn add(&mut self, unit: gimli::UnitRef<'_, Reader>, attr: &gimli::Attribute<Reader>) {
        match (attr.name(), attr.value()) {
            (gimli::DW_AT_low_pc, value) => self.low = unit.attr_address(value).ok().flatten(),
            (gimli::DW_AT_high_pc, AttributeValue::Udata(size)) => self.size = Some(size),
            (gimli::DW_AT_high_pc, value) => self.high = unit.attr_address(value).ok().flatten(),
            (gimli::DW_AT_ranges, value) => {
                self.list = unit.attr_ranges_offset(value).ok().flatten()
            }
            _ => {}
        }
    }

    /// Call `each` with every non-empty range.
    fn each(&self, unit: gimli::UnitRef<'_, Reader>, mut each: impl FnMut(u64, u64)) {
        if let Some(low) = self.low {
            let end = self.high.or_else(|| self.size.map(|s| low.wrapping_add(s)));
            if let Some(end) = end.filter(|&end| low < end) {
                each(low, end);
            }
        }
        if let Some(mut list) = self.list.and_then(|offset| unit.ranges(offset).ok()) {
            while let Ok(Some(r)) = list.next() {
                if r.begin < r.end {
                    each(r.begin, r.end);
                }
            }
        }
    }

    fn contains(&self, unit: gimli::UnitRef<'_, Reader>, addr: u64) -> bool {
        let mut found = false;
        self.each(unit, |start, end| found |= start <= addr && addr < end);
        found
    }
}

impl Functions {
    /// Read every `DW_TAG_subprogram` of the unit that has code (one pass over its DIEs, reading only the
    /// range attributes of functions).
    pub fn of(unit: gimli::UnitRef<'_, Reader>) -> gimli::Result<Functions> {
        let mut ranges = Vec::new();
        let mut entries = unit.entries_raw(None)?;
        while !entries.is_empty() {
            let offset = entries.next_offset();
            let Some(abbrev) = entries.read_abbreviation()? else {
                continue;
            };
            if abbrev.tag() != gimli::DW_TAG_subprogram {
                entries.skip_attributes(abbrev.attributes())?;
                continue;
            }
            let mut code = Ranges::default();
            for spec in abbrev.attributes() {
                code.add(unit, &entries.read_attribute(*spec)?);
            }
            code.each(unit, |start, end| ranges.push((start, end, offset)));
        }
        ranges.sort_unstable_by_key(|r| r.0);
        ranges.shrink_to_fit();
        Ok(Functions { ranges })
    }

    /// The bytes the index holds (what the unit cache counts against its budget).
    pub fn bytes(&self) -> usize {
        self.ranges.len() * std::mem::size_of::<(u64, u64, UnitOffset)>()
    }

    /// The innermost function whose code holds `addr` (a nested function rather than its parent).
    pub fn at(&self, addr: u64) -> Option<UnitOffset> {
        let i = self.ranges.partition_point(|r| r.0 <= addr);
        self.ranges[..i]
            .iter()
            .rev()
            .take(16)
            .filter(|r| addr < r.1)
            .max_by_key(|r| r.0)
            .map(|r| r.2)
    }
}

/// The functions inlined at `addr` inside the function at `function`, outermost first: the
/// `DW_TAG_inlined_subroutine` DIEs under it (directly or in lexical blocks) whose code holds `addr`.
pub(super) fn inlined_at(
    unit: gimli::UnitRef<'_, Reader>,
    function: UnitOffset,
    addr: u64,
) -> gimli::Result<Vec<Inlined>> {
    let mut chain: Vec<(isize, Inlined)> = Vec::new();
    let mut entries = unit.entries_raw(Some(function))?;
    match entries.read_abbreviation()? {
        Some(abbrev) if abbrev.has_children() => entries.skip_attributes(abbrev.attributes())?,
        _ => return Ok(Vec::new()),
    }
    // Depths are relative to the function: its children are at 1, and 0 is past its last child.
    while !entries.is_empty() && entries.next_depth() > 0 {
        let depth = entries.next_depth();
        let offset = entries.next_offset();
        let Some(abbrev) = entries.read_abbreviation()? else {
            continue;
        };
        let nested = chain.last().is_none_or(|(d, _)| depth > *d);
        if abbrev.tag() != gimli::DW_TAG_inlined_subroutine || !nested {
            entries.skip_attributes(abbrev.attributes())?;
            continue;
        }
        let mut code = Ranges::default();
        let mut inlined = Inlined {
            die: offset,
            call_file: None,
            call_line: 0,
        };
        for spec in abbrev.attributes() {
            let attr = entries.read_attribute(*spec)?;
            match (attr.name(), attr.value()) {
                (gimli::DW_AT_call_file, AttributeValue::FileIndex(file)) => {
                    inlined.call_file = Some(file)
                }
                (gimli::DW_AT_call_line, value) => {
                    let line = value.udata_value().unwrap_or(0);
                    inlined.call_line = u32::try_from(line).unwrap_or(0);
                }
                _ => code.add(unit, &attr),
            }
        }
        if code.contains(unit, addr) {
            chain.push((depth, inlined));
        }
    }
    Ok(chain.into_iter().map(|(_, inlined)| inlined).collect())
}
