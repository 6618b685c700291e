//! Requests to the coordinators: the transaction coordinator of the transactional id and the
//! groups' coordinators, found (FindCoordinator) and found again, with the retries an error's
//! [`Action`] allows.

use std::sync::Arc;

use tokio::time::Instant;

use super::error::{Action, error_action};
use super::producer::TransactionalProducer;
use crate::connection::{BrokerConnection, ConnectionKind, backoff_delay};
use crate::error::{Context, Error, ErrorCode};
use crate::messages::Request;

/// Whose coordinator a request goes to.
#[derive(Debug, Clone, Copy)]
pub(super) enum Target<'a> {
    /// The transactional id's transaction coordinator.
    Transaction,
    /// A consumer group's coordinator.
    Group(&'a str),
}

/// Where an error of a request about `topic`/`partition` belongs.
pub(super) fn partition_context(topic: &str, partition: i32) -> Context {
    Context {
        topic: Some(topic.to_string()),
        partition: Some(partition),
        offset: None,
    }
}

impl TransactionalProducer {
    /// Sends `req` to `target`'s coordinator until it is answered without error (`code` reads
    /// the answer's error and where it belongs), retrying with backoff what
    /// [`action`](super::error::action) says a retry or a new coordinator fixes. Returns the
    /// answer, or the action for the last error
    /// ([`Action::Retry`] once `deadline` has passed).
    pub(super) async fn request<R: Request>(
        &self,
        target: Target<'_>,
        req: &R,
        code: impl Fn(&R::Response) -> (ErrorCode, Context),
        deadline: Instant,
    ) -> Result<R::Response, (Action, Error)> {
        let mut attempt = 0;
        loop {
            let e = match self.coordinator(target).await {
                // Bounded by the deadline too: a connection's request timeout may be longer than
                // the whole call may take. A request abandoned so leaves its connection replaced.
                Ok(conn) => {
                    let sent = Instant::now();
                    match tokio::time::timeout_at(deadline, conn.send(req)).await {
                        Ok(Ok(resp)) => {
                            let (c, context) = code(&resp);
                            if c == ErrorCode::NONE {
                                return Ok(resp);
                            }
                            conn.kafka_error(R::NAME, c, context, None)
                        }
                        Ok(Err(e)) => e,
                        Err(_) => Error::RequestTimeout {
                            broker: conn.broker().to_owned(),
                            api: R::NAME,
                            after: sent.elapsed(),
                        },
                    }
                }
                Err(e) => e,
            };
            let act = error_action(&e);
            if !matches!(act, Action::Retry | Action::Rediscover) {
                return Err((act, e));
            }
            if act == Action::Rediscover {
                self.forget_coordinator(target);
            }
            let cfg = self.pool.config();
            let wait = backoff_delay(cfg.backoff_initial, cfg.backoff_max, attempt);
            attempt = attempt.saturating_add(1);
            if Instant::now() + wait >= deadline {
                return Err((Action::Retry, e));
            }
            tracing::debug!(api = R::NAME, error = %e, ?wait, "retrying");
            tokio::time::sleep(wait).await;
        }
    }

    /// A coordination connection to `target`'s coordinator, found (FindCoordinator) if not known.
    pub(super) async fn coordinator(
        &self,
        target: Target<'_>,
    ) -> Result<Arc<BrokerConnection>, Error> {
        let (known, transactional_id) = {
            let inner = self.lock();
            let known = match target {
                Target::Transaction => inner.coordinator.clone(),
                Target::Group(g) => inner.group_coordinators.get(g).cloned(),
            };
            (known, inner.transactional_id.clone())
        };
        let addr = match known {
            Some(a) => a,
            None => {
                let any = self.pool.any().await?;
                let c = match target {
                    Target::Transaction => {
                        any.find_transaction_coordinator(&transactional_id).await?
                    }
                    Target::Group(g) => any.find_coordinator(g).await?,
                };
                let addr = c.addr();
                self.pool.set_broker(c.node_id, addr.clone());
                let mut inner = self.lock();
                match target {
                    Target::Transaction => inner.coordinator = Some(addr.clone()),
                    Target::Group(g) => {
                        inner.group_coordinators.insert(g.to_string(), addr.clone());
                    }
                }
                addr
            }
        };
        let conn = self.pool.get(&addr, ConnectionKind::Coordination).await;
        if conn.is_err() {
            self.forget_coordinator(target);
        }
        conn
    }

    fn forget_coordinator(&self, target: Target<'_>) {
        let mut inner = self.lock();
        match target {
            Target::Transaction => inner.coordinator = None,
            Target::Group(g) => {
                inner.group_coordinators.remove(g);
            }
        }
    }
}
