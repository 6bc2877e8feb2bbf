//! What a probe fetches besides the time: arguments (by ABI position, DWARF name or USDT argument), the return
//! value and the caller's return address, as tracefs fetch arguments (`v0=%di:s64`, `v1=+0(%si):string`,
//! `ret=$retval:s64`), and how their values are read back from an event's data.
//!
//! Spec syntax (close to bpftrace's and perf probe's): `PATTERN(ITEM, ITEM:TYPE) ret`, where an item is `argN`,
//! a parameter name, `ret` or `caller`, and a type is `str` (a NUL-terminated string the value points to),
//! `s8`..`s64`, `u8`..`u64` or `x8`..`x64`.
use super::pattern::PatternError;
use std::fmt;

/// The x86-64 System V integer argument registers, as tracefs names them.
pub const ABI_REGS: [&str; 6] = ["di", "si", "dx", "cx", "r8", "r9"];

/// A value's type as written after `:`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FetchType {
    /// The NUL-terminated string the value points to.
    Str,
    Int {
        size: u8,
        signed: bool,
    },
    Hex {
        size: u8,
    },
}

impl FetchType {
    /// Parse `str`, `s32`, `u64`, `x64`, ...
    pub fn parse(s: &str) -> Option<FetchType> {
        if s == "str" || s == "string" {
            return Some(FetchType::Str);
        }
        let (kind, bits) = s.split_at(1.min(s.len()));
        let size = match bits {
            "8" => 1,
            "16" => 2,
            "32" => 4,
            "64" => 8,
            _ => return None,
        };
        match kind {
            "s" => Some(FetchType::Int { size, signed: true }),
            "u" => Some(FetchType::Int {
                size,
                signed: false,
            }),
            "x" => Some(FetchType::Hex { size }),
            _ => None,
        }
    }

    /// The tracefs type suffix (`s64`, `x64`, `string`).
    pub fn tracefs(self) -> String {
        match self {
            FetchType::Str => "string".into(),
            FetchType::Int { size, signed } => {
                format!("{}{}", if signed { 's' } else { 'u' }, size as u32 * 8)
            }
            FetchType::Hex { size } => format!("x{}", size as u32 * 8),
        }
    }
}

/// One value a spec asks for, as written: `arg1:str`, `len`, `ret`, `caller`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchItem {
    pub name: String,
    pub ty: Option<FetchType>,
}

impl FetchItem {
    /// Parse `NAME` or `NAME:TYPE`.
    pub fn parse(s: &str) -> Result<FetchItem, String> {
        let (name, ty) = match s.split_once(':') {
            Some((n, t)) => {
                let ty = FetchType::parse(t.trim()).ok_or_else(|| {
                    format!("unknown type `{t}` for `{n}` (use str, s8..s64, u8..u64 or x8..x64)")
                })?;
                (n.trim(), Some(ty))
            }
            None => (s.trim(), None),
        };
        if !is_ident(name) {
            return Err(format!(
                "`{name}` is not a value name (use argN, a parameter name, ret or caller)"
            ));
        }
        Ok(FetchItem {
            name: name.to_string(),
            ty,
        })
    }

    /// `argN`'s N.
    pub fn arg_index(&self) -> Option<usize> {
        self.name.strip_prefix("arg")?.parse().ok()
    }

    /// The return value.
    pub fn is_ret(&self) -> bool {
        self.name == "ret"
    }

    /// The calling function (from the return address at entry).
    pub fn is_caller(&self) -> bool {
        self.name == "caller"
    }
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// C type words that make a trailing `(...)` a C++ parameter list rather than a fetch list.
const CPP_TYPE_WORDS: &[&str] = &[
    "int", "char", "long", "short", "unsigned", "signed", "double", "float", "bool", "void",
    "const", "auto",
];

/// A probe spec split into its pattern, the values to fetch, and whether ` ret` follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitSpec<'a> {
    pub pattern: &'a str,
    pub items: Vec<FetchItem>,
}

