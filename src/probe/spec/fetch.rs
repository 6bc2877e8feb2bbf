//! What a probe fetches besides the time: arguments (by ABI position, DWARF name or USDT argument), the return
//! value and the caller's return address, as tracefs fetch arguments (`v0=%di:s64`, `v1=+0(%si):string`,
//! `ret=$retval:s64`), and how their values are read back from an event's data.
//!
//! Spec syntax (close to bpftrace's and perf probe's): `PATTERN(ITEM, ITEM:TYPE) ret`, where an item is `argN`,
//! a parameter name, `ret` or `caller`, and a type is `str` (a NUL-terminated string the value points to),
//! `s8`..`s64`, `u8`..`u64` or `x8`..`x64`.
use super::pattern::PatternError;
use crate::probe::value::ValueKind;
use crate::tracefs::FieldDisplay;
use std::sync::Arc;

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
    /// As written: `len`, `arg0`, or a path through pointers (`req->len`, `arg0->8`, `sp+8`).
    pub name: String,
    pub ty: Option<FetchType>,
    /// `:str[N]`: N strings from an array of `char *` (argv).
    pub array: Option<u16>,
}

impl FetchItem {
    /// Parse `NAME` or `NAME:TYPE`.
    pub fn parse(s: &str) -> Result<FetchItem, String> {
        let (name, ty, array) = match s.split_once(':') {
            Some((n, t)) => {
                let (t, array) = match t.trim().strip_suffix(']').and_then(|t| t.split_once('[')) {
                    Some(("str", count)) => {
                        let parsed = count
                            .trim()
                            .parse::<u16>()
                            .ok()
                            .filter(|c| (1..=64).contains(c));
                        let count =
                            parsed.ok_or_else(|| format!("`{n}:str[{count}]`: N is 1..64"))?;
                        ("str", Some(count))
                    }
                    Some((other, _)) => {
                        return Err(format!(
                            "`{n}:{other}[..]`: only str[N] reads an array (N strings)"
                        ))
                    }
                    None => (t.trim(), None),
                };
                let ty = FetchType::parse(t).ok_or_else(|| {
                    format!("unknown type `{t}` for `{n}` (use str, str[N], s8..s64, u8..u64 or x8..x64)")
                })?;
                (n.trim(), Some(ty), array)
            }
            None => (s.trim(), None, None),
        };
        if name.starts_with('%') {
            super::register::check_item(name, array)?;
            return Ok(FetchItem {
                name: name.to_string(),
                ty,
                array,
            });
        }
        let path = super::deref::ValuePath::parse(name)?;
        // A pair's value at one end: `start.sport`, `done.error`.
        let bare = path
            .base
            .strip_prefix("start.")
            .or_else(|| path.base.strip_prefix("done."))
            .unwrap_or(path.base);
        if !is_ident(bare) {
            return Err(format!(
                "`{name}` is not a value name (use argN, a parameter name, ret or caller; a pair's start.NAME \
                 or done.NAME)"
            ));
        }
        Ok(FetchItem {
            name: name.to_string(),
            ty,
            array,
        })
    }

