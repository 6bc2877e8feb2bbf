//! A unit's line table, read only when lines are asked for (`--lines`, annotate), and its file names.
use super::Reader;
use gimli::Reader as _;
use std::collections::HashMap;

/// One row: from `addr` on (to the next row), the code is of `line` in file `file` (an index in the line
/// program's file table).
struct Row {
    addr: u64,
    file: u64,
    line: u32,
}

/// A run of rows over contiguous code.
struct Sequence {
    start: u64,
    end: u64,
    rows: Vec<Row>,
}

/// The line table of one unit.
pub(super) struct Lines {
    /// Sorted by start.
    sequences: Vec<Sequence>,
}

impl Lines {
    /// Run the unit's line program; an empty table when it has none or it cannot be read.
    pub fn of(unit: gimli::UnitRef<'_, Reader>) -> Lines {
        let mut sequences = Vec::new();
        if let Some(program) = unit.line_program.clone() {
            let mut rows = program.rows();
            let mut current: Vec<Row> = Vec::new();
            while let Ok(Some((_, row))) = rows.next_row() {
                if row.end_sequence() {
                    if let Some(first) = current.first() {
                        sequences.push(Sequence {
                            start: first.addr,
                            end: row.address(),
                            rows: std::mem::take(&mut current),
                        });
                    }
                    continue;
                }
                let line = row
                    .line()
                    .map_or(0, |l| u32::try_from(l.get()).unwrap_or(0));
                current.push(Row {
                    addr: row.address(),
                    file: row.file_index(),
                    line,
                });
            }
        }
        sequences.sort_by_key(|s| s.start);
        Lines { sequences }
    }

    /// The bytes the table holds (what the unit cache counts against its budget).
    pub fn bytes(&self) -> usize {
        let rows: usize = self.sequences.iter().map(|s| s.rows.len()).sum();
        rows * std::mem::size_of::<Row>() + self.sequences.len() * std::mem::size_of::<Sequence>()
    }

    /// The file index and line of the code at `addr`.
    pub fn at(&self, addr: u64) -> Option<(u64, u32)> {
        let i = self.sequences.partition_point(|s| s.start <= addr);
        // Sequences of code the linker dropped may overlap low addresses: look back a little.
        let sequence = self.sequences[..i]
            .iter()
            .rev()
            .take(8)
            .find(|s| addr < s.end)?;
        let row = sequence
            .rows
            .partition_point(|r| r.addr <= addr)
            .checked_sub(1)?;
        let row = &sequence.rows[row];
        Some((row.file, row.line))
    }
}

/// File names of a unit's line program, rendered once each.
#[derive(Default)]
pub(super) struct FileNames {
    names: HashMap<u64, Option<String>>,
}

impl FileNames {
    /// The path of file `index` of the unit's line program: joined with its directory and the compilation
    /// directory, as addr2line renders it.
    pub fn get(&mut self, unit: gimli::UnitRef<'_, Reader>, index: u64) -> Option<String> {
        self.names
            .entry(index)
            .or_insert_with(|| render(unit, index))
            .clone()
    }
}

fn render(unit: gimli::UnitRef<'_, Reader>, index: u64) -> Option<String> {
    let header = unit.line_program.as_ref()?.header();
    // Before DWARF 5, file 0 means no file.
    if index == 0 && header.version() < 5 {
        return None;
    }
    let file = header.file(index)?;
    let text = |value| -> Option<String> {
        let s = unit.attr_string(value).ok()?;
        Some(s.to_string_lossy().ok()?.into_owned())
    };
    let mut path = match &unit.comp_dir {
        Some(dir) => dir.to_string_lossy().ok()?.into_owned(),
        None => String::new(),
    };
    // Directory 0 is the compilation directory.
    if file.directory_index() != 0 {
        if let Some(dir) = file.directory(header).and_then(text) {
            push(&mut path, &dir);
        }
    }
    push(&mut path, &text(file.path_name())?);
    Some(path)
}

/// Append a path component; an absolute one replaces the path.
fn push(path: &mut String, part: &str) {
    if part.starts_with('/') {
        *path = part.to_string();
        return;
    }
    if !path.is_empty() && !path.ends_with('/') {
        path.push('/');
    }
    path.push_str(part);
}

#[cfg(test)]
mod tests {
    use super::push;

    /// Check that relative parts join with one slash and absolute ones start over.
    #[test]
    fn paths_join() {
        let mut path = "/build".to_string();
        push(&mut path, "src");
        push(&mut path, "a.c");
        assert_eq!(path, "/build/src/a.c");
        push(&mut path, "/usr/include/stdio.h");
        assert_eq!(path, "/usr/include/stdio.h");
        let mut empty = String::new();
        push(&mut empty, "a.c");
        assert_eq!(empty, "a.c");
    }
}
