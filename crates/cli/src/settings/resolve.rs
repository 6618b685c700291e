//! Validation: `ConsumeOpts` (file, variables and flags merged) into the library types.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use orderly_consumer::ConsumerConfig;
use orderly_consumer::RecordHook;
use orderly_engine::{EngineConfig, RetryPolicy};
use orderly_handlers::http::{CloudEvents, ExtraHeader, SigningKey, StatusClasses};
use orderly_handlers::{ExecConfig, HttpConfig, HttpFormat, PipeConfig, SessionRouter};

use super::choice;
use super::effective::effective;
use super::flags::ConsumeOpts;
use super::places::AdminAddr;
use super::resolved::{HandlerChoice, Resolved};
use super::secret::{Secret, secret};
use super::units::HumanDuration;

impl ConsumeOpts {
    /// Validates everything and builds the library configuration.
    pub fn resolve(self) -> Result<Resolved> {
        let o = self.with_file()?;
        let bootstrap = o.bootstrap.clone().filter(|b| !b.is_empty()).context(
            "no brokers: pass --bootstrap host:port (or ORDERLY_BOOTSTRAP, or bootstrap in --config)",
        )?;
        let group = o
            .group
            .clone()
            .context("no group: pass --group G (or ORDERLY_GROUP)")?;
        let topics = o
            .topic
            .clone()
            .filter(|t| !t.is_empty())
            .context("no topic: pass --topic T[,T2] (or ORDERLY_TOPIC)")?;
        let mut c = ConsumerConfig::new(bootstrap, group, topics);
        if let Some(d) = &o.dlq_topic {
            c.dlq_topic.clone_from(d);
        }
        c.parked_topic.clone_from(&o.parked_topic);
        c.reply_topic = o.reply_topic.clone().filter(|t| !t.is_empty());
        if let Some(t) = c
            .reply_topic
            .as_ref()
            .filter(|t| c.group.topics.contains(t))
        {
            bail!(
                "invalid value {t:?} for --reply-topic: it is also consumed (--topic); that would loop"
            );
        }
        c.exactly_once = o.exactly_once.unwrap_or(false);
        c.transactional_id = o.transactional_id.clone().filter(|t| !t.is_empty());
        if let Some(t) = o.transaction_timeout {
            c.transaction_timeout = t.0;
        }
        anyhow::ensure!(
            c.exactly_once || (c.transactional_id.is_none() && o.transaction_timeout.is_none()),
            "--transactional-id and --transaction-timeout need --exactly-once"
        );
        c.fetch.isolation = o.isolation.unwrap_or_default().into();
        if let Some(id) = &o.client_id {
            c.connection.client_id.clone_from(id);
        }
        o.connection.apply(&mut c.connection)?;

        // Handler.
        let timeout = o
            .handler_timeout
            .map(|d| positive("--handler-timeout", d))
            .transpose()?
            .unwrap_or(Duration::from_secs(30));
        let handler = match (&o.http, &o.exec, &o.pipe) {
            (Some(url), None, None) => {
                let mut h = HttpConfig::new(url.clone());
                h.body = o.http_body.unwrap_or_default().into();
                if let Some(n) = o.http_concurrency {
                    h.concurrency = at_least_one("--http-concurrency", n)?;
                }
                if let Some(t) = o.http_timeout {
                    h.timeout = positive("--http-timeout", t)?;
                }
                if let Some(t) = o.http_connect_timeout {
                    h.connect_timeout = positive("--http-connect-timeout", t)?;
                }
                if let Some(t) = o.http_tls_handshake_timeout {
                    h.tls_handshake_timeout = positive("--http-tls-handshake-timeout", t)?;
                }
                h.validate()?;
                h.h2c = o.http_h2c.unwrap_or(false);
                h.adaptive_concurrency = o.http_adaptive_concurrency.unwrap_or(false);
                http_service_settings(&o, &mut h)?;
                h.reply_with_body = c.reply_topic.is_some();
                HandlerChoice::Http(h)
            }
            (None, Some(cmd), None) => {
                let mut e = ExecConfig::new(cmd.clone());
                if let Some(codes) = &o.exec_transient_codes {
                    e.transient_codes.clone_from(codes);
                }
                if let Some(n) = o.exec_concurrency {
                    e.concurrency = at_least_one("--exec-concurrency", n)?;
                }
                e.timeout = timeout;
                e.pass_env = o.pass_env.clone().unwrap_or_default();
                HandlerChoice::Exec(e)
            }
            (None, None, Some(cmd)) => {
                let mut p = PipeConfig::new(cmd.clone());
                if let Some(n) = o.pipe_concurrency {
                    p.concurrency = at_least_one("--pipe-concurrency", n)?;
                }
                p.timeout = timeout;
                p.pass_env = o.pass_env.clone().unwrap_or_default();
                HandlerChoice::Pipe(p)
            }
            (None, None, None) => {
                bail!("no handler: pass one of --http URL, --exec CMD or --pipe CMD")
            }
            _ => bail!("more than one handler: pass only one of --http, --exec and --pipe"),
        };
        let router = SessionRouter::new(
            o.session.clone().unwrap_or_default().0,
            o.no_session.unwrap_or_default().into(),
        );

        // Engine.
        let e = &mut c.engine;
        e.session_id = router.engine_source();
        if router.needs_prepare() {
            let r = router.clone();
            c.fetch.prepare = Some(RecordHook(Arc::new(move |rec| r.prepare(rec))));
        }
        if let Some(w) = o.workers {
            e.workers = at_least_one("--workers", w)?;
        }
        let dur = |v: Option<HumanDuration>, d: Duration| v.map_or(d, |v| v.0);
        e.session_idle_timeout = dur(o.session_idle_timeout, e.session_idle_timeout);
        // The handlers bound their own work; an engine limit on top is opt-in.
        e.attempt_timeout = o.attempt_timeout.and_then(|d| d.0);
        if let Some(d) = o.stuck_timeout {
            e.stuck_timeout = d.0;
        }
        e.retry = RetryPolicy {
            base: dur(o.retry_base, e.retry.base),
            factor: o.retry_factor.unwrap_or(e.retry.factor),
            cap: dur(o.retry_cap, e.retry.cap),
            max_attempts: match o.retry_max_attempts {
                Some(0) => None,
                Some(n) => Some(n),
                None => e.retry.max_attempts,
            },
        };
        anyhow::ensure!(
            e.retry.factor.is_finite() && e.retry.factor >= 1.0,
            "invalid value {} for --retry-factor: must be at least 1",
            e.retry.factor
        );
        if let Some(b) = o.partition_budget {
            e.partition_budget_bytes = b.0;
        }
        batch_settings(&o, e)?;
        if let Some(b) = o.global_budget {
            e.global_budget_bytes = b.0;
        }
        e.commit_interval = dur(o.commit_interval, e.commit_interval);
        anyhow::ensure!(
            !e.commit_interval.is_zero(),
            "invalid value 0 for --commit-interval: must be greater than 0"
        );
        if let Some(b) = o.commit_metadata_limit {
            e.metadata_limit = b.0;
        }
        e.drain_timeout = dur(o.shutdown_timeout, e.drain_timeout);
        e.dlq_mode = o.dlq_mode.unwrap_or_default().into();
        e.revoke_timeout = dur(o.revoke_timeout, e.revoke_timeout);
        if let Some(h) = &o.dedup_header {
            e.event_id_header = (!h.is_empty()).then(|| h.clone());
        }
        if let Some(h) = &o.seq_header {
            e.seq_header = (!h.is_empty()).then(|| h.clone());
        }

        // Group.
        let g = &mut c.group;
        if let Some(names) = &o.assignor {
            g.assignors = names.iter().map(|&a| a.into()).collect();
        }
        g.protocol = o.group_protocol.unwrap_or_default().into();
        g.server_assignor.clone_from(&o.server_assignor);
        g.instance_id.clone_from(&o.instance_id);
        let positive_or = |key: &str, v: Option<HumanDuration>, d: Duration| -> Result<Duration> {
            v.map_or(Ok(d), |v| positive(key, v))
        };
        g.session_timeout = positive_or("--session-timeout", o.session_timeout, g.session_timeout)?;
        g.heartbeat_interval = positive_or(
            "--heartbeat-interval",
            o.heartbeat_interval,
            g.heartbeat_interval,
        )?;
        g.rebalance_timeout = positive_or(
            "--rebalance-timeout",
            o.rebalance_timeout,
            g.rebalance_timeout,
        )?;
        g.auto_offset_reset = o.offset_reset.unwrap_or_default().into();
        g.validate()
            .map_err(|e| anyhow::anyhow!("invalid group settings: {e}"))?;

        // CloudEvents ids come from the same header as the engine's dedup.
        let mut handler = handler;
        if let HandlerChoice::Http(HttpConfig {
            format: HttpFormat::CloudEvents(ce),
            ..
        }) = &mut handler
        {
            ce.id_header.clone_from(&c.engine.event_id_header);
        }

        let admin_addr = o.admin_addr.unwrap_or(AdminAddr::DEFAULT).0;
        let admin_token = secret(
            "--admin-token",
            o.admin_token.as_ref(),
            "--admin-token-file",
            o.admin_token_file.as_deref(),
        )?
        .map(Secret);
        if let Some(Secret(t)) = &admin_token {
            anyhow::ensure!(
                !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()),
                "the admin token must be non-empty printable ASCII without spaces"
            );
        }
        let effective = effective(&o, &c, &handler, &router, admin_addr);
        Ok(Resolved {
            consumer: c,
            handler,
            router,
            admin_addr,
            admin_token,
            effective,
        })
    }
}

