//! The name a Python thread was given (`threading.Thread(name=...)`, `Thread-1 (target)`), as py-spy shows it:
//! CPython 3.11 does not give it to the OS thread (its comm stays the process's). A thread that `threading`
//! started runs `Thread._bootstrap(self)` as its outermost Python frame: its first local is the `Thread`, whose
//! `_name` attribute is read from the instance's managed dict (3.11: the values before the object, keyed by the
//! type's cached keys; or a dict).
use super::code::read_str;
use super::layout::V3_11;
use super::memory::{u64_at, Memory, ReadError};

/// `_PyInterpreterFrame.localsplus` (3.11).
const FRAME_LOCALSPLUS: u64 = 0x48;
/// `PyTypeObject.tp_flags`, `PyHeapTypeObject.ht_cached_keys` (3.11, checked with gdb on pyenv's 3.11.7).
const TYPE_FLAGS: u64 = 168;
const TYPE_CACHED_KEYS: u64 = 872;
/// `Py_TPFLAGS_MANAGED_DICT`: the values pointer is at `obj - 32`, the dict pointer at `obj - 24`.
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
/// The most keys looked through.
const MAX_KEYS: u64 = 256;

/// The `threading` name of the thread whose outermost Python frame is `outermost`, when that frame is
/// `Thread._bootstrap` (`outermost_name` is its `qualname (file:line)`); None for other threads.
pub fn thread_name(mem: &Memory, outermost: u64, outermost_name: &str) -> Option<String> {
    if !outermost_name.starts_with("Thread._bootstrap (threading.py:") {
        return None;
    }
    let thread = mem.u64(outermost + FRAME_LOCALSPLUS).ok()?;
    let name = attribute(mem, thread, "_name").ok()??;
    read_str(mem, &V3_11.str, name).ok()
}

/// Attribute `name` of an instance with a managed dict (3.11).
fn attribute(mem: &Memory, obj: u64, name: &str) -> Result<Option<u64>, ReadError> {
    let tp = mem.u64(obj + 8)?;
    if mem.u64(tp + TYPE_FLAGS)? & MANAGED_DICT == 0 {
        return Ok(None);
    }
    let values = mem.u64(obj - 32)?;
    if values != 0 {
        let keys = mem.u64(tp + TYPE_CACHED_KEYS)?;
        return match find(mem, keys, name)? {
            Some((i, _)) => Ok(Some(mem.u64(values + 8 * i)?)),
            None => Ok(None),
        };
    }
    let dict = mem.u64(obj - 24)?;
    if dict == 0 {
        return Ok(None);
    }
    let (keys, values) = (mem.u64(dict + DICT_KEYS)?, mem.u64(dict + DICT_VALUES)?);
    match find(mem, keys, name)? {
        Some((i, _)) if values != 0 => Ok(Some(mem.u64(values + 8 * i)?)),
        Some((_, value)) => Ok(Some(value)),
        None => Ok(None),
    }
}

/// The index of key `name` in a dict's keys, and the value its entry holds (a combined dict's).
fn find(mem: &Memory, keys: u64, name: &str) -> Result<Option<(u64, u64)>, ReadError> {
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
        if key != 0 && read_str(mem, &V3_11.str, key).is_ok_and(|k| k == name) {
            return Ok(Some((i, u64_at(&entries, at + 8))));
        }
    }
    Ok(None)
}
