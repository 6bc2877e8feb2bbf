//! Values of tracepoints and syscalls: the events' own fields, by name (or, for syscalls, by position), from
//! their `format` files, read as their C types say: integers by size and sign, `char name[N]` and
//! `__data_loc char[]` as strings, pointers as addresses unless a string they point to is asked for.
use super::fetch::{Fetch, FetchItem, FetchType};
use crate::probe::value::ValueKind;
use crate::tracefs::{FieldDisplay, FormatField};
use std::collections::HashMap;
use std::sync::Arc;

/// The fields a value can name: every field but the common ones (and a syscall's `__syscall_nr`).
pub fn value_fields(format: &[FormatField]) -> Vec<&FormatField> {
    format
        .iter()
        .filter(|f| !f.is_common() && f.name != "__syscall_nr")
        .collect()
}

/// The fetch of `item` from an event with these `fields` (its value fields, see [`value_fields`]); `event`
/// names it for errors; `syscall`: a syscall entry, whose `argN` is the Nth argument and whose pointers point
/// into the process (their strings are read elsewhere, see [`crate::probe::spec::fetch::FetchSource`]).
/// `displays`: how the event's `print fmt` shows its fields (names, addresses), for a value without a type.
pub fn resolve(
    fields: &[&FormatField],
    displays: &HashMap<String, FieldDisplay>,
    item: &FetchItem,
    event: &str,
    syscall: bool,
    on_return: bool,
) -> Result<Fetch, String> {
    // A field named like a position (arch_prctl's `arg2`) is that field.
    let named = fields.iter().any(|f| f.name == item.name);
    let (index, field) = match item.arg_index().filter(|_| syscall && !named) {
        Some(n) => (
            n,
            *fields.get(n).ok_or_else(|| {
                format!(
                    "arg{n}: {event} has {} argument(s) (arg0..arg{})",
                    fields.len(),
                    fields.len().saturating_sub(1)
                )
            })?,
        ),
        None => fields
            .iter()
            .enumerate()
            .find(|(_, f)| f.name == item.name)
            .map(|(i, f)| (i, *f))
            .ok_or_else(|| {
                let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
                format!(
                    "{event} has no field `{}` (its fields: {})",
                    item.name,
                    if names.is_empty() {
                        "none".into()
                    } else {
                        names.join(", ")
                    }
                )
            })?,
    };
    let label = item.name.as_str();
    match (item.ty, field.is_pointer()) {
        (Some(FetchType::Str), true) if !on_return => Ok(Fetch::user_string(
            label,
            &field.name,
            syscall.then_some(index),
        )),
        (Some(FetchType::Str), _) if field.is_char_array() || field.is_data_loc() => Ok(
            Fetch::field(label, &field.name, natural_kind(field), on_return),
        ),
        (Some(FetchType::Str), _) => Err(format!(
            "`{}` is {} `{}`, not a pointer: it cannot be read as a string",
            item.name,
            article(&field.ty),
            field.ty
        )),
        (Some(FetchType::Int { size, signed }), _) => Ok(Fetch::field(
            label,
            &field.name,
            ValueKind::Int {
                size: size.min(field.size as u8),
                signed,
            },
            on_return,
        )),
        (Some(FetchType::Hex { size }), _) => Ok(Fetch::field(
            label,
            &field.name,
            ValueKind::Hex {
                size: size.min(field.size as u8),
            },
            on_return,
        )),
        (None, _) => {
            let display = displays.get(&field.name);
            let kind = typed_kind(field, display, syscall && on_return);
            let mut fetch = Fetch::field(label, &field.name, kind, on_return);
            if matches!(kind, ValueKind::Named { .. }) {
                fetch.names = display.cloned().map(Arc::new);
            }
            Ok(fetch)
        }
    }
}

