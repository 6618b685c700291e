//! `orderly config check`: prints the effective `orderly consume` configuration (secrets masked) or the first thing wrong with it.

use std::process::ExitCode;

use anyhow::Result;

use crate::settings::ConsumeOpts;

/// Resolves the options exactly as `orderly consume` would and prints them as TOML.
pub fn check(opts: ConsumeOpts) -> Result<ExitCode> {
    let r = opts.resolve()?;
    print!("{}", r.effective.to_masked_toml()?);
    Ok(ExitCode::SUCCESS)
}
