//! Unit tests of the settings: parsing, defaults, secrets never printed, mistakes named.

use std::path::PathBuf;
use std::time::Duration;

use orderly_handlers::HttpFormat;
use orderly_protocol::Sasl;

use super::choice::{self, SaslMechanism};
use super::secret::{HeaderArg, Secret};
use super::units::{HumanDuration, Statuses};
use super::{ConnectionFlags, ConsumeOpts, HandlerChoice, Resolved};

fn minimal() -> ConsumeOpts {
    ConsumeOpts {
        bootstrap: Some(vec!["127.0.0.1:9092".into()]),
        group: Some("g".into()),
        topic: Some(vec!["t".into()]),
        http: Some("http://127.0.0.1:8080/".into()),
        ..ConsumeOpts::default()
    }
}

#[test]
fn admin_endpoint_binds_loopback_unless_configured() {
    let r = minimal().resolve().unwrap();
    let addr = r.admin_addr.unwrap();
    assert!(addr.ip().is_loopback(), "{addr}");
    assert_eq!(addr.to_string(), "127.0.0.1:9898");
    let r = ConsumeOpts {
        admin_addr: Some("0.0.0.0:9000".parse().unwrap()),
        ..minimal()
    }
    .resolve()
    .unwrap();
    assert_eq!(r.admin_addr.unwrap().to_string(), "0.0.0.0:9000");
    let r = ConsumeOpts {
        admin_addr: Some("off".parse().unwrap()),
        ..minimal()
    }
    .resolve()
    .unwrap();
    assert_eq!(r.admin_addr, None);
}

#[test]
fn secrets_never_print() {
    let o = ConsumeOpts {
        connection: ConnectionFlags {
            sasl_password: Some(Secret("hunter2".into())),
            ..ConnectionFlags::default()
        },
        ..ConsumeOpts::default()
    };
    assert!(!format!("{o:?}").contains("hunter2"));
    assert!(!o.to_masked_toml().unwrap().contains("hunter2"));
    // Nor in what resolving builds from them (the effective settings `config check` prints,
    // the consumer's configuration with its SASL credentials).
    let r = ConsumeOpts {
        connection: ConnectionFlags {
            sasl_mechanism: Some(SaslMechanism::ScramSha512),
            sasl_username: Some("alice".into()),
            sasl_password: Some(Secret("hunter2".into())),
            ..ConnectionFlags::default()
        },
        ..minimal()
    }
    .resolve()
    .unwrap();
    assert!(r.consumer.connection.sasl.is_some());
    assert!(!format!("{:?}", r.consumer).contains("hunter2"));
    assert!(!format!("{:?}", r.effective).contains("hunter2"));
    assert!(!r.effective.to_masked_toml().unwrap().contains("hunter2"));
}