/// The batch settings of the handler that runs, `--http-batch-*` or `--pipe-batch-*`. They are
/// the engine's (`EngineConfig::batch_max`, `batch_max_bytes`, `batch_linger`): a run has one
/// handler, and each name says which handler a batch setting is for, so a setting for another
/// handler is refused instead of silently applied.
fn batch_settings(o: &ConsumeOpts, e: &mut EngineConfig) -> Result<()> {
    let handlers = [
        (
            "http",
            o.http.is_some(),
            o.http_batch_max,
            o.http_batch_max_bytes,
            o.http_batch_linger,
        ),
        (
            "pipe",
            o.pipe.is_some(),
            o.pipe_batch_max,
            o.pipe_batch_max_bytes,
            o.pipe_batch_linger,
        ),
    ];
    for (name, runs, max, bytes, linger) in handlers {
        if let Some(n) = max {
            anyhow::ensure!(
                n > 0,
                "invalid value 0 for --{name}-batch-max: must be at least 1"
            );
            anyhow::ensure!(
                runs || n == 1,
                "--{name}-batch-max needs --{name} (--{name}-batch-* set the batches of that handler)"
            );
        }
        if !runs {
            continue;
        }
        if let Some(n) = max {
            e.batch_max = n;
        }
        if let Some(b) = bytes {
            e.batch_max_bytes = b.0;
            anyhow::ensure!(
                e.batch_max_bytes > 0,
                "invalid value 0 for --{name}-batch-max-bytes"
            );
        }
        if let Some(d) = linger {
            e.batch_linger = d.0;
            anyhow::ensure!(
                e.batch_linger.is_zero() || e.batch_max > 1,
                "--{name}-batch-linger needs --{name}-batch-max above 1 (a batch to fill)"
            );
        }
    }
    Ok(())
}

