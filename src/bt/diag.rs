//! Source spans and the errors of every pass, printed as bpftrace 0.17 prints them (its `log.cpp`):
//! `FILE:LINE:COL-COL: ERROR: message`, then the source line (tabs as four spaces), then `~` under the span.
//! A span over several lines prints `FILE:LINE-LINE: ERROR: message` alone. Columns count bytes from 1; the end
//! column is one past the last byte, as bison's locations are.
use std::fmt;

/// A position in the source: line and column, both from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    pub line: u32,
    pub col: u32,
}

/// A range of the source: `begin` is the first byte, `end` is one past the last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    pub begin: Pos,
    pub end: Pos,
}

impl Span {
    /// The span from the start of `self` to the end of `other` (bison's `@1 + @3`).
    pub fn to(self, other: Span) -> Span {
        Span {
            begin: self.begin,
            end: other.end,
        }
    }

    /// An empty span at the end of `self` (where bison places an empty rule).
    pub fn after(self) -> Span {
        Span {
            begin: self.end,
            end: self.end,
        }
    }
}

/// How bad a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

/// One message of a pass, about one span of the program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub span: Option<Span>,
    pub message: String,
}

impl Diagnostic {
    pub fn error(span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            span: Some(span),
            message: message.into(),
        }
    }

    pub fn warning(span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Warning,
            span: Some(span),
            message: message.into(),
        }
    }

    /// A message about the program as a whole (bpftrace prints these without a location).
    pub fn general(message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            span: None,
            message: message.into(),
        }
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// The text bpftrace prints for this diagnostic of program `source` read from `file` (`stdin` for `-e`).
    pub fn render(&self, file: &str, source: &str) -> String {
        Rendered {
            diag: self,
            file,
            source,
        }
        .to_string()
    }
}

/// All diagnostics in order, as bpftrace prints them one after another.
pub fn render_all(diags: &[Diagnostic], file: &str, source: &str) -> String {
    diags.iter().map(|d| d.render(file, source)).collect()
}

struct Rendered<'a> {
    diag: &'a Diagnostic,
    file: &'a str,
    source: &'a str,
}

impl fmt::Display for Rendered<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.diag.severity {
            Severity::Error => "ERROR",
            Severity::Warning => "WARNING",
        };
        let message = self.diag.message.trim_end_matches('\n');
        let Some(span) = self.diag.span else {
            return writeln!(f, "{kind}: {message}");
        };
        write!(f, "{}:", self.file)?;
        if span.begin.line < span.end.line {
            return writeln!(
                f,
                "{}-{}: {kind}: {message}",
                span.begin.line, span.end.line
            );
        }
        writeln!(
            f,
            "{}:{}-{}: {kind}: {message}",
            span.begin.line, span.begin.col, span.end.col
        )?;
        let line = source_line(self.source, span.begin.line);
        if line.is_empty() {
            return Ok(());
        }
        writeln!(f, "{}", line.replace('\t', "    "))?;
        let mut marker = String::new();
        for (x, b) in line
            .bytes()
            .enumerate()
            .take(span.end.col.saturating_sub(1) as usize)
        {
            let c = if x + 1 < span.begin.col as usize {
                ' '
            } else {
                '~'
            };
            let width = if b == b'\t' { 4 } else { 1 };
            marker.extend(std::iter::repeat_n(c, width));
        }
        writeln!(f, "{marker}")
    }
}

/// Line `n` (from 1) of `source`, without its newline; empty when there is none.
fn source_line(source: &str, n: u32) -> &str {
    source
        .split('\n')
        .nth(n.saturating_sub(1) as usize)
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(line: u32, b: u32, e: u32) -> Span {
        Span {
            begin: Pos { line, col: b },
            end: Pos { line, col: e },
        }
    }

    /// Check that a one-line span prints the location, the line and the marker as bpftrace does.
    #[test]
    fn one_line_span() {
        let src = "BEGIN { printf(\"%d\\n\", \"x\"); }";
        let d = Diagnostic::error(
            span(1, 9, 28),
            "printf: %d specifier expects a value of type integer (string supplied)",
        );
        assert_eq!(
            d.render("stdin", src),
            "stdin:1:9-28: ERROR: printf: %d specifier expects a value of type integer (string supplied)\n\
             BEGIN { printf(\"%d\\n\", \"x\"); }\n        ~~~~~~~~~~~~~~~~~~~\n"
        );
    }

    /// Check that tabs widen to four spaces in the line and the marker, and multi-line spans print lines only.
    #[test]
    fn tabs_and_multi_line() {
        let d = Diagnostic::error(span(2, 2, 4), "m");
        assert_eq!(
            d.render("f.bt", "x\n\t@a\n"),
            "f.bt:2:2-4: ERROR: m\n    @a\n    ~~\n"
        );
        let d = Diagnostic::error(
            Span {
                begin: Pos { line: 1, col: 1 },
                end: Pos { line: 3, col: 2 },
            },
            "m",
        );
        assert_eq!(d.render("f.bt", "a\nb\nc\n"), "f.bt:1-3: ERROR: m\n");
    }
}