/// Split `PATTERN(ITEMS) ret` into the pattern and its fetch items (`ret` becomes an item). A trailing `(...)`
/// that holds C++ parameter types (`f(int)`) stays part of the pattern.
pub fn split_spec(text: &str) -> Result<SplitSpec<'_>, PatternError> {
    let bad = |reason: String| PatternError::Bad {
        pattern: text.to_string(),
        reason,
    };
    let mut rest = text.trim_end();
    let mut items = Vec::new();
    let mut ret = false;
    if let Some(head) = rest.strip_suffix(" ret") {
        ret = true;
        rest = head.trim_end();
    }
    if let Some(head) = rest.strip_suffix(')') {
        if let Some(open) = head.rfind('(') {
            let inner = &head[open + 1..];
            let words: Vec<&str> = inner.split(',').map(str::trim).collect();
            let looks_cpp = inner.trim().is_empty()
                || words.iter().any(|w| {
                    // `NAME:TYPE` is a fetch item, whatever TYPE says (a bad one is an error below).
                    let typed = w.contains(':') && !w.contains("::");
                    (!typed
                        && w.split([' ', '*', '&'])
                            .any(|t| CPP_TYPE_WORDS.contains(&t)))
                        || w.contains("::")
                        || w.contains(['<', '*', '&'])
                });
            if !looks_cpp && open == 0 {
                return Err(bad("no function pattern before the values".into()));
            }
            if !looks_cpp {
                for w in words {
                    items.push(FetchItem::parse(w).map_err(bad)?);
                }
                rest = &head[..open];
            }
        }
    }
    if ret {
        items.push(FetchItem {
            name: "ret".into(),
            ty: None,
        });
    }
    if rest.is_empty() {
        return Err(bad("no function pattern before the values".into()));
    }
    Ok(SplitSpec {
        pattern: rest,
        items,
    })
}

/// An argument of a USDT probe: its spec as the note writes it (`-4@-20(%rbp)`), its tracefs fetch expression
/// without type (or why there is none), and its natural type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgSource {
    pub spec: String,
    pub base: Result<String, String>,
    pub ty: FetchType,
    /// 8 bytes: it can hold a pointer (to a string).
    pub pointer_sized: bool,
}

impl ArgSource {
    pub fn base(&self) -> Result<String, String> {
        self.base.clone()
    }

    pub fn fetch_type(&self) -> FetchType {
        self.ty
    }
}

/// How a fetched value is read from the event's data and shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueKind {
    Int {
        size: u8,
        signed: bool,
    },
    Hex {
        size: u8,
    },
    /// A `__data_loc` string.
    Str,
    /// A return address, shown as the function that holds it.
    Caller,
}

impl ValueKind {
    fn of(ty: FetchType) -> ValueKind {
        match ty {
            FetchType::Str => ValueKind::Str,
            FetchType::Int { size, signed } => ValueKind::Int { size, signed },
            FetchType::Hex { size } => ValueKind::Hex { size },
        }
    }
}

/// One resolved fetch argument of a target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetch {
    /// The name the user gave (`arg0`, `len`, `ret`, `caller`).
    pub label: String,
    /// The tracefs field name (`v0`, `v1`, ...).
    pub field: String,
    /// The tracefs fetch expression with its type (`%di:s64`).
    pub expr: String,
    pub kind: ValueKind,
    /// Fetched at the return (`ret`), else at the entry.
    pub on_return: bool,
}

impl Fetch {
    /// `FIELD=EXPR`, as a probe definition line takes it.
    pub fn arg(&self) -> String {
        format!("{}={}", self.field, self.expr)
    }

    /// A fetch of `base` (a tracefs fetch expression without type) as `ty`; `Str` reads what it points to.
    pub fn new(label: &str, field: String, base: &str, ty: FetchType, on_return: bool) -> Fetch {
        let expr = match ty {
            FetchType::Str => format!("+0({base}):string"),
            _ => format!("{base}:{}", ty.tracefs()),
        };
        Fetch {
            label: label.to_string(),
            field,
            expr,
            kind: ValueKind::of(ty),
            on_return,
        }
    }

    /// The return address at the stack pointer, at a function's first instruction.
    pub fn caller(field: String) -> Fetch {
        Fetch {
            label: "caller".into(),
            field,
            expr: "+0(%sp):x64".into(),
            kind: ValueKind::Caller,
            on_return: false,
        }
    }
}

/// A value read from an event.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Value {
    Int(i64),
    UInt(u64),
    Hex(u64),
    Str(Box<str>),
    /// A caller's return address (shown through the symbolizer).
    Addr(u64),
}

/// Strings are shown up to this many characters.
pub const MAX_SHOWN: usize = 96;

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(v) => write!(f, "{v}"),
            Value::UInt(v) => write!(f, "{v}"),
            Value::Hex(v) | Value::Addr(v) => write!(f, "0x{v:x}"),
            Value::Str(s) if s.chars().count() > MAX_SHOWN => {
                let cut: String = s.chars().take(MAX_SHOWN).collect();
                write!(f, "\"{}...\"", cut.escape_debug())
            }
            Value::Str(s) => write!(f, "\"{}\"", s.escape_debug()),
        }
    }
}

impl Value {
    /// The value as a `--by` key shows it: strings without quotes.
    pub fn plain(&self) -> String {
        match self {
            Value::Str(s) => s.to_string(),
            v => v.to_string(),
        }
    }

    /// The value as a number for histograms (strings have none; negative numbers count as 0).
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Int(v) => Some((*v).max(0) as u64),
            Value::UInt(v) | Value::Hex(v) | Value::Addr(v) => Some(*v),
            Value::Str(_) => None,
        }
    }
}

