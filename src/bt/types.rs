//! The checker's types of values, spelled as bpftrace 0.17 spells them in messages (`types.cpp`): `int64`,
//! `unsigned int64`, `string[16]`, `count`, `(ctx) struct _tracepoint_syscalls_sys_enter_openat *`.
use std::fmt;

/// Where the memory a pointer points into lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    User,
    Kernel,
    /// Not known (bpftrace's `none`): in BEGIN, END, interval and profile blocks.
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ty {
    None,
    Int {
        bits: u8,
        signed: bool,
    },
    /// A string of this many bytes (with its NUL).
    Str(usize),
    Ptr {
        to: Box<Ty>,
        space: Space,
        ctx: bool,
    },
    Record(String),
    Array {
        elem: Box<Ty>,
        len: usize,
    },
    Tuple(Vec<Ty>),
    Buffer(usize),
    Count,
    Sum,
    Min,
    Max,
    Avg,
    Stats,
    Hist,
    Lhist,
    KStack,
    UStack,
    KSym,
    USym,
    Username,
    Probe,
    Inet,
    StackMode,
    Timestamp,
    MacAddr,
    CgroupPath,
    Strerror,
}

impl Ty {
    pub const INT64: Ty = Ty::Int {
        bits: 64,
        signed: true,
    };
    pub const UINT64: Ty = Ty::Int {
        bits: 64,
        signed: false,
    };

    pub fn is_int(&self) -> bool {
        matches!(self, Ty::Int { .. })
    }

    pub fn is_str(&self) -> bool {
        matches!(self, Ty::Str(_))
    }

    pub fn is_ptr(&self) -> bool {
        matches!(self, Ty::Ptr { .. })
    }

    /// `count`, `sum`... : values only a map can hold (bpftrace's "should be directly assigned to a map").
    pub fn is_aggregation(&self) -> bool {
        use Ty::*;
        matches!(self, Count | Sum | Min | Max | Avg | Stats | Hist | Lhist)
    }

    /// bpftrace's `typestr(Type)`: the kind without sizes, as "(string provided)" spells it.
    pub fn kind(&self) -> &'static str {
        use Ty::*;
        match self {
            None => "none",
            Int { .. } => "integer",
            Str(_) => "string",
            Ptr { .. } => "pointer",
            Record(_) => "record",
            Array { .. } => "array",
            Tuple(_) => "tuple",
            Buffer(_) => "buffer",
            Count => "count",
            Sum => "sum",
            Min => "min",
            Max => "max",
            Avg => "avg",
            Stats => "stats",
            Hist => "hist",
            Lhist => "lhist",
            KStack => "kstack",
            UStack => "ustack",
            KSym => "ksym",
            USym => "usym",
            Username => "username",
            Probe => "probe",
            Inet => "inet",
            StackMode => "stack mode",
            Timestamp => "timestamp",
            MacAddr => "mac_address",
            CgroupPath => "cgroup_path",
            Strerror => "strerror",
        }
    }

    /// The kind printf's checks compare: symbols, stacks and the like print as strings, pointers as integers.
    pub fn printf_kind(&self) -> &'static str {
        use Ty::*;
        match self {
            KSym | USym | Probe | Username | KStack | UStack | Inet | Timestamp | MacAddr
            | CgroupPath | Strerror => "string",
            Ptr { .. } => "integer",
            t => t.kind(),
        }
    }

    /// The same kind of value, whatever the sizes (bpftrace compares `type.type` for most checks).
    pub fn same_kind(&self, other: &Ty) -> bool {
        self.kind() == other.kind()
    }

    /// A map key's type: bpftrace casts integer keys to 64 bits and compares them unsigned, whatever their sign.
    pub fn as_key(&self) -> Ty {
        match self {
            Ty::Int { .. } => Ty::UINT64,
            t => t.clone(),
        }
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Int { bits, signed } => {
                write!(f, "{}int{bits}", if *signed { "" } else { "unsigned " })
            }
            Ty::Str(n) => write!(f, "string[{n}]"),
            Ty::Buffer(n) => write!(f, "buffer[{n}]"),
            Ty::Record(name) => write!(f, "{name}"),
            Ty::Ptr { to, ctx, .. } => {
                if *ctx {
                    write!(f, "(ctx) ")?;
                }
                write!(f, "{to} *")
            }
            Ty::Array { elem, len } => write!(f, "{elem}[{len}]"),
            Ty::Tuple(items) => {
                let items: Vec<String> = items.iter().map(|t| t.to_string()).collect();
                write!(f, "({})", items.join(","))
            }
            t => write!(f, "{}", t.kind()),
        }
    }
}

