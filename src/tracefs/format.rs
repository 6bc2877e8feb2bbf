//! Event formats: the fields of a tracepoint's or probe's raw data (`events/GROUP/EVENT/format`), and ids.
use super::{Tracefs, TracefsError};
use std::path::Path;

/// The offset of `field` in an event's `format` text (`field:unsigned long __probe_ip;\toffset:8;...`).
pub fn parse_field_offset(format: &str, field: &str) -> Option<usize> {
    format.lines().find_map(|line| {
        let decl = line.trim().strip_prefix("field:")?;
        let (decl, rest) = decl.split_once(';')?;
        let name = decl.split_whitespace().last()?.trim_start_matches('*');
        if name != field {
            return None;
        }
        rest.split(';')
            .find_map(|kv| kv.trim().strip_prefix("offset:")?.parse().ok())
    })
}

/// One field of an event's raw data, as its `format` file declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatField {
    pub name: String,
    /// The C type, with the array size after it: `const char *`, `char[16]`, `__data_loc char[]`, `dev_t`.
    pub ty: String,
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
}

impl FormatField {
    /// A fixed array of chars (`char comm[16]`): a string of at most that many bytes.
    pub fn is_char_array(&self) -> bool {
        self.ty.starts_with("char[") && self.ty.ends_with(']')
    }

    /// A `__data_loc` string (length and offset of bytes after the fixed fields).
    pub fn is_data_loc(&self) -> bool {
        self.ty.starts_with("__data_loc")
    }

    /// A pointer (`const char *`): an address, in the kernel or in the process.
    pub fn is_pointer(&self) -> bool {
        self.ty.ends_with('*')
    }

    /// One of the fields every event has (`common_type`, `common_pid`...).
    pub fn is_common(&self) -> bool {
        self.name.starts_with("common_")
    }
}

/// Every field of an event's `format` text, in order.
pub fn parse_format(format: &str) -> Vec<FormatField> {
    format
        .lines()
        .filter_map(|line| {
            let decl = line.trim().strip_prefix("field:")?;
            let (decl, rest) = decl.split_once(';')?;
            let (ty, last) = decl.trim().rsplit_once(' ')?;
            let mut ty = ty.trim().to_string();
            let mut name = last.to_string();
            while let Some(n) = name.strip_prefix('*') {
                ty.push_str(" *");
                name = n.to_string();
            }
            if let Some(at) = name.find('[') {
                ty.push_str(&name[at..]);
                name.truncate(at);
            }
            let value = |key: &str| {
                rest.split(';')
                    .find_map(|kv| kv.trim().strip_prefix(key)?.parse::<usize>().ok())
            };
            Some(FormatField {
                name,
                ty,
                offset: value("offset:")?,
                size: value("size:")?,
                signed: value("signed:").unwrap_or(0) == 1,
            })
        })
        .collect()
}

impl Tracefs {
    /// The perf event id of `events/GROUP/EVENT/id` (PERF_TYPE_TRACEPOINT config).
    pub fn event_id(&self, group: &str, event: &str) -> Result<u64, TracefsError> {
        let rel = Path::new("events").join(group).join(event).join("id");
        let text = self.read(&rel)?;
        text.trim().parse().map_err(|_| TracefsError::BadId {
            path: self.root.join(rel),
            text,
        })
    }

    /// The `format` file of `events/GROUP/EVENT`: its fields, for [`parse_field_offset`].
    pub fn event_format(&self, group: &str, event: &str) -> Result<String, TracefsError> {
        self.read(Path::new("events").join(group).join(event).join("format"))
    }

    /// The byte offset of `field` in the raw data of `events/GROUP/EVENT` (from its `format` file).
    pub fn field_offset(
        &self,
        group: &str,
        event: &str,
        field: &str,
    ) -> Result<Option<usize>, TracefsError> {
        Ok(parse_field_offset(&self.event_format(group, event)?, field))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that fields parse with their C type, arrays and pointers included.
    #[test]
    fn parses_fields() {
        let text = "name: block_rq_issue\nID: 1234\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
            \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
            \tfield:dev_t dev;\toffset:8;\tsize:4;\tsigned:0;\n\
            \tfield:char rwbs[10];\toffset:34;\tsize:10;\tsigned:1;\n\
            \tfield:__data_loc char[] cmd;\toffset:60;\tsize:4;\tsigned:1;\n\
            \tfield:const char * filename;\toffset:24;\tsize:8;\tsigned:0;\n\
            \tfield:const char *name2;\toffset:32;\tsize:8;\tsigned:0;\n";
        let f = parse_format(text);
        let view: Vec<(&str, &str, usize, usize)> = f
            .iter()
            .map(|f| (f.name.as_str(), f.ty.as_str(), f.offset, f.size))
            .collect();
        assert_eq!(
            view,
            vec![
                ("common_type", "unsigned short", 0, 2),
                ("common_pid", "int", 4, 4),
                ("dev", "dev_t", 8, 4),
                ("rwbs", "char[10]", 34, 10),
                ("cmd", "__data_loc char[]", 60, 4),
                ("filename", "const char *", 24, 8),
                ("name2", "const char *", 32, 8),
            ]
        );
        assert!(
            f[3].is_char_array() && f[4].is_data_loc() && f[5].is_pointer() && f[0].is_common()
        );
    }
}
