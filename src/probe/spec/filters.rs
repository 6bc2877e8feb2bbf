//! Where each part of a target's filter runs: the conjuncts whose every name the kernel knows on the target's
//! event (its fields, rprof's fetch arguments, `common_pid`, `comm`, `cpu`) go into the event's filter; the
//! rest (the process id, values read elsewhere or at the return, names of values) rprof evaluates on each
//! event that reaches it.
//!
//! A string compared with a `char *` field is compared by the kernel with the text it points to: a syscall's
//! pointer into the process as `NAME.ustring` (Documentation/trace/events.rst), a kernel pointer as `NAME`.
//! So is a user string rprof fetches (`syscall:openat(filename:str)`): on the syscall's tracepoint as
//! `filename.ustring`, on an event probe that read it as its own string field. rprof has the pointer only:
//! a comparison of a pointer (or any number) with a string that is left to rprof is refused.
use super::fetch::{Fetch, FetchSource};
use super::filter::{Expr, KernelField};
use crate::probe::value::ValueKind;
use crate::tracefs::FormatField;

/// The names of the process context: values of every event, like fetched ones.
pub const CONTEXT: [&str; 5] = ["comm", "pid", "tid", "cpu", "ppid"];

/// Whether `name` is one of the process context's (see [`CONTEXT`]).
pub fn is_context(name: &str) -> bool {
    CONTEXT.contains(&name)
}

/// A target's filter, divided by where each part runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetFilter {
    /// The whole filter, as written.
    pub expr: Expr,
    /// The kernel's part on the entry (or hit) event, as ftrace filter text.
    pub kernel: Option<String>,
    /// The kernel's part on an event probe that reads the target's user strings (its own string fields
    /// there, not `.ustring`); None where the target has none.
    pub kernel_probe: Option<String>,
    /// The kernel's part on the uprobes that read a syscall's user strings at its `syscall` instructions:
    /// the conjuncts on those strings and the task only, so that rprof keeps no string of a rejected call
    /// for the entry that follows.
    pub kernel_sites: Option<String>,
    /// The kernel's part on the return event: the conjuncts on the task only (`tid`, `comm`), so that the
    /// returns of rejected calls are rejected too.
    pub kernel_return: Option<String>,
    /// What rprof evaluates on each entry (or hit) that the kernel let through.
    pub user: Option<Expr>,
    /// What rprof evaluates when the call returns: the conjuncts that name a value read at the return (`ret`).
    /// A call it rejects is not counted, traced or timed.
    pub at_return: Option<Expr>,
}

impl TargetFilter {
    /// Divide `expr` for a target with these fetches; `format` gives the signedness of an event's own fields.
    pub fn place(expr: Expr, fetches: &[Fetch], format: &[FormatField]) -> TargetFilter {
        let field = |name: &str| kernel_field(name, fetches, format, false);
        let probe_field = |name: &str| kernel_field(name, fetches, format, true);
        let task_only = |name: &str| match name {
            "tid" | "comm" => field(name),
            _ => None,
        };
        let string = |name: &str| {
            fetches
                .iter()
                .any(|f| f.label == name && matches!(f.source, FetchSource::UserString { .. }))
        };
        let sites_field = |name: &str| match name {
            "tid" | "comm" => field(name),
            _ if string(name) => probe_field(name),
            _ => None,
        };
        let (mut kernel, mut kernel_probe, mut kernel_return) =
            (Vec::new(), Vec::new(), Vec::new());
        let mut kernel_sites = Vec::new();
        let mut user = Vec::new();
        let mut at_return = Vec::new();
        let returned = |c: &Expr| {
            c.names()
                .iter()
                .any(|n| fetches.iter().any(|f| f.on_return && f.label == *n))
        };
        for c in expr.conjuncts() {
            if returned(c) {
                at_return.push(c.clone());
                continue;
            }
            // `a && (b || c)`: an `||` term keeps its parentheses among the `&&` terms.
            let term = |field: &dyn Fn(&str) -> Option<KernelField>| {
                c.ftrace(field).map(|text| match c {
                    Expr::Or(..) => format!("({text})"),
                    _ => text,
                })
            };
            match term(&field) {
                Some(text) => {
                    kernel.push(text);
                    kernel_probe.extend(term(&probe_field));
                    kernel_sites.extend(term(&sites_field));
                    kernel_return.extend(term(&task_only));
                }
                None => user.push(c.clone()),
            }
        }
        let join = |v: Vec<String>| (!v.is_empty()).then(|| v.join(" && "));
        let strings = fetches
            .iter()
            .any(|f| matches!(f.source, FetchSource::UserString { .. }));
        TargetFilter {
            expr,
            kernel: join(kernel),
            kernel_probe: join(kernel_probe).filter(|_| strings),
            kernel_sites: join(kernel_sites).filter(|_| strings),
            kernel_return: join(kernel_return),
            user: Expr::all(user),
            at_return: Expr::all(at_return),
        }
    }

