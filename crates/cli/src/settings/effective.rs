//! The effective settings: what `orderly consume` runs with, every default written out.

use std::net::SocketAddr;

use orderly_consumer::ConsumerConfig;
use orderly_engine::DlqMode;
use orderly_handlers::{HttpFormat, SessionRouter};

use super::choice::Assignor;
use super::flags::ConsumeOpts;
use super::places::{AdminAddr, SessionSource};
use super::resolved::HandlerChoice;
use super::units::Statuses;

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
        transaction_timeout: c.exactly_once.then(|| c.transaction_timeout.into()),
        isolation: Some(c.fetch.isolation.into()),
        parked_topic: (e.dlq_mode == DlqMode::ParkSession).then(|| {
            c.parked_topic
                .clone()
                .unwrap_or_else(|| format!("{}.parked", c.dlq_topic))
        }),
        client_id: Some(c.connection.client_id.clone()),
        connection: o.connection.clone(),
        admin_token: o.admin_token.clone(),
        admin_token_file: o.admin_token_file.clone(),
        session: Some(SessionSource(router.from.clone())),
        no_session: Some(router.missing.into()),
        workers: Some(e.workers),
        session_idle_timeout: Some(e.session_idle_timeout.into()),
        attempt_timeout: Some(e.attempt_timeout.into()),
        stuck_timeout: Some(e.stuck_timeout.into()),
        retry_base: Some(e.retry.base.into()),
        retry_factor: Some(e.retry.factor),
        retry_cap: Some(e.retry.cap.into()),
        retry_max_attempts: Some(e.retry.max_attempts.unwrap_or(0)),
        partition_budget: Some(e.partition_budget_bytes.into()),
        global_budget: Some(e.global_budget_bytes.into()),
        commit_interval: Some(e.commit_interval.into()),
        commit_metadata_limit: Some(e.metadata_limit.into()),
        dedup_header: Some(e.event_id_header.clone().unwrap_or_default()),
        seq_header: Some(e.seq_header.clone().unwrap_or_default()),
        shutdown_timeout: Some(e.drain_timeout.into()),
        dlq_mode: Some(e.dlq_mode.into()),
        revoke_timeout: Some(e.revoke_timeout.into()),
        assignor: Some(
            g.assignors
                .iter()
                .filter_map(|a| Assignor::of(a.as_ref()))
                .collect(),
        ),
        group_protocol: Some(g.protocol.into()),
        server_assignor: g.server_assignor.clone(),
        instance_id: g.instance_id.clone(),
        session_timeout: Some(g.session_timeout.into()),
        heartbeat_interval: Some(g.heartbeat_interval.into()),
        rebalance_timeout: Some(g.rebalance_timeout.into()),
        offset_reset: Some(g.auto_offset_reset.into()),
        admin_addr: Some(AdminAddr(admin)),
        ..ConsumeOpts::default()
    };
    match handler {
        HandlerChoice::Http(h) => {
            out.http = Some(orderly_handlers::redact_url(&h.url));
            out.http_body = Some(h.body.into());
            out.http_concurrency = Some(h.concurrency);
            out.http_adaptive_concurrency = Some(h.adaptive_concurrency);
            out.http_timeout = Some(h.timeout.into());
            out.http_connect_timeout = Some(h.connect_timeout.into());
            out.http_tls_handshake_timeout = Some(h.tls_handshake_timeout.into());
            out.http_h2c = Some(h.h2c);
            out.http_batch_max = Some(e.batch_max);
            out.http_batch_max_bytes = Some(e.batch_max_bytes.into());
            out.http_batch_linger = Some(e.batch_linger.into());
            out.http_ca_file.clone_from(&h.ca_file);
            out.http_client_cert.clone_from(&h.client_cert);
            out.http_client_key.clone_from(&h.client_key);
            out.http_header = o.http_header.clone();
            out.http_signing_secret = o.http_signing_secret.clone();
            out.http_signing_secret_file = o.http_signing_secret_file.clone();
            out.http_retry_on = Some(Statuses(h.classes.retry_on.clone()));
            out.http_dead_letter_on = Some(Statuses(h.classes.dead_letter_on.clone()));
            out.http_format = Some((&h.format).into());
            if let HttpFormat::CloudEvents(ce) = &h.format {
                out.http_ce_type = Some(ce.event_type.clone());
                out.http_ce_source.clone_from(&ce.source);
            }
            out.http_pool_idle_timeout = Some(h.pool_idle_timeout.into());
        }
        HandlerChoice::Exec(x) => {
            out.exec = Some(x.command.clone());
            out.exec_transient_codes = Some(x.transient_codes.clone());
            out.exec_concurrency = Some(x.concurrency);
            out.handler_timeout = Some(x.timeout.into());
            out.pass_env = Some(x.pass_env.clone());
        }
        HandlerChoice::Pipe(p) => {
            out.pipe = Some(p.command.clone());
            out.pipe_concurrency = Some(p.concurrency);
            out.pipe_batch_max = Some(e.batch_max);
            out.pipe_batch_max_bytes = Some(e.batch_max_bytes.into());
            out.pipe_batch_linger = Some(e.batch_linger.into());
            out.handler_timeout = Some(p.timeout.into());
            out.pass_env = Some(p.pass_env.clone());
        }
    }
    out
}
