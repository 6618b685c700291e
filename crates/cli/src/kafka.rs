//! Kafka plumbing the operator commands share: connection flags, a whole-topic reader, a batching producer.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use orderly_consumer::Cluster;
use orderly_protocol::messages::list_offsets::{EARLIEST, LATEST};
use orderly_protocol::partitioner::partition_for_key;
use orderly_protocol::records::{IsolationLevel, ProduceRecord, Record};
use orderly_protocol::{
    ConnectionConfig, ConnectionKind, ConnectionPool, FetchOptions, FetchSpec, Producer,
    ProducerConfig,
};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::settings::Secret;

/// A connection pool and its metadata cache.
pub type Connected = (Arc<ConnectionPool>, Cluster);

/// Brokers and credentials, shared by `produce`, `dlq` and `status`.
#[derive(clap::Args, Debug, Clone)]
pub struct KafkaArgs {
    /// Bootstrap brokers, host:port[,host:port].
    #[arg(
        long,
        env = "ORDERLY_BOOTSTRAP",
        value_delimiter = ',',
        required = true
    )]
    pub bootstrap: Vec<String>,
    /// SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    #[arg(long, env = "ORDERLY_SASL_MECHANISM")]
    pub sasl_mechanism: Option<String>,
    /// SASL user name.
    #[arg(long, env = "ORDERLY_SASL_USERNAME")]
    pub sasl_username: Option<String>,
    /// SASL password (prefer the variable or --sasl-password-file).
    #[arg(long, env = "ORDERLY_SASL_PASSWORD", hide_env_values = true)]
    pub sasl_password: Option<Secret>,
    /// File holding the SASL password.
    #[arg(long, env = "ORDERLY_SASL_PASSWORD_FILE")]
    pub sasl_password_file: Option<PathBuf>,
    /// TLS: trust the CA certificates in this PEM file (certificate and host name are verified).
    #[arg(long, env = "ORDERLY_TLS_CA_FILE")]
    pub tls_ca_file: Option<PathBuf>,
    /// TLS: verify broker certificates against this name.
    #[arg(long, env = "ORDERLY_TLS_SERVER_NAME")]
    pub tls_server_name: Option<String>,
}

impl KafkaArgs {
    /// The connection settings.
    pub fn connection(&self) -> Result<ConnectionConfig> {
        let mut c = ConnectionConfig {
            connect_attempts: 2,
            ..ConnectionConfig::default()
        };
        if let Some(m) = &self.sasl_mechanism {
            let username = self
                .sasl_username
                .clone()
                .context("--sasl-mechanism needs --sasl-username")?;
            let password = match (&self.sasl_password, &self.sasl_password_file) {
                (Some(p), _) => p.expose().to_owned(),
                (None, Some(f)) => std::fs::read_to_string(f)
                    .with_context(|| format!("cannot read {}", f.display()))?
                    .trim_end_matches(['\n', '\r'])
                    .to_owned(),
                (None, None) => anyhow::bail!(
                    "--sasl-mechanism needs a password: ORDERLY_SASL_PASSWORD or --sasl-password-file"
                ),
            };
            c.sasl = Some(crate::settings::sasl(m, username, password)?);
        }
        crate::settings::apply_tls(
            &mut c,
            self.tls_ca_file.as_deref(),
            self.tls_server_name.as_deref(),
        )?;
        Ok(c)
    }

    /// A pool and a metadata cache on these brokers, checked reachable.
    pub async fn connect(&self, topics: Vec<String>) -> Result<Connected> {
        let pool = Arc::new(ConnectionPool::new(
            self.bootstrap.clone(),
            self.connection()?,
        ));
        let cluster = Cluster::new(pool.clone(), topics, Duration::from_secs(300));
        cluster
            .refresh(&[])
            .await
            .with_context(|| format!("cannot reach the brokers {}", self.bootstrap.join(",")))?;
        Ok((pool, cluster))
    }
}