    /// `expr` tested by rprof alone, on each hit (events that take no kernel filter: software events).
    pub fn in_rprof(expr: Expr) -> TargetFilter {
        TargetFilter {
            user: Some(expr.clone()),
            expr,
            kernel: None,
            kernel_probe: None,
            kernel_sites: None,
            kernel_return: None,
            at_return: None,
        }
    }

    /// `-l`'s words: which part runs where.
    pub fn describe(&self) -> String {
        let mut text = match (&self.kernel, &self.user) {
            (Some(k), None) => format!("filter in the kernel: {k}"),
            (None, Some(u)) => format!("filter in rprof: {}", u.text()),
            (Some(k), Some(u)) => format!("filter in the kernel: {k}; in rprof: {}", u.text()),
            (None, None) => String::new(),
        };
        if let Some(r) = &self.at_return {
            let sep = if text.is_empty() { "filter" } else { ";" };
            text.push_str(&format!("{sep} at the return, in rprof: {}", r.text()));
        }
        text
    }
}

/// How the kernel knows `name` on the target's event, if it does; `probe`: on the event probe that reads the
/// target's user strings.
fn kernel_field(
    name: &str,
    fetches: &[Fetch],
    format: &[FormatField],
    probe: bool,
) -> Option<KernelField> {
    let field = |name: &str, text, signed| {
        Some(KernelField {
            name: name.to_string(),
            text,
            signed,
            pointee: None,
        })
    };
    if let Some(f) = fetches.iter().find(|f| f.label == name) {
        if f.on_return {
            return None;
        }
        let own = format.iter().find(|x| x.name == f.field);
        let signed = match (&f.source, f.kind) {
            (FetchSource::Field, _) => own?.signed,
            (FetchSource::Probe, ValueKind::Int { signed, .. }) => signed,
            _ => false,
        };
        return match (&f.source, f.kind) {
            (FetchSource::UserString { .. }, _) if probe => field(&f.field, true, false),
            (FetchSource::UserString { .. }, _) => {
                let pointee = pointee_name(own?, format)?;
                field(&pointee, true, false)
            }
            (_, ValueKind::Caller) => None,
            // A C++ string with its length: the kernel's copy runs past the length.
            (_, ValueKind::Str) if f.len.is_some() => None,
            (_, ValueKind::Str | ValueKind::Chars { .. }) => field(&f.field, true, false),
            (FetchSource::Field, _) => Some(KernelField {
                pointee: own.and_then(|o| pointee_name(o, format)),
                ..field(&f.field, false, signed)?
            }),
            _ => field(&f.field, false, signed),
        };
    }
    match name {
        "tid" => field("common_pid", false, true),
        "comm" => field("comm", true, false),
        "cpu" => field("cpu", false, false),
        _ => None,
    }
}

/// The name under which the kernel compares the text a `char *` field points to: `NAME.ustring` on a
/// syscall's event (whose pointers point into the process; its format has `__syscall_nr`), `NAME` on others
/// (kernel pointers). None for other fields.
fn pointee_name(f: &FormatField, format: &[FormatField]) -> Option<String> {
    let base = f.ty.strip_suffix('*')?.trim();
    if base.trim_start_matches("const ").trim() != "char" {
        return None;
    }
    Some(match format.iter().any(|x| x.name == "__syscall_nr") {
        true => format!("{}.ustring", f.name),
        false => f.name.clone(),
    })
}

