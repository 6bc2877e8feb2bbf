//! `rprof generate-man DIR` (hidden): the man pages, generated from the clap definitions with clap_mangen, one
//! per command: `rprof.1`, `rprof-record.1`, `rprof-report.1`, ... The repository keeps them under `docs/man/`
//! (regenerate with `cargo run -- generate-man docs/man`); `tests/man_pages.rs` fails when they differ from
//! what the definitions generate.
use clap::CommandFactory;
use std::path::Path;

/// Write every man page into `dir` (created if missing).
pub fn run(dir: &Path) -> anyhow::Result<u8> {
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    clap_mangen::generate_to(super::Cli::command(), dir)
        .map_err(|e| anyhow::anyhow!("cannot write the man pages into {}: {e}", dir.display()))?;
    Ok(0)
}