fn tmp_file(name: &str, text: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("orderly-settings-{}-{name}", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

fn password(r: &Resolved) -> String {
    match r.consumer.connection.sasl.as_ref().unwrap() {
        Sasl::Plain { password, .. }
        | Sasl::ScramSha256 { password, .. }
        | Sasl::ScramSha512 { password, .. } => password.clone(),
        _ => panic!("unexpected SASL mechanism"),
    }
}

#[test]
fn the_endpoint_connect_and_handshake_limits_reach_the_handler() {
    let c = ConsumeOpts {
        http_connect_timeout: Some(HumanDuration(Duration::from_secs(3))),
        http_tls_handshake_timeout: Some(HumanDuration(Duration::from_secs(4))),
        ..minimal()
    }
    .resolve()
    .unwrap();
    let HandlerChoice::Http(h) = &c.handler else {
        panic!("expected the HTTP handler")
    };
    assert_eq!(h.connect_timeout, Duration::from_secs(3));
    assert_eq!(h.tls_handshake_timeout, Duration::from_secs(4));
    for flag in ["--http-connect-timeout", "--http-tls-handshake-timeout"] {
        let zero = Some(HumanDuration(Duration::ZERO));
        let opts = if flag == "--http-connect-timeout" {
            ConsumeOpts {
                http_connect_timeout: zero,
                ..minimal()
            }
        } else {
            ConsumeOpts {
                http_tls_handshake_timeout: zero,
                ..minimal()
            }
        };
        let e = opts.resolve().unwrap_err().to_string();
        assert!(e.contains(flag) && e.contains("greater than 0"), "{e}");
    }
}

#[test]
fn zero_timeouts_are_clear_errors() {
    let e = ConsumeOpts {
        http_timeout: Some(HumanDuration(Duration::ZERO)),
        ..minimal()
    }
    .resolve()
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("--http-timeout") && e.contains("greater than 0"),
        "{e}"
    );
    let e = ConsumeOpts {
        http: None,
        exec: Some("true".into()),
        handler_timeout: Some(HumanDuration(Duration::ZERO)),
        ..minimal()
    }
    .resolve()
    .unwrap_err()
    .to_string();
    assert!(e.contains("--handler-timeout"), "{e}");
    for key in [
        "--session-timeout",
        "--heartbeat-interval",
        "--rebalance-timeout",
    ] {
        let mut o = minimal();
        let v = Some(HumanDuration(Duration::ZERO));
        match key {
            "--session-timeout" => o.session_timeout = v,
            "--heartbeat-interval" => o.heartbeat_interval = v,
            _ => o.rebalance_timeout = v,
        }
        let e = o.resolve().unwrap_err().to_string();
        assert!(e.contains(key), "{key}: {e}");
    }
}

#[test]
fn a_password_file_flag_beats_a_password_in_the_file() {
    let file = tmp_file("pw", "from-password-file\n");
    let config = tmp_file(
        "pw.toml",
        "sasl-mechanism = \"PLAIN\"\nsasl-username = \"u\"\nsasl-password = \"from-config\"\n",
    );
    let r = ConsumeOpts {
        config: Some(config.clone()),
        connection: ConnectionFlags {
            sasl_password_file: Some(file.clone()),
            ..ConnectionFlags::default()
        },
        ..minimal()
    }
    .resolve()
    .unwrap();
    assert_eq!(password(&r), "from-password-file");
    // The effective settings name the source that is used, and only that one.
    let text = r.effective.to_masked_toml().unwrap();
    assert!(
        text.contains("sasl-password-file") && !text.contains("sasl-password = "),
        "{text}"
    );
    // Without the flag the file's password is used.
    let r = ConsumeOpts {
        config: Some(config),
        ..minimal()
    }
    .resolve()
    .unwrap();
    assert_eq!(password(&r), "from-config");
    // Both at the same level: ambiguous, refused.
    let e = ConsumeOpts {
        connection: ConnectionFlags {
            sasl_mechanism: Some(SaslMechanism::Plain),
            sasl_username: Some("u".into()),
            sasl_password: Some(Secret("p".into())),
            sasl_password_file: Some(file),
            ..ConnectionFlags::default()
        },
        ..minimal()
    }
    .resolve()
    .unwrap_err()
    .to_string();
    assert!(e.contains("only one of"), "{e}");
}

#[test]
fn the_handler_url_is_validated_and_masked() {
    let e = ConsumeOpts {
        http: Some("ftp://h/".into()),
        ..minimal()
    }
    .resolve()
    .unwrap_err()
    .to_string();
    assert!(e.contains("invalid handler URL"), "{e}");
    let r = ConsumeOpts {
        http: Some("http://alice:pa55word@127.0.0.1:8080/in?token=t0ken&x=1".into()),
        ..minimal()
    }
    .resolve()
    .unwrap();
    let text = r.effective.to_masked_toml().unwrap();
    let shown = format!("{text}{:?}{:?}", r.effective, r.handler);
    assert!(
        !shown.contains("pa55word") && !shown.contains("t0ken"),
        "{shown}"
    );
    assert!(
        text.contains("http://alice:***@127.0.0.1:8080/in?token=***&x=***"),
        "{text}"
    );
}

#[test]
fn http_service_flags_resolve_and_their_secrets_never_print() {
    let o = ConsumeOpts {
        http: Some("https://hooks.example/in".into()),
        http_header: Some(vec![
            HeaderArg("Authorization: Bearer tok-123".into()),
            HeaderArg("X-Api-Key: env:PATH".into()),
        ]),
        http_signing_secret: Some(Secret("sign-456".into())),
        http_retry_on: Some(statuses("429,502-504")),
        http_dead_letter_on: Some(statuses("501")),
        http_format: Some(choice::HttpFormat::CloudEvents),
        http_ce_type: Some("com.example.order".into()),
        http_pool_idle_timeout: Some(HumanDuration(Duration::from_secs(2))),
        dedup_header: Some("msg-id".into()),
        ..minimal()
    };
    assert!(!format!("{o:?}").contains("tok-123"));
    let r = o.resolve().unwrap();
    let HandlerChoice::Http(h) = &r.handler else {
        panic!("http handler expected");
    };
    assert_eq!(h.headers.len(), 2);
    assert_eq!(h.headers[0].value.to_str().unwrap(), "Bearer tok-123");
    assert!(h.signing_key.is_some());
    assert_eq!(h.classes.retry_on.to_string(), "429,502-504");
    assert!(h.classes.dead_letter_on.contains(501));
    let HttpFormat::CloudEvents(ce) = &h.format else {
        panic!("cloudevents expected");
    };
    assert_eq!(ce.event_type, "com.example.order");
    assert_eq!(ce.id_header.as_deref(), Some("msg-id"));
    assert_eq!(h.pool_idle_timeout, Duration::from_secs(2));
    for printed in [
        format!("{:?}", r.handler),
        format!("{:?}", r.effective),
        r.effective.to_masked_toml().unwrap(),
    ] {
        assert!(!printed.contains("tok-123"), "{printed}");
        assert!(!printed.contains("sign-456"), "{printed}");
    }
    let toml = r.effective.to_masked_toml().unwrap();
    assert!(toml.contains("Authorization: ********"), "{toml}");
    assert!(toml.contains("X-Api-Key: env:PATH"), "{toml}");
    assert!(toml.contains("http-retry-on = \"429,502-504\""), "{toml}");
    assert!(toml.contains("http-pool-idle-timeout = \"2s\""), "{toml}");

    // Defaults, printed.
    let r = minimal().resolve().unwrap();
    let toml = r.effective.to_masked_toml().unwrap();
    assert!(
        toml.contains("http-retry-on = \"408,425,429,500-599\""),
        "{toml}"
    );
    assert!(toml.contains("http-dead-letter-on = \"none\""), "{toml}");
    assert!(toml.contains("http-format = \"plain\""), "{toml}");
    assert!(toml.contains("http-pool-idle-timeout = \"4s\""), "{toml}");

    // Mistakes are named.
    let err = |o: ConsumeOpts| o.resolve().unwrap_err().to_string();
    let e = err(ConsumeOpts {
        http_ca_file: Some("ca.pem".into()),
        ..minimal()
    });
    assert!(e.contains("https://"), "{e}");
    let e = err(ConsumeOpts {
        http_header: Some(vec![HeaderArg("no colon".into())]),
        ..minimal()
    });
    assert!(e.contains("--http-header"), "{e}");
    let e = err(ConsumeOpts {
        http_ce_type: Some("com.example.order".into()),
        ..minimal()
    });
    assert!(e.contains("need --http-format cloudevents"), "{e}");
}

fn statuses(s: &str) -> Statuses {
    s.parse().unwrap()
}

/// `orderly consume`'s flags parsed by clap, the `ORDERLY_*` variables of the test's environment
/// ignored (the binary's tests set variables).
fn parse(args: &[&str]) -> Result<ConsumeOpts, clap::Error> {
    use clap::{Args, FromArgMatches};
    let cmd = ConsumeOpts::augment_args(clap::Command::new("consume").no_binary_name(true))
        .mut_args(|a| a.env(None::<&'static str>));
    ConsumeOpts::from_arg_matches(&cmd.try_get_matches_from(args)?)
}

#[test]
fn clap_refuses_a_bad_choice_naming_the_flag_and_the_possible_values() {
    for (flag, possible) in [
        ("--isolation", "read-committed, read-uncommitted"),
        ("--http-body", "raw, json"),
        ("--http-format", "plain, cloudevents"),
        ("--no-session", "unordered, dlq, partition"),
        ("--dlq-mode", "continue, park-session"),
        ("--group-protocol", "classic, consumer"),
        ("--offset-reset", "earliest, latest"),
        ("--assignor", "cooperative-sticky, range, roundrobin"),
        ("--sasl-mechanism", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
        ("--tls-provider", "auto, graviola, rustcrypto"),
    ] {
        let e = parse(&[flag, "bogus"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue, "{flag}");
        let text = e.to_string();
        assert!(
            text.contains(flag)
                && text.contains("'bogus'")
                && text.contains(&format!("[possible values: {possible}]")),
            "{text}"
        );
    }
    // A status list that does not parse: the flag and what a status is.
    let e = parse(&["--http-dead-letter-on", "500-5xx"]).unwrap_err();
    assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
    let text = e.to_string();
    assert!(
        text.contains("--http-dead-letter-on") && text.contains("expected a code 100-999"),
        "{text}"
    );
}

#[test]
fn each_choice_resolves_to_its_library_value() {
    use orderly_engine::DlqMode;
    use orderly_group::AutoOffsetReset;
    use orderly_group::config::GroupProtocol;
    use orderly_handlers::{HttpBody, NoSession};
    use orderly_protocol::IsolationLevel;

    let defaults = minimal().resolve().unwrap();
    let c = &defaults.consumer;
    assert_eq!(c.fetch.isolation, IsolationLevel::ReadCommitted);
    assert_eq!(c.engine.dlq_mode, DlqMode::Continue);
    assert_eq!(c.group.protocol, GroupProtocol::Classic);
    assert_eq!(c.group.auto_offset_reset, AutoOffsetReset::Earliest);
    assert_eq!(defaults.router.missing, NoSession::Unordered);
    let HandlerChoice::Http(h) = &defaults.handler else {
        panic!("http handler expected");
    };
    assert_eq!(h.body, HttpBody::Raw);
    assert_eq!(h.format, HttpFormat::Plain);

    let o = parse(&[
        "--bootstrap",
        "127.0.0.1:9092",
        "--group",
        "g",
        "--topic",
        "t",
        "--http",
        "http://127.0.0.1:8080/",
        "--isolation",
        "read-uncommitted",
        "--http-body",
        "json",
        "--http-format",
        "cloudevents",
        "--no-session",
        "partition",
        "--dlq-mode",
        "park-session",
        "--group-protocol",
        "consumer",
        "--offset-reset",
        "latest",
        "--assignor",
        "roundrobin,range",
        "--sasl-mechanism",
        "scram-sha-256",
        "--sasl-username",
        "u",
        "--sasl-password",
        "p",
    ])
    .unwrap();
    let r = o.resolve().unwrap();
    let c = &r.consumer;
    assert_eq!(c.fetch.isolation, IsolationLevel::ReadUncommitted);
    assert_eq!(c.engine.dlq_mode, DlqMode::ParkSession);
    assert_eq!(c.group.protocol, GroupProtocol::Consumer);
    assert_eq!(c.group.auto_offset_reset, AutoOffsetReset::Latest);
    let names: Vec<&str> = c.group.assignors.iter().map(|a| a.name()).collect();
    assert_eq!(names, ["roundrobin", "range"]);
    assert!(matches!(c.connection.sasl, Some(Sasl::ScramSha256 { .. })));
    assert_eq!(r.router.missing, NoSession::Partition);
    let HandlerChoice::Http(h) = &r.handler else {
        panic!("http handler expected");
    };
    assert_eq!(h.body, HttpBody::Json);
    assert!(matches!(h.format, HttpFormat::CloudEvents(_)));
    // The effective settings print each in the spelling the flags and the file take.
    let toml = r.effective.to_masked_toml().unwrap();
    for line in [
        "isolation = \"read-uncommitted\"",
        "http-body = \"json\"",
        "http-format = \"cloudevents\"",
        "no-session = \"partition\"",
        "dlq-mode = \"park-session\"",
        "group-protocol = \"consumer\"",
        "offset-reset = \"latest\"",
        "assignor = [\"roundrobin\", \"range\"]",
        "sasl-mechanism = \"SCRAM-SHA-256\"",
    ] {
        assert!(toml.lines().any(|l| l == line), "{line} not in {toml}");
    }
}
