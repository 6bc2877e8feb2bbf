//! `rprof bt`: bpftrace 0.17's language without BPF. The passes, one module each, as bpftrace's own:
//! parse ([`lexer`], [`parser`] into [`ast`]) → check ([`attach`]: attach points into typed probes; [`check`]:
//! builtins, functions, types, maps, and what this kernel cannot run, refused in bpftrace's error format) →
//! plan → run → print. The runtime's data and output are built ahead of plan and run: [`value`] (runtime
//! values), [`inet`] (`ntop()`), [`maps`] (maps in user space, bpftrace's aggregations and key limit),
//! [`print`] (bpftrace 0.17's text and `-f json` output), [`format`] (`printf`, `join`), [`strftime`]
//! (`time()`, `strftime()`). Every pass reports [`diag::Diagnostic`]s, printed as bpftrace prints its errors. This
//! module reaches neither `perf/` nor `tracefs/`: what the kernel offers comes in as [`check::Kernel`] and a
//! [`check::TracepointFields`] source.
pub mod ast;
pub mod attach;
pub mod check;
pub mod consts;
pub mod diag;
pub mod format;
pub mod inet;
pub mod lexer;
pub mod maps;
pub mod parser;
pub mod plan;
pub mod print;
pub mod run;
pub mod session;
pub mod strftime;
pub mod token;
pub mod types;
pub mod value;
pub mod values;

/// A program parsed and checked.
#[derive(Debug)]
pub struct Front {
    pub program: ast::Program,
    pub checked: check::Checked,
}

/// Parse and check the program `source` (read from `file`, `stdin` for `-e`): the tree and what the checker
/// found, or bpftrace's error text (every diagnostic, as bpftrace prints them) when anything failed.
pub fn front(source: &str, file: &str, env: &check::Env) -> Result<Front, String> {
    let parsed = parser::parse(source);
    let Some(program) = parsed.program else {
        return Err(diag::render_all(&parsed.errors, file, source));
    };
    let checked = check::check(&program, env);
    if checked.has_errors() {
        return Err(diag::render_all(&checked.diagnostics, file, source));
    }
    Ok(Front { program, checked })
}
