//! Values fetched by probes: their kinds, how they are read back from an event's data (the offsets its
//! `format` file gives), and how they are shown.
use crate::probe::spec::fetch::{Fetch, FetchType};
use crate::tracefs::FieldDisplay;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::Arc;

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
    /// An IPv4 (4 bytes) or IPv6 (16 bytes) address, in network order (`%pI4`, `%pI6c`).
    Ip {
        len: u8,
    },
    /// A `struct sockaddr_in` or `sockaddr_in6` in `len` bytes, by its family (`%pISpc`).
    Sockaddr {
        len: u16,
    },
    /// Another array of bytes (`__u8 x[N]`), shown in hex.
    Bytes {
        len: u16,
    },
    /// An integer with names for its values or flags (the event's `print fmt`; the fetch carries them).
    Named {
        size: u8,
        signed: bool,
    },
    /// A signal number, shown by its name (`SIGKILL`).
    Signal {
        size: u8,
    },
    /// A syscall's return value: a negative one is an error, shown with its name (`-2 ENOENT`).
    Errno {
        size: u8,
    },
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
    Ip(IpAddr),
    Sock(SocketAddr),
    Bytes(Box<[u8]>),
    /// A value with a name (an enum value, or flags), and the number it stands for.
    Named {
        raw: i64,
        name: Box<str>,
    },
    Signal(i64),
    Errno(i64),
}

/// A signal's name (`SIGKILL`, `SIGRTMIN+2`), or None for a number that is none.
pub fn signal_name(sig: i64) -> Option<String> {
    let n = i32::try_from(sig).ok()?;
    if let Ok(s) = nix::sys::signal::Signal::try_from(n) {
        return Some(s.as_str().to_string());
    }
    // The kernel's real-time signals: 32 (SIGRTMIN) to 64.
    (32..=64).contains(&n).then(|| match n {
        32 => "SIGRTMIN".to_string(),
        _ => format!("SIGRTMIN+{}", n - 32),
    })
}

/// The name of error `-ret` (`ENOENT` for -2), when `ret` is a syscall's error return (-4095..-1).
pub fn errno_name(ret: i64) -> Option<String> {
    if !(-4095..0).contains(&ret) {
        return None;
    }
    let e = nix::errno::Errno::from_raw(i32::try_from(-ret).ok()?);
    (e != nix::errno::Errno::UnknownErrno).then(|| format!("{e:?}"))
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
            Value::Ip(a) => write!(f, "{a}"),
            Value::Sock(a) => write!(f, "{a}"),
            Value::Bytes(b) => {
                f.write_str("0x")?;
                b.iter().try_for_each(|x| write!(f, "{x:02x}"))
            }
            Value::Named { name, .. } => f.write_str(name),
            Value::Signal(s) => match signal_name(*s) {
                Some(name) => f.write_str(&name),
                None => write!(f, "{s}"),
            },
            Value::Errno(r) => match errno_name(*r) {
                Some(name) => write!(f, "{r} {name}"),
                None => write!(f, "{r}"),
            },
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

    /// The value as one word, for a column of `--trace-format` (bcc's DISK): a device by its name alone.
    pub fn word(&self) -> String {
        match self {
            Value::Dev(d) => block_device_name(*d).unwrap_or_else(|| self.to_string()),
            v => v.plain(),
        }
    }

    /// The value as a number for histograms (strings have none; negative numbers count as 0).
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Int(v) | Value::Signal(v) | Value::Errno(v) | Value::Named { raw: v, .. } => {
                Some((*v).max(0) as u64)
            }
            Value::UInt(v) | Value::Hex(v) | Value::Addr(v) => Some(*v),
            Value::Dev(d) => Some(u64::from(*d)),
            Value::Str(_) | Value::Ip(_) | Value::Sock(_) | Value::Bytes(_) => None,
        }
    }

    /// The number a named value stands for (an enum's, flags', a signal's, an errno's), which JSON keeps
    /// beside the name.
    pub fn raw(&self) -> Option<i64> {
        match self {
            Value::Named { raw, .. } | Value::Signal(raw) | Value::Errno(raw) => Some(*raw),
            _ => None,
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
    /// The names of a [`ValueKind::Named`] value.
    pub names: Option<Arc<FieldDisplay>>,
}

/// A `struct sockaddr_in` (family 2) or `sockaddr_in6` (family 10): family (host order), port (network
/// order), then the address (after the IPv6 flow info); None for another family.
fn sockaddr(b: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes(b.get(0..2)?.try_into().ok()?);
    let port = u16::from_be_bytes(b.get(2..4)?.try_into().ok()?);
    match family {
        2 => {
            let ip: [u8; 4] = b.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::V4(SocketAddrV4::new(ip.into(), port)))
        }
        10 => {
            let ip: [u8; 16] = b.get(8..24)?.try_into().ok()?;
            let scope = b
                .get(24..28)
                .map_or(0, |s| u32::from_ne_bytes(s.try_into().unwrap_or_default()));
            Some(SocketAddr::V6(SocketAddrV6::new(ip.into(), port, 0, scope)))
        }
        _ => None,
    }
}

