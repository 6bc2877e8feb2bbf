//! Kernel symbols from /proc/kallsyms.
use std::cell::OnceCell;
use std::sync::Arc;

/// How far past the very last kernel symbol an address may lie and still be attributed to it.
const LAST_SYMBOL_SPAN: u64 = 4096;

/// One text symbol: its range, where its name lies in [`KernelSymbols::names`], and the name as an `Arc`
/// once it was looked up (most of the ~100k kernel symbols never are, so they cost no allocation).
#[derive(Debug)]
struct Entry {
    start: u64,
    end: u64,
    name_start: u32,
    name_end: u32,
    shared: OnceCell<Arc<str>>,
}

/// Kernel text symbols sorted by address, each bounded by the next symbol of any kind.
#[derive(Debug, Default)]
pub struct KernelSymbols {
    /// Sorted by start, non-overlapping.
    entries: Vec<Entry>,
    /// All text symbol names, back to back.
    names: String,
}

impl KernelSymbols {
    /// The text symbol containing `addr`, if any.
    pub fn lookup(&self, addr: u64) -> Option<&Arc<str>> {
        let i = self
            .entries
            .partition_point(|e| e.start <= addr)
            .checked_sub(1)?;
        let e = &self.entries[i];
        (addr >= e.start && addr < e.end).then(|| {
            e.shared
                .get_or_init(|| Arc::from(&self.names[e.name_start as usize..e.name_end as usize]))
        })
    }

    /// The number of text symbols.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no symbols (for example kallsyms hides addresses).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A hexadecimal number (no prefix); None when empty, too long or not hex.
fn parse_hex(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    digits.iter().try_fold(0u64, |acc, &d| {
        let v = (d as char).to_digit(16)?;
        Some(acc << 4 | v as u64)
    })
}

/// The first three blank-separated fields of a kallsyms line (address, type, name); the rest (`\t[module]`) is
/// ignored.
fn kallsyms_fields(line: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let is_blank = |b: &u8| *b == b' ' || *b == b'\t';
    // The usual line on 64-bit kernels: 16 hex digits, a space, the type, a space, the name.
    if line.len() > 19
        && line[16] == b' '
        && line[18] == b' '
        && !is_blank(&line[17])
        && !is_blank(&line[19])
        && !line[..16].iter().any(is_blank)
    {
        let name = &line[19..];
        let end = name.iter().position(is_blank).unwrap_or(name.len());
        return Some((&line[..16], &line[17..18], &name[..end]));
    }
    let mut rest = line;
    let mut next = || {
        let start = rest.iter().position(|b| !is_blank(b))?;
        let field = &rest[start..];
        let end = field.iter().position(is_blank).unwrap_or(field.len());
        rest = &field[end..];
        Some(&field[..end])
    };
    Some((next()?, next()?, next()?))
}

/// Parse the text of /proc/kallsyms (`ADDR TYPE NAME [\tMODULE]` lines).
///
/// Only text symbols (`t`, `T`, `w`, `W`) are kept, but every symbol bounds the one before it, so an address in
/// data after a function is not attributed to that function. When every address is zero (kallsyms hidden by
/// `kptr_restrict` for an unprivileged reader), the result is empty.
pub fn parse_kallsyms(data: &[u8]) -> KernelSymbols {
    let mut names = String::with_capacity(data.len() / 2);
    // (addr, name range in `names` for a text symbol, or None)
    let mut all: Vec<(u64, Option<(u32, u32)>)> = Vec::with_capacity(data.len() / 40);
    for line in data.split(|&b| b == b'\n') {
        let Some((addr, kind, name)) = kallsyms_fields(line) else {
            continue;
        };
        let Some(addr) = parse_hex(addr) else {
            continue;
        };
        let is_text = matches!(kind, b"t" | b"T" | b"w" | b"W");
        let name = is_text.then(|| {
            let start = names.len() as u32;
            match std::str::from_utf8(name) {
                Ok(name) => names.push_str(name),
                Err(_) => names.push_str(&String::from_utf8_lossy(name)),
            }
            (start, names.len() as u32)
        });
        all.push((addr, name));
    }
    if all.iter().all(|(addr, _)| *addr == 0) {
        return KernelSymbols::default();
    }
    // Stable: of several names at one address, the first in the file stays first.
    all.sort_by_key(|(addr, _)| *addr);
    let mut entries: Vec<Entry> = Vec::with_capacity(all.len());
    for (i, (addr, name)) in all.iter().enumerate() {
        let Some((name_start, name_end)) = *name else {
            continue;
        };
        if entries.last().is_some_and(|e| e.start == *addr) {
            continue; // An alias at the same address: keep the first name.
        }
        let end = all[i + 1..]
            .iter()
            .map(|(next, _)| *next)
            .find(|next| next > addr)
            .unwrap_or(addr.saturating_add(LAST_SYMBOL_SPAN));
        entries.push(Entry {
            start: *addr,
            end,
            name_start,
            name_end,
            shared: OnceCell::new(),
        });
    }
    KernelSymbols { entries, names }
}

#[cfg(test)]
mod tests {
    use super::parse_kallsyms;

    /// Check that text symbols are found by nearest-below lookup bounded by the next symbol of any kind.
    #[test]
    fn parses_and_looks_up() {
        let data = b"ffffffff81000000 T _stext\n\
ffffffff81000100 t helper\n\
ffffffff81000200 D some_data\n\
ffffffff81000300 T ksys_write\n\
ffffffffc0001000 t mod_fn\t[some_module]\n";
        let syms = parse_kallsyms(data);
        assert_eq!(syms.len(), 4);
        assert_eq!(
            syms.lookup(0xffffffff81000000).map(|s| &**s),
            Some("_stext")
        );
        assert_eq!(
            syms.lookup(0xffffffff810000ff).map(|s| &**s),
            Some("_stext")
        );
        assert_eq!(
            syms.lookup(0xffffffff81000150).map(|s| &**s),
            Some("helper")
        );
        assert_eq!(syms.lookup(0xffffffff81000250), None, "data is not text");
        assert_eq!(
            syms.lookup(0xffffffff81000310).map(|s| &**s),
            Some("ksys_write")
        );
        assert_eq!(
            syms.lookup(0xffffffffc0001010).map(|s| &**s),
            Some("mod_fn")
        );
        assert_eq!(
            syms.lookup(0xffffffffc0101010),
            None,
            "far past the last symbol"
        );
        assert_eq!(syms.lookup(0x1000), None, "below the first symbol");
    }

    /// Check that kallsyms with hidden (all-zero) addresses gives no symbols.
    #[test]
    fn hidden_addresses_give_nothing() {
        let data = b"0000000000000000 T _stext\n0000000000000000 T ksys_write\n";
        let syms = parse_kallsyms(data);
        assert!(syms.is_empty());
        assert_eq!(syms.lookup(0), None);
    }

    /// Check that malformed lines are skipped.
    #[test]
    fn skips_garbage() {
        let syms = parse_kallsyms(b"garbage\n\nzz T x\nffffffff81000000 T ok\n");
        assert_eq!(syms.len(), 1);
    }
}
