//! The settings that are one of a few names (`--isolation`, `--dlq-mode`, `--sasl-mechanism`,
//! ...) and the status lists through the binary, without a broker: a bad value names its flag
//! (or its key and line in the file) and the possible values, `--help` lists them, and every
//! accepted spelling is taken from a flag, an `ORDERLY_*` variable and the file alike and printed
//! by `config check` in the one spelling the file takes back.

use std::process::Output;

use super::{HTTP, stderr, stdout};

/// What a choice needs beside it to be resolved: SASL needs credentials, a TLS provider TLS.
fn companions(flag: &str) -> &'static [&'static str] {
    match flag {
        "--sasl-mechanism" => &["--sasl-username", "u", "--sasl-password", "p"],
        "--tls-provider" => &["--tls"],
        _ => &[],
    }
}

/// Every choice of `orderly consume`: flag, variable, the accepted spellings with the one
/// `config check` prints for each, and the possible values `--help` and errors list.
struct Choice {
    flag: &'static str,
    var: &'static str,
    spellings: &'static [(&'static str, &'static str)],
    possible: &'static [&'static str],
}

const CHOICES: &[Choice] = &[
    Choice {
        flag: "--isolation",
        var: "ORDERLY_ISOLATION",
        spellings: &[
            ("read-committed", "read-committed"),
            ("read-uncommitted", "read-uncommitted"),
        ],
        possible: &["read-committed", "read-uncommitted"],
    },
    Choice {
        flag: "--http-body",
        var: "ORDERLY_HTTP_BODY",
        spellings: &[("raw", "raw"), ("json", "json")],
        possible: &["raw", "json"],
    },
    Choice {
        flag: "--http-format",
        var: "ORDERLY_HTTP_FORMAT",
        spellings: &[("plain", "plain"), ("cloudevents", "cloudevents")],
        possible: &["plain", "cloudevents"],
    },
    Choice {
        flag: "--no-session",
        var: "ORDERLY_NO_SESSION",
        spellings: &[
            ("unordered", "unordered"),
            ("dlq", "dlq"),
            ("partition", "partition"),
        ],
        possible: &["unordered", "dlq", "partition"],
    },
    Choice {
        flag: "--dlq-mode",
        var: "ORDERLY_DLQ_MODE",
        spellings: &[("continue", "continue"), ("park-session", "park-session")],
        possible: &["continue", "park-session"],
    },
    Choice {
        flag: "--group-protocol",
        var: "ORDERLY_GROUP_PROTOCOL",
        spellings: &[("classic", "classic"), ("consumer", "consumer")],
        possible: &["classic", "consumer"],
    },
    Choice {
        flag: "--offset-reset",
        var: "ORDERLY_OFFSET_RESET",
        spellings: &[("earliest", "earliest"), ("latest", "latest")],
        possible: &["earliest", "latest"],
    },
    Choice {
        flag: "--sasl-mechanism",
        var: "ORDERLY_SASL_MECHANISM",
        spellings: &[
            ("PLAIN", "PLAIN"),
            ("plain", "PLAIN"),
            ("SCRAM-SHA-256", "SCRAM-SHA-256"),
            ("scram-sha-256", "SCRAM-SHA-256"),
            ("SCRAM-SHA-512", "SCRAM-SHA-512"),
            ("Scram-Sha-512", "SCRAM-SHA-512"),
        ],
        possible: &["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
    },
    Choice {
        flag: "--tls-provider",
        var: "ORDERLY_TLS_PROVIDER",
        spellings: &[
            ("auto", "auto"),
            ("graviola", "graviola"),
            ("rustcrypto", "rustcrypto"),
            ("RustCrypto", "rustcrypto"),
        ],
        possible: &["auto", "graviola", "rustcrypto"],
    },
];

/// The parent's `run`, logging warnings only.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    super::run(args, &quiet(env))
}

/// The parent's `check`, logging warnings only.
fn check(extra: &[&str], env: &[(&str, &str)]) -> Output {
    super::check(extra, &quiet(env))
}

fn quiet<'a>(env: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    std::iter::once(("RUST_LOG", "warn"))
        .chain(env.iter().copied())
        .collect()
}