impl FieldLoc {
    /// An integer of `size` bytes at the offset, sign-extended when `signed`.
    fn int(&self, data: &[u8], size: u8, signed: bool) -> Option<i64> {
        let b = data.get(self.offset..self.offset + size as usize)?;
        let mut v = [0u8; 8];
        v[..b.len()].copy_from_slice(b);
        let raw = u64::from_le_bytes(v);
        let shift = 64 - u32::from(size) * 8;
        Some(match signed {
            true => ((raw << shift) as i64) >> shift,
            false => raw as i64,
        })
    }

    /// Read a value the event's print fmt, or its meaning, types (names, addresses, signals, errors).
    fn read_typed(&self, data: &[u8]) -> Option<Value> {
        let bytes = |len: usize| data.get(self.offset..self.offset + len);
        Some(match self.kind {
            ValueKind::Ip { len: 4 } => {
                let b: [u8; 4] = bytes(4)?.try_into().ok()?;
                Value::Ip(IpAddr::V4(Ipv4Addr::from(b)))
            }
            ValueKind::Ip { .. } => {
                let b: [u8; 16] = bytes(16)?.try_into().ok()?;
                Value::Ip(IpAddr::V6(Ipv6Addr::from(b)))
            }
            ValueKind::Sockaddr { len } => {
                let b = bytes(len as usize)?;
                sockaddr(b).map_or_else(|| Value::Bytes(b.into()), Value::Sock)
            }
            ValueKind::Bytes { len } => Value::Bytes(bytes(len as usize)?.into()),
            ValueKind::Named { size, signed } => {
                let raw = self.int(data, size, signed)?;
                let name = self.names.as_ref().and_then(|n| n.name(raw as u64));
                match (name, signed) {
                    (Some(name), _) => Value::Named {
                        raw,
                        name: name.into(),
                    },
                    (None, true) => Value::Int(raw),
                    (None, false) => Value::UInt(raw as u64),
                }
            }
            ValueKind::Signal { size } => Value::Signal(self.int(data, size, true)?),
            ValueKind::Errno { size } => Value::Errno(self.int(data, size, true)?),
            _ => return None,
        })
    }

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
            _ => return self.read_typed(data),
        })
    }
}

