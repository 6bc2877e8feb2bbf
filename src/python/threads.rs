//! The name a Python thread was given (`threading.Thread(name=...)`, `Thread-1 (target)`), as py-spy shows it:
//! CPython 3.11 to 3.13 do not give it to the OS thread (its comm stays the process's). A thread that
//! `threading` started runs `Thread._bootstrap(self)` as its outermost Python frame: its first local is the
//! `Thread`, whose `_name` attribute is read from the instance's managed dict, which each version keeps its own
//! way ([`Dict`]). The main thread's name is `sys.modules['threading']._main_thread._name`
//! ([`main_thread_name`]), as py-spy shows it (`MainThread` unless renamed; none when the script did not import
//! `threading`). Offsets checked with gdb on pyenv's 3.11.7, 3.12.1 and 3.13.0 (and by the live tests).
use super::code::read_str;
use super::layout::StrLayout;
use super::memory::{u64_at, Memory, ReadError};

/// Where the objects `_name` is read through keep their fields, in one version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameLayout {
    /// `_PyInterpreterFrame.localsplus`.
    pub frame_localsplus: u64,
    /// `PyHeapTypeObject.ht_cached_keys`.
    pub type_cached_keys: u64,
    pub dict: Dict,
}

/// How an instance's managed dict is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dict {
    /// 3.11: the values pointer at `obj - 32` (the values of the type's cached keys), else the dict at `obj - 24`.
    V311,
    /// 3.12: one pointer at `obj - 24`, odd for values (`ptr + 1`), else the dict.
    V312,
    /// 3.13: the values inline after the object (`tp_basicsize`, an 8-byte header, `valid` its 4th byte) when
    /// the type has `Py_TPFLAGS_INLINE_VALUES` and they are valid, else the dict at `obj - 24` (whose
    /// `ma_values`, when set, have the same header).
    V313,
}

pub const V3_11: NameLayout = NameLayout {
    frame_localsplus: 0x48,
    type_cached_keys: 872,
    dict: Dict::V311,
};
pub const V3_12: NameLayout = NameLayout {
    frame_localsplus: 0x48,
    type_cached_keys: 880,
    dict: Dict::V312,
};
pub const V3_13: NameLayout = NameLayout {
    frame_localsplus: 0x48,
    type_cached_keys: 880,
    dict: Dict::V313,
};

/// `PyTypeObject.tp_name`, `.tp_basicsize`, `.tp_flags` (the same in 3.11 to 3.13).
pub const TYPE_NAME: u64 = 24;
const TYPE_BASICSIZE: u64 = 32;
const TYPE_FLAGS: u64 = 168;
/// `Py_TPFLAGS_INLINE_VALUES` (3.13), `Py_TPFLAGS_MANAGED_DICT`.
const INLINE_VALUES: u64 = 1 << 2;
const MANAGED_DICT: u64 = 1 << 4;
/// `PyDictObject.ma_keys`, `.ma_values`.
const DICT_KEYS: u64 = 32;
const DICT_VALUES: u64 = 40;
/// `PyDictKeysObject`: its header's size (the indices follow), `dk_log2_index_bytes`, `dk_kind`,
/// `dk_nentries`.
const KEYS_HEADER: usize = 32;
const KEYS_LOG2_INDEX_BYTES: usize = 9;
const KEYS_KIND: usize = 10;
const KEYS_NENTRIES: usize = 24;
/// `PyModuleObject.md_dict` (the same in 3.11 to 3.13).
pub const MODULE_DICT: u64 = 16;
/// The most keys looked through (`sys.modules` of a large program holds a few thousand).
const MAX_KEYS: u64 = 16384;

/// The `threading` name of the thread whose outermost Python frame is `outermost`, when that frame is
/// `Thread._bootstrap` (`outermost_name` is its `qualname (file:line)`); None for other threads.
pub fn thread_name(
    mem: &Memory,
    l: &NameLayout,
    s: &StrLayout,
    outermost: u64,
    outermost_name: &str,
) -> Option<String> {
    if !outermost_name.starts_with("Thread._bootstrap (threading.py:") {
        return None;
    }
    let thread = mem.u64(outermost + l.frame_localsplus).ok()?;
    let name = attribute(mem, l, s, thread, "_name").ok()??;
    read_str(mem, s, name).ok()
}

/// What a look for the main thread's name found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MainThread {
    /// Its `threading` name.
    Named(String),
    /// `sys.modules` has no key `threading`: the script did not import it (yet).
    NoThreading,
    /// A read failed, an object on the way is not of the type it should be (`module`, `str`), or `threading`
    /// is being imported (no `_main_thread` yet).
    Unknown,
}

/// The `threading` name of the main thread (`sys.modules['threading']._main_thread._name`), from the
/// interpreter's `sys.modules` dict at `modules`.
pub fn main_thread_name(mem: &Memory, l: &NameLayout, s: &StrLayout, modules: u64) -> MainThread {
    match dict_item(mem, l, s, modules, "threading") {
        Ok(Some(threading)) => match main_thread_of(mem, l, s, threading) {
            Some(name) => MainThread::Named(name),
            None => MainThread::Unknown,
        },
        Ok(None) => MainThread::NoThreading,
        Err(_) => MainThread::Unknown,
    }
}

