//! Kernel symbols from /proc/kallsyms.
use std::sync::Arc;

/// How far past the very last kernel symbol an address may lie and still be attributed to it.
const LAST_SYMBOL_SPAN: u64 = 4096;

/// One text symbol: its range, and where its name lies in [`KernelSymbols::names`] (24 bytes: the kernel
/// has some 100k text symbols).
#[derive(Clone, Copy, Debug)]
struct Entry {
    start: u64,
    end: u64,
    name: u32,
    name_len: u16,
}

/// Kernel text symbols sorted by address, each bounded by the next symbol of any kind.
#[derive(Debug, Default)]
pub struct KernelSymbols {
    /// Sorted by start, non-overlapping.
    entries: Vec<Entry>,
    /// The names of the text symbols, one after the other (a third of the kallsyms text).
    names: String,
    marks: Marks,
}

/// Where the kernel image lies, as its own symbols say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Marks {
    /// `_text`: what perf's `[kernel.kallsyms]_text` mapping records, to compute the KASLR offset.
    pub text: Option<u64>,
    /// The lowest and highest addresses of symbols without a `[module]` tag: the kernel image (core and init
    /// text), whose symbols the build fixes. Modules, BPF programs and trampolines carry a tag. Absolute
    /// symbols (`A`: x86_64's per-CPU offsets near 0 before 6.15) are not addresses in the image: counted, the
    /// image would reach down over whatever lies below it (arm64's modules).
    pub image: Option<(u64, u64)>,
}

impl KernelSymbols {
    /// The text symbol containing `addr`, if any.
    pub fn lookup(&self, addr: u64) -> Option<Arc<str>> {
        self.lookup_at(addr).map(|(name, _)| name)
    }

    /// The text symbol containing `addr` and the symbol's start address.
    pub fn lookup_at(&self, addr: u64) -> Option<(Arc<str>, u64)> {
        let i = self
            .entries
            .partition_point(|e| e.start <= addr)
            .checked_sub(1)?;
        let e = &self.entries[i];
        let name = e.name as usize..e.name as usize + usize::from(e.name_len);
        (addr >= e.start && addr < e.end).then(|| (Arc::from(&self.names[name]), e.start))
    }

    /// Only the symbols outside the kernel image (modules, BPF programs, trampolines), for a reader that
    /// names the image from elsewhere: their names are copied out, the rest is dropped.
    pub fn outside_image(self) -> KernelSymbols {
        let Some((low, high)) = self.marks.image else {
            return self;
        };
        let mut names = String::new();
        let entries = self
            .entries
            .iter()
            .filter(|e| e.start > high || e.end <= low)
            .map(|e| {
                let at = e.name as usize;
                let name = u32::try_from(names.len()).unwrap_or(u32::MAX);
                names.push_str(&self.names[at..at + usize::from(e.name_len)]);
                Entry { name, ..*e }
            })
            .collect();
        KernelSymbols {
            entries,
            names,
            marks: self.marks,
        }
    }

    /// The symbols as kallsyms text that [`parse_kallsyms`] reads back to the same lookups: each text symbol,
    /// then where it ends (a symbol that is not text), tagged `[rprof]` (not the image).
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        for e in &self.entries {
            let at = e.name as usize;
            let name = &self.names[at..at + usize::from(e.name_len)];
            text.push_str(&format!(
                "{:016x} t {name}\t[rprof]\n{:016x} d .end\t[rprof]\n",
                e.start, e.end
            ));
        }
        text
    }

    /// The `_text` address and the kernel image's extent.
    pub fn marks(&self) -> Marks {
        self.marks
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
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => return None,
        };
        Some(acc << 4 | u64::from(v))
    })
}

/// The fields of a kallsyms line.
struct Fields<'a> {
    addr: &'a [u8],
    kind: &'a [u8],
    name: &'a [u8],
    /// More follows the name (a `\t[module]` tag).
    tagged: bool,
}

/// The first three blank-separated fields of a kallsyms line (address, type, name), and whether more follows.
fn kallsyms_fields(line: &[u8]) -> Option<Fields<'_>> {
    let is_blank = |b: &u8| *b == b' ' || *b == b'\t';
    // The usual line on 64-bit kernels: 16 hex digits (checked by the caller), a space, the type, a space, the
    // name, maybe a tab and a tag.
    if line.len() > 19
        && line[16] == b' '
        && line[18] == b' '
        && !is_blank(&line[17])
        && !is_blank(&line[19])
    {
        let name = &line[19..];
        let (name, tagged) = match memchr::memchr2(b'\t', b' ', name) {
            Some(end) => (&name[..end], name[end..].iter().any(|b| !is_blank(b))),
            None => (name, false),
        };
        return Some(Fields {
            addr: &line[..16],
            kind: &line[17..18],
            name,
            tagged,
        });
    }
    let mut rest = line;
    let mut next = || {
        let start = rest.iter().position(|b| !is_blank(b))?;
        let field = &rest[start..];
        let end = field.iter().position(is_blank).unwrap_or(field.len());
        rest = &field[end..];
        Some(&field[..end])
    };
    Some(Fields {
        addr: next()?,
        kind: next()?,
        name: next()?,
        tagged: next().is_some(),
    })
}