/// The fields of `fetches` in an event's format (those of the entry or of the return event), each read as
/// the event holds it: a string the event has as `__data_loc` is read so (an event probe's, a kprobe's), and a
/// value whose field the event lacks, or holds only as a pointer (a syscall's string, read elsewhere), is not
/// read from it.
pub fn field_locs(
    format: &str,
    fetches: &[Fetch],
    wanted: &dyn Fn(usize, &Fetch) -> bool,
) -> Vec<(usize, FieldLoc)> {
    let fields = crate::tracefs::parse_format(format);
    fetches
        .iter()
        .enumerate()
        .filter(|&(i, f)| wanted(i, f))
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
                    names: f.names.clone(),
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
            names: None,
        };
        assert_eq!(int.read(&data), Some(Value::Int(-5)));
        let s = FieldLoc {
            offset: 4,
            kind: ValueKind::Str,
            len: None,
            names: None,
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

    fn loc(offset: usize, kind: ValueKind) -> FieldLoc {
        FieldLoc {
            offset,
            kind,
            len: None,
            names: None,
        }
    }

    /// Check that addresses are read in network order (IPv4, IPv6 compressed, socket addresses by family with
    /// their port), other arrays as their bytes, and that names, signals and errors keep their numbers.
    #[test]
    fn reads_typed_values() {
        let mut data = vec![127, 0, 0, 1];
        data.extend(std::net::Ipv6Addr::LOCALHOST.octets());
        let v4 = loc(0, ValueKind::Ip { len: 4 }).read(&data).unwrap();
        let v6 = loc(4, ValueKind::Ip { len: 16 }).read(&data).unwrap();
        assert_eq!(
            (v4.to_string(), v6.to_string()),
            ("127.0.0.1".into(), "::1".into())
        );
        let bytes = loc(0, ValueKind::Bytes { len: 4 }).read(&data).unwrap();
        assert_eq!(bytes.to_string(), "0x7f000001");
        // sockaddr_in6 for [::1]:8080, then sockaddr_in for 10.0.0.2:53, each in 28 bytes.
        let mut sa = vec![0u8; 56];
        sa[0..2].copy_from_slice(&10u16.to_ne_bytes());
        sa[2..4].copy_from_slice(&8080u16.to_be_bytes());
        sa[8..24].copy_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
        sa[28..30].copy_from_slice(&2u16.to_ne_bytes());
        sa[30..32].copy_from_slice(&53u16.to_be_bytes());
        sa[32..36].copy_from_slice(&[10, 0, 0, 2]);
        let a6 = loc(0, ValueKind::Sockaddr { len: 28 }).read(&sa).unwrap();
        let a4 = loc(28, ValueKind::Sockaddr { len: 28 }).read(&sa).unwrap();
        assert_eq!(
            (a6.to_string(), a4.to_string()),
            ("[::1]:8080".into(), "10.0.0.2:53".into())
        );
        let names = FieldDisplay::Symbolic(vec![(2, "TCP_SYN_SENT".into())]);
        let state = FieldLoc {
            names: Some(Arc::new(names)),
            ..loc(
                0,
                ValueKind::Named {
                    size: 4,
                    signed: true,
                },
            )
        };
        let v = state.read(&2i32.to_le_bytes()).unwrap();
        assert_eq!((v.to_string(), v.raw()), ("TCP_SYN_SENT".into(), Some(2)));
        assert_eq!(state.read(&77i32.to_le_bytes()), Some(Value::Int(77)));
        let sig = loc(0, ValueKind::Signal { size: 4 })
            .read(&9i64.to_le_bytes())
            .unwrap();
        assert_eq!((sig.to_string(), sig.raw()), ("SIGKILL".into(), Some(9)));
        assert_eq!(Value::Signal(0).to_string(), "0");
        assert_eq!(Value::Signal(34).to_string(), "SIGRTMIN+2");
        let ret = loc(0, ValueKind::Errno { size: 8 })
            .read(&(-2i64).to_le_bytes())
            .unwrap();
        assert_eq!((ret.to_string(), ret.raw()), ("-2 ENOENT".into(), Some(-2)));
        assert_eq!(Value::Errno(3).to_string(), "3");
        assert_eq!(Value::Errno(-5000).to_string(), "-5000");
    }
}
