//! The Apache Kafka distribution: jars resolved from Maven Central into a cached, git-ignored folder.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Error, Result};

/// The Apache Kafka version every test, benchmark and demo runs against.
///
/// It must match `kafka.version` in `crates/testkit/kafka/pom.xml`; a unit test checks that.
pub const KAFKA_VERSION: &str = "4.3.1";

/// The pom that lists the broker, the tools and the logging binding.
pub const POM: &str = include_str!("../kafka/pom.xml");
/// Broker configuration template (placeholders `__PORT__`, `__CPORT__`, `__DIR__`).
pub const SERVER_PROPERTIES: &str = include_str!("../kafka/server.properties.tmpl");
/// Broker logging configuration.
pub const BROKER_LOG4J: &str = include_str!("../kafka/log4j2.properties");
/// Logging configuration for the command-line tools (warnings to stderr).
pub const TOOLS_LOG4J: &str = include_str!("../kafka/tools-log4j2.properties");

/// The repository root, known at compile time (this crate is test support, never shipped).
pub fn repo_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| here.to_path_buf())
}

/// The folder holding everything Kafka-related that is generated: `<repo>/.kafka` unless
/// `ORDERLY_KAFKA_HOME` names another.
pub fn kafka_home() -> PathBuf {
    std::env::var_os("ORDERLY_KAFKA_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".kafka"))
}

/// A resolved Kafka distribution: a folder of jars plus our logging configs.
#[derive(Debug, Clone)]
pub struct KafkaDist {
    /// `.kafka/dist/<version>`.
    pub dir: PathBuf,
}

impl KafkaDist {
    /// Returns the cached distribution, resolving it with Maven first if it is missing.
    ///
    /// Resolution runs `mvn dependency:copy-dependencies` on [`POM`]; Maven's own cache
    /// (`~/.m2`) makes a second resolution cheap. A marker file is written only after a
    /// complete copy, so an interrupted download is redone rather than half-used.
    pub fn ensure() -> Result<Self> {
        let dir = kafka_home().join("dist").join(KAFKA_VERSION);
        let dist = KafkaDist { dir };
        let marker = dist.dir.join("complete");
        if marker.exists() && dist.lib().is_dir() {
            return Ok(dist);
        }
        std::fs::create_dir_all(&dist.dir)
            .map_err(|e| Error::io("create dist dir", &dist.dir, e))?;
        let pom = dist.dir.join("pom.xml");
        write(&pom, POM)?;
        let lib = dist.lib();
        if lib.exists() {
            std::fs::remove_dir_all(&lib).map_err(|e| Error::io("clear lib dir", &lib, e))?;
        }
        let mvn = std::env::var("MVN").unwrap_or_else(|_| "mvn".to_string());
        let out = Command::new(&mvn)
            .arg("-B")
            .arg("-q")
            .arg("-f")
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
                what: "resolving Apache Kafka jars with Maven".into(),
                detail: format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            });
        }
        write(&dist.dir.join("log4j2.properties"), BROKER_LOG4J)?;
        write(&dist.dir.join("tools-log4j2.properties"), TOOLS_LOG4J)?;
        write(&marker, KAFKA_VERSION)?;
        Ok(dist)
    }

    /// The folder of jars.
    pub fn lib(&self) -> PathBuf {
        self.dir.join("lib")
    }

    /// The JVM classpath: the lib folder as a wildcard, expanded by the JVM, not a shell.
    pub fn classpath(&self) -> String {
        format!("{}/*", self.lib().display())
    }

    /// A `java` command with our classpath and the given log4j2 configuration.
    pub fn java(&self, log4j: &str, heap: &str) -> Command {
        let mut cmd = Command::new(java_binary());
        cmd.arg(format!("-Xmx{heap}"))
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                self.dir.join(log4j).display()
            ))
            .arg("-cp")
            .arg(self.classpath());
        cmd
    }
}

/// `$JAVA`, else `$JAVA_HOME/bin/java`, else `java` from `PATH`.
pub fn java_binary() -> PathBuf {
    if let Some(j) = std::env::var_os("JAVA") {
        return PathBuf::from(j);
    }
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        let p = PathBuf::from(home).join("bin").join("java");
        if p.exists() {
            return p;
        }
    }
    PathBuf::from("java")
}

pub(crate) fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::io("write", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pom_pins_the_same_kafka_version() {
        let needle = format!("<kafka.version>{KAFKA_VERSION}</kafka.version>");
        assert!(
            POM.contains(&needle),
            "pom.xml must pin Kafka {KAFKA_VERSION}"
        );
    }

    #[test]
    fn server_template_has_every_placeholder() {
        for p in ["__PORT__", "__CPORT__", "__DIR__"] {
            assert!(SERVER_PROPERTIES.contains(p), "{p} missing");
        }
    }
}