/// A key's types as bpftrace lists them: `[unsigned int64, string[2]]`.
pub fn key_list(keys: &[Ty]) -> String {
    let items: Vec<String> = keys.iter().map(|t| t.to_string()).collect();
    format!("[{}]", items.join(", "))
}

/// bpftrace's built-in integer casts: `(uint64)`, `(int8)`...
pub fn int_cast(name: &str) -> Option<Ty> {
    let (signed, bits) = match name.strip_prefix('u') {
        Some(rest) => (false, rest.strip_prefix("int")?),
        None => (true, name.strip_prefix("int")?),
    };
    let bits: u8 = bits.parse().ok()?;
    matches!(bits, 8 | 16 | 32 | 64).then_some(Ty::Int { bits, signed })
}

/// The type of a tracepoint field from its C declaration in the event's `format` file (`const char * filename`,
/// `char comm[16]`, `__data_loc char[] name`, `pid_t pid`), with the field's size and sign from the file.
pub fn tracepoint_field_type(decl: &str, size: usize, signed: bool, user_pointers: bool) -> Ty {
    let int = |size: usize| Ty::Int {
        bits: (size.clamp(1, 8) * 8) as u8,
        signed,
    };
    if decl.starts_with("__data_loc") {
        return Ty::Str(size.max(1));
    }
    if let Some(open) = decl.find('[') {
        let len: usize = decl[open + 1..]
            .trim_end_matches(']')
            .trim()
            .parse()
            .unwrap_or(0);
        let base = decl[..open].trim();
        if base.starts_with("char") || base.contains(" char") {
            return Ty::Str(len.max(1));
        }
        let elem = int(size.checked_div(len).unwrap_or(1));
        return Ty::Array {
            elem: Box::new(elem),
            len,
        };
    }
    if decl.contains('*') {
        let base = decl.split('*').next().unwrap_or("").trim();
        let to = if base.contains("char") {
            Ty::Int {
                bits: 8,
                signed: true,
            }
        } else {
            Ty::Int {
                bits: 64,
                signed: false,
            }
        };
        let space = if user_pointers {
            Space::User
        } else {
            Space::Kernel
        };
        // `const char *const * argv`: a pointer to pointers (each `*` after the first is one more level).
        let to = (1..decl.matches('*').count()).fold(to, |to, _| Ty::Ptr {
            to: Box::new(to),
            space,
            ctx: false,
        });
        return Ty::Ptr {
            to: Box::new(to),
            space,
            ctx: false,
        };
    }
    int(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check the spellings bpftrace's messages use.
    #[test]
    fn spellings() {
        assert_eq!(Ty::INT64.to_string(), "int64");
        assert_eq!(Ty::UINT64.to_string(), "unsigned int64");
        assert_eq!(Ty::Str(2).to_string(), "string[2]");
        assert_eq!(
            key_list(&[Ty::UINT64, Ty::Str(2)]),
            "[unsigned int64, string[2]]"
        );
        let args = Ty::Ptr {
            to: Box::new(Ty::Record("struct _tracepoint_a_b".into())),
            space: Space::Kernel,
            ctx: true,
        };
        assert_eq!(args.to_string(), "(ctx) struct _tracepoint_a_b *");
        assert_eq!(int_cast("uint64"), Some(Ty::UINT64));
        assert_eq!(int_cast("uint63"), None);
    }

    /// Check tracepoint field declarations: strings, arrays, pointers, integers.
    #[test]
    fn field_types() {
        assert_eq!(
            tracepoint_field_type("char comm[16]", 16, true, false),
            Ty::Str(16)
        );
        assert_eq!(
            tracepoint_field_type("__data_loc char[] name", 4, true, false),
            Ty::Str(4)
        );
        assert!(tracepoint_field_type("const char * filename", 8, false, true).is_ptr());
        // execve's argv points to pointers, not to text (read as text, its first pointer's bytes printed).
        match tracepoint_field_type("const char *const * argv", 8, false, true) {
            Ty::Ptr { to, .. } => assert!(to.is_ptr(), "{to:?}"),
            t => panic!("{t:?}"),
        }
        assert_eq!(
            tracepoint_field_type("pid_t pid", 4, true, false),
            Ty::Int {
                bits: 32,
                signed: true
            }
        );
    }
}