/// The `--http-*` settings of what a service behind a webhook needs: TLS files, extra headers,
fn http_service_settings(o: &ConsumeOpts, h: &mut HttpConfig) -> Result<()> {
    h.ca_file.clone_from(&o.http_ca_file);
    h.client_cert.clone_from(&o.http_client_cert);
    h.client_key.clone_from(&o.http_client_key);
    anyhow::ensure!(
        h.client_cert.is_some() == h.client_key.is_some(),
        "--http-client-cert and --http-client-key go together"
    );
    let https = h.url.starts_with("https://");
    anyhow::ensure!(
        https || (h.ca_file.is_none() && h.client_cert.is_none()),
        "--http-ca-file and --http-client-cert need an https:// handler URL"
    );
    for spec in o.http_header.iter().flatten() {
        h.headers
            .push(ExtraHeader::parse(&spec.0).map_err(|e| anyhow::anyhow!("--http-header: {e}"))?);
    }
    let secret = match (&o.http_signing_secret, &o.http_signing_secret_file) {
        (Some(s), _) => Some(s.0.clone()),
        (None, Some(f)) => Some(
            std::fs::read_to_string(f)
                .with_context(|| format!("cannot read --http-signing-secret-file {}", f.display()))?
                .trim_end_matches(['\n', '\r'])
                .to_owned(),
        ),
        (None, None) => None,
    };
    if let Some(s) = secret {
        anyhow::ensure!(!s.is_empty(), "the request signing secret is empty");
        h.signing_key = Some(SigningKey::new(s.into_bytes()));
    }
    let d = StatusClasses::default();
    h.classes = StatusClasses {
        retry_on: o.http_retry_on.clone().map_or(d.retry_on, |s| s.0),
        dead_letter_on: o
            .http_dead_letter_on
            .clone()
            .map_or(d.dead_letter_on, |s| s.0),
    };
    h.format = match o.http_format.unwrap_or_default() {
        choice::HttpFormat::Plain => {
            anyhow::ensure!(
                o.http_ce_type.is_none() && o.http_ce_source.is_none(),
                "--http-ce-type and --http-ce-source need --http-format cloudevents"
            );
            HttpFormat::Plain
        }
        choice::HttpFormat::CloudEvents => {
            let mut ce = CloudEvents::default();
            if let Some(t) = &o.http_ce_type {
                ce.event_type.clone_from(t);
            }
            ce.source.clone_from(&o.http_ce_source);
            HttpFormat::CloudEvents(ce)
        }
    };
    if let Some(t) = o.http_pool_idle_timeout {
        h.pool_idle_timeout = t.0;
    }
    Ok(())
}

/// A duration that must be more than zero (a timeout of 0 would fail everything at once).
fn positive(key: &str, d: HumanDuration) -> Result<Duration> {
    anyhow::ensure!(
        !d.0.is_zero(),
        "invalid value \"{d}\" for {key}: must be greater than 0"
    );
    Ok(d.0)
}

/// A count that must be at least 1 (no HTTP requests, processes or workers would run nothing).
fn at_least_one(key: &str, n: usize) -> Result<usize> {
    anyhow::ensure!(n > 0, "invalid value 0 for {key}: must be at least 1");
    Ok(n)
}