/// Where a fetched value lies in an event's data (from the event's `format` file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldLoc {
    pub offset: usize,
    pub kind: ValueKind,
}

impl FieldLoc {
    /// Read the value from an event's data.
    pub fn read(&self, data: &[u8]) -> Option<Value> {
        let at = |off: usize, n: usize| data.get(off..off + n);
        let le = |b: &[u8]| {
            let mut v = [0u8; 8];
            v[..b.len()].copy_from_slice(b);
            u64::from_le_bytes(v)
        };
        Some(match self.kind {
            ValueKind::Int { size, signed } => {
                let raw = le(at(self.offset, size as usize)?);
                if signed {
                    let shift = 64 - size as u32 * 8;
                    Value::Int(((raw << shift) as i64) >> shift)
                } else {
                    Value::UInt(raw)
                }
            }
            ValueKind::Hex { size } => Value::Hex(le(at(self.offset, size as usize)?)),
            ValueKind::Caller => Value::Addr(le(at(self.offset, 8)?)),
            ValueKind::Str => {
                // __data_loc: u32 with the length in the high half and the offset in the low half.
                let loc = le(at(self.offset, 4)?) as u32;
                let (off, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
                let bytes = data.get(off..off + len).unwrap_or(&[]);
                let bytes = bytes.split(|&b| b == 0).next().unwrap_or(&[]);
                Value::Str(String::from_utf8_lossy(bytes).into())
            }
        })
    }
}

/// The fields of `fetches` in an event's format (those of the entry or of the return event).
pub fn field_locs(format: &str, fetches: &[Fetch], on_return: bool) -> Vec<(usize, FieldLoc)> {
    fetches
        .iter()
        .enumerate()
        .filter(|(_, f)| f.on_return == on_return)
        .filter_map(|(i, f)| {
            let offset = crate::tracefs::parse_field_offset(format, &f.field)?;
            Some((
                i,
                FieldLoc {
                    offset,
                    kind: f.kind,
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(name: &str, ty: Option<FetchType>) -> FetchItem {
        FetchItem {
            name: name.into(),
            ty,
        }
    }

    /// Check that specs split into pattern and values, and that C++ parameter lists stay in the pattern.
    #[test]
    fn splits_specs() {
        let s = split_spec("parse_*(arg0, arg1:str)").unwrap();
        assert_eq!(s.pattern, "parse_*");
        assert_eq!(
            s.items,
            vec![item("arg0", None), item("arg1", Some(FetchType::Str))]
        );
        let s = split_spec("read_block ret").unwrap();
        assert_eq!(
            (s.pattern, s.items),
            ("read_block", vec![item("ret", None)])
        );
        let s = split_spec("f(len, name:str) ret").unwrap();
        assert_eq!(s.items.len(), 3);
        for cpp in [
            "ns::K::f(int)",
            "f(char const*)",
            "Foo::operator()",
            "f(std::string&)",
        ] {
            let s = split_spec(cpp).unwrap();
            assert_eq!((s.pattern, s.items.len()), (cpp, 0), "{cpp}");
        }
        assert!(split_spec("f(arg0:float)").is_err());
        assert!(split_spec("(arg0)").is_err());
        assert!(split_spec("f(1x)").is_err());
    }

    /// Check the tracefs expressions of each type.
    #[test]
    fn fetch_expressions() {
        let f = Fetch::new("arg1", "v1".into(), "%si", FetchType::Str, false);
        assert_eq!(f.arg(), "v1=+0(%si):string");
        let f = Fetch::new(
            "len",
            "v0".into(),
            "%di",
            FetchType::Int {
                size: 4,
                signed: false,
            },
            false,
        );
        assert_eq!(f.arg(), "v0=%di:u32");
        assert_eq!(FetchType::parse("x64"), Some(FetchType::Hex { size: 8 }));
        assert_eq!(FetchType::parse("q8"), None);
    }

    /// Check that values are read back from event data: sign extension, hex and __data_loc strings.
    #[test]
    fn reads_values() {
        let mut data = vec![0u8; 16];
        data[0..4].copy_from_slice(&(-5i32).to_le_bytes());
        data[4..8].copy_from_slice(&((3u32 << 16) | 12).to_le_bytes());
        data.extend_from_slice(b"");
        data.truncate(12);
        data.extend_from_slice(b"ab\0");
        let int = FieldLoc {
            offset: 0,
            kind: ValueKind::Int {
                size: 4,
                signed: true,
            },
        };
        assert_eq!(int.read(&data), Some(Value::Int(-5)));
        let s = FieldLoc {
            offset: 4,
            kind: ValueKind::Str,
        };
        assert_eq!(s.read(&data), Some(Value::Str("ab".into())));
        assert_eq!(Value::Str("a\"b".into()).to_string(), "\"a\\\"b\"");
        assert_eq!(Value::Int(-5).as_u64(), Some(0));
    }
}
