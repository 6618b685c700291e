//! Broker processes: format a KRaft data directory, start `kafka.Kafka`, wait until it serves, stop it.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::dist::{KafkaDist, SERVER_PROPERTIES, write};
use crate::{Error, Result};

/// How long a broker may take from `java` launch to serving clients.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Options for [`start`].
#[derive(Debug, Clone)]
pub struct BrokerOptions {
    /// JVM heap (`-Xms` and `-Xmx`), e.g. `"512m"`.
    pub heap: String,
    /// Client port; `None` picks a free one.
    pub port: Option<u16>,
    /// Extra `server.properties` lines appended after the template (a later line wins over an
    /// earlier one with the same key). `__PORT__`, `__CPORT__` and `__DIR__` are substituted here too.
    pub extra_properties: Vec<String>,
    /// Listeners served next to the plaintext client listener (which stays the inter-broker one).
    pub extra_listeners: Vec<Listener>,
    /// Extra arguments for `kafka-storage format`, e.g. `--add-scram` to create SCRAM users.
    pub format_args: Vec<String>,
}

impl Default for BrokerOptions {
    fn default() -> Self {
        BrokerOptions {
            heap: "768m".into(),
            port: None,
            extra_properties: Vec::new(),
            extra_listeners: Vec::new(),
            format_args: Vec::new(),
        }
    }
}

/// An additional broker listener on `127.0.0.1:<port>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    /// Listener name, e.g. `SASL_PLAINTEXT`; its settings use the prefix `listener.name.<lowercase name>.`.
    pub name: String,
    /// Security protocol: `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`.
    pub protocol: String,
    /// Port on loopback.
    pub port: u16,
}

/// Name of the listener [`BrokerOptions::with_sasl_listener`] adds.
pub const SASL_LISTENER: &str = "SASL_PLAINTEXT";
/// Name of the listener [`BrokerOptions::with_ssl_listener`] adds.
pub const SSL_LISTENER: &str = "SSL";

impl BrokerOptions {
    /// Adds a `SASL_PLAINTEXT` listener on `port` with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512
    /// enabled. Each `(user, password)` is accepted by PLAIN (JAAS `user_<name>` entries) and is
    /// created as a SCRAM-SHA-256 and a SCRAM-SHA-512 credential when the storage is formatted.
    pub fn with_sasl_listener(mut self, port: u16, users: &[(&str, &str)]) -> Self {
        let prefix = format!("listener.name.{}", SASL_LISTENER.to_ascii_lowercase());
        self.extra_listeners.push(Listener {
            name: SASL_LISTENER.into(),
            protocol: "SASL_PLAINTEXT".into(),
            port,
        });
        let plain_users: String = users
            .iter()
            .map(|(u, p)| format!(" user_{u}=\"{p}\""))
            .collect();
        self.extra_properties.extend([
            format!("{prefix}.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"),
            format!(
                "{prefix}.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required{plain_users};"
            ),
            format!(
                "{prefix}.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            format!(
                "{prefix}.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
        ]);
        for (u, p) in users {
            for mech in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
                self.format_args.push("--add-scram".into());
                self.format_args
                    .push(format!("{mech}=[name={u},password={p}]"));
            }
        }
        self
    }

    /// Adds an `SSL` listener on `port` serving the key and certificate chain in the PKCS12
    /// `keystore` (store and key password `password`). Clients are not asked for certificates.
    pub fn with_ssl_listener(mut self, port: u16, keystore: &Path, password: &str) -> Self {
        let prefix = format!("listener.name.{}", SSL_LISTENER.to_ascii_lowercase());
        self.extra_listeners.push(Listener {
            name: SSL_LISTENER.into(),
            protocol: "SSL".into(),
            port,
        });
        self.extra_properties.extend([
            format!("{prefix}.ssl.keystore.type=PKCS12"),
            format!("{prefix}.ssl.keystore.location={}", keystore.display()),
            format!("{prefix}.ssl.keystore.password={password}"),
            format!("{prefix}.ssl.key.password={password}"),
            format!("{prefix}.ssl.client.auth=none"),
        ]);
        self
    }

