//! Running the releases in turn: one release's broker started from its jars, what orderly
//! negotiates with it, then the checks that apply to it.

use anyhow::{Context, Result};
use orderly_protocol::{BrokerConnection, ConnectionConfig};
use orderly_testkit::releases::{Release, ReleaseBroker};

use super::degraded::{check_degraded, check_parked_store};
use super::legacy_format::check_legacy_format;
use super::options::CompatOptions;
use super::outcome::{Outcome, print_outcome};
use super::refusal::check_refused;
use super::releases::{expect_refused, writes_legacy_format};
use super::sasl::{SASL_PASSWORD, SASL_USER, check_sasl};
use super::workload::check_workload;

/// Runs every release in turn; a release that cannot even start is a failure of that release.
pub fn run(opts: &CompatOptions) -> Result<Vec<Outcome>> {
    let rt = tokio::runtime::Runtime::new()?;
    let mut out = Vec::new();
    for &release in &opts.versions {
        eprintln!("==> Apache Kafka {release}");
        let outcome = match run_one(&rt, opts, release) {
            Ok(o) => o,
            Err(e) => Outcome {
                release,
                expect_refused: expect_refused(release),
                negotiated: Vec::new(),
                refused: None,
                failures: vec![format!("{e:#}")],
                summary: "broker did not start".into(),
            },
        };
        print_outcome(&outcome);
        out.push(outcome);
    }
    Ok(out)
}

/// Starts `release`, records what orderly negotiates with it, and runs the checks that apply.
fn run_one(
    rt: &tokio::runtime::Runtime,
    opts: &CompatOptions,
    release: Release,
) -> Result<Outcome> {
    let dir = opts.dir.join(release.to_string());
    let mut broker = ReleaseBroker::start_with(release, &dir, None, &[(SASL_USER, SASL_PASSWORD)])
        .with_context(|| format!("starting Apache Kafka {release}"))?;
    let bootstrap = broker.bootstrap.clone();
    eprintln!(
        "    {} mode, bootstrap {bootstrap}, state {}",
        if release.kraft() {
            "KRaft"
        } else {
            "ZooKeeper"
        },
        dir.display()
    );
    let mut outcome = Outcome {
        release,
        expect_refused: expect_refused(release),
        negotiated: Vec::new(),
        refused: None,
        failures: Vec::new(),
        summary: String::new(),
    };
    match rt.block_on(probe(&bootstrap)) {
        Ok(conn) => outcome.negotiated = conn.negotiated(),
        Err(e) => outcome.refused = Some(e.to_string()),
    }
    let topic = format!("compat-{}", release.to_string().replace('.', "-"));
    let dlq = format!("{topic}.dlq");
    let group = format!("{topic}-g");
    for (t, partitions) in [(&topic, 4), (&dlq, 1)] {
        rt.block_on(orderly_testkit::create_topic(&bootstrap, t, partitions))
            .with_context(|| format!("creating topic {t}"))?;
    }
    if outcome.expect_refused {
        check_refused(opts, &bootstrap, &topic, &dlq, &group, &mut outcome);
    } else {
        check_workload(opts, &bootstrap, &topic, &dlq, &group, &mut outcome);
        if writes_legacy_format(release) {
            check_legacy_format(rt, opts, &bootstrap, &topic, &mut outcome);
        }
        check_parked_store(opts, &bootstrap, &topic, &dlq, &group, &mut outcome);
        check_degraded(opts, &bootstrap, &topic, &dlq, &group, &mut outcome);
        match broker.sasl_bootstrap.clone() {
            Some(sasl) => check_sasl(rt, opts, &sasl, &group, &mut outcome),
            None => outcome
                .failures
                .push("the broker has no SASL_PLAINTEXT listener".into()),
        }
    }
    broker.stop();
    Ok(outcome)
}

/// How long [`probe`] keeps trying a broker that does not answer.
const PROBE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);

/// Connects to the release's broker as the library does. A broker that refuses orderly answers
/// with a version refusal at once; one that only answers slowly (a JVM just started on a busy
/// machine: a connect or request timeout, a broken connection) is asked again until
/// [`PROBE_PATIENCE`], since a timeout says nothing about the release.
async fn probe(bootstrap: &str) -> orderly_protocol::Result<BrokerConnection> {
    let deadline = std::time::Instant::now() + PROBE_PATIENCE;
    loop {
        match BrokerConnection::connect(bootstrap, &ConnectionConfig::default()).await {
            Err(e) if e.is_retriable() && std::time::Instant::now() < deadline => {
                eprintln!("    {bootstrap} not answering yet ({e}); trying again");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            result => return result,
        }
    }
}
