//! The `--config` TOML file: read, the flags and variables laid over it, and printed back.

use std::path::Path;

use anyhow::{Context, Result};
use orderly_handlers::http::mask_header;

use super::alternatives::ALTERNATIVES;
use super::connection::ConnectionFlags;
use super::flags::ConsumeOpts;

impl ConsumeOpts {
    /// Reads the TOML file (if any) and lays these options (flags and environment) over it.
    pub fn with_file(self) -> Result<Self> {
        let Some(path) = self.config.clone() else {
            return Ok(self);
        };
        let file = Self::read_file(&path)?;
        let mut merged = toml::Table::try_from(&file).context("re-reading the configuration")?;
        let over = toml::Table::try_from(&self).context("re-reading the flags")?;
        for group in ALTERNATIVES {
            if group.iter().any(|k| over.contains_key(*k)) {
                for k in group {
                    merged.remove(*k);
                }
            }
        }
        merged.extend(over);
        let mut out: Self = merged.try_into().context("merging flags over the file")?;
        out.config = Some(path);
        Ok(out)
    }

    fn read_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
        // toml's message spans several lines with a caret; one line names key and place.
        let one_line = |e: toml::de::Error| {
            let msg = e.message().trim().to_owned();
            let at = e.span().map(|s| place(&text, s.start)).unwrap_or_default();
            anyhow::anyhow!("{}{at}: {msg}", path.display())
        };
        let doc = toml::de::DeTable::parse(&text).map_err(one_line)?;
        let known = Self::file_keys();
        if let Some(key) = doc
            .get_ref()
            .keys()
            .find(|k| !known.iter().any(|n| n == k.get_ref().as_ref()))
        {
            let line = text[..key.span().start.min(text.len())]
                .matches('\n')
                .count()
                + 1;
            let expected: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
            anyhow::bail!(
                "{} (line {line}): unknown field `{}`, expected one of {}",
                path.display(),
                key.get_ref(),
                expected.join(", ")
            );
        }
        // The connection settings are flattened into `ConsumeOpts`, and serde hands flattened
        // values over without their place in the file: read them on their own first, so a
        // mistake there is reported at its line too.
        toml::from_str::<ConnectionFlags>(&text).map_err(one_line)?;
        toml::from_str(&text).map_err(one_line)
    }

    /// The keys the file may hold: the long names of the flags (aliases too), but `config`.
    pub fn file_keys() -> Vec<String> {
        use clap::Args;
        let cmd = Self::augment_args(clap::Command::new("consume"));
        cmd.get_arguments()
            .flat_map(|a| {
                a.get_long()
                    .into_iter()
                    .chain(a.get_all_aliases().into_iter().flatten())
            })
            .filter(|k| *k != "config")
            .map(str::to_owned)
            .collect()
    }

    /// These settings as TOML, secrets masked.
    pub fn to_masked_toml(&self) -> Result<String> {
        let mut t = toml::Table::try_from(self)?;
        for key in ["sasl-password", "admin-token", "http-signing-secret"] {
            if t.contains_key(key) {
                t.insert(key.into(), toml::Value::String("********".into()));
            }
        }
        if let Some(toml::Value::String(url)) = t.get_mut("http") {
            *url = orderly_handlers::redact_url(url);
        }
        if let Some(h) = &self.http_header {
            t.insert(
                "http-header".into(),
                toml::Value::Array(
                    h.iter()
                        .map(|a| toml::Value::String(mask_header(&a.0)))
                        .collect(),
                ),
            );
        }
        Ok(toml::to_string(&t)?)
    }
}

/// ` (line N, key)` for an error at byte `at` of the file: the line, and the key when the line
/// is a `key = value` (a value that does not parse is reported without its key otherwise).
fn place(text: &str, at: usize) -> String {
    let at = at.min(text.len());
    let line = text[..at].matches('\n').count() + 1;
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let key = text[start..]
        .lines()
        .next()
        .and_then(|l| l.split_once('='))
        .map(|(k, _)| k.trim().trim_matches('"'))
        .filter(|k| !k.is_empty() && !k.starts_with('#') && !k.starts_with('['));
    match key {
        Some(k) => format!(" (line {line}, {k})"),
        None => format!(" (line {line})"),
    }
}
