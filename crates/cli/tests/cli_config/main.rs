//! `orderly consume`'s configuration through the binary, without a broker: exit codes of bad
//! flags and values, zero and huge durations, flags over variables over the file for the secret
//! sources, and the handler URL checked and masked in `config check` and in start-up logs; the
//! settings that are one of a few names in `choices`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Output};

mod choices;

const BIN: &str = env!("CARGO_BIN_EXE_orderly");

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args)
        .env_remove("ORDERLY_BOOTSTRAP")
        .env("ORDERLY_ADMIN_ADDR", "off")
        .env("RUST_LOG", "info");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn check(extra: &[&str], env: &[(&str, &str)]) -> Output {
    let base = [
        "config",
        "check",
        "--bootstrap",
        "127.0.0.1:1",
        "--group",
        "g",
        "--topic",
        "t",
    ];
    run(&[&base[..], extra].concat(), env)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Exit 1 with an `error:` line naming `needle`, no panic.
fn bad(o: &Output, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.starts_with("error:"), "{err}");
    assert!(err.contains(needle), "{err:?} lacks {needle:?}");
    assert!(!err.contains("panicked"), "{err}");
}

fn tmp(name: &str, text: &str) -> String {
    let p = std::env::temp_dir().join(format!("orderly-cli-config-{}-{name}", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_owned()
}

const HTTP: [&str; 2] = ["--http", "http://127.0.0.1:9/"];

/// `config check` with the HTTP handler and `flags`, without environment.
fn http_with(flags: &[&str]) -> Output {
    check(&[&HTTP[..], flags].concat(), &[])
}

/// `config check --config FILE`, FILE holding `text`.
fn check_file(name: &str, text: &str) -> Output {
    check(&["--config", &tmp(name, text)], &[])
}

#[test]
fn every_bad_input_exits_1_and_help_exits_0() {
    // Values clap parses (numbers, booleans) and values orderly parses exit alike.
    bad(
        &http_with(&["--http-concurrency", "abc"]),
        "--http-concurrency",
    );
    bad(&http_with(&["--retry-base", "soon"]), "--retry-base");
    bad(&http_with(&["--no-such-flag"]), "--no-such-flag");
    bad(&run(&["no-such-command"], &[]), "no-such-command");
    for args in [&["--help"][..], &["--version"], &["consume", "--help"]] {
        let o = run(args, &[]);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        assert!(!stdout(&o).is_empty());
    }
}

#[test]
fn zero_timeouts_and_huge_durations_are_refused() {
    bad(&http_with(&["--http-timeout", "0"]), "--http-timeout");
    bad(
        &check(&["--exec", "true", "--handler-timeout", "0ms"], &[]),
        "--handler-timeout",
    );
    bad(
        &check(
            &[&HTTP[..], &["--retry-cap", "99999999999999999999999h"]].concat(),
            &[],
        ),
        "--retry-cap",
    );
}

#[test]
fn a_batch_linger_needs_a_batch_and_shows_in_config_check() {
    bad(
        &http_with(&["--http-batch-linger", "5ms"]),
        "--http-batch-linger needs --http-batch-max above 1",
    );
    bad(
        &check(
            &[
                &HTTP[..],
                &["--http-batch-max", "8", "--http-batch-linger", "soon"],
            ]
            .concat(),
            &[],
        ),
        "--http-batch-linger",
    );
    let o = check(
        &[
            &HTTP[..],
            &["--http-batch-max", "8", "--http-batch-linger", "5ms"],
        ]
        .concat(),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("http-batch-linger = \"5ms\""),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_flag_beats_a_variable_and_the_file_among_alternatives() {
    let pw = tmp("pw", "from-file\n");
    let sasl = ["--sasl-mechanism", "PLAIN", "--sasl-username", "u"];
    // ORDERLY_SASL_PASSWORD set, --sasl-password-file given: the flag's file is used.
    let o = check(
        &[&HTTP[..], &sasl[..], &["--sasl-password-file", &pw]].concat(),
        &[("ORDERLY_SASL_PASSWORD", "from-env")],
    );
    let text = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        text.contains("sasl-password-file") && !text.contains("sasl-password ="),
        "{text}"
    );
    // A handler in the file, another one as a flag: the flag's handler runs.
    let cfg = tmp("handler.toml", "http = \"http://127.0.0.1:9/\"\n");
    let o = check(&["--config", &cfg, "--exec", "true"], &[]);
    let text = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        text.contains("exec = \"true\"") && !text.contains("http ="),
        "{text}"
    );
}

#[test]
fn the_handler_url_is_checked_and_its_secrets_never_shown() {
    bad(&check(&["--http", "ftp://h/"], &[]), "invalid handler URL");
    let url = "http://alice:pa55word@127.0.0.1:1/in?token=t0ken";
    let o = check(&["--http", url], &[]);
    let text = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        text.contains("http = \"http://alice:***@127.0.0.1:1/in?token=***\""),
        "{text}"
    );
    // Start-up: the endpoint is not up (a warning naming the URL), then the brokers are not
    // reachable (the error). Neither shows a secret.
    let o = run(
        &[
            "consume",
            "--bootstrap",
            "127.0.0.1:1",
            "--group",
            "g",
            "--topic",
            "t",
            "--http",
            url,
        ],
        &[],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("alice:***@127.0.0.1:1"), "{err}");
    assert!(!err.contains("pa55word") && !err.contains("t0ken"), "{err}");
}

#[test]
fn the_reply_topic_is_a_setting_and_may_not_be_consumed() {
    let o = http_with(&["--reply-topic", "answers"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("reply-topic = \"answers\""),
        "{}",
        stdout(&o)
    );
    let o = check(&HTTP, &[("ORDERLY_REPLY_TOPIC", "from-env")]);
    assert!(
        stdout(&o).contains("reply-topic = \"from-env\""),
        "{}",
        stdout(&o)
    );
    // Without one, none is printed (replies then name their topic).
    let o = check(&HTTP, &[]);
    assert!(!stdout(&o).contains("reply-topic"), "{}", stdout(&o));
    let o = run(
        &[
            &[
                "consume",
                "--bootstrap",
                "127.0.0.1:1",
                "--group",
                "g",
                "--topic",
                "t",
            ][..],
            &HTTP[..],
            &["--reply-topic", "t"],
        ]
        .concat(),
        &[],
    );
    bad(&o, "--reply-topic: it is also consumed");
    bad(
        &http_with(&["--reply-topic", "t"]),
        "--reply-topic: it is also consumed",
    );
}

#[test]
fn pipe_batches_have_their_own_flags_refused_for_another_handler() {
    const PIPE: [&str; 2] = ["--pipe", "cat"];
    let o = check(
        &[
            &PIPE[..],
            &[
                "--pipe-batch-max",
                "16",
                "--pipe-batch-linger",
                "2ms",
                "--pipe-batch-max-bytes",
                "64KiB",
            ],
        ]
        .concat(),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for line in [
        "pipe-batch-max = 16",
        "pipe-batch-linger = \"2ms\"",
        "pipe-batch-max-bytes = \"64KiB\"",
    ] {
        assert!(out.contains(line), "{line} not in {out}");
    }
    bad(
        &http_with(&["--pipe-batch-max", "16"]),
        "--pipe-batch-max needs --pipe",
    );
    bad(
        &check(&[&PIPE[..], &["--http-batch-max", "16"]].concat(), &[]),
        "--http-batch-max needs --http",
    );
    bad(
        &check(&[&PIPE[..], &["--pipe-batch-linger", "2ms"]].concat(), &[]),
        "--pipe-batch-linger needs --pipe-batch-max above 1",
    );
    bad(
        &check(&[&PIPE[..], &["--pipe-batch-max", "0"]].concat(), &[]),
        "--pipe-batch-max",
    );
}

#[test]
fn a_bad_duration_or_size_names_its_flag_or_its_key_and_line() {
    let o = http_with(&["--stuck-timeout", "1e400"]);
    bad(&o, "--stuck-timeout");
    assert_eq!(stderr(&o).lines().count(), 1, "one line: {}", stderr(&o));
    bad(
        &http_with(&["--partition-budget", "16XB"]),
        "--partition-budget",
    );
    bad(
        &check(&HTTP, &[("ORDERLY_HTTP_BATCH_LINGER", "soon")]),
        "--http-batch-linger",
    );
    let o = check_file(
        "bad-duration.toml",
        "http = \"http://127.0.0.1:9/\"\n\nhttp-timeout = \"soon\"\n",
    );
    bad(&o, "http-timeout");
    bad(&o, "soon");
    let o = check_file(
        "bad-size.toml",
        "http = \"http://127.0.0.1:9/\"\nglobal-budget = 5\n",
    );
    bad(&o, "global-budget");
    bad(&o, "line 2");
}

#[test]
fn durations_and_sizes_print_as_given_in_config_check() {
    let o = check(
        &[
            &HTTP[..],
            &[
                "--http-timeout",
                "1.5s",
                "--attempt-timeout",
                "250us",
                "--stuck-timeout",
                "off",
                "--retry-cap",
                "2m",
                "--partition-budget",
                "16MB",
                "--commit-metadata-limit",
                "1000",
            ],
        ]
        .concat(),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for line in [
        "http-timeout = \"1500ms\"",
        "attempt-timeout = \"250us\"",
        "stuck-timeout = \"off\"",
        "retry-cap = \"120s\"",
        "partition-budget = \"16MiB\"",
        "commit-metadata-limit = \"1000\"",
    ] {
        assert!(out.contains(line), "{line} not in {out}");
    }
    // The same values from the file, with a flag laid over it: the file's values kept exactly.
    let cfg = tmp(
        "units.toml",
        "http = \"http://127.0.0.1:9/\"\nattempt-timeout = \"250us\"\nglobal-budget = \"64KiB\"\n",
    );
    let o = check(&["--config", &cfg, "--retry-base", "0.3s"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for line in [
        "attempt-timeout = \"250us\"",
        "global-budget = \"64KiB\"",
        "retry-base = \"300ms\"",
    ] {
        assert!(out.contains(line), "{line} not in {out}");
    }
}

/// `--session` and `--admin-addr` are parsed where they are read: a bad value names its flag, or
/// its key and line in the file, and `config check` prints a good one as given.
#[test]
fn the_session_source_and_the_admin_address_name_their_flag_or_key_and_line() {
    bad(&http_with(&["--session", "value"]), "--session");
    bad(
        &check(&HTTP, &[("ORDERLY_SESSION", "json:user")]),
        "--session",
    );
    let o = http_with(&["--admin-addr", "localhost"]);
    bad(&o, "--admin-addr");
    assert_eq!(stderr(&o).lines().count(), 1, "one line: {}", stderr(&o));
    let o = check_file(
        "bad-session.toml",
        "http = \"http://127.0.0.1:9/\"\n\nsession = \"value\"\n",
    );
    bad(&o, "(line 3, session)");
    bad(&o, "`key`, `header:NAME` or `json:/pointer`");
    // The file's admin address, without the variable `run` sets.
    let cfg = tmp(
        "bad-admin-addr.toml",
        "http = \"http://127.0.0.1:9/\"\nadmin-addr = \"9898\"\n",
    );
    let o = Command::new(BIN)
        .args([
            "config",
            "check",
            "--bootstrap",
            "127.0.0.1:1",
            "--group",
            "g",
        ])
        .args(["--topic", "t", "--config", &cfg])
        .env_remove("ORDERLY_ADMIN_ADDR")
        .env_remove("ORDERLY_BOOTSTRAP")
        .output()
        .unwrap();
    bad(&o, "(line 2, admin-addr)");
    bad(&o, "or off");

    let o = check(
        &[
            &HTTP[..],
            &["--session", "json:/user/id", "--admin-addr", "[::1]:9000"],
        ]
        .concat(),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for line in ["session = \"json:/user/id\"", "admin-addr = \"[::1]:9000\""] {
        assert!(out.contains(line), "{line} not in {out}");
    }
    // From the file, with a flag laid over it: the file's values kept exactly.
    let cfg = tmp(
        "places.toml",
        "http = \"http://127.0.0.1:9/\"\nsession = \"header:user\"\n",
    );
    let o = check(&["--config", &cfg, "--retry-base", "0.3s"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for line in ["session = \"header:user\"", "admin-addr = \"off\""] {
        assert!(out.contains(line), "{line} not in {out}");
    }
}

#[test]
fn every_command_takes_the_same_connection_flags() {
    let commands: [&[&str]; 5] = [
        &["status", "--group", "g"],
        &["produce", "--topic", "t"],
        &["dlq", "ls", "--dlq-topic", "d"],
        &["run", "--topic", "t", "--records", "1"],
        &[
            "consume",
            "--group",
            "g",
            "--topic",
            "t",
            "--http",
            "http://127.0.0.1:9/",
        ],
    ];
    for cmd in commands {
        // A password file given as a flag beats ORDERLY_SASL_PASSWORD (the file is read, and
        // it is not there).
        let sasl = [
            "--bootstrap",
            "127.0.0.1:1",
            "--sasl-mechanism",
            "PLAIN",
            "--sasl-username",
            "u",
            "--sasl-password-file",
            "/nonexistent/pw",
        ];
        bad(
            &run(
                &[cmd, &sasl[..]].concat(),
                &[("ORDERLY_SASL_PASSWORD", "p")],
            ),
            "cannot read --sasl-password-file /nonexistent/pw",
        );
        // Both as flags: ambiguous, refused.
        bad(
            &run(&[cmd, &sasl[..], &["--sasl-password", "p"]].concat(), &[]),
            "pass only one of --sasl-password and --sasl-password-file",
        );
        // A server name to check needs TLS.
        bad(
            &run(
                &[
                    cmd,
                    &["--bootstrap", "127.0.0.1:1", "--tls-server-name", "b"],
                ]
                .concat(),
                &[],
            ),
            "--tls-server-name needs --tls or --tls-ca-file",
        );
        bad(
            &run(
                &[
                    cmd,
                    &[
                        "--bootstrap",
                        "127.0.0.1:1",
                        "--tls-ca-file",
                        "/nonexistent/ca.pem",
                    ],
                ]
                .concat(),
                &[],
            ),
            "cannot read --tls-ca-file /nonexistent/ca.pem",
        );
    }
    // TLS on the public web PKI is a setting of `consume` too, printed by `config check`.
    let o = check(
        &[&HTTP[..], &["--tls", "--tls-provider", "rustcrypto"]].concat(),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("tls = true") && out.contains("tls-provider = \"rustcrypto\""),
        "{out}"
    );
}

#[test]
fn a_mistake_in_the_file_names_its_line() {
    let o = check_file(
        "unknown.toml",
        "http = \"http://127.0.0.1:9/\"\n\nworkerz = 3\n",
    );
    bad(
        &o,
        "(line 3): unknown field `workerz`, expected one of `bootstrap`",
    );
    // A connection setting (flattened into the settings) too.
    let cfg = tmp(
        "tls.toml",
        "http = \"http://127.0.0.1:9/\"\ntls-ca-file = 1\n",
    );
    bad(&check(&["--config", &cfg], &[]), "(line 2, tls-ca-file)");
}

#[test]
fn help_never_prints_a_secret_from_the_environment() {
    let secrets: [(&str, &str); 6] = [
        ("ORDERLY_HTTP", "https://alice:url-s3cret@hooks.example/in"),
        ("ORDERLY_HTTP_HEADER", "Authorization: Bearer header-s3cret"),
        ("ORDERLY_HTTP_SIGNING_SECRET", "signing-s3cret"),
        ("ORDERLY_SASL_PASSWORD", "sasl-s3cret"),
        ("ORDERLY_EXEC", "deliver --token exec-s3cret"),
        ("ORDERLY_PIPE", "deliver --token pipe-s3cret"),
    ];
    for args in [
        &["consume", "--help"][..],
        &["config", "check", "--help"],
        &["run", "--help"],
    ] {
        let o = run(args, &secrets);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        let text = format!("{}{}", stdout(&o), stderr(&o));
        assert!(text.contains("ORDERLY_SASL_PASSWORD"), "{args:?}: {text}");
        assert!(!text.contains("s3cret"), "{args:?}: {text}");
    }
}

#[test]
fn a_password_with_a_slash_is_masked_in_the_url_error() {
    for url in [
        "https://alice:p4ss/w0rd@hooks.example/in",
        "https://alice:p4ss?w0rd@hooks.example/in",
        "https://alice:p4ss#w0rd@hooks.example/in",
        "https://alice:1234/w0rd@hooks.example/in",
    ] {
        let o = check(&["--http", url], &[]);
        let text = format!("{}{}", stdout(&o), stderr(&o));
        assert!(text.contains("alice:***@hooks.example"), "{url}: {text}");
        assert!(
            !text.contains("p4ss") && !text.contains("w0rd"),
            "{url}: {text}"
        );
    }
}