/// Reads every record of `topic` from `from` (per partition; default earliest) up to the high
/// watermark at the time of the call.
pub async fn read_topic(
    pool: &Arc<ConnectionPool>,
    cluster: &Cluster,
    topic: &str,
) -> Result<Vec<(i32, Record)>> {
    let n = cluster
        .wait_for_topic(topic, Duration::from_secs(5))
        .await
        .with_context(|| format!("topic {topic}"))?;
    let mut out = Vec::new();
    for p in 0..n {
        let mut pos = cluster
            .list_offset(topic, p, EARLIEST, IsolationLevel::ReadCommitted)
            .await?;
        let end = cluster
            .list_offset(topic, p, LATEST, IsolationLevel::ReadCommitted)
            .await?;
        while pos < end {
            let leader = cluster
                .leader(topic, p)
                .with_context(|| format!("no leader for {topic}-{p}"))?;
            let conn = pool.broker(leader.node_id, ConnectionKind::Fetch).await?;
            let spec = FetchSpec {
                topic: topic.to_owned(),
                topic_id: [0; 16],
                partition: p,
                offset: pos,
                leader_epoch: -1,
                max_bytes: 4 << 20,
            };
            let opts = FetchOptions {
                max_wait: Duration::from_millis(100),
                ..FetchOptions::default()
            };
            let fetched = conn.fetch(&[spec], &opts).await?;
            let Some(pf) = fetched.into_iter().next() else {
                break;
            };
            if let Some(e) = pf.error {
                return Err(e).with_context(|| format!("fetching {topic}-{p} at {pos}"));
            }
            if pf.next_offset <= pos {
                break;
            }
            pos = pf.next_offset;
            out.extend(
                pf.records
                    .into_iter()
                    .filter(|r| r.offset < end)
                    .map(|r| (p, r)),
            );
        }
    }
    Ok(out)
}

/// Produces records in batches, one batch in flight per partition (so order per partition holds),
/// partitions in parallel, acks=all. Keys are partitioned like Java's default partitioner.
pub struct Batcher {
    partitions: i32,
    pending: BTreeMap<i32, Vec<ProduceRecord>>,
    lanes: BTreeMap<i32, mpsc::Sender<Vec<ProduceRecord>>>,
    tasks: JoinSet<Result<u64>>,
    producer: Arc<Producer>,
    topic: String,
    max_batch: usize,
    round_robin: i32,
}

impl Batcher {
    /// A batcher for `topic`.
    pub async fn new(pool: Arc<ConnectionPool>, cluster: &Cluster, topic: &str) -> Result<Self> {
        let partitions = cluster
            .wait_for_topic(topic, Duration::from_secs(5))
            .await
            .with_context(|| format!("topic {topic}"))?;
        Ok(Self {
            partitions,
            pending: BTreeMap::new(),
            lanes: BTreeMap::new(),
            tasks: JoinSet::new(),
            producer: Arc::new(Producer::new(pool, ProducerConfig::default())),
            topic: topic.to_owned(),
            max_batch: 1000,
            round_robin: 0,
        })
    }

    /// The partition a record goes to.
    pub fn partition_of(&mut self, r: &ProduceRecord) -> i32 {
        match r.key.as_deref() {
            Some(k) => partition_for_key(k, self.partitions),
            None => {
                self.round_robin = (self.round_robin + 1) % self.partitions.max(1);
                self.round_robin
            }
        }
    }

    /// Queues one record to an explicit partition.
    pub async fn push_to(&mut self, p: i32, r: ProduceRecord) -> Result<()> {
        let q = self.pending.entry(p).or_default();
        q.push(r);
        if q.len() >= self.max_batch {
            self.flush_partition(p).await?;
        }
        Ok(())
    }

    /// Queues one record.
    pub async fn push(&mut self, r: ProduceRecord) -> Result<()> {
        let p = self.partition_of(&r);
        self.push_to(p, r).await
    }

    async fn flush_partition(&mut self, p: i32) -> Result<()> {
        let Some(batch) = self.pending.remove(&p).filter(|b| !b.is_empty()) else {
            return Ok(());
        };
        if !self.lanes.contains_key(&p) {
            let (tx, mut rx) = mpsc::channel::<Vec<ProduceRecord>>(4);
            let (producer, topic) = (self.producer.clone(), self.topic.clone());
            self.tasks.spawn(async move {
                let mut n = 0u64;
                while let Some(b) = rx.recv().await {
                    producer
                        .send_batch(&topic, p, &b)
                        .await
                        .with_context(|| format!("producing to {topic}-{p}"))?;
                    n += b.len() as u64;
                }
                Ok(n)
            });
            self.lanes.insert(p, tx);
        }
        if let Some(tx) = self.lanes.get(&p) {
            if tx.send(batch).await.is_err() {
                // The lane failed; its error comes out of `finish`.
                return self.finish_err().await;
            }
        }
        Ok(())
    }

    async fn finish_err(&mut self) -> Result<()> {
        self.lanes.clear();
        while let Some(r) = self.tasks.join_next().await {
            r.context("producer task")??;
        }
        anyhow::bail!("a producer lane stopped")
    }

    /// Sends whatever is queued.
    pub async fn flush(&mut self) -> Result<()> {
        let ps: Vec<i32> = self.pending.keys().copied().collect();
        for p in ps {
            self.flush_partition(p).await?;
        }
        Ok(())
    }

    /// Flushes, waits for every acknowledgement and returns the records written.
    pub async fn finish(mut self) -> Result<u64> {
        self.flush().await?;
        self.lanes.clear();
        let mut n = 0;
        while let Some(r) = self.tasks.join_next().await {
            n += r.context("producer task")??;
        }
        Ok(n)
    }
}