/// Why rprof cannot evaluate `parts` (its parts of a filter) on a target with these fetches, if it cannot: a
/// comparison of a string with a value rprof holds as no text (a pointer whose text only the kernel reads, a
/// number), which would match nothing.
pub fn check_strings<'a>(
    parts: impl IntoIterator<Item = &'a Expr>,
    fetches: &[Fetch],
) -> Result<(), String> {
    let not_text = |name: &str| match fetches.iter().find(|f| f.label == name) {
        Some(f) => !matches!(f.kind, ValueKind::Str | ValueKind::Chars { .. }),
        None => name != "comm",
    };
    for part in parts {
        if let Some(name) = part.string_compared(&not_text) {
            return Err(format!(
                "`{}`: rprof holds `{name}` as a number or an address, not text, so this would match nothing \
                 (the kernel tests the text of a `char *` field with ==, != or ~ in an `&&` term of its own; \
                 `{name}:str` reads a syscall's string for rprof)",
                part.text()
            ));
        }
    }
    Ok(())
}

/// Why `expr` cannot run, if it cannot: a value that is text (`comm`, a fetched string) compared with a
/// number, which would match nothing (the kernel compares `comm == 5` with the text "5"; rprof never equals
/// text and a number). The mirror of [`check_strings`].
pub fn check_numbers(expr: &Expr, fetches: &[Fetch]) -> Result<(), String> {
    let is_text = |name: &str| match fetches.iter().find(|f| f.label == name) {
        Some(f) => matches!(f.kind, ValueKind::Str | ValueKind::Chars { .. }),
        None => name == "comm",
    };
    let Some(name) = expr.number_compared(&is_text) else {
        return Ok(());
    };
    let part = expr
        .conjuncts()
        .into_iter()
        .find(|c| c.number_compared(&is_text).is_some())
        .map_or_else(|| expr.text(), |c| c.text());
    Err(format!(
        "`{part}`: `{name}` is text, compared with a number, so this would match nothing (quote the value: \
         `{name} == \"5\"`; `~` takes a glob)"
    ))
}

