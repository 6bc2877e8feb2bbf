//! CPython's location table (`co_linetable`, Objects/locations.md; the same format in 3.11, 3.12 and 3.13, as
//! the test against each pyenv build's own `co_lines()` checks): the source line of an instruction.
//!
//! Each entry starts with a byte with its top bit set: bits 3-6 the kind of entry, bits 0-2 the number of code
//! units it covers minus one. Kinds 0-9 stay on the line, 10-12 move 0-2 lines, 13 (no columns) and 14 (long
//! form) move by a signed varint that follows, 15 has no line. Varints are 6-bit chunks, least significant
//! first, bit 6 set on every chunk but the last; a signed varint holds its sign in bit 0.

/// The line of the instruction at `unit` (an index in code units, 2 bytes each) of a code object whose first
/// line is `first_line`; None for an instruction without a line (or past the table's end).
pub fn line_of(table: &[u8], first_line: i32, unit: u64) -> Option<i32> {
    let mut line = first_line;
    let mut start = 0u64;
    let mut i = 0;
    while i < table.len() {
        let head = table[i];
        let kind = (head >> 3) & 15;
        let units = u64::from(head & 7) + 1;
        let delta = match kind {
            13 | 14 => signed_varint(table.get(i + 1..).unwrap_or(&[])),
            10..=12 => i32::from(kind) - 10,
            _ => 0,
        };
        line = line.wrapping_add(delta);
        if unit < start + units {
            return (kind != 15).then_some(line);
        }
        start += units;
        // The next entry starts at the next byte with its top bit set.
        i += 1;
        while i < table.len() && table[i] & 0x80 == 0 {
            i += 1;
        }
    }
    None
}

fn varint(bytes: &[u8]) -> u32 {
    let mut value = 0u32;
    for (n, &b) in bytes.iter().take(6).enumerate() {
        value |= u32::from(b & 63) << (6 * n);
        if b & 64 == 0 {
            break;
        }
    }
    value
}

fn signed_varint(bytes: &[u8]) -> i32 {
    let v = varint(bytes);
    match v & 1 {
        1 => -((v >> 1) as i32),
        _ => (v >> 1) as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::line_of;

    /// Check the decoder on a table CPython 3.11 wrote (`compile` of a four-line function, its code object's
    /// co_linetable and the lines `co_lines()` gives for it): every instruction gets CPython's line.
    #[test]
    fn lines_of_a_real_table() {
        // def f(x):\n    y = x + 1\n    z = y * 2\n    return z   (first line 1)
        // co_linetable and co_lines() as Debian's python3.11 prints them for that source.
        let table: &[u8] = &[
            0x80, 0x00, 0xd8, 0x08, 0x09, 0x88, 0x41, 0x89, 0x05, 0x80, 0x41, 0xd8, 0x08, 0x09,
            0x88, 0x41, 0x89, 0x05, 0x80, 0x41, 0xd8, 0x0b, 0x0c, 0x80, 0x48,
        ];
        let want = [1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 4, 4];
        for (unit, &line) in want.iter().enumerate() {
            assert_eq!(line_of(table, 1, unit as u64), Some(line), "unit {unit}");
        }
    }

    /// Check the long and no-column forms with negative deltas, and the no-line kind.
    #[test]
    fn long_forms_and_no_line() {
        // 14 (long): delta -3 (signed varint 7), end line 0, cols 0 0; 13: delta +5 (10); 15: no line.
        let table: &[u8] = &[0xf0, 7, 0, 0, 0, 0xe9, 10, 0xf8];
        assert_eq!(line_of(table, 10, 0), Some(7));
        assert_eq!(line_of(table, 10, 1), Some(12));
        assert_eq!(line_of(table, 10, 2), Some(12));
        assert_eq!(line_of(table, 10, 3), None);
        assert_eq!(line_of(table, 10, 4), None);
    }

    /// Print, for each code object of a few stdlib modules, `first_line table_hex start,end,line ...` (its
    /// `co_lines()`; line -1 for none).
    const DUMP: &str = "
import types, json.decoder, re, threading
def walk(co):
    lines = ' '.join('%d,%d,%d' % (s, e, -1 if l is None else l) for s, e, l in co.co_lines())
    print(co.co_firstlineno, co.co_linetable.hex() or '-', lines)
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            walk(c)
for mod in (json.decoder, re, threading):
    walk(compile(open(mod.__file__).read(), mod.__file__, 'exec'))
";

    /// Check the decoder against each pyenv build's own `co_lines()` (3.11.7, 3.12.1, 3.13.0), on every code
    /// object of `json.decoder`, `re` and `threading`: every code unit gets CPython's line. Where a build is
    /// absent, says so.
    #[test]
    fn lines_match_each_versions_co_lines() {
        for v in ["3.11.7", "3.12.1", "3.13.0"] {
            let python = format!("/root/.pyenv/versions/{v}/bin/python3");
            let Ok(out) = std::process::Command::new(&python)
                .args(["-c", DUMP])
                .output()
            else {
                eprintln!("SKIP lines_match_each_versions_co_lines: {python} is not installed");
                continue;
            };
            assert!(
                out.status.success(),
                "{python}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let (mut codes, mut units) = (0, 0);
            for code in String::from_utf8_lossy(&out.stdout).lines() {
                let mut fields = code.split(' ');
                let first: i32 = fields.next().unwrap().parse().unwrap();
                let hex = fields.next().unwrap();
                let table: Vec<u8> = (0..hex.len() / 2 * 2)
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                    .collect();
                codes += 1;
                for range in fields.filter(|f| !f.is_empty()) {
                    let r: Vec<i64> = range.split(',').map(|x| x.parse().unwrap()).collect();
                    let want = (r[2] >= 0).then_some(r[2] as i32);
                    for unit in r[0] / 2..r[1] / 2 {
                        units += 1;
                        assert_eq!(line_of(&table, first, unit as u64), want, "{v}: {code}");
                    }
                }
            }
            assert!(
                codes > 100 && units > 10_000,
                "{v}: {codes} codes, {units} units"
            );
        }
    }
}
