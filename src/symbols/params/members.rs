//! Struct members through a pointer parameter, by name (`req->len`, `req->name`, `req->next->len`): each
//! member's offset in its struct and what the last one is, from DWARF, for fetch arguments that read them in
//! the kernel (`+8(%di):u32`, `+0(+16(%di)):string`).
use super::{ParamType, Text, R};
use crate::symbols::dies::{DieRef, Dies, MAX_DEPTH};

/// What a member chain comes to: the offset of each member (one dereference per step) and its last member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberPath {
    pub offsets: Vec<u64>,
    pub ty: ParamType,
    /// A `char *` member: its text; a `char[N]` member is [`MemberPath::inline_chars`].
    pub text: Option<Text>,
    /// The member is an array of characters held in the struct: its text is at the member's address.
    pub inline_chars: bool,
    pub type_name: String,
}

impl Dies<R<'_>> {
    /// The type DIE of parameter `name` of the function starting at `addr`.
    pub(super) fn param_type_at(&mut self, addr: u64, name: &str) -> gimli::Result<Option<DieRef>> {
        for unit in self.units_for(addr)? {
            let Some(function) = self.function_at(unit, addr)? else {
                continue;
            };
            let mut at = (unit, function);
            let mut children = self.param_children(at)?;
            if children.is_empty() {
                if let Some(origin) = self.follow(at, gimli::DW_AT_abstract_origin)? {
                    children = self.param_children(origin)?;
                    at = origin;
                }
            }
            for c in children {
                if self.name((at.0, c))?.as_deref() == Some(name) {
                    return self.type_of((at.0, c));
                }
            }
        }
        Ok(None)
    }

    /// `at` without typedefs and qualifiers.
    fn bare(&mut self, mut at: DieRef) -> gimli::Result<DieRef> {
        for _ in 0..MAX_DEPTH {
            match self.entry(at)?.tag() {
                gimli::DW_TAG_typedef
                | gimli::DW_TAG_const_type
                | gimli::DW_TAG_volatile_type
                | gimli::DW_TAG_restrict_type
                | gimli::DW_TAG_atomic_type => match self.follow(at, gimli::DW_AT_type)? {
                    Some(next) => at = next,
                    None => return Ok(at),
                },
                _ => return Ok(at),
            }
        }
        Ok(at)
    }

    /// Follow `members` from a value of type `ty` (a pointer to a struct, each member but the last a pointer
    /// to the next struct); `what` names the value in errors.
    pub(super) fn member_path(
        &mut self,
        ty: DieRef,
        what: &str,
        members: &[&str],
    ) -> gimli::Result<Result<MemberPath, String>> {
        let mut ty = ty;
        let mut offsets = Vec::new();
        let mut path = what.to_string();
        for m in members {
            let ptr = self.bare(ty)?;
            let tag = self.entry(ptr)?.tag();
            if !matches!(
                tag,
                gimli::DW_TAG_pointer_type | gimli::DW_TAG_reference_type
            ) {
                let d = self.describe(Some(ty), 0)?;
                return Ok(Err(format!(
                    "`{path}` is {} {}, not a pointer to a struct",
                    article(&d.name),
                    d.name
                )));
            }
            let Some(target) = self.follow(ptr, gimli::DW_AT_type)? else {
                return Ok(Err(format!(
                    "`{path}` is a void pointer: it has no members"
                )));
            };
            let st = self.bare(target)?;
            let Some((offset, member_ty)) = self.member(st, m)? else {
                let d = self.describe(Some(st), 0)?;
                let names = self.member_names(st)?;
                return Ok(Err(format!(
                    "`{path}` points to {} which has no member `{m}` (its members: {})",
                    d.name,
                    if names.is_empty() {
                        "none".into()
                    } else {
                        names.join(", ")
                    }
                )));
            };
            offsets.push(offset);
            path = format!("{path}->{m}");
            ty = member_ty;
        }
        let d = self.describe(Some(ty), 0)?;
        let bare = self.bare(ty)?;
        let inline_chars = self.entry(bare)?.tag() == gimli::DW_TAG_array_type && {
            let elem = self.follow(bare, gimli::DW_AT_type)?;
            self.describe(elem, 0)?.is_char
        };
        Ok(Ok(MemberPath {
            offsets,
            ty: d.kind,
            text: d.text,
            inline_chars,
            type_name: d.name,
        }))
    }

    /// The offset and type of member `name` of the struct, union or class `st` (members of anonymous structs
    /// and unions inside it included).
    fn member(&mut self, st: DieRef, name: &str) -> gimli::Result<Option<(u64, DieRef)>> {
        for (offset, tag) in self.children(st)? {
            if tag != gimli::DW_TAG_member {
                continue;
            }
            let at = (st.0, offset);
            let base = match self
                .entry(at)?
                .attr_value(gimli::DW_AT_data_member_location)
            {
                Some(v) => v.udata_value().unwrap_or(0),
                None => 0,
            };
            let Some(ty) = self.follow(at, gimli::DW_AT_type)? else {
                continue;
            };
            match self.name(at)? {
                Some(n) if n == name => return Ok(Some((base, ty))),
                Some(_) => {}
                None => {
                    let inner = self.bare(ty)?;
                    if let Some((o, t)) = self.member(inner, name)? {
                        return Ok(Some((base + o, t)));
                    }
                }
            }
        }
        Ok(None)
    }

    fn member_names(&mut self, st: DieRef) -> gimli::Result<Vec<String>> {
        let mut out = Vec::new();
        for (offset, tag) in self.children(st)? {
            if tag == gimli::DW_TAG_member {
                if let Some(n) = self.name((st.0, offset))? {
                    out.push(n);
                }
            }
        }
        Ok(out)
    }
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}
