//! Any Apache Kafka release from its Maven Central jars, for the compatibility matrix
//! (`cargo xtask compat`): ZooKeeper mode before 3.3, KRaft from 3.3 on.
//!
//! The jars of each release are resolved with Maven into `.kafka/releases/<version>/lib`
//! (complete-or-not, like [`crate::KafkaDist`]) from a pom written here: the broker artifact
//! (`kafka_2.12` before 2.4, `kafka_2.13` after), which also brings ZooKeeper's server
//! (`org.apache.zookeeper.server.quorum.QuorumPeerMain`) for the releases that need one, plus a
//! logging binding (log4j 1 through reload4j before 4.0, log4j2 from 4.0).
//!
//! Releases before 2.4 depend on ZooKeeper 3.4, whose client cannot connect on Java 14 and
//! later (it never resolves the server address): the pom pins ZooKeeper 3.5.9, whose client
//! and server run on the installed Java 17 and which those brokers accept (its client API is
//! the 3.4 one).
//!
//! A [`ReleaseBroker`] owns its processes (ZooKeeper and the broker, or the broker alone) and
//! stops them when stopped or dropped.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::dist::{java_binary, kafka_home, write};
use crate::process::{free_port, random_cluster_id, tail};
use crate::{Error, Result};

/// How long a broker of any release may take to serve after its JVM starts.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// One Apache Kafka release: `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Release {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch version.
    pub patch: u32,
}

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl std::str::FromStr for Release {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::Failed {
            what: format!("Kafka release {s:?}"),
            detail: "expected major.minor.patch, e.g. 2.8.2".into(),
        };
        let mut parts = s
            .trim()
            .split('.')
            .map(|p| p.parse::<u32>().map_err(|_| bad()));
        let r = Release {
            major: parts.next().ok_or_else(bad)??,
            minor: parts.next().ok_or_else(bad)??,
            patch: parts.next().ok_or_else(bad)??,
        };
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(r)
    }
}

impl Release {
    const fn at_least(self, major: u32, minor: u32) -> bool {
        self.major > major || (self.major == major && self.minor >= minor)
    }

    /// Whether this release runs here in KRaft mode (3.3 on); older ones run with ZooKeeper.
    pub fn kraft(self) -> bool {
        self.at_least(3, 3)
    }

    /// The broker's Maven artifact.
    pub fn artifact(self) -> &'static str {
        if self.at_least(2, 4) {
            "kafka_2.13"
        } else {
            "kafka_2.12"
        }
    }

    /// The pom that resolves this release's broker and a logging binding.
    pub fn pom(self) -> String {
        let mut deps = format!(
            "    <dependency><groupId>org.apache.kafka</groupId><artifactId>{}</artifactId><version>{self}</version></dependency>\n",
            self.artifact()
        );
        if self.at_least(4, 0) {
            for a in ["log4j-api", "log4j-core", "log4j-slf4j2-impl"] {
                deps.push_str(&format!(
                    "    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>{a}</artifactId><version>2.24.3</version></dependency>\n"
                ));
            }
        } else {
            deps.push_str("    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version></dependency>\n");
        }
        let managed = if self.at_least(2, 4) {
            String::new()
        } else {
            "  <dependencyManagement><dependencies>\n    <dependency><groupId>org.apache.zookeeper</groupId><artifactId>zookeeper</artifactId><version>3.5.9</version></dependency>\n  </dependencies></dependencyManagement>\n".to_string()
        };
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
             <!-- Apache Kafka {self} from Maven Central, for `cargo xtask compat`; generated. -->\n\
             <project xmlns=\"http://maven.apache.org/POM/4.0.0\">\n  <modelVersion>4.0.0</modelVersion>\n  \
             <groupId>dev.orderly</groupId>\n  <artifactId>orderly-kafka-release</artifactId>\n  <version>1</version>\n  \
             <packaging>pom</packaging>\n{managed}  <dependencies>\n{deps}  </dependencies>\n</project>\n"
        )
    }
}

/// Logging for releases before 4.0 (log4j 1 syntax, read by reload4j): warnings, and the
/// broker's start line.
const LOG4J1: &str = "log4j.rootLogger=WARN, stdout\n\
log4j.appender.stdout=org.apache.log4j.ConsoleAppender\n\
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout\n\
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n\n\
log4j.logger.kafka.server.KafkaServer=INFO\n";

/// Logging for 4.x (log4j2).
const LOG4J2: &str = "status = warn\n\
appender.out.type = Console\nappender.out.name = out\n\
appender.out.layout.type = PatternLayout\nappender.out.layout.pattern = [%d] %p %m (%c)%n\n\
rootLogger.level = warn\nrootLogger.appenderRef.out.ref = out\n";

/// A resolved release: its jars and logging configuration.
#[derive(Debug, Clone)]
pub struct ReleaseDist {
    /// The release.
    pub release: Release,
    /// `.kafka/releases/<version>`.
    pub dir: PathBuf,
}

