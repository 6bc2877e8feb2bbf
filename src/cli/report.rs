//! `rprof report` arguments.
use clap::Args;

#[derive(Args, Debug)]
pub struct ReportArgs {}

pub fn run(_args: ReportArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
