//! `rprof record` arguments.
use clap::Args;

#[derive(Args, Debug)]
pub struct RecordArgs {}

pub fn run(_args: RecordArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