/// Parse the text of /proc/kallsyms (`ADDR TYPE NAME [\tMODULE]` lines).
///
/// Only text symbols (`t`, `T`, `w`, `W`) are kept, but every symbol bounds the one before it, so an address in
/// data after a function is not attributed to that function. When every address is zero (kallsyms hidden by
/// `kptr_restrict` for an unprivileged reader), the result is empty.
pub fn parse_kallsyms(data: &[u8]) -> KernelSymbols {
    let mut parser = KallsymsParser::default();
    for line in data.split(|&b| b == b'\n') {
        parser.line(line);
    }
    parser.finish()
}

/// Parse a kallsyms file as it is read, a line at a time: the text is not held (5 MB for /proc/kallsyms), only
/// the text symbols' names.
pub(crate) fn read_kallsyms_from(reader: impl std::io::Read) -> std::io::Result<KernelSymbols> {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::with_capacity(64 << 10, reader);
    let mut parser = KallsymsParser::default();
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            return Ok(parser.finish());
        }
        parser.line(line.strip_suffix(b"\n").unwrap_or(&line));
    }
}

/// The symbols of kallsyms lines fed one at a time.
#[derive(Default)]
struct KallsymsParser {
    /// (addr, name range in `names`; empty for a symbol that is not text), in file order.
    all: Vec<(u64, u32, u32)>,
    /// The text symbols' names, one after the other.
    names: String,
    marks: Marks,
    /// The names outgrew u32 offsets (never seen: kallsyms is a few MiB): later lines are ignored.
    full: bool,
}

impl KallsymsParser {
    fn line(&mut self, line: &[u8]) {
        let Some(Fields {
            addr,
            kind,
            name,
            tagged,
        }) = kallsyms_fields(line)
        else {
            return;
        };
        let Some(addr) = parse_hex(addr) else {
            return;
        };
        if self.full {
            return;
        }
        let marks = &mut self.marks;
        if name == b"_text" {
            marks.text = Some(addr);
        }
        if !tagged && addr != 0 && !matches!(kind, b"A" | b"a") {
            let (low, high) = marks.image.unwrap_or((addr, addr));
            marks.image = Some((low.min(addr), high.max(addr)));
        }
        let Ok(start) = u32::try_from(self.names.len()) else {
            self.full = true;
            return;
        };
        if matches!(kind, b"t" | b"T" | b"w" | b"W") {
            // ASCII in practice: the lossy path (a tenth of a push run's parsing time) only for the odd name.
            let name = match std::str::from_utf8(name) {
                Ok(name) => std::borrow::Cow::Borrowed(name),
                Err(_) => String::from_utf8_lossy(name),
            };
            // Names are short; a longer one (never seen) is cut rather than wrapped.
            self.names
                .push_str(&name[..name.floor_char_boundary(usize::from(u16::MAX))]);
        }
        let Ok(end) = u32::try_from(self.names.len()) else {
            self.full = true;
            return;
        };
        self.all.push((addr, start, end));
    }

    fn finish(mut self) -> KernelSymbols {
        if self.all.iter().all(|(addr, _, _)| *addr == 0) {
            return KernelSymbols::default();
        }
        // Stable: several names at one address keep their order in the file. The file is sorted but for module
        // and BPF symbols after the core kernel's.
        if !self.all.is_sorted_by_key(|(addr, _, _)| *addr) {
            self.all.sort_by_key(|(addr, _, _)| *addr);
        }
        let entries = text_entries(&self.all);
        drop(self.all);
        self.names.shrink_to_fit();
        KernelSymbols {
            entries,
            names: self.names,
            marks: self.marks,
        }
    }
}

/// The text symbols among `all` (address, name range: empty for a symbol that is not text, sorted by address),
/// each ending at the next symbol of any kind.
fn text_entries(all: &[(u64, u32, u32)]) -> Vec<Entry> {
    let texts = all.iter().filter(|(_, start, end)| start < end).count();
    let mut entries: Vec<Entry> = Vec::with_capacity(texts);
    for (i, &(addr, name, name_end)) in all.iter().enumerate() {
        if name == name_end {
            continue; // not text
        }
        let name_len = (name_end - name) as u16;
        // Aliases at one address (`__pi___x86_indirect_thunk_rax`, `__x86_indirect_thunk_rax`): the last name
        // in the file wins, as in perf, where each earlier alias ends where the next begins and so has no size.
        if let Some(last) = entries.last_mut().filter(|e| e.start == addr) {
            last.name = name;
            last.name_len = name_len;
            continue;
        }
        let end = all[i + 1..]
            .iter()
            .map(|(next, _, _)| *next)
            .find(|next| *next > addr)
            .unwrap_or(addr.saturating_add(LAST_SYMBOL_SPAN));
        entries.push(Entry {
            start: addr,
            end,
            name,
            name_len,
        });
    }
    entries.shrink_to_fit();
    entries
}

