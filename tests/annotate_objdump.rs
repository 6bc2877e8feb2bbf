//! `rprof annotate --asm` prints instructions as `objdump -d` does (issue 26, row 4): operands, prefixes and
//! `<symbol+0xoffset>` labels, on whole functions and on every instruction of libc's and perl's code, and
//! through `rprof annotate` on a function of perl that a recording sampled.
mod common;
use common::*;
use object::{Object, ObjectSection, ObjectSymbol};
use rprof::annotate::disasm::disassemble;
use rprof::annotate::labels::Labels;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";
const PERL: &str = "/usr/bin/perl";

/// Text with runs of white space made one space.
fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `objdump -d --no-show-raw-insn` of `binary`'s .text (or of `start..stop` of it): address -> instruction.
fn objdump(binary: &str, range: Option<(u64, u64)>) -> BTreeMap<u64, String> {
    let mut cmd = Command::new("objdump");
    cmd.args(["-d", "--no-show-raw-insn", "-j", ".text", binary]);
    if let Some((start, stop)) = range {
        cmd.arg(format!("--start-address={start:#x}"));
        cmd.arg(format!("--stop-address={stop:#x}"));
    }
    let out = cmd.output().expect("run objdump");
    assert!(out.status.success(), "objdump failed on {binary}");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut insns = BTreeMap::new();
    for line in text.lines() {
        let Some((addr, insn)) = line.split_once(":\t") else {
            continue;
        };
        if let Ok(addr) = u64::from_str_radix(addr.trim(), 16) {
            insns.insert(addr, squeeze(insn));
        }
    }
    insns
}

/// Whether objdump and the binaries are here; skips (see [`skip`]) when not.
fn tools(test: &str) -> bool {
    let objdump = Command::new("objdump").arg("--version").output();
    if !objdump.is_ok_and(|o| o.status.success()) {
        skip(test, "objdump is not installed (apt-get install binutils)");
        return false;
    }
    if !Path::new(LIBC).is_file() || !Path::new(PERL).is_file() {
        skip(test, "needs Debian's libc.so.6 and /usr/bin/perl");
        return false;
    }
    true
}

/// Assert that rprof's disassembly `got` reads as objdump's `want` (at least `least` instructions), showing
/// the first 10 that differ.
fn assert_reads_as_objdump(
    want: &BTreeMap<u64, String>,
    got: &BTreeMap<u64, String>,
    what: &str,
    least: usize,
) {
    let mut diff = Vec::new();
    for (addr, text) in want {
        let mine = got
            .get(addr)
            .map_or("(nothing at this address)", String::as_str);
        if mine != text {
            diff.push(format!("{addr:x}: objdump `{text}`, rprof `{mine}`"));
        }
    }
    diff.extend(
        got.keys()
            .filter(|a| !want.contains_key(a))
            .map(|a| format!("{a:x}: only rprof")),
    );
    assert!(
        want.len() >= least,
        "{what}: objdump printed only {} instructions",
        want.len()
    );
    assert!(
        diff.is_empty(),
        "{what}: {} of {} instructions differ:\n{}",
        diff.len(),
        want.len(),
        diff[..diff.len().min(10)].join("\n")
    );
}

/// rprof's disassembly of `binary`'s .text in the blocks objdump decodes: from each symbol to the next.
fn rprof_text(binary: &str, range: Option<(u64, u64)>) -> BTreeMap<u64, String> {
    let data = std::fs::read(binary).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let text = file.section_by_name(".text").unwrap();
    let (start, end) = range.unwrap_or((text.address(), text.address() + text.size()));
    // objdump uses .symtab, or .dynsym when there is none.
    let symbols: Vec<u64> = match file.symbols().next() {
        Some(_) => file.symbols().map(|s| s.address()).collect(),
        None => file.dynamic_symbols().map(|s| s.address()).collect(),
    };
    let mut bounds: Vec<u64> = symbols
        .into_iter()
        .filter(|a| (start..end).contains(a))
        .collect();
    bounds.extend([start, end]);
    bounds.sort_unstable();
    bounds.dedup();
    let labels = Labels::of_elf(&data, start);
    let bytes = text.data().unwrap();
    let mut insns = BTreeMap::new();
    for block in bounds.windows(2) {
        let at = |a: u64| (a - text.address()) as usize;
        for insn in disassemble(&bytes[at(block[0])..at(block[1])], block[0], &labels) {
            insns.insert(insn.addr, squeeze(&insn.text));
        }
    }
    insns
}

