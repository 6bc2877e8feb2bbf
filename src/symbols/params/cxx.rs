//! Which C++ classes the Itanium C++ ABI passes by invisible reference: those "non-trivial for the purposes
//! of calls". DWARF 5's `DW_AT_calling_convention` says so directly, but GCC does not emit it; this reads
//! the class's members instead.
use crate::symbols::dies::{DieRef, Dies, MAX_DEPTH};
use gimli::AttributeValue;

impl Dies<super::R<'_>> {
    /// True when the class at `at` has a user-provided destructor, copy or move constructor (or a deleted
    /// one), virtual functions or bases, or a base or member (maybe in an array) of such a class type.
    /// A class known only by its declaration counts as non-trivial: the caller cannot tell.
    pub(super) fn non_trivial_for_calls(&mut self, at: DieRef, depth: u8) -> gimli::Result<bool> {
        if depth >= MAX_DEPTH {
            return Ok(true);
        }
        let entry = self.entry(at)?;
        if entry.attr_value(gimli::DW_AT_declaration).is_some() {
            return Ok(true);
        }
        let class_name = self.name(at)?.unwrap_or_default();
        let class_name = class_name.split('<').next().unwrap_or_default().to_string();
        for (offset, tag) in self.children(at)? {
            let child = (at.0, offset);
            let e = self.entry(child)?;
            let virtual_ = matches!(
                e.attr_value(gimli::DW_AT_virtuality),
                Some(AttributeValue::Virtuality(v)) if v != gimli::DW_VIRTUALITY_none
            );
            match tag {
                gimli::DW_TAG_subprogram => {
                    if virtual_ {
                        return Ok(true);
                    }
                    let artificial = matches!(
                        e.attr_value(gimli::DW_AT_artificial),
                        Some(AttributeValue::Flag(true))
                    );
                    let defaulted_in_class = matches!(
                        e.attr_value(gimli::DW_AT_defaulted),
                        Some(AttributeValue::Udata(1)) | Some(AttributeValue::Data1(1))
                    );
                    let deleted = e.attr_value(gimli::DW_AT_deleted).is_some();
                    let user_provided = deleted || (!artificial && !defaulted_in_class);
                    if !user_provided {
                        continue;
                    }
                    let name = self.name(child)?.unwrap_or_default();
                    if name.starts_with('~') {
                        return Ok(true);
                    }
                    if !class_name.is_empty() && name == class_name && self.copies(child)? {
                        return Ok(true);
                    }
                }
                gimli::DW_TAG_inheritance | gimli::DW_TAG_member => {
                    if virtual_ {
                        return Ok(true);
                    }
                    // Static members are declarations (DWARF 4) or variables (DWARF 5).
                    if e.attr_value(gimli::DW_AT_declaration).is_some() {
                        continue;
                    }
                    if let Some(class) = self.class_within(child)? {
                        if self.non_trivial_for_calls(class, depth + 1)? {
                            return Ok(true);
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(false)
    }

    /// True when the constructor at `at` takes one parameter (besides `this`) of reference type: a copy or
    /// move constructor.
    fn copies(&mut self, at: DieRef) -> gimli::Result<bool> {
        let mut explicit = Vec::new();
        for offset in self.param_children(at)? {
            let artificial = matches!(
                self.entry((at.0, offset))?
                    .attr_value(gimli::DW_AT_artificial),
                Some(AttributeValue::Flag(true))
            );
            if !artificial {
                explicit.push((at.0, offset));
            }
        }
        let [only] = explicit[..] else {
            return Ok(false);
        };
        let Some(ty) = self.type_of(only)? else {
            return Ok(false);
        };
        let tag = self.entry(ty)?.tag();
        Ok(matches!(
            tag,
            gimli::DW_TAG_reference_type | gimli::DW_TAG_rvalue_reference_type
        ))
    }

    /// The class, struct or union type of a member or base (through typedefs, qualifiers and arrays).
    fn class_within(&mut self, at: DieRef) -> gimli::Result<Option<DieRef>> {
        let mut ty = self.type_of(at)?;
        for _ in 0..MAX_DEPTH {
            let Some(t) = ty else {
                return Ok(None);
            };
            match self.entry(t)?.tag() {
                gimli::DW_TAG_structure_type
                | gimli::DW_TAG_class_type
                | gimli::DW_TAG_union_type => return Ok(Some(t)),
                gimli::DW_TAG_typedef
                | gimli::DW_TAG_const_type
                | gimli::DW_TAG_volatile_type
                | gimli::DW_TAG_array_type => ty = self.follow(t, gimli::DW_AT_type)?,
                _ => return Ok(None),
            }
        }
        Ok(None)
    }
}