    /// The value path written (`req->len`: base `req`, one member).
    pub fn path(&self) -> super::deref::ValuePath<'_> {
        super::deref::ValuePath::parse(&self.name).unwrap_or(super::deref::ValuePath {
            base: &self.name,
            steps: Vec::new(),
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

/// perf probe's spelling `FUNC ARG...` (`heavy depth`, `c:pthread_create caller`): the pattern and the values
/// after it, where every word after the first names a value and the first is no part of a C++ name with spaces
/// (`operator new`, `(anonymous namespace)::f`).
fn perf_form(text: &str) -> Option<(&str, Vec<&str>)> {
    let mut words = text.split_whitespace();
    let first = words.next()?;
    let values: Vec<&str> = words.collect();
    let plain = !first.contains(['(', '<', '>']) && !first.ends_with("operator");
    let all_values = values
        .iter()
        .all(|w| !CPP_TYPE_WORDS.contains(w) && FetchItem::parse(w).is_ok());
    (plain && !values.is_empty() && all_values).then_some((first, values))
}

/// A probe spec split into its pattern, the values to fetch, and whether ` ret` follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitSpec<'a> {
    pub pattern: &'a str,
    pub items: Vec<FetchItem>,
}

/// Split `PATTERN(ITEMS) ret` into the pattern and its fetch items (`ret` becomes an item). A trailing `(...)`
/// that holds C++ parameter types (`f(int)`) or is escaped (`f\(double\)`) stays part of the pattern.
pub fn split_spec(text: &str) -> Result<SplitSpec<'_>, PatternError> {
    let bad = |reason: String| PatternError::Bad {
        pattern: text.to_string(),
        reason,
    };
    let mut rest = text.trim_end();
    let mut items = Vec::new();
    // ` ret` or ` ret:TYPE` after the pattern.
    let mut ret = None;
    if let Some((head, last)) = rest.rsplit_once(char::is_whitespace) {
        if last == "ret" || last.starts_with("ret:") {
            ret = Some(FetchItem::parse(last).map_err(bad)?);
            rest = head.trim_end();
        }
    }
    // An escaped parenthesis (`-r 'f\(double\)'`, or a glob's `\(`) is the pattern's own.
    if let Some(head) = rest.strip_suffix(')').filter(|h| !h.ends_with('\\')) {
        if let Some(open) = head.rfind('(').filter(|&i| !head[..i].ends_with('\\')) {
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
    if items.is_empty() {
        if let Some((first, values)) = perf_form(rest) {
            for w in values {
                items.push(FetchItem::parse(w).map_err(bad)?);
            }
            rest = first;
        }
    }
    items.extend(ret);
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

/// Where a value comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchSource {
    /// A fetch argument of rprof's own probe definition (`expr`).
    Probe,
    /// A field of the event itself (a tracepoint's, a syscall's), read from its raw data.
    Field,
    /// The user string a pointer field points to (a syscall's `filename`), which the tracepoint does not hold:
    /// read in the kernel by an event probe where the kernel has them, else at the `syscall` instructions of
    /// libc just before the syscall (the plan decides). `arg`: the syscall argument's position (None: not a
    /// syscall's; only an event probe can read it).
    UserString { arg: Option<usize> },
    /// A register where a software event fired (`profile:hz:99(%ip)`), from the sample's
    /// PERF_SAMPLE_REGS_INTR: the interrupted context's, kernel or user (`expr`: `%NAME`).
    Register,
}

/// Where text is, from a fetch base (a register), by the type DWARF gives it: how `:str` reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TextLayout {
    /// The base points to a NUL-terminated string.
    Chars,
    /// The base is the address of a libstdc++ `std::string`: its data pointer at +0 (NUL-terminated), its
    /// length at +8.
    StdString,
    /// The base is the address of a libstdc++ `std::string_view`: its length at +0, its data pointer at +8.
    StringViewAt,
    /// The base is a `std::string_view`'s length, and `data` (a register) its data pointer.
    StringView { data: String },
}

/// One resolved fetch argument of a target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetch {
    /// The name the user gave (`arg0`, `len`, `ret`, `caller`).
    pub label: String,
    /// The field name in the event's data: rprof's own (`v0`, `v1`, ...), or the event's.
    pub field: String,
    /// The tracefs fetch expression with its type (`%di:s64`), for [`FetchSource::Probe`].
    pub expr: String,
    /// A string's length, fetched beside it in field `FIELDn` (C++ strings and views): the string is cut
    /// there (a view's bytes go on past its end).
    pub len: Option<String>,
    pub kind: ValueKind,
    /// Fetched at the return (`ret`), else at the entry.
    pub on_return: bool,
    pub source: FetchSource,
    /// The names of a [`ValueKind::Named`] value's values or flags (from its event's `print fmt`).
    pub names: Option<Arc<FieldDisplay>>,
}

impl Fetch {
    /// `FIELD=EXPR`, as a probe definition line takes it.
    pub fn arg(&self) -> String {
        format!("{}={}", self.field, self.expr)
    }

    /// `FIELDn=LEN` for a string with a length.
    pub fn len_arg(&self) -> Option<String> {
        Some(format!("{}={}", self.len_field(), self.len.as_ref()?))
    }

    /// The field of the length.
    pub fn len_field(&self) -> String {
        format!("{}n", self.field)
    }

    /// The text at `base` laid out as `layout`, read as a string.
    pub fn text(
        label: &str,
        field: String,
        base: &str,
        layout: &TextLayout,
        on_return: bool,
    ) -> Fetch {
        let (expr, len) = match layout {
            TextLayout::Chars => (format!("+0({base}):string"), None),
            TextLayout::StdString => (
                format!("+0(+0({base})):string"),
                Some(format!("+8({base}):u64")),
            ),
            TextLayout::StringViewAt => (
                format!("+0(+8({base})):string"),
                Some(format!("+0({base}):u64")),
            ),
            TextLayout::StringView { data } => {
                (format!("+0({data}):string"), Some(format!("{base}:u64")))
            }
        };
        Fetch {
            label: label.to_string(),
            field,
            expr,
            len,
            kind: ValueKind::Str,
            on_return,
            source: FetchSource::Probe,
            names: None,
        }
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
            len: None,
            kind: ValueKind::of(ty),
            on_return,
            source: FetchSource::Probe,
            names: None,
        }
    }

