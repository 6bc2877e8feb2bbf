//! Which tasks the probes watch. A tracepoint's event holds the thread (`common_pid`), not the process, so the
//! kernel's event filter cannot take `pid == N`. Where every probe's predicate has `pid == N` (or `pid ==
//! cpid`) as a top-level conjunct, the probes are opened for that process only instead (per thread, inherited
//! by the threads it creates), so that other processes' events never reach rprof. `inherit` follows the
//! process's forked children too (other pids): the runtime tests `pid` again on every event, so the kernel part
//! only narrows.
use super::PlannedProbe;
use crate::bt::ast::{BinOp, Expr, ExprKind, Param, Program};

/// The process a program's predicates name on every probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnlyProcess {
    /// `pid == N` (N a literal or a positional parameter).
    Pid(i32),
    /// `pid == cpid`: `-c`'s command.
    Cpid,
}

impl OnlyProcess {
    /// The conjunct as written (`pid == 42`, `pid == cpid`).
    pub fn text(self) -> String {
        match self {
            OnlyProcess::Pid(n) => format!("pid == {n}"),
            OnlyProcess::Cpid => "pid == cpid".into(),
        }
    }
}

/// The process every planned probe's blocks (entry and return) test with a top-level `pid == ...`, the same in
/// all; None when one probe runs a block without it (that probe must see every process).
pub fn only_process(
    probes: &[PlannedProbe],
    program: &Program,
    params: &[String],
) -> Option<OnlyProcess> {
    let mut found = None;
    // The argv probe (no blocks) serves the blocks at `sys_enter_execve`: it follows their tasks.
    let blocks = probes
        .iter()
        .flat_map(|p| p.blocks.iter().chain(&p.return_blocks));
    for &b in blocks {
        let pred = program.probes[b].pred.as_ref()?;
        let this = pid_conjunct(pred, params)?;
        if found.is_some_and(|f| f != this) {
            return None;
        }
        found = Some(this);
    }
    found
}

/// The process a top-level conjunct `pid == X` (or `X == pid`) of `e` names.
fn pid_conjunct(e: &Expr, params: &[String]) -> Option<OnlyProcess> {
    let ExprKind::Binop { op, left, right } = &e.kind else {
        return None;
    };
    match op {
        BinOp::LAnd => pid_conjunct(left, params).or_else(|| pid_conjunct(right, params)),
        BinOp::Eq => match (is_pid(left), is_pid(right)) {
            (true, _) => process(right, params),
            (_, true) => process(left, params),
            _ => None,
        },
        _ => None,
    }
}

fn is_pid(e: &Expr) -> bool {
    matches!(&e.kind, ExprKind::Builtin(b) if b == "pid")
}

/// A process id: a literal, `$N` holding a number, or `cpid`.
fn process(e: &Expr, params: &[String]) -> Option<OnlyProcess> {
    let n = match &e.kind {
        ExprKind::Builtin(b) if b == "cpid" => return Some(OnlyProcess::Cpid),
        ExprKind::Int(n) => *n,
        ExprKind::Param(Param::Positional(k)) => params
            .get((*k as usize).checked_sub(1)?)?
            .trim()
            .parse()
            .ok()?,
        _ => return None,
    };
    // Process ids are positive i32s; another value matches no process, and the runtime's test says so.
    i32::try_from(n)
        .ok()
        .filter(|&n| n > 0)
        .map(OnlyProcess::Pid)
}