impl ReleaseDist {
    /// The cached jars of `release`, resolved with Maven first if missing.
    pub fn ensure(release: Release) -> Result<Self> {
        let dir = kafka_home().join("releases").join(release.to_string());
        let dist = ReleaseDist { release, dir };
        let marker = dist.dir.join("complete");
        if marker.exists() && dist.lib().is_dir() {
            return Ok(dist);
        }
        std::fs::create_dir_all(&dist.dir)
            .map_err(|e| Error::io("create release dir", &dist.dir, e))?;
        let pom = dist.dir.join("pom.xml");
        write(&pom, &release.pom())?;
        let lib = dist.lib();
        if lib.exists() {
            std::fs::remove_dir_all(&lib).map_err(|e| Error::io("clear lib dir", &lib, e))?;
        }
        let mvn = std::env::var("MVN").unwrap_or_else(|_| "mvn".to_string());
        let out = Command::new(&mvn)
            .args(["-B", "-q", "-f"])
            .arg(&pom)
            .arg("dependency:copy-dependencies")
            .arg(format!("-DoutputDirectory={}", lib.display()))
            .arg("-DincludeScope=runtime")
            .output()
            .map_err(|e| Error::Spawn {
                what: format!("{mvn} (Maven)"),
                source: e,
            })?;
        if !out.status.success() {
            return Err(Error::Failed {
                what: format!("resolving Apache Kafka {release} with Maven"),
                detail: format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            });
        }
        write(&dist.dir.join("log4j.properties"), LOG4J1)?;
        write(&dist.dir.join("log4j2.properties"), LOG4J2)?;
        write(&marker, &release.to_string())?;
        Ok(dist)
    }

    /// The folder of jars.
    pub fn lib(&self) -> PathBuf {
        self.dir.join("lib")
    }

    /// A `java` command on this release's classpath with its logging configuration.
    fn java(&self, heap: &str) -> Command {
        let mut cmd = Command::new(java_binary());
        cmd.arg(format!("-Xmx{heap}"))
            .arg(format!(
                "-Dlog4j.configuration=file:{}",
                self.dir.join("log4j.properties").display()
            ))
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                self.dir.join("log4j2.properties").display()
            ))
            .args(["-XX:+UseG1GC", "-Djava.awt.headless=true"])
            .arg("-cp")
            .arg(format!("{}/*", self.lib().display()));
        cmd
    }
}

/// A single-node broker of some release, with its ZooKeeper when it needs one.
#[derive(Debug)]
pub struct ReleaseBroker {
    /// The release.
    pub release: Release,
    /// `127.0.0.1:<port>`.
    pub bootstrap: String,
    /// State directory (configuration, data, logs).
    pub dir: PathBuf,
    /// `127.0.0.1:<port>` of the SASL_PLAINTEXT listener (SASL/PLAIN), when started with one.
    pub sasl_bootstrap: Option<String>,
    zookeeper: Option<Child>,
    broker: Option<Child>,
}

impl ReleaseBroker {
    /// Starts `release` on `port` (a free one if `None`) in a fresh state directory `dir`, and
    /// returns once it serves clients.
    pub fn start(release: Release, dir: &Path, port: Option<u16>) -> Result<Self> {
        Self::start_with(release, dir, port, &[])
    }

