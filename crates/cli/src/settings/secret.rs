//! Settings that must never be printed: `Secret` (passwords, tokens) and `HeaderArg` (extra
//! request headers, masked), and the rule for a secret given directly or as a file.

use std::path::Path;

use anyhow::{Context, Result, bail};
use orderly_handlers::http::mask_header;
use serde::{Deserialize, Serialize};

/// A secret (a password): read from a flag, the environment, the file or a file of its own, never
/// printed, never in `Debug`.
#[derive(Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct Secret(pub(super) String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"********\"")
    }
}

impl Secret {
    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_owned()))
    }
}

/// One `--http-header 'Name: value'`: `Debug` (and `config check`) show the name and an
/// `env:VAR` or `@file` reference, never a literal value.
#[derive(Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct HeaderArg(pub(super) String);

impl std::fmt::Debug for HeaderArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", mask_header(&self.0))
    }
}

impl std::str::FromStr for HeaderArg {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(HeaderArg(s.to_owned()))
    }
}

/// A secret given directly (`direct_key`) or as a file holding it (`file_key`; a trailing newline
/// is ignored). Both at once is ambiguous and refused; which one wins across flags, variables and
/// the file is settled before (see [`ConsumeOpts::with_file`](super::ConsumeOpts::with_file), [`ConsumeOpts::prefer_flags`](super::ConsumeOpts::prefer_flags)).
pub(super) fn secret(
    direct_key: &str,
    direct: Option<&Secret>,
    file_key: &str,
    file: Option<&Path>,
) -> Result<Option<String>> {
    match (direct, file) {
        (Some(_), Some(_)) => bail!("pass only one of {direct_key} and {file_key}"),
        (Some(p), None) => Ok(Some(p.expose().to_owned())),
        (None, Some(f)) => Ok(Some(
            std::fs::read_to_string(f)
                .with_context(|| format!("cannot read {file_key} {}", f.display()))?
                .trim_end_matches(['\n', '\r'])
                .to_owned(),
        )),
        (None, None) => Ok(None),
    }
}
