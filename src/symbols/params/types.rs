//! What a parameter's type comes to: its [`ParamType`], its C spelling, and how it is passed.
use super::{ParamType, Text};
use crate::symbols::dies::{DieRef, Dies, MAX_DEPTH};
use gimli::{AttributeValue, DwTag};

/// libstdc++'s string classes of `char`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StdString {
    /// `std::basic_string<char>` (both ABIs): the data pointer at offset 0, the length at 8.
    String,
    /// `std::basic_string_view<char>`: the length at offset 0, the data pointer at 8.
    View,
}

/// The libstdc++ string class a class named `name` (its DWARF name, with template arguments) is. libc++'s
/// (`std::__1::`) lays its strings out otherwise, and is not one.
fn std_string(name: &str) -> Option<StdString> {
    if name.contains("std::__1::") || !name.contains("<char, std::char_traits<char>") {
        return None;
    }
    match name.split('<').next()? {
        "basic_string" => Some(StdString::String),
        "basic_string_view" => Some(StdString::View),
        _ => None,
    }
}

/// What a type comes to: its kind, its C spelling, whether it is a character type (after typedefs and
/// qualifiers), whether C++ passes it by invisible reference, the libstdc++ string class it is, and the text
/// it points to (pointers and references).
pub(super) struct Desc {
    pub kind: ParamType,
    pub name: String,
    pub is_char: bool,
    pub by_reference: bool,
    pub std_string: Option<StdString>,
    pub text: Option<Text>,
}

impl Desc {
    /// A type of `kind` named `name`, with nothing else known.
    fn plain(kind: ParamType, name: String) -> Desc {
        Desc {
            kind,
            name,
            is_char: false,
            by_reference: false,
            std_string: None,
            text: None,
        }
    }
}

impl Dies<super::R<'_>> {
    /// Describe the type DIE `at` (None: void).
    pub(super) fn describe(&mut self, at: Option<DieRef>, depth: u8) -> gimli::Result<Desc> {
        let desc = Desc::plain;
        let Some(at) = at.filter(|_| depth < MAX_DEPTH) else {
            return Ok(desc(ParamType::Unknown, "void".into()));
        };
        let tag: DwTag = self.entry(at)?.tag();
        let own_name = self.name(at)?;
        let size = self.udata(at, gimli::DW_AT_byte_size)?.unwrap_or(0);
        let inner = self.follow(at, gimli::DW_AT_type)?;
        Ok(match tag {
            gimli::DW_TAG_base_type => self.base_type(at, size, own_name)?,
            gimli::DW_TAG_typedef => {
                let d = self.describe(inner, depth + 1)?;
                Desc {
                    name: own_name.unwrap_or(d.name),
                    ..d
                }
            }
            gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_restrict_type
            | gimli::DW_TAG_atomic_type => {
                let d = self.describe(inner, depth + 1)?;
                let q = match tag {
                    gimli::DW_TAG_const_type => "const",
                    gimli::DW_TAG_volatile_type => "volatile",
                    gimli::DW_TAG_restrict_type => "restrict",
                    _ => "_Atomic",
                };
                let name = if d.name.ends_with('*') || d.name.ends_with('&') {
                    format!("{} {q}", d.name)
                } else {
                    format!("{q} {}", d.name)
                };
                Desc { name, ..d }
            }
            gimli::DW_TAG_pointer_type
            | gimli::DW_TAG_reference_type
            | gimli::DW_TAG_rvalue_reference_type => {
                let d = self.describe(inner, depth + 1)?;
                let sigil = match tag {
                    gimli::DW_TAG_pointer_type => "*",
                    gimli::DW_TAG_reference_type => "&",
                    _ => "&&",
                };
                let text = match (d.is_char, d.std_string) {
                    (true, _) => Some(Text::Chars),
                    (false, Some(StdString::String)) => Some(Text::StringAt),
                    (false, Some(StdString::View)) => Some(Text::StringViewAt),
                    (false, None) => None,
                };
                Desc {
                    text,
                    ..desc(
                        ParamType::Pointer { to_char: d.is_char },
                        format!("{} {sigil}", d.name),
                    )
                }
            }
            gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type | gimli::DW_TAG_class_type => {
                self.aggregate(at, tag, size, own_name, depth)?
            }
            gimli::DW_TAG_enumeration_type => {
                let signed = match inner {
                    Some(_) => matches!(
                        self.describe(inner, depth + 1)?.kind,
                        ParamType::Int { signed: true, .. }
                    ),
                    None => false,
                };
                let keyword = if self.is_cxx(at)? { "" } else { "enum " };
                let name = format!("{keyword}{}", own_name.as_deref().unwrap_or("<anonymous>"));
                desc(
                    ParamType::Int {
                        size: size.min(255) as u8,
                        signed,
                    },
                    name,
                )
            }
            gimli::DW_TAG_array_type => {
                let d = self.describe(inner, depth + 1)?;
                desc(ParamType::Aggregate { size }, format!("{}[]", d.name))
            }
            gimli::DW_TAG_subroutine_type => desc(ParamType::Unknown, "function".into()),
            _ => desc(ParamType::Unknown, own_name.unwrap_or_else(|| "?".into())),
        })
    }

    /// A base type: an integer (its size and sign), a float, a char.
    fn base_type(
        &mut self,
        at: DieRef,
        size: u64,
        own_name: Option<String>,
    ) -> gimli::Result<Desc> {
        let desc = Desc::plain;
        let encoding = self.entry(at)?.attr_value(gimli::DW_AT_encoding);
        let encoding = match encoding {
            Some(AttributeValue::Encoding(e)) => e,
            _ => gimli::DwAte(0),
        };
        let name = own_name.unwrap_or_else(|| "?".into());
        let int = |signed| ParamType::Int {
            size: size.min(255) as u8,
            signed,
        };
        let kind = match encoding {
            gimli::DW_ATE_float | gimli::DW_ATE_complex_float => ParamType::Float,
            gimli::DW_ATE_signed | gimli::DW_ATE_signed_char => int(true),
            gimli::DW_ATE_unsigned
            | gimli::DW_ATE_unsigned_char
            | gimli::DW_ATE_boolean
            | gimli::DW_ATE_UTF => int(false),
            _ => ParamType::Unknown,
        };
        let is_char = size == 1
            && matches!(
                encoding,
                gimli::DW_ATE_signed_char | gimli::DW_ATE_unsigned_char | gimli::DW_ATE_UTF
            );
        Ok(Desc {
            is_char,
            ..desc(kind, name)
        })
    }

    /// A struct, union or class: its size, whether it is passed by reference, whether it is a std::string.
    fn aggregate(
        &mut self,
        at: DieRef,
        tag: DwTag,
        size: u64,
        own_name: Option<String>,
        depth: u8,
    ) -> gimli::Result<Desc> {
        let desc = Desc::plain;
        let keyword = match tag {
            _ if self.is_cxx(at)? => "",
            gimli::DW_TAG_structure_type => "struct ",
            gimli::DW_TAG_union_type => "union ",
            _ => "",
        };
        let name = format!("{keyword}{}", own_name.as_deref().unwrap_or("<anonymous>"));
        let by_reference = self.udata(at, gimli::DW_AT_calling_convention)?
            == Some(u64::from(gimli::DW_CC_pass_by_reference.0))
            || (self.is_cxx(at)? && self.non_trivial_for_calls(at, depth)?);
        Ok(Desc {
            by_reference,
            std_string: own_name.as_deref().and_then(std_string),
            ..desc(ParamType::Aggregate { size }, name)
        })
    }
}
