//! The effective settings: what `orderly consume` runs with, every default written out.

use std::net::SocketAddr;

use orderly_consumer::ConsumerConfig;
use orderly_engine::DlqMode;
use orderly_group::AutoOffsetReset;
use orderly_group::config::GroupProtocol;
use orderly_handlers::{HttpBody, HttpFormat, SessionRouter};

use super::flags::ConsumeOpts;
use super::resolved::HandlerChoice;
use super::units::{fmt_bytes, fmt_duration};

/// The settings with every default written out.
pub(super) fn effective(
    o: &ConsumeOpts,
    c: &ConsumerConfig,
    handler: &HandlerChoice,
    router: &SessionRouter,
    admin: Option<SocketAddr>,
) -> ConsumeOpts {
    let e = &c.engine;
    let g = &c.group;
    let mut out = ConsumeOpts {
        config: o.config.clone(),
        bootstrap: Some(c.bootstrap.clone()),
        group: Some(g.group_id.clone()),
        topic: Some(g.topics.clone()),
        dlq_topic: Some(c.dlq_topic.clone()),
        reply_topic: c.reply_topic.clone(),
        exactly_once: Some(c.exactly_once),
        transactional_id: c.transactional_id.clone(),
        transaction_timeout: c.exactly_once.then(|| fmt_duration(c.transaction_timeout)),
        isolation: Some(
            match c.fetch.isolation {
                orderly_protocol::IsolationLevel::ReadUncommitted => "read-uncommitted",
                _ => "read-committed",
            }
            .into(),
        ),
        parked_topic: (e.dlq_mode == DlqMode::ParkSession).then(|| {
            c.parked_topic
                .clone()
                .unwrap_or_else(|| format!("{}.parked", c.dlq_topic))
        }),
        client_id: Some(c.connection.client_id.clone()),
        sasl_mechanism: o.sasl_mechanism.clone(),
        sasl_username: o.sasl_username.clone(),
        sasl_password: o.sasl_password.clone(),
        sasl_password_file: o.sasl_password_file.clone(),
        admin_token: o.admin_token.clone(),
        admin_token_file: o.admin_token_file.clone(),
        tls_ca_file: o.tls_ca_file.clone(),
        tls_server_name: o.tls_server_name.clone(),
        session: Some(router.from.to_string()),
        no_session: Some(router.missing.to_string()),
        workers: Some(e.workers),
        session_idle_timeout: Some(fmt_duration(e.session_idle_timeout)),
        attempt_timeout: Some(e.attempt_timeout.map_or("off".into(), fmt_duration)),
        stuck_timeout: Some(e.stuck_timeout.map_or("off".into(), fmt_duration)),
        retry_base: Some(fmt_duration(e.retry.base)),
        retry_factor: Some(e.retry.factor),
        retry_cap: Some(fmt_duration(e.retry.cap)),
        retry_max_attempts: Some(e.retry.max_attempts.unwrap_or(0)),
        partition_budget: Some(fmt_bytes(e.partition_budget_bytes)),
        global_budget: Some(fmt_bytes(e.global_budget_bytes)),
        commit_interval: Some(fmt_duration(e.commit_interval)),
        commit_metadata_limit: Some(fmt_bytes(e.metadata_limit)),
        dedup_header: Some(e.event_id_header.clone().unwrap_or_default()),
        seq_header: Some(e.seq_header.clone().unwrap_or_default()),
        shutdown_timeout: Some(fmt_duration(e.drain_timeout)),
        dlq_mode: Some(
            if e.dlq_mode == DlqMode::ParkSession {
                "park-session"
            } else {
                "continue"
            }
            .into(),
        ),
        revoke_timeout: Some(fmt_duration(e.revoke_timeout)),
        assignor: Some(g.assignors.iter().map(|a| a.name().to_owned()).collect()),
        group_protocol: Some(
            if g.protocol == GroupProtocol::Consumer {
                "consumer"
            } else {
                "classic"
            }
            .into(),
        ),
        server_assignor: g.server_assignor.clone(),
        instance_id: g.instance_id.clone(),
        session_timeout: Some(fmt_duration(g.session_timeout)),
        heartbeat_interval: Some(fmt_duration(g.heartbeat_interval)),
        rebalance_timeout: Some(fmt_duration(g.rebalance_timeout)),
        offset_reset: Some(
            if g.auto_offset_reset == AutoOffsetReset::Earliest {
                "earliest"
            } else {
                "latest"
            }
            .into(),
        ),
        admin_addr: Some(admin.map_or("off".into(), |a| a.to_string())),
        ..ConsumeOpts::default()
    };
    match handler {
        HandlerChoice::Http(h) => {
            out.http = Some(orderly_handlers::redact_url(&h.url));
            out.http_body = Some(
                if h.body == HttpBody::Json {
                    "json"
                } else {
                    "raw"
                }
                .into(),
            );
            out.http_concurrency = Some(h.concurrency);
            out.http_adaptive_concurrency = Some(h.adaptive_concurrency);
            out.http_timeout = Some(fmt_duration(h.timeout));
            out.http_h2c = Some(h.h2c);
            out.http_batch_max = Some(e.batch_max);
            out.http_batch_max_bytes = Some(fmt_bytes(e.batch_max_bytes));
            out.http_batch_linger = Some(fmt_duration(e.batch_linger));
            out.http_ca_file.clone_from(&h.ca_file);
            out.http_client_cert.clone_from(&h.client_cert);
            out.http_client_key.clone_from(&h.client_key);
            out.http_header = o.http_header.clone();
            out.http_signing_secret = o.http_signing_secret.clone();
            out.http_signing_secret_file = o.http_signing_secret_file.clone();
            out.http_retry_on = Some(h.classes.retry_on.to_string());
            out.http_dead_letter_on = Some(h.classes.dead_letter_on.to_string());
            match &h.format {
                HttpFormat::CloudEvents(ce) => {
                    out.http_format = Some("cloudevents".into());
                    out.http_ce_type = Some(ce.event_type.clone());
                    out.http_ce_source.clone_from(&ce.source);
                }
                _ => out.http_format = Some("plain".into()),
            }
            out.http_pool_idle_timeout = Some(fmt_duration(h.pool_idle_timeout));
        }
        HandlerChoice::Exec(x) => {
            out.exec = Some(x.command.clone());
            out.exec_transient_codes = Some(x.transient_codes.clone());
            out.exec_concurrency = Some(x.concurrency);
            out.handler_timeout = Some(fmt_duration(x.timeout));
            out.pass_env = Some(x.pass_env.clone());
        }
        HandlerChoice::Pipe(p) => {
            out.pipe = Some(p.command.clone());
            out.pipe_concurrency = Some(p.concurrency);
            out.pipe_batch_max = Some(e.batch_max);
            out.pipe_batch_max_bytes = Some(fmt_bytes(e.batch_max_bytes));
            out.pipe_batch_linger = Some(fmt_duration(e.batch_linger));
            out.handler_timeout = Some(fmt_duration(p.timeout));
            out.pass_env = Some(p.pass_env.clone());
        }
    }
    out
}
