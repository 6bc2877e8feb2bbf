//! Code objects read from the interpreter, cached by address (and checked against the pointers they hold, so
//! that a code object freed and another allocated at its address is read anew), and the strings they name.
use super::layout::{Layout, StrLayout};
use super::linetable;
use super::memory::{i32_at, u64_at, Memory, ReadError};
use std::collections::HashMap;
use std::sync::Arc;

/// What rprof keeps of a code object.
struct Code {
    /// The pointers it held when read (qualname, filename, line table): the check that it is the same object.
    key: [u64; 3],
    qualname: String,
    file: String,
    first_line: i32,
    linetable: Vec<u8>,
    /// Its instructions' length in bytes (`ob_size` code units of 2 bytes).
    code_bytes: u64,
}

/// The code objects of one process, and the frame names made of them.
#[derive(Default)]
pub struct Codes {
    codes: HashMap<u64, Code>,
    names: HashMap<(u64, i32), Arc<str>>,
}

/// The longest string or line table read.
const MAX_STR: usize = 4096;
const MAX_TABLE: usize = 1 << 20;
/// `PyVarObject.ob_size`: a code object's length in code units.
const OB_SIZE: usize = 16;

impl Codes {
    /// `qualname (file.py:line)` of a frame running `code`, at instruction `instr` (3.11 and 3.12: the last
    /// one run, `prev_instr`; 3.13: the one running, `instr_ptr`). `code_type` is the address of
    /// `PyCode_Type` (0: unknown): an object of another type is not read (memory that changed under the read).
    pub fn frame_name(
        &mut self,
        mem: &Memory,
        l: &Layout,
        code: u64,
        instr: u64,
        code_type: u64,
    ) -> Result<Arc<str>, ReadError> {
        let head = mem.bytes(code, l.code_read)?;
        // PyObject.ob_type.
        if code_type != 0 && u64_at(&head, 8) != code_type {
            return Err(ReadError::Unmapped(code));
        }
        let key = [
            u64_at(&head, l.code_qualname),
            u64_at(&head, l.code_filename),
            u64_at(&head, l.code_linetable),
        ];
        if self.codes.get(&code).is_none_or(|c| c.key != key) {
            let c = Code {
                key,
                qualname: read_str(mem, &l.str, key[0])?,
                file: short_file(&read_str(mem, &l.str, key[1])?),
                first_line: i32_at(&head, l.code_first_line),
                linetable: read_bytes(mem, l, key[2])?,
                code_bytes: 2 * u64_at(&head, OB_SIZE),
            };
            self.names.retain(|k, _| k.0 != code);
            self.codes.insert(code, c);
        }
        let c = &self.codes[&code];
        // The instruction run last, in code units (2 bytes) from the start of the code; before the first
        // instruction a frame is at its first line.
        let start = code + l.code_code;
        let line = match instr.checked_sub(start) {
            Some(bytes) => linetable::line_of(&c.linetable, c.first_line, bytes / 2),
            None => Some(c.first_line),
        }
        .unwrap_or(c.first_line);
        let name = self
            .names
            .entry((code, line))
            .or_insert_with(|| Arc::from(format!("{} ({}:{line})", c.qualname, c.file)));
        Ok(Arc::clone(name))
    }

    /// Where the instructions of code object `code` lie (from its start to one past its last; None when it
    /// was not read).
    pub fn instructions(&self, code: u64, l: &Layout) -> Option<std::ops::Range<u64>> {
        let c = self.codes.get(&code)?;
        let start = code + l.code_code;
        Some(start..start + c.code_bytes + 1)
    }
}

/// A file name as py-spy shortens it: the base name (with its package directory for `__init__.py`).
fn short_file(path: &str) -> String {
    let mut parts = path.rsplit('/');
    let base = parts.next().unwrap_or(path);
    match (base, parts.next()) {
        ("__init__.py", Some(dir)) => format!("{dir}/{base}"),
        _ => base.to_string(),
    }
}

/// A Python `str` (compact: ASCII, Latin-1, UCS-2 or UCS-4).
pub fn read_str(mem: &Memory, l: &StrLayout, addr: u64) -> Result<String, ReadError> {
    let head = mem.bytes(addr, l.state.max(l.length + 4) + 4)?;
    let len = (u64_at(&head, l.length) as usize).min(MAX_STR);
    let state = head[l.state];
    let (kind, compact, ascii) = ((state >> 2) & 7, state & 32 != 0, state & 64 != 0);
    if !compact {
        return Ok("?".into());
    }
    if ascii {
        let bytes = mem.bytes(addr + l.ascii_data, len)?;
        return Ok(String::from_utf8_lossy(&bytes).into_owned());
    }
    let width = usize::from(kind.clamp(1, 4));
    let bytes = mem.bytes(addr + l.compact_data, len * width)?;
    let chars = bytes.chunks_exact(width).map(|c| {
        let mut v = [0u8; 4];
        v[..width].copy_from_slice(c);
        char::from_u32(u32::from_le_bytes(v)).unwrap_or('?')
    });
    Ok(chars.collect())
}

/// A Python `bytes` object's contents.
fn read_bytes(mem: &Memory, l: &Layout, addr: u64) -> Result<Vec<u8>, ReadError> {
    let size = mem.u64(addr + l.bytes_size)? as usize;
    mem.bytes(addr + l.bytes_data, size.min(MAX_TABLE))
}

#[cfg(test)]
mod tests {
    /// Check the file names frames show.
    #[test]
    fn short_file_names() {
        assert_eq!(super::short_file("/tmp/x/work.py"), "work.py");
        assert_eq!(
            super::short_file("/usr/lib/python3.11/json/__init__.py"),
            "json/__init__.py"
        );
        assert_eq!(super::short_file("<string>"), "<string>");
    }
}