    /// [`ReleaseBroker::start`], plus a `SASL_PLAINTEXT` listener on a free port
    /// ([`ReleaseBroker::sasl_bootstrap`]) that accepts each `(user, password)` with SASL/PLAIN
    /// (JAAS `user_<name>` entries in the listener's own `sasl.jaas.config`, which every release
    /// from 1.1 on reads), when `plain_users` is not empty.
    pub fn start_with(
        release: Release,
        dir: &Path,
        port: Option<u16>,
        plain_users: &[(&str, &str)],
    ) -> Result<Self> {
        let dist = ReleaseDist::ensure(release)?;
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(|e| Error::io("clear state dir", dir, e))?;
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::io("create state dir", dir, e))?;
        let port = match port {
            Some(p) => p,
            None => free_port()?,
        };
        let other = loop {
            let p = free_port()?;
            if p != port {
                break p;
            }
        };
        let sasl_port = if plain_users.is_empty() {
            None
        } else {
            Some(loop {
                let p = free_port()?;
                if p != port && p != other {
                    break p;
                }
            })
        };
        let mut me = ReleaseBroker {
            release,
            bootstrap: format!("127.0.0.1:{port}"),
            dir: dir.to_path_buf(),
            sasl_bootstrap: sasl_port.map(|p| format!("127.0.0.1:{p}")),
            zookeeper: None,
            broker: None,
        };
        let sasl_listener = sasl_port
            .map(|p| format!(",SASL_PLAINTEXT://127.0.0.1:{p}"))
            .unwrap_or_default();
        let mut props = format!(
            "listeners=PLAINTEXT://127.0.0.1:{port}{sasl_listener}{ctl}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{port}{sasl_listener}\n\
             log.dirs={data}\n\
             offsets.topic.replication.factor=1\n\
             offsets.topic.num.partitions=1\n\
             transaction.state.log.replication.factor=1\n\
             transaction.state.log.min.isr=1\n\
             transaction.state.log.num.partitions=1\n\
             default.replication.factor=1\n\
             min.insync.replicas=1\n\
             num.partitions=1\n\
             auto.create.topics.enable=false\n\
             group.initial.rebalance.delay.ms=0\n\
             group.min.session.timeout.ms=1000\n",
            ctl = if release.kraft() {
                format!(",CONTROLLER://127.0.0.1:{other}")
            } else {
                String::new()
            },
            data = dir.join("data").display(),
        );
        if release.kraft() {
            props.push_str(&format!(
                "process.roles=broker,controller\nnode.id=1\n\
                 controller.quorum.voters=1@127.0.0.1:{other}\n\
                 controller.listener.names=CONTROLLER\n\
                 inter.broker.listener.name=PLAINTEXT\n\
                 listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT\n"
            ));
        } else {
            props.push_str(&format!(
                "broker.id=0\nzookeeper.connect=127.0.0.1:{other}\n\
                 zookeeper.connection.timeout.ms=30000\n"
            ));
            let zk_props = dir.join("zookeeper.properties");
            write(
                &zk_props,
                &format!(
                    "dataDir={}\nclientPort={other}\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\nadmin.enableServer=false\n",
                    dir.join("zookeeper").display()
                ),
            )?;
            let child = spawn_logged(
                dist.java("256m")
                    .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
                    .arg(&zk_props),
                &dir.join("zookeeper.log"),
                "ZooKeeper",
            )?;
            me.zookeeper = Some(child);
            wait_port(&mut me, other, &dir.join("zookeeper.log"), "ZooKeeper")?;
        }
        if sasl_port.is_some() {
            let users: String = plain_users
                .iter()
                .map(|(u, p)| format!(" user_{u}=\"{p}\""))
                .collect();
            props.push_str(&format!(
                "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN\n\
                 listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required{users};\n"
            ));
        }
        let props_path = dir.join("server.properties");
        write(&props_path, &props)?;
        if release.kraft() {
            let mut format = dist.java("256m");
            format
                .arg("kafka.tools.StorageTool")
                .arg("format")
                .args(["-t", &random_cluster_id(), "-c"])
                .arg(&props_path);
            let out = format.output().map_err(|e| Error::Spawn {
                what: "java (kafka-storage format)".into(),
                source: e,
            })?;
            if !out.status.success() {
                return Err(Error::Failed {
                    what: format!("formatting KRaft storage for Kafka {release}"),
                    detail: format!(
                        "{}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    ),
                });
            }
        }
        let child = spawn_logged(
            dist.java("512m").arg("kafka.Kafka").arg(&props_path),
            &dir.join("broker.log"),
            "kafka.Kafka",
        )?;
        me.broker = Some(child);
        wait_port(&mut me, port, &dir.join("broker.log"), "the broker")?;
        Ok(me)
    }

    /// Stops the broker, then ZooKeeper (SIGKILL: the data is thrown away anyway).
    pub fn stop(&mut self) {
        for child in [self.broker.take(), self.zookeeper.take()]
            .into_iter()
            .flatten()
        {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ReleaseBroker {
    fn drop(&mut self) {
        self.stop();
    }
}

fn spawn_logged(cmd: &mut Command, log: &Path, what: &str) -> Result<Child> {
    let file = std::fs::File::create(log).map_err(|e| Error::io("create", log, e))?;
    let file2 = file.try_clone().map_err(|e| Error::io("clone", log, e))?;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(file))
        .stderr(Stdio::from(file2))
        .spawn()
        .map_err(|e| Error::Spawn {
            what: format!("java ({what})"),
            source: e,
        })
}

/// Waits until `port` accepts connections; fails with the log's tail if a process of `me`
/// exits or [`START_TIMEOUT`] passes.
fn wait_port(me: &mut ReleaseBroker, port: u16, log: &Path, what: &str) -> Result<()> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        let exited = [me.zookeeper.as_mut(), me.broker.as_mut()]
            .into_iter()
            .flatten()
            .any(|c| matches!(c.try_wait(), Ok(Some(_))));
        if exited || Instant::now() > deadline {
            me.stop();
            return Err(Error::Failed {
                what: format!(
                    "starting {what} of Apache Kafka {} ({})",
                    me.release,
                    if exited { "it exited" } else { "timed out" }
                ),
                detail: tail(log, 30),
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse_and_pick_their_mode_and_artifact() {
        let r: Release = "2.1.1".parse().unwrap();
        assert!(!r.kraft());
        assert_eq!(r.artifact(), "kafka_2.12");
        assert!(r.pom().contains("<version>3.5.9</version>"));
        let r: Release = "3.3.2".parse().unwrap();
        assert!(r.kraft());
        assert_eq!(r.artifact(), "kafka_2.13");
        assert!(!r.pom().contains("zookeeper"));
        let r: Release = "4.0.0".parse().unwrap();
        assert!(r.pom().contains("log4j-core"));
        assert!("2.8".parse::<Release>().is_err());
        assert!("2.8.2.1".parse::<Release>().is_err());
    }
}