/// A defined function of `binary`'s dynamic symbols: (start, end).
fn function(binary: &str, name: &str) -> (u64, u64) {
    let data = std::fs::read(binary).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let sym = file
        .dynamic_symbols()
        .find(|s| s.name() == Ok(name) && s.size() > 0)
        .unwrap_or_else(|| panic!("{binary} exports no {name}"));
    (sym.address(), sym.address() + sym.size())
}

/// Check the bar: every instruction of two whole functions of libc (`qsort_r`, `malloc`) and two of
/// perl (`Perl_sv_vcatpvfn_flags`, where the issue found 1,169 `(%rsp,)` operands, and `Perl_regexec_flags`)
/// reads as `objdump -d` prints it, white space aside: operands, prefixes and branch and rip-relative labels.
#[test]
fn whole_functions_of_libc_and_perl_read_as_objdump() {
    if !tools("whole_functions_of_libc_and_perl_read_as_objdump") {
        return;
    }
    let functions = [
        (LIBC, "qsort_r"),
        (LIBC, "malloc"),
        (PERL, "Perl_sv_vcatpvfn_flags"),
        (PERL, "Perl_regexec_flags"),
    ];
    for (binary, name) in functions {
        let range = function(binary, name);
        let got = rprof_text(binary, Some(range));
        assert_reads_as_objdump(&objdump(binary, Some(range)), &got, name, 150);
    }
}

/// Check that every instruction of libc's and perl's .text (libc's hand-written string functions included:
/// AVX-512 compares, `rep movsb`, `notrack jmp`, x87) reads as objdump prints it.
#[test]
fn all_of_libc_and_perl_reads_as_objdump() {
    if !tools("all_of_libc_and_perl_reads_as_objdump") {
        return;
    }
    for binary in [LIBC, PERL] {
        let got = rprof_text(binary, None);
        assert_reads_as_objdump(&objdump(binary, None), &got, binary, 100_000);
    }
}

/// Check the whole path on a recording: perl formatting numbers for 1 s of its CPU time, `rprof annotate
/// --asm Perl_sv_vcatpvfn_flags` lists every instruction of the function as objdump does, at objdump's
/// addresses.
#[test]
fn annotate_asm_of_a_sampled_perl_function_reads_as_objdump() {
    let test = "annotate_asm_of_a_sampled_perl_function_reads_as_objdump";
    if !privileged(test) || !tools(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = "my $s; while ((times)[0] < 1) { $s = sprintf('%d %s %.3f', $i++, 'abc', 3.25) }";
    let data = record_to(
        dir.path(),
        "perl.data",
        &["-F", "999", "--", PERL, "-e", script],
    );
    let name = "Perl_sv_vcatpvfn_flags";
    let text = rprof_ok(&["annotate", "-i", &data, "--asm", "--stdio", name]);
    let mut got = BTreeMap::new();
    for line in text.lines() {
        // ` 12.34 :   12a240:   push   %r15    <- 12a2f0`
        let Some((_, rest)) = line.split_once(" :   ") else {
            continue;
        };
        let Some((addr, insn)) = rest.split_once(":   ") else {
            continue;
        };
        if let Ok(addr) = u64::from_str_radix(addr.trim(), 16) {
            let insn = insn.split("    <- ").next().unwrap();
            got.insert(addr, squeeze(insn));
        }
    }
    let want = objdump(PERL, Some(function(PERL, name)));
    assert_reads_as_objdump(&want, &got, &format!("{name}, annotated:\n{text}"), 150);
}