/// perf's `--filter` on a tracepoint or probe event of `rprof record`: probe's filter language over the
/// event's own fields (`format`), every part of it run by the kernel (a recording keeps what the kernel lets
/// through). The kernel's filter text, or why the expression cannot be that.
pub fn kernel_filter(text: &str, format: &str) -> Result<String, String> {
    let expr = super::filter::parse(text)?;
    let fields = crate::tracefs::parse_format(format);
    let fetches: Vec<Fetch> = fields
        .iter()
        .map(|f| Fetch::field(&f.name, &f.name, super::fields::natural_kind(f), false))
        .collect();
    let placed = TargetFilter::place(expr, &fetches, &fields);
    match (placed.kernel, placed.user) {
        (Some(kernel), None) => Ok(kernel),
        (_, Some(user)) => Err(format!(
            "`{}` is not a test the kernel can run on this event's fields ({})",
            user.text(),
            fields
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        (None, None) => Err("the filter is empty".to_string()),
    }
}

/// The trace flags of an event that ran in interrupt context (`common_flags`: hard irq 0x08, softirq 0x10,
/// NMI 0x40; include/linux/trace_events.h).
const IN_INTERRUPT: u32 = 0x08 | 0x10 | 0x40;

/// The ftrace filter that keeps rprof's own threads (`tids`) out of an event that watches every task: the
/// event is dropped when rprof's thread made it (`common_pid`) in task context and every field of it that
/// names a task (`task_fields`: `pid`, `next_pid`...) names one of rprof's threads too:
/// `(common_pid != T && ...) || common_flags & 0x58 || (next_pid != T && ...) || ...`.
///
/// A timer's wakeup of another task, or a packet's state change in softirq, is charged to rprof's thread when
/// rprof happened to be on the CPU; the switch from rprof's thread to another task is that task's switch-in.
/// Both are about other tasks (runqlat lost 1-7 of 400 wakeups and 1-4 switch-ins that way under load).
/// A user probe (`user`) runs in the task it probes, from the int3 trap, whose events the kernel flags as
/// NMI: it has no interrupt part.
pub fn exclude_tasks(tids: &[u32], task_fields: &[String], user: bool) -> Option<String> {
    if tids.is_empty() {
        return None;
    }
    let not_ours = |field: &str| {
        let terms: Vec<String> = tids.iter().map(|t| format!("{field} != {t}")).collect();
        format!("({})", terms.join(" && "))
    };
    let mut keep = vec![not_ours("common_pid")];
    if !user {
        keep.push(format!("common_flags & {IN_INTERRUPT:#x}"));
    }
    keep.extend(task_fields.iter().map(|f| not_ours(f)));
    Some(keep.join(" || "))
}

/// The fields of an event's format that name a task (`pid`, `next_pid`, `child_pid`...: integers named `pid`
/// or ending in `_pid`, the common fields left out).
pub fn task_fields(format: &[crate::tracefs::FormatField]) -> Vec<String> {
    format
        .iter()
        .filter(|f| !f.name.starts_with("common_") && (f.name == "pid" || f.name.ends_with("_pid")))
        .filter(|f| !f.ty.contains('[') && !f.ty.contains('*') && matches!(f.size, 4 | 8))
        .map(|f| f.name.clone())
        .collect()
}

/// `a && b` of two optional filter texts.
pub fn and_text(a: Option<&str>, b: Option<&str>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(format!("({a}) && ({b})")),
        (a, b) => a.or(b).map(str::to_string),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fetch::FetchType;
    use super::super::filter::parse;
    use super::*;

    /// Check that a uprobe's argument and the task go to the kernel and the process id stays in rprof.
    #[test]
    fn divides_by_what_the_kernel_knows() {
        let fetches = vec![Fetch::new(
            "arg0",
            "v0".into(),
            "%di",
            FetchType::Int {
                size: 8,
                signed: true,
            },
            false,
        )];
        let f = TargetFilter::place(
            parse("arg0 < 100 && comm == \"x\" && pid == 3").unwrap(),
            &fetches,
            &[],
        );
        assert_eq!(f.kernel.as_deref(), Some("v0 < 100 && comm == \"x\""));
        assert_eq!(f.kernel_return.as_deref(), Some("comm == \"x\""));
        assert_eq!(f.user, Some(parse("pid == 3").unwrap()));
        let f = TargetFilter::place(
            parse("comm == \"x\" && (arg0 < 1 || arg0 > 9)").unwrap(),
            &fetches,
            &[],
        );
        assert_eq!(
            f.kernel.as_deref(),
            Some("comm == \"x\" && ((v0 < 1) || (v0 > 9))")
        );
        let f = TargetFilter::place(parse("arg0 < 1 || pid == 3").unwrap(), &fetches, &[]);
        assert_eq!((f.kernel, f.user.is_some()), (None, true));
        assert_eq!(
            exclude_tasks(&[5, 6], &[], false).as_deref(),
            Some("(common_pid != 5 && common_pid != 6) || common_flags & 0x58")
        );
        assert_eq!(
            exclude_tasks(&[5], &["prev_pid".into(), "next_pid".into()], false).as_deref(),
            Some("(common_pid != 5) || common_flags & 0x58 || (prev_pid != 5) || (next_pid != 5)")
        );
        assert_eq!(exclude_tasks(&[], &["pid".into()], false), None);
        let switch = crate::tracefs::parse_format(
            "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
             \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
             \tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
             \tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
             \tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\
             \tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n",
        );
        assert_eq!(task_fields(&switch), ["prev_pid", "next_pid"]);
        assert_eq!(
            exclude_tasks(&[5], &[], true).as_deref(),
            Some("(common_pid != 5)")
        );
    }

    /// Check that a string compared with a `char *` field runs in the kernel on the text it points to (a
    /// syscall's as `.ustring`, a kernel one's by its name), as does one with a user string rprof fetches, and
    /// that comparisons left to rprof on a pointer are refused while those on a fetched string are not.
    #[test]
    fn strings_of_pointers() {
        let openat = crate::tracefs::parse_format(
            "\tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n\
             \tfield:const char * filename;\toffset:24;\tsize:8;\tsigned:0;\n",
        );
        let rcu = crate::tracefs::parse_format(
            "\tfield:const char * s;\toffset:8;\tsize:8;\tsigned:0;\n",
        );
        let pointer =
            |name: &str| vec![Fetch::field(name, name, ValueKind::Hex { size: 8 }, false)];
        let place = |text: &str, fetches: &[Fetch], format: &[FormatField]| {
            TargetFilter::place(parse(text).unwrap(), fetches, format)
        };
        let f = place(
            "filename ~ \"/etc*\" && filename != 0",
            &pointer("filename"),
            &openat,
        );
        assert_eq!(
            (f.kernel.as_deref(), &f.user),
            (Some("filename.ustring ~ \"/etc*\" && filename != 0"), &None)
        );
        let f = place("s == \"Start context switch\"", &pointer("s"), &rcu);
        assert_eq!(f.kernel.as_deref(), Some("s == \"Start context switch\""));
        for rprof in ["filename < \"/f\"", "filename ~ \"/etc*\" || pid == 1"] {
            let f = place(rprof, &pointer("filename"), &openat);
            assert!(f.kernel.is_none(), "{rprof}");
            let e = check_strings(f.user.iter(), &pointer("filename")).unwrap_err();
            assert!(
                e.contains("match nothing") && e.contains("filename:str"),
                "{e}"
            );
        }
        let fetched = vec![Fetch::user_string("filename", "filename", Some(1))];
        let f = place(
            "filename == \"/etc/hostname\" && filename < \"/f\"",
            &fetched,
            &openat,
        );
        assert_eq!(
            f.kernel.as_deref(),
            Some("filename.ustring == \"/etc/hostname\"")
        );
        assert_eq!(
            f.kernel_probe.as_deref(),
            Some("filename == \"/etc/hostname\"")
        );
        assert_eq!(f.kernel_sites, f.kernel_probe);
        assert_eq!(f.user, Some(parse("filename < \"/f\"").unwrap()));
        assert!(check_strings(f.user.iter(), &fetched).is_ok());
        assert!(check_strings([&parse("pid == \"x\"").unwrap()], &[]).is_err());
        assert!(check_strings([&parse("comm ~ \"x*\"").unwrap()], &[]).is_ok());
    }

    /// Check that text (`comm`, a fetched string) compared with a number is refused in one line that names
    /// the part and the fix, in any position of the expression, while text with text and numbers with numbers
    /// pass.
    #[test]
    fn text_compared_with_a_number_is_refused() {
        let fetched = vec![Fetch::user_string("filename", "filename", Some(1))];
        for bad in [
            "comm == 5",
            "pid == 1 && comm != 5",
            "!(comm < 3) || pid == 2",
            "comm & 4",
            "filename == 0",
        ] {
            let e = check_numbers(&parse(bad).unwrap(), &fetched).unwrap_err();
            assert!(
                e.contains("is text, compared with a number") && e.contains("quote the value"),
                "{bad}: {e}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
        let e = check_numbers(&parse("pid == 1 && comm == 5").unwrap(), &[]).unwrap_err();
        assert!(e.starts_with("`comm == 5`: `comm` is text"), "{e}");
        for good in [
            "comm == \"5\"",
            "comm ~ \"py*\" && pid == 5",
            "filename != \"/x\"",
        ] {
            assert!(
                check_numbers(&parse(good).unwrap(), &fetched).is_ok(),
                "{good}"
            );
        }
        // A pointer held as a number is compared with numbers.
        let pointer = vec![Fetch::field(
            "filename",
            "filename",
            ValueKind::Hex { size: 8 },
            false,
        )];
        assert!(check_numbers(&parse("filename != 0").unwrap(), &pointer).is_ok());
    }
}