    /// The `listeners`, `advertised.listeners` and `listener.security.protocol.map` lines that
    /// add [`BrokerOptions::extra_listeners`] to the template's (none when there are none).
    fn listener_properties(&self, port: u16, cport: u16) -> Vec<String> {
        if self.extra_listeners.is_empty() {
            return Vec::new();
        }
        let mut listeners = format!("PLAINTEXT://127.0.0.1:{port}");
        let mut map = String::from("CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT");
        for l in &self.extra_listeners {
            listeners.push_str(&format!(",{}://127.0.0.1:{}", l.name, l.port));
            map.push_str(&format!(",{}:{}", l.name, l.protocol));
        }
        let controller = format!(",CONTROLLER://127.0.0.1:{cport}");
        vec![
            format!("listeners={listeners}{controller}"),
            format!("advertised.listeners={listeners}{controller}"),
            format!("listener.security.protocol.map={map}"),
        ]
    }
}

/// A broker started by [`start`]; its state lives in `dir`.
#[derive(Debug, Clone)]
pub struct RunningBroker {
    /// Process id of the `java` process.
    pub pid: u32,
    /// `127.0.0.1:<port>`.
    pub bootstrap: String,
    /// State directory: `server.properties`, `data/`, `broker.log`, `broker.pid`, `bootstrap`.
    pub dir: PathBuf,
}

impl RunningBroker {
    /// The file holding the broker's stdout and stderr.
    pub fn log(&self) -> PathBuf {
        self.dir.join("broker.log")
    }

    /// Reads a broker recorded in `dir` by an earlier [`start`], if its process still runs.
    pub fn read(dir: &Path) -> Option<RunningBroker> {
        let pid = std::fs::read_to_string(dir.join("broker.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let bootstrap = std::fs::read_to_string(dir.join("bootstrap"))
            .ok()?
            .trim()
            .to_string();
        let b = RunningBroker {
            pid,
            bootstrap,
            dir: dir.to_path_buf(),
        };
        b.is_alive().then_some(b)
    }

    /// True if the recorded pid is a live `kafka.Kafka` process started with this directory's
    /// configuration (so a recycled pid is never mistaken for our broker).
    pub fn is_alive(&self) -> bool {
        is_our_broker(self.pid, &self.dir)
    }
}

/// Picks a free TCP port on loopback for a broker or a test server to listen on.
///
/// The port comes from outside the kernel's ephemeral range (`ip_local_port_range`): a port
/// that `bind(0)` hands out lies in that range, and until the broker binds it, any outgoing
/// connection of any process (the tests' clients open thousands) may take it as its local
/// port. A random port below the range (or above it) that binds now is returned; only if none
/// does, one from `bind(0)`.
pub fn free_port() -> Result<u16> {
    let (lo, hi) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|v| v.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999));
    let (from, to) = if lo > 12_000 {
        (10_000u16, lo)
    } else {
        (hi.saturating_add(1).max(1024), u16::MAX)
    };
    if from < to {
        use std::hash::{BuildHasher, Hasher};
        let state = std::collections::hash_map::RandomState::new();
        for attempt in 0u32..200 {
            let mut h = state.build_hasher();
            h.write_u32(std::process::id());
            h.write_u32(attempt);
            let port = from + u16::try_from(h.finish() % u64::from(to - from)).unwrap_or(0);
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return Ok(port);
            }
        }
    }
    let l = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::io("bind", Path::new("127.0.0.1:0"), e))?;
    let port = l
        .local_addr()
        .map_err(|e| Error::io("local_addr", Path::new("127.0.0.1:0"), e))?
        .port();
    Ok(port)
}

#[cfg(test)]
mod port_tests {
    #[test]
    fn a_free_port_lies_outside_the_ephemeral_range() {
        let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
        let mut it = range.split_whitespace().map(|v| v.parse::<u16>().unwrap());
        let (lo, hi) = (it.next().unwrap(), it.next().unwrap());
        for _ in 0..20 {
            let p = super::free_port().unwrap();
            assert!(
                !(lo..=hi).contains(&p),
                "{p} is in the ephemeral range {lo}-{hi}"
            );
        }
    }
}