/// `_main_thread._name` of the `threading` module object at `threading`.
fn main_thread_of(mem: &Memory, l: &NameLayout, s: &StrLayout, threading: u64) -> Option<String> {
    if !is_type(mem, threading, "module").ok()? {
        return None;
    }
    let dict = mem.u64(threading + MODULE_DICT).ok()?;
    let main = dict_item(mem, l, s, dict, "_main_thread").ok()??;
    let name = attribute(mem, l, s, main, "_name").ok()??;
    if !is_type(mem, name, "str").ok()? {
        return None;
    }
    read_str(mem, s, name).ok()
}

/// Where a dict's keys are and how many entries they have used (`ma_keys`, `dk_nentries`): the same pair
/// again means no key was added since (an insertion takes a new entry, or new keys when full).
pub fn dict_shape(mem: &Memory, dict: u64) -> Result<(u64, u64), ReadError> {
    let keys = mem.u64(dict + DICT_KEYS)?;
    Ok((keys, mem.u64(keys + KEYS_NENTRIES as u64)?))
}

/// Whether the type of object `obj` is named `name` (its `tp_name`).
fn is_type(mem: &Memory, obj: u64, name: &str) -> Result<bool, ReadError> {
    let tp = mem.u64(obj + 8)?;
    let tp_name = mem.u64(tp + TYPE_NAME)?;
    let bytes = mem.bytes(tp_name, name.len() + 1)?;
    Ok(bytes[..name.len()] == *name.as_bytes() && bytes[name.len()] == 0)
}

/// Attribute `name` of an instance with a managed dict.
fn attribute(
    mem: &Memory,
    l: &NameLayout,
    s: &StrLayout,
    obj: u64,
    name: &str,
) -> Result<Option<u64>, ReadError> {
    let tp = mem.u64(obj + 8)?;
    let flags = mem.u64(tp + TYPE_FLAGS)?;
    if flags & MANAGED_DICT == 0 {
        return Ok(None);
    }
    // The values of the type's cached keys (and where their array starts), else a dict.
    let (values, dict) = match l.dict {
        Dict::V311 => (mem.u64(obj - 32)?, mem.u64(obj - 24)?),
        Dict::V312 => match mem.u64(obj - 24)? {
            v if v & 1 == 1 => (v + 1, 0),
            d => (0, d),
        },
        Dict::V313 => {
            let inline = obj + mem.u64(tp + TYPE_BASICSIZE)?;
            match flags & INLINE_VALUES != 0 && mem.bytes(inline, 4)?[3] != 0 {
                true => (inline + 8, 0),
                false => (0, mem.u64(obj - 24)?),
            }
        }
    };
    if values != 0 {
        let keys = mem.u64(tp + l.type_cached_keys)?;
        return match find(mem, s, keys, name)? {
            Some((i, _)) => Ok(Some(mem.u64(values + 8 * i)?)),
            None => Ok(None),
        };
    }
    if dict == 0 {
        return Ok(None);
    }
    dict_item(mem, l, s, dict, name)
}

/// The value of str key `name` in the dict at `dict` (None without it).
fn dict_item(
    mem: &Memory,
    l: &NameLayout,
    s: &StrLayout,
    dict: u64,
    name: &str,
) -> Result<Option<u64>, ReadError> {
    let (keys, values) = (mem.u64(dict + DICT_KEYS)?, mem.u64(dict + DICT_VALUES)?);
    let values = match (values, l.dict) {
        (0, _) => 0,
        (v, Dict::V313) => v + 8,
        (v, _) => v,
    };
    match find(mem, s, keys, name)? {
        Some((i, _)) if values != 0 => Ok(Some(mem.u64(values + 8 * i)?)),
        Some((_, value)) => Ok(Some(value)),
        None => Ok(None),
    }
}

/// The index of key `name` in a dict's keys, and the value its entry holds (a combined dict's).
fn find(
    mem: &Memory,
    s: &StrLayout,
    keys: u64,
    name: &str,
) -> Result<Option<(u64, u64)>, ReadError> {
    let head = mem.bytes(keys, KEYS_HEADER)?;
    let n = u64_at(&head, KEYS_NENTRIES).min(MAX_KEYS);
    let index_bytes = 1u64 << head[KEYS_LOG2_INDEX_BYTES].min(20);
    // DICT_KEYS_GENERAL entries are (hash, key, value); unicode and split ones (key, value).
    let (size, key_at) = match head[KEYS_KIND] {
        0 => (24, 8),
        _ => (16, 0),
    };
    let entries = mem.bytes(keys + KEYS_HEADER as u64 + index_bytes, (n * size) as usize)?;
    for i in 0..n {
        let at = (i * size) as usize + key_at;
        let key = u64_at(&entries, at);
        if key != 0 && read_str(mem, s, key).is_ok_and(|k| k == name) {
            return Ok(Some((i, u64_at(&entries, at + 8))));
        }
    }
    Ok(None)
}