/// How a value without a type is read and shown: as the event's `print fmt` shows it (enum and flag names,
/// addresses), a signal by its name (a field `sig`), a syscall's return with its error's name; else
/// [`natural_kind`].
fn typed_kind(f: &FormatField, display: Option<&FieldDisplay>, syscall_return: bool) -> ValueKind {
    let natural = natural_kind(f);
    let int = match natural {
        ValueKind::Int { size, signed } => Some((size, signed)),
        _ => None,
    };
    match (display, int) {
        (Some(FieldDisplay::Ipv4), _) if f.size == 4 => ValueKind::Ip { len: 4 },
        (Some(FieldDisplay::Ipv6), _) if f.size == 16 => ValueKind::Ip { len: 16 },
        (Some(FieldDisplay::Sockaddr), _) => ValueKind::Sockaddr { len: f.size as u16 },
        (Some(FieldDisplay::Symbolic(_) | FieldDisplay::Flags { .. }), Some((size, signed))) => {
            ValueKind::Named { size, signed }
        }
        (_, Some((size, _))) if syscall_return && f.name == "ret" => ValueKind::Errno { size },
        (_, Some((size, _))) if f.name == "sig" => ValueKind::Signal { size },
        _ => natural,
    }
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

/// How a field is read by default: strings as strings, pointers as addresses, integers as their C type says
/// (a syscall stores each argument in 8 bytes: an `int` one is its low 4, sign and all).
pub fn natural_kind(f: &FormatField) -> ValueKind {
    if f.is_char_array() {
        return ValueKind::Chars { len: f.size as u16 };
    }
    if f.is_data_loc() {
        return ValueKind::Str;
    }
    if f.is_pointer() {
        return ValueKind::Hex { size: 8 };
    }
    if f.ty.ends_with(']') {
        // An array of numbers (`__u8 saddr_v6[16]`): its bytes, not its first element.
        return ValueKind::Bytes { len: f.size as u16 };
    }
    let base = f.ty.trim_start_matches("const ").trim();
    let (size, signed) = match base {
        "int" | "pid_t" | "key_t" | "clockid_t" | "timer_t" | "mqd_t" | "s32" | "__s32"
        | "int32_t" => (4, true),
        "unsigned int" | "unsigned" | "uid_t" | "gid_t" | "qid_t" | "mode_t" | "u32" | "__u32"
        | "uint32_t" | "fmode_t" => (4, false),
        "dev_t" if f.size == 4 => return ValueKind::Dev,
        "short" | "s16" | "__s16" | "int16_t" => (2, true),
        "unsigned short" | "umode_t" | "u16" | "__u16" | "uint16_t" => (2, false),
        "char" | "signed char" | "s8" | "__s8" => (1, true),
        "unsigned char" | "u8" | "__u8" | "bool" => (1, false),
        _ => (
            f.size.min(8) as u8,
            f.signed
                || base.starts_with("long")
                || base.contains("ssize_t")
                || base.contains("off_t")
                || base == "s64"
                || base == "__s64"
                || base == "int64_t",
        ),
    };
    ValueKind::Int {
        size: size.min(f.size.max(1) as u8),
        signed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::spec::fetch::FetchSource;
    use crate::tracefs::parse_format;

    const OPENAT: &str = "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\\
        \tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n\\
        \tfield:int dfd;\toffset:16;\tsize:8;\tsigned:0;\n\\
        \tfield:const char * filename;\toffset:24;\tsize:8;\tsigned:0;\n\\
        \tfield:int flags;\toffset:32;\tsize:8;\tsigned:0;\n\\
        \tfield:umode_t mode;\toffset:40;\tsize:8;\tsigned:0;\n";

    fn item(s: &str) -> FetchItem {
        FetchItem::parse(s).unwrap()
    }

    /// Check that syscall arguments resolve by name and position with their C types, strings as user strings,
    /// and that a missing field and a string asked of an int are errors that say what exists.
    #[test]
    fn syscall_fields() {
        let format = parse_format(&OPENAT.replace("\\\t", "\t").replace("\\\n", "\n"));
        let fields = value_fields(&format);
        let ev = "syscalls:sys_enter_openat";
        let dfd = resolve(&fields, &HashMap::new(), &item("dfd"), ev, true, false).unwrap();
        assert_eq!(
            (dfd.field.as_str(), dfd.kind),
            (
                "dfd",
                ValueKind::Int {
                    size: 4,
                    signed: true
                }
            )
        );
        let name = resolve(&fields, &HashMap::new(), &item("arg1:str"), ev, true, false).unwrap();
        assert_eq!(
            (name.field.as_str(), name.source),
            ("filename", FetchSource::UserString { arg: Some(1) })
        );
        let mode = resolve(&fields, &HashMap::new(), &item("mode"), ev, true, false).unwrap();
        assert_eq!(
            mode.kind,
            ValueKind::Int {
                size: 2,
                signed: false
            }
        );
        let err = resolve(&fields, &HashMap::new(), &item("nope"), ev, true, false).unwrap_err();
        assert!(
            err.contains("its fields: dfd, filename, flags, mode"),
            "{err}"
        );
        let err = resolve(&fields, &HashMap::new(), &item("dfd:str"), ev, true, false).unwrap_err();
        assert!(err.contains("an `int`, not a pointer"), "{err}");
    }

    /// inet_sock_set_state's format, as this kernel (6.18) has it, fields and print fmt shortened.
    const INET_SOCK_SET_STATE: &str = "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
        \tfield:int newstate;\toffset:20;\tsize:4;\tsigned:1;\n\
        \tfield:__u16 sport;\toffset:24;\tsize:2;\tsigned:0;\n\
        \tfield:__u8 saddr[4];\toffset:32;\tsize:4;\tsigned:0;\n\
        \tfield:__u8 saddr_v6[16];\toffset:40;\tsize:16;\tsigned:0;\n\
        \tfield:__u8 spare[16];\toffset:56;\tsize:16;\tsigned:0;\n\n\
        print fmt: \"sport=%hu saddr=%pI4 saddrv6=%pI6c newstate=%s\", REC->sport, REC->saddr, \
        REC->saddr_v6, __print_symbolic(REC->newstate, { 1, \"TCP_ESTABLISHED\" }, { 2, \"TCP_SYN_SENT\" })\n";

    /// Check that fields are typed as the print fmt shows them (addresses, names), other arrays as bytes (not
    /// their first bytes as a number), a field `sig` as a signal and a syscall's `ret` as a possible error;
    /// an explicit type wins.
    #[test]
    fn typed_fields() {
        let text = INET_SOCK_SET_STATE;
        let (displays, format) = (crate::tracefs::field_displays(text), parse_format(text));
        let fields = value_fields(&format);
        let ev = "sock:inet_sock_set_state";
        let kind = |name: &str| resolve(&fields, &displays, &item(name), ev, false, false).unwrap();
        assert_eq!(kind("saddr").kind, ValueKind::Ip { len: 4 });
        assert_eq!(kind("saddr_v6").kind, ValueKind::Ip { len: 16 });
        assert_eq!(kind("spare").kind, ValueKind::Bytes { len: 16 });
        assert_eq!(
            kind("saddr:u32").kind,
            ValueKind::Int {
                size: 4,
                signed: false
            }
        );
        let state = kind("newstate");
        assert_eq!(
            state.kind,
            ValueKind::Named {
                size: 4,
                signed: true
            }
        );
        assert_eq!(
            state.names.unwrap().name(2).as_deref(),
            Some("TCP_SYN_SENT")
        );
        assert_eq!(kind("sport").names, None);
        let kill = "\tfield:int sig;\toffset:24;\tsize:8;\tsigned:0;\n\
            \tfield:long ret;\toffset:16;\tsize:8;\tsigned:1;\n";
        let format = parse_format(kill);
        let fields = value_fields(&format);
        let none = HashMap::new();
        let sig = resolve(&fields, &none, &item("sig"), "syscall:kill", true, false).unwrap();
        assert_eq!(sig.kind, ValueKind::Signal { size: 4 });
        let ret = resolve(&fields, &none, &item("ret"), "syscall:kill", true, true).unwrap();
        assert_eq!(ret.kind, ValueKind::Errno { size: 8 });
        let ret = resolve(&fields, &none, &item("ret"), "t:x:y", false, false).unwrap();
        assert_eq!(
            ret.kind,
            ValueKind::Int {
                size: 8,
                signed: true
            }
        );
    }
}