/// Formats a fresh single-node KRaft directory in `dir` and starts a broker on it.
///
/// Returns once the client listener accepts connections: Kafka opens a non-zero-port listener
/// only after the broker is unfenced, so a successful connect means it serves.
pub fn start(dist: &KafkaDist, dir: &Path, opts: &BrokerOptions) -> Result<RunningBroker> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io("create broker dir", dir, e))?;
    let data = dir.join("data");
    if data.exists() {
        std::fs::remove_dir_all(&data).map_err(|e| Error::io("clear data dir", &data, e))?;
    }
    let port = match opts.port {
        Some(p) => p,
        None => free_port()?,
    };
    let cport = loop {
        let c = free_port()?;
        if c != port {
            break c;
        }
    };
    let mut props = SERVER_PROPERTIES
        .replace("__PORT__", &port.to_string())
        .replace("__CPORT__", &cport.to_string())
        .replace("__DIR__", &dir.display().to_string());
    for line in opts
        .listener_properties(port, cport)
        .iter()
        .chain(&opts.extra_properties)
    {
        let line = line
            .replace("__PORT__", &port.to_string())
            .replace("__CPORT__", &cport.to_string())
            .replace("__DIR__", &dir.display().to_string());
        props.push_str(&line);
        props.push('\n');
    }
    let props_path = dir.join("server.properties");
    write(&props_path, &props)?;

    // Format storage: one JVM start. The cluster id is 16 random bytes in base64url, which is
    // exactly what `kafka-storage random-uuid` prints, so we save a second JVM start.
    let cluster_id = random_cluster_id();
    let out = dist
        .java("tools-log4j2.properties", "256m")
        .arg("kafka.tools.StorageTool")
        .arg("format")
        .arg("--standalone")
        .arg("-t")
        .arg(&cluster_id)
        .arg("-c")
        .arg(&props_path)
        .args(&opts.format_args)
        .output()
        .map_err(|e| Error::Spawn {
            what: "java (kafka-storage format)".into(),
            source: e,
        })?;
    if !out.status.success() {
        return Err(Error::Failed {
            what: "formatting the KRaft storage".into(),
            detail: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        });
    }

    launch(dist, dir, port, opts)
}

/// Starts a broker again on the directory and port of `old`, keeping its data (no format).
pub fn restart(
    dist: &KafkaDist,
    old: &RunningBroker,
    opts: &BrokerOptions,
) -> Result<RunningBroker> {
    let port = old
        .bootstrap
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| Error::Failed {
            what: format!("parsing bootstrap {}", old.bootstrap),
            detail: String::new(),
        })?;
    launch(dist, &old.dir, port, opts)
}

/// Launches `kafka.Kafka` on the formatted directory `dir` and waits until it serves.
fn launch(dist: &KafkaDist, dir: &Path, port: u16, opts: &BrokerOptions) -> Result<RunningBroker> {
    let (child, broker) = spawn(dist, dir, port, &opts.heap)?;
    wait_serving(child, &broker, port, START_TIMEOUT)
}

/// Spawns `kafka.Kafka` on the formatted directory `dir` (client port `port`) without waiting.
pub(crate) fn spawn(
    dist: &KafkaDist,
    dir: &Path,
    port: u16,
    heap: &str,
) -> Result<(std::process::Child, RunningBroker)> {
    let props_path = dir.join("server.properties");
    let log_path = dir.join("broker.log");
    let log = std::fs::File::create(&log_path).map_err(|e| Error::io("create", &log_path, e))?;
    let log2 = log
        .try_clone()
        .map_err(|e| Error::io("clone", &log_path, e))?;
    let mut cmd = dist.java("log4j2.properties", heap);
    cmd.arg(format!("-Xms{heap}"))
        .args([
            "-server",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35",
            "-XX:+ExplicitGCInvokesConcurrent",
            "-Djava.awt.headless=true",
        ])
        .arg(format!("-Dkafka.logs.dir={}", dir.join("logs").display()))
        .arg("kafka.Kafka")
        .arg(&props_path)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log2));
    let child = cmd.spawn().map_err(|e| Error::Spawn {
        what: "java (kafka.Kafka)".into(),
        source: e,
    })?;
    let pid = child.id();
    let bootstrap = format!("127.0.0.1:{port}");
    write(&dir.join("broker.pid"), &pid.to_string())?;
    write(&dir.join("bootstrap"), &bootstrap)?;
    let broker = RunningBroker {
        pid,
        bootstrap,
        dir: dir.to_path_buf(),
    };
    Ok((child, broker))
}

