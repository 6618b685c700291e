//! Settings that are alternatives to each other (a password or its file, one handler): a higher
//! level's choice replaces a lower level's, whichever of the group each one set.

/// Keys of `orderly consume` settings that are alternatives to each other: a flag or variable
/// that sets one of them replaces whatever the file or a lower level set for the others.
pub(super) const ALTERNATIVES: [&[&str]; 3] = [
    &["sasl-password", "sasl-password-file"],
    &["admin-token", "admin-token-file"],
    &["http", "exec", "pipe"],
];

/// The keys of `group` whose value came from a variable while a flag set one of the group: clap
/// fills a setting from its flag or else its variable, so `ORDERLY_SASL_PASSWORD` and
/// `--sasl-password-file` would both arrive; the variable is to be dropped.
pub(super) fn variables_beside_flags<'a>(m: &clap::ArgMatches, group: &[&'a str]) -> Vec<&'a str> {
    use clap::parser::ValueSource;
    let source = |k: &str| m.value_source(&k.replace('-', "_"));
    if !group
        .iter()
        .any(|k| source(k) == Some(ValueSource::CommandLine))
    {
        return Vec::new();
    }
    group
        .iter()
        .copied()
        .filter(|k| source(k) == Some(ValueSource::EnvVariable))
        .collect()
}