    /// A field of the event itself, read as `kind`.
    pub fn field(label: &str, field: &str, kind: ValueKind, on_return: bool) -> Fetch {
        Fetch {
            label: label.to_string(),
            field: field.to_string(),
            expr: String::new(),
            len: None,
            kind,
            on_return,
            source: FetchSource::Field,
            names: None,
        }
    }

    /// The user string that the pointer field `field` (syscall argument `arg`) points to.
    pub fn user_string(label: &str, field: &str, arg: Option<usize>) -> Fetch {
        Fetch {
            label: label.to_string(),
            field: field.to_string(),
            expr: String::new(),
            len: None,
            kind: ValueKind::Str,
            on_return: false,
            source: FetchSource::UserString { arg },
            names: None,
        }
    }

    /// Register `reg` where a software event fired, read as `ty` (an integer).
    pub fn sampled_register(label: &str, field: String, reg: &str, ty: FetchType) -> Fetch {
        Fetch {
            expr: format!("%{reg}"),
            source: FetchSource::Register,
            ..Fetch::new(label, field, reg, ty, false)
        }
    }

    /// The return address at the stack pointer, at a function's first instruction.
    pub fn caller(field: String) -> Fetch {
        Fetch {
            label: "caller".into(),
            field,
            expr: "+0(%sp):x64".into(),
            len: None,
            kind: ValueKind::Caller,
            on_return: false,
            source: FetchSource::Probe,
            names: None,
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A fetch item without an array (register.rs's tests too).
    pub(in crate::probe::spec) fn item(name: &str, ty: Option<FetchType>) -> FetchItem {
        FetchItem {
            name: name.into(),
            ty,
            array: None,
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
        // perf probe's `FUNC ARG...` is `FUNC(ARG, ...)`.
        for (perf, ours) in [
            ("heavy depth", "heavy(depth)"),
            ("c:pthread_create caller", "c:pthread_create(caller)"),
            ("f len name:str ret", "f(len, name:str) ret"),
        ] {
            assert_eq!(
                split_spec(perf).unwrap(),
                split_spec(ours).unwrap(),
                "{perf}"
            );
        }
        for name in ["operator new", "(anonymous namespace)::f", "f(char const*)"] {
            assert_eq!(split_spec(name).unwrap().pattern, name);
        }
        // A typed return value after a bare pattern or a value list (not a library named `readline ret`).
        let s = split_spec("readline ret:str").unwrap();
        assert_eq!(
            (s.pattern, s.items),
            ("readline", vec![item("ret", Some(FetchType::Str))])
        );
        let s = split_spec("libc:f(arg0) ret:x64").unwrap();
        assert_eq!(
            (s.pattern, s.items),
            (
                "libc:f",
                vec![
                    item("arg0", None),
                    item("ret", Some(FetchType::Hex { size: 8 }))
                ]
            )
        );
        assert!(split_spec("f ret:float").is_err());
        for cpp in [
            "ns::K::f(int)",
            "f(char const*)",
            "Foo::operator()",
            "f(std::string&)",
            "method\\(double\\)",
            "K<int>::method\\((int|double)\\)",
        ] {
            let s = split_spec(cpp).unwrap();
            assert_eq!((s.pattern, s.items.len()), (cpp, 0), "{cpp}");
        }
        let s = split_spec("method\\(double\\)(arg0) ret").unwrap();
        assert_eq!((s.pattern, s.items.len()), ("method\\(double\\)", 2));
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

    /// Check the tracefs expressions of C++ strings: through the data pointer, with the length beside.
    #[test]
    fn text_expressions() {
        let f = Fetch::text("item", "v0".into(), "%si", &TextLayout::StdString, false);
        assert_eq!(
            (f.arg(), f.len_arg()),
            (
                "v0=+0(+0(%si)):string".into(),
                Some("v0n=+8(%si):u64".into())
            )
        );
        let f = Fetch::text("v", "v1".into(), "%di", &TextLayout::StringViewAt, false);
        assert_eq!(
            (f.arg(), f.len_arg()),
            (
                "v1=+0(+8(%di)):string".into(),
                Some("v1n=+0(%di):u64".into())
            )
        );
        let data = "%dx".to_string();
        let f = Fetch::text(
            "v",
            "v2".into(),
            "%si",
            &TextLayout::StringView { data },
            false,
        );
        assert_eq!(
            (f.arg(), f.len_arg()),
            ("v2=+0(%dx):string".into(), Some("v2n=%si:u64".into()))
        );
        let f = Fetch::text("s", "v3".into(), "%di", &TextLayout::Chars, false);
        assert_eq!((f.arg(), f.len_arg()), ("v3=+0(%di):string".into(), None));
    }
}