/// Waits until `broker` (spawned as `child`) accepts connections on `port`, or fails with its log
/// tail once it exits or `timeout` passes (then it is stopped).
pub(crate) fn wait_serving(
    mut child: std::process::Child,
    broker: &RunningBroker,
    port: u16,
    timeout: Duration,
) -> Result<RunningBroker> {
    let log_path = broker.log();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + timeout;
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
            // The child handle is dropped without waiting: the broker outlives this call and is
            // ended by `stop` (by pid) or by the test watchdog.
            drop(child);
            return Ok(broker.clone());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Error::Failed {
                what: format!("starting the broker (exited with {status})"),
                detail: tail(&log_path, 40),
            });
        }
        if Instant::now() > deadline {
            let _ = stop(broker);
            return Err(Error::Failed {
                what: format!("starting the broker (not serving after {timeout:?})"),
                detail: tail(&log_path, 40),
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Stops exactly the broker `start` started: SIGTERM (graceful shutdown), then SIGKILL after 30 s.
///
/// Does nothing if the recorded pid is no longer our broker.
pub fn stop(broker: &RunningBroker) -> Result<()> {
    if !broker.is_alive() {
        return Ok(());
    }
    signal(broker.pid, "TERM")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while broker.is_alive() {
        if Instant::now() > deadline {
            signal(broker.pid, "KILL")?;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = std::fs::remove_file(broker.dir.join("broker.pid"));
    Ok(())
}

/// Kills the broker without a graceful shutdown (SIGKILL); used by crash tests.
pub fn kill(broker: &RunningBroker) -> Result<()> {
    if broker.is_alive() {
        signal(broker.pid, "KILL")?;
    }
    Ok(())
}

fn signal(pid: u32, sig: &str) -> Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| Error::Spawn {
            what: "kill".into(),
            source: e,
        })?;
    // A failure here means the process already ended, which is what we want.
    let _ = status;
    Ok(())
}

/// True if `pid` runs `kafka.Kafka` with the `server.properties` of `dir`.
fn is_our_broker(pid: u32, dir: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let cmdline = String::from_utf8_lossy(&cmdline);
    let props = dir.join("server.properties");
    cmdline.contains("kafka.Kafka")
        && cmdline.contains(&*props.to_string_lossy())
        && !is_zombie(pid)
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .map(|rest| rest.trim_start().starts_with('Z'))
                .unwrap_or(false)
        })
        .unwrap_or(false)
}

/// The last `n` lines of a file, for error messages.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    format!(
        "last lines of {}:\n{}",
        path.display(),
        lines[start..].join("\n")
    )
}

/// A random cluster id that does not start with `-`: like Kafka's own `Uuid.randomUuid`, which
/// redraws such ids because the storage tool would read `-t -abc...` as an option and fail.
pub(crate) fn random_cluster_id() -> String {
    loop {
        let id = encode_cluster_id(rand::random());
        if !id.starts_with('-') {
            return id;
        }
    }
}

/// 16 bytes in base64url without padding: 22 characters.
fn encode_cluster_id(bytes: [u8; 16]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(22);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for b in bytes {
        acc = (acc << 8) | u32::from(b);
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            out.push(char::from(ALPHABET[((acc >> bits) & 63) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((acc << (6 - bits)) & 63) as usize]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_id_is_22_base64url_chars() {
        // An id whose first six bits are 62 encodes to a leading '-'; it is never handed out.
        assert!(encode_cluster_id([0xF8; 16]).starts_with('-'));
        for _ in 0..1000 {
            assert!(!random_cluster_id().starts_with('-'));
        }
        let id = random_cluster_id();
        assert_eq!(id.len(), 22);
        assert!(
            id.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
        assert_ne!(id, random_cluster_id());
    }

    #[test]
    fn sasl_listener_adds_listener_jaas_and_scram_users() {
        let o = BrokerOptions::default().with_sasl_listener(9999, &[("alice", "pw")]);
        let lines = o.listener_properties(1111, 2222);
        assert_eq!(
            lines[0],
            "listeners=PLAINTEXT://127.0.0.1:1111,SASL_PLAINTEXT://127.0.0.1:9999,CONTROLLER://127.0.0.1:2222"
        );
        assert!(lines[2].ends_with(",SASL_PLAINTEXT:SASL_PLAINTEXT"));
        assert!(o.extra_properties.iter().any(|l| {
            l.starts_with("listener.name.sasl_plaintext.plain.sasl.jaas.config=")
                && l.contains("user_alice=\"pw\"")
        }));
        assert_eq!(
            o.format_args,
            [
                "--add-scram",
                "SCRAM-SHA-256=[name=alice,password=pw]",
                "--add-scram",
                "SCRAM-SHA-512=[name=alice,password=pw]"
            ]
        );
        assert!(
            BrokerOptions::default()
                .listener_properties(1, 2)
                .is_empty()
        );
    }

    #[test]
    fn a_foreign_pid_is_never_our_broker() {
        // Our own test process is alive but is not a kafka.Kafka process of this directory.
        assert!(!is_our_broker(
            std::process::id(),
            Path::new("/nonexistent")
        ));
    }
}