/// Exit 1 with an `error:` naming each of `needles`, no panic.
fn bad(o: &Output, needles: &[&str]) {
    for needle in needles {
        super::bad(o, needle);
    }
}

/// Exit 0 and `config check` printing `line`.
fn prints(o: &Output, line: &str) {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    let out = stdout(o);
    assert!(out.lines().any(|l| l == line), "{line} not in {out}");
}

fn tmp(name: &str, text: &str) -> String {
    super::tmp(&format!("choices-{name}"), text)
}

#[test]
fn a_bad_choice_names_its_flag_and_the_possible_values() {
    for c in CHOICES {
        let listed = format!("[possible values: {}]", c.possible.join(", "));
        let needles = [c.flag, "bogus", listed.as_str()];
        let with = [&HTTP[..], companions(c.flag)].concat();
        // As a flag.
        bad(
            &check(&[&with[..], &[c.flag, "bogus"]].concat(), &[]),
            &needles,
        );
        // As a variable: named by its flag too.
        bad(&check(&with, &[(c.var, "bogus")]), &needles);
        // In the file: its key, its line and the values it takes.
        let key = c.flag.trim_start_matches("--");
        let cfg = tmp(
            &format!("bad-{key}.toml"),
            &format!("http = \"http://127.0.0.1:9/\"\n{key} = \"bogus\"\n"),
        );
        let expected = match c.possible {
            [a, b] => format!("expected {a} or {b}"),
            [a, b, last] => format!("expected {a}, {b} or {last}"),
            _ => unreachable!(),
        };
        let place = format!("(line 2, {key})");
        bad(
            &check(
                &[&["--config", cfg.as_str()][..], companions(c.flag)].concat(),
                &[],
            ),
            &[place.as_str(), "invalid value \"bogus\"", expected.as_str()],
        );
    }
    // `orderly run` takes the same --offset-reset.
    bad(
        &run(
            &[
                "run",
                "--bootstrap",
                "127.0.0.1:1",
                "--topic",
                "t",
                "--offset-reset",
                "bogus",
            ],
            &[],
        ),
        &["--offset-reset", "[possible values: earliest, latest]"],
    );
    // --assignor is a list of choices.
    bad(
        &check(&[&HTTP[..], &["--assignor", "range,bogus"]].concat(), &[]),
        &[
            "--assignor",
            "bogus",
            "[possible values: cooperative-sticky, range, roundrobin]",
        ],
    );
    let cfg = tmp(
        "bad-assignor.toml",
        "http = \"http://127.0.0.1:9/\"\nassignor = [\"range\", \"bogus\"]\n",
    );
    bad(
        &check(&["--config", &cfg], &[]),
        &[
            "assignor",
            "line 2",
            "expected cooperative-sticky, range or roundrobin",
        ],
    );
}

#[test]
fn every_spelling_is_taken_from_a_flag_a_variable_and_the_file() {
    for c in CHOICES {
        let key = c.flag.trim_start_matches("--");
        let with = [&HTTP[..], companions(c.flag)].concat();
        for (given, printed) in c.spellings {
            // graviola runs only on CPUs with its features; resolving it elsewhere is refused.
            let line = format!("{key} = \"{printed}\"");
            let ok = |o: &Output| {
                if *printed == "graviola" && stderr(o).contains("needs CPU features") {
                    return;
                }
                prints(o, &line);
            };
            ok(&check(&[&with[..], &[c.flag, given]].concat(), &[]));
            ok(&check(&with, &[(c.var, given)]));
            let cfg = tmp(
                &format!("{key}-{given}.toml"),
                &format!("http = \"http://127.0.0.1:9/\"\n{key} = \"{given}\"\n"),
            );
            ok(&check(
                &[&["--config", cfg.as_str()][..], companions(c.flag)].concat(),
                &[],
            ));
        }
    }
    let o = check(
        &[
            &HTTP[..],
            &["--assignor", "roundrobin,range,cooperative-sticky"],
        ]
        .concat(),
        &[],
    );
    prints(
        &o,
        "assignor = [\"roundrobin\", \"range\", \"cooperative-sticky\"]",
    );
    let o = check(&HTTP, &[("ORDERLY_ASSIGNOR", "range,roundrobin")]);
    prints(&o, "assignor = [\"range\", \"roundrobin\"]");
    let cfg = tmp(
        "assignor.toml",
        "http = \"http://127.0.0.1:9/\"\nassignor = [\"roundrobin\"]\n",
    );
    prints(
        &check(&["--config", &cfg], &[]),
        "assignor = [\"roundrobin\"]",
    );
}