#[cfg(test)]
mod tests {
    use super::{parse_kallsyms, read_kallsyms_from};

    /// Check that kallsyms read a line at a time (lines crossing the reader's 64 KiB buffer, the last one without
    /// a newline) gives the table its whole text gives: the same names at every symbol, the same bounds.
    #[test]
    fn streamed_as_whole() {
        let mut text = String::new();
        for i in 0..20_000u64 {
            let addr = 0xffffffff81000000 + i * 0x40;
            let kind = ["T", "t", "D", "W"][(i % 4) as usize];
            text.push_str(&format!("{addr:016x} {kind} function_number_{i}\n"));
            if i % 7 == 0 {
                text.push_str(&format!("{addr:016x} T alias_of_{i}\n"));
            }
        }
        text.push_str("ffffffffc0001000 t mod_fn\t[some_module]");
        let whole = parse_kallsyms(text.as_bytes());
        let streamed = read_kallsyms_from(text.as_bytes()).unwrap();
        assert_eq!(streamed.len(), whole.len());
        assert_eq!(streamed.marks(), whole.marks());
        for addr in (0xffffffff81000000u64..0xffffffff81000000 + 20_001 * 0x40).step_by(0x20) {
            assert_eq!(
                streamed.lookup_at(addr),
                whole.lookup_at(addr),
                "at {addr:#x}"
            );
        }
        assert_eq!(
            streamed.lookup(0xffffffff81000000 + 7 * 0x40).as_deref(),
            Some("alias_of_7")
        );
        assert_eq!(
            streamed.lookup(0xffffffffc0001008).as_deref(),
            Some("mod_fn")
        );
    }

    /// Check that the image's extent is that of the untagged symbols but the absolute ones (per-CPU offsets
    /// near 0 on older x86_64 kernels).
    #[test]
    fn image_without_absolute_symbols() {
        let data = b"0000000000000000 A fixed_percpu_data\n\
0000000000001000 A cpu_debug_store\n\
ffff800080000000 T _text\n\
ffff800080000100 T vfs_write\n\
ffff800081000000 D _end\n\
ffff800078001000 t mod_fn\t[some_module]\n";
        let marks = parse_kallsyms(data).marks();
        assert_eq!(marks.text, Some(0xffff800080000000));
        assert_eq!(marks.image, Some((0xffff800080000000, 0xffff800081000000)));
    }

    /// Check that `outside_image` keeps the modules' and BPF programs' symbols with their names, and no symbol
    /// of the image: a report that names the image from a cached copy adds these beside it.
    #[test]
    fn outside_image_keeps_the_run_time_symbols() {
        let data = b"ffffffff81000000 T _text\n\
ffffffff81000100 T ksys_write\n\
ffffffff81000200 T _etext\n\
ffffffffa0001000 t bpf_prog_8651a1834a802b68_sys_enter\t[bpf]\n\
ffffffffc0001000 t mod_fn\t[some_module]\n\
ffffffffc0001100 t mod_next\t[some_module]\n";
        let rest = parse_kallsyms(data).outside_image();
        assert_eq!(rest.len(), 3);
        assert_eq!(rest.lookup(0xffffffff81000150), None);
        assert_eq!(
            rest.lookup(0xffffffffa0001010).as_deref(),
            Some("bpf_prog_8651a1834a802b68_sys_enter")
        );
        assert_eq!(rest.lookup(0xffffffffc0001010).as_deref(), Some("mod_fn"));
        assert_eq!(rest.lookup(0xffffffffc0001110).as_deref(), Some("mod_next"));
    }

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
        assert_eq!(syms.lookup(0xffffffff81000000).as_deref(), Some("_stext"));
        assert_eq!(syms.lookup(0xffffffff810000ff).as_deref(), Some("_stext"));
        assert_eq!(syms.lookup(0xffffffff81000150).as_deref(), Some("helper"));
        assert_eq!(syms.lookup(0xffffffff81000250), None, "data is not text");
        assert_eq!(
            syms.lookup(0xffffffff81000310).as_deref(),
            Some("ksys_write")
        );
        assert_eq!(syms.lookup(0xffffffffc0001010).as_deref(), Some("mod_fn"));
        assert_eq!(
            syms.lookup(0xffffffffc0101010),
            None,
            "far past the last symbol"
        );
        assert_eq!(syms.lookup(0x1000), None, "below the first symbol");
    }

    /// Check that of several text names at one address the last one in the file names it, as perf does, and that
    /// a data symbol there does not.
    #[test]
    fn last_alias_names_the_address() {
        let data = b"ffffffff82270000 T __pi___x86_indirect_thunk_rax\n\
ffffffff82270000 T __x86_indirect_thunk_rax\n\
ffffffff82270000 D some_data\n\
ffffffff82270020 T next_fn\n";
        let syms = parse_kallsyms(data);
        assert_eq!(syms.len(), 2);
        assert_eq!(
            syms.lookup(0xffffffff82270010).as_deref(),
            Some("__x86_indirect_thunk_rax")
        );
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
