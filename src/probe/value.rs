//! Values fetched by probes: their kinds, how they are read back from an event's data (the offsets its
//! `format` file gives), and how they are shown.
use crate::probe::spec::fetch::{Fetch, FetchType};
use std::fmt;

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
    /// A fixed array of chars (`char comm[16]`), NUL-terminated or full.
    Chars {
        len: u16,
    },
    /// A return address, shown as the function that holds it.
    Caller,
    /// A kernel `dev_t` (4 bytes: major << 20 | minor), shown as its block device's name.
    Dev,
}

impl ValueKind {
    pub fn of(ty: FetchType) -> ValueKind {
        match ty {
            FetchType::Str => ValueKind::Str,
            FetchType::Int { size, signed } => ValueKind::Int { size, signed },
            FetchType::Hex { size } => ValueKind::Hex { size },
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
    /// A kernel `dev_t`.
    Dev(u32),
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
            Value::Dev(d) => write!(f, "{}:{}", d >> 20, d & 0xf_ffff),
        }
    }
}

/// The name of the block device `major:minor` (`loop0`), from sysfs.
fn block_device_name(dev: u32) -> Option<String> {
    let uevent = format!("/sys/dev/block/{}:{}/uevent", dev >> 20, dev & 0xf_ffff);
    let text = std::fs::read_to_string(uevent).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .map(str::to_string)
}

impl Value {
    /// The value as a `--by` key shows it: strings without quotes.
    /// A device is named with its numbers: `loop0 (7:0)`.
    pub fn plain(&self) -> String {
        match self {
            Value::Str(s) => s.to_string(),
            Value::Dev(d) => match block_device_name(*d) {
                Some(name) => format!("{name} ({self})"),
                None => self.to_string(),
            },
            v => v.to_string(),
        }
    }

    /// The value as a number for histograms (strings have none; negative numbers count as 0).
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Int(v) => Some((*v).max(0) as u64),
            Value::UInt(v) | Value::Hex(v) | Value::Addr(v) => Some(*v),
            Value::Dev(d) => Some(u64::from(*d)),
            Value::Str(_) => None,
        }
    }
}

/// Where a fetched value lies in an event's data (from the event's `format` file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldLoc {
    pub offset: usize,
    pub kind: ValueKind,
    /// Where a string's length lies (C++ strings and views: the string is cut there).
    pub len: Option<usize>,
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
            ValueKind::Dev => Value::Dev(le(at(self.offset, 4)?) as u32),
            ValueKind::Chars { len } => {
                let bytes = at(self.offset, len as usize)?;
                let bytes = bytes.split(|&b| b == 0).next().unwrap_or(&[]);
                Value::Str(String::from_utf8_lossy(bytes).into())
            }
            ValueKind::Str => {
                // __data_loc: u32 with the length in the high half and the offset in the low half.
                let loc = le(at(self.offset, 4)?) as u32;
                let (off, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
                let bytes = data.get(off..off + len).unwrap_or(&[]);
                let mut bytes = bytes.split(|&b| b == 0).next().unwrap_or(&[]);
                if let Some(len_at) = self.len {
                    let n = usize::try_from(le(at(len_at, 8)?)).unwrap_or(usize::MAX);
                    bytes = &bytes[..bytes.len().min(n)];
                }
                Value::Str(String::from_utf8_lossy(bytes).into())
            }
        })
    }
}

/// The fields of `fetches` in an event's format (those of the entry or of the return event), each read as
/// the event holds it: a string the event has as `__data_loc` is read so (an event probe's, a kprobe's), and a
/// value whose field the event lacks, or holds only as a pointer (a syscall's string, read elsewhere), is not
/// read from it.
pub fn field_locs(format: &str, fetches: &[Fetch], on_return: bool) -> Vec<(usize, FieldLoc)> {
    let fields = crate::tracefs::parse_format(format);
    fetches
        .iter()
        .enumerate()
        .filter(|(_, f)| f.on_return == on_return)
        .filter_map(|(i, f)| {
            let field = fields.iter().find(|x| x.name == f.field)?;
            let kind = match f.kind {
                ValueKind::Str | ValueKind::Chars { .. } if field.is_data_loc() => ValueKind::Str,
                ValueKind::Str | ValueKind::Chars { .. } if field.is_char_array() => {
                    ValueKind::Chars {
                        len: field.size as u16,
                    }
                }
                ValueKind::Str | ValueKind::Chars { .. } => return None,
                k => k,
            };
            let len = match &f.len {
                Some(_) => {
                    let len_field = f.len_field();
                    Some(fields.iter().find(|x| x.name == len_field)?.offset)
                }
                None => None,
            };
            Some((
                i,
                FieldLoc {
                    offset: field.offset,
                    kind,
                    len,
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that values are read back from event data: sign extension, hex and __data_loc strings, cut at
    /// their length when one is fetched.
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
            len: None,
        };
        assert_eq!(int.read(&data), Some(Value::Int(-5)));
        let s = FieldLoc {
            offset: 4,
            kind: ValueKind::Str,
            len: None,
        };
        assert_eq!(s.read(&data), Some(Value::Str("ab".into())));
        // A view of one byte of "ab": its length (a u64 at 8) cuts it.
        let mut data = vec![0u8; 16];
        data[4..8].copy_from_slice(&((3u32 << 16) | 16).to_le_bytes());
        data[8..16].copy_from_slice(&1u64.to_le_bytes());
        data.extend_from_slice(b"ab\0");
        let view = FieldLoc { len: Some(8), ..s };
        assert_eq!(view.read(&data), Some(Value::Str("a".into())));
        assert_eq!(Value::Str("a\"b".into()).to_string(), "\"a\\\"b\"");
        assert_eq!(Value::Int(-5).as_u64(), Some(0));
    }
}