#[test]
fn config_check_prints_every_choice_with_its_default() {
    let o = check(&HTTP, &[]);
    for line in [
        "isolation = \"read-committed\"",
        "http-body = \"raw\"",
        "http-format = \"plain\"",
        "no-session = \"unordered\"",
        "dlq-mode = \"continue\"",
        "group-protocol = \"classic\"",
        "offset-reset = \"earliest\"",
        "assignor = [\"cooperative-sticky\"]",
        "http-retry-on = \"408,425,429,500-599\"",
        "http-dead-letter-on = \"none\"",
    ] {
        prints(&o, line);
    }
    // Nothing is printed for the connection choices not given.
    let out = stdout(&o);
    assert!(
        !out.contains("sasl-mechanism") && !out.contains("tls-provider"),
        "{out}"
    );
    // The effective settings read back as a file give the same settings.
    let cfg = tmp("effective.toml", &out);
    let again = check(&["--config", &cfg], &[]);
    assert_eq!(stdout(&again), out, "{}", stderr(&again));
}

#[test]
fn status_lists_are_parsed_where_given_with_the_same_syntax() {
    for (flag, var) in [
        ("--http-retry-on", "ORDERLY_HTTP_RETRY_ON"),
        ("--http-dead-letter-on", "ORDERLY_HTTP_DEAD_LETTER_ON"),
    ] {
        let key = flag.trim_start_matches("--");
        for (given, printed) in [
            ("429,502-504", "429,502-504"),
            (" 408 , 500-599 ", "408,500-599"),
            ("none", "none"),
            ("NONE", "none"),
            ("", "none"),
        ] {
            let line = format!("{key} = \"{printed}\"");
            prints(&check(&[&HTTP[..], &[flag, given]].concat(), &[]), &line);
            prints(&check(&HTTP, &[(var, given)]), &line);
            let cfg = tmp(
                &format!("{key}-{}.toml", given.trim().replace([',', ' '], "_")),
                &format!("http = \"http://127.0.0.1:9/\"\n{key} = \"{given}\"\n"),
            );
            prints(&check(&["--config", &cfg], &[]), &line);
        }
        // A mistake: one line naming the flag and what a status is.
        let o = check(&[&HTTP[..], &[flag, "5xx"]].concat(), &[]);
        bad(&o, &[flag, "5xx", "expected a code 100-999"]);
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
        bad(&check(&HTTP, &[(var, "600-500")]), &[flag, "600-500"]);
        let cfg = tmp(
            &format!("{key}-bad.toml"),
            &format!("http = \"http://127.0.0.1:9/\"\n\n{key} = \"5xx\"\n"),
        );
        let place = format!("(line 3, {key})");
        bad(
            &check(&["--config", &cfg], &[]),
            &[place.as_str(), "expected a code 100-999"],
        );
    }
}

#[test]
fn help_lists_the_possible_values() {
    for args in [
        &["consume", "--help"][..],
        &["consume", "-h"],
        &["config", "check", "--help"],
    ] {
        let o = run(args, &[]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let help = stdout(&o);
        for c in CHOICES {
            let listed = format!("[possible values: {}]", c.possible.join(", "));
            assert!(help.contains(&listed), "{args:?}: {listed} not in {help}");
        }
        assert!(
            help.contains("[possible values: cooperative-sticky, range, roundrobin]"),
            "{help}"
        );
    }
    let o = run(&["run", "--help"], &[]);
    let help = stdout(&o);
    assert!(
        help.contains("[default: earliest]")
            && help.contains("[possible values: earliest, latest]"),
        "{help}"
    );
    for cmd in [
        &["status", "--help"][..],
        &["produce", "--help"],
        &["dlq", "ls", "--help"],
    ] {
        let help = stdout(&run(cmd, &[]));
        assert!(
            help.contains("[possible values: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512]"),
            "{cmd:?}: {help}"
        );
    }
}
