//! `cargo xtask kafka start|stop|status|logs|tool`: the local broker (see `xtask::kafka`).

use anyhow::{Context, Result, bail};
use clap::Subcommand;

#[derive(Subcommand)]
pub enum Action {
    /// Start the broker (if not running) and print its bootstrap address on stdout; with
    /// `--brokers 3`, a 3-node KRaft cluster (RF 3, min.insync.replicas 2) and its addresses.
    Start {
        /// Nodes: 1 = the single broker; 3 = a cluster in .kafka/cluster (each node broker and controller).
        #[arg(long, default_value_t = 1)]
        brokers: usize,
        /// Client port (default: a free port).
        #[arg(long)]
        port: Option<u16>,
        /// JVM heap.
        #[arg(long, default_value = "1g")]
        heap: String,
        /// Also serve a SASL_PLAINTEXT listener (SCRAM-SHA-256/512; PLAIN too on the single
        /// broker) with this user, created as a SCRAM credential at format time (repeatable). With
        /// --brokers 3 every node serves one. The addresses are printed on stderr.
        #[arg(long, value_name = "NAME:PASSWORD")]
        scram_user: Vec<String>,
        /// Port of that SASL listener (default: a free port).
        #[arg(long, requires = "scram_user")]
        sasl_port: Option<u16>,
    },
    /// Stop exactly the broker `start` started (by its recorded pid).
    Stop,
    /// Print pid, bootstrap address and log file; exit 1 if not running.
    Status,
    /// Print the last lines of the broker log.
    Logs {
        #[arg(short = 'n', long, default_value_t = 60)]
        lines: usize,
    },
    /// Run one of Apache Kafka's command-line tools (`list` shows them). `{bootstrap}` in an
    /// argument is replaced by the running broker's address.
    Tool {
        name: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Runs `action`.
pub fn run(action: Action) -> Result<()> {
    match action {
        Action::Start {
            brokers,
            port,
            heap,
            scram_user,
            sasl_port,
        } => {
            let users = scram_user
                .iter()
                .map(|u| {
                    u.split_once(':')
                        .map(|(n, p)| (n.to_string(), p.to_string()))
                        .with_context(|| format!("--scram-user {u:?}: expected NAME:PASSWORD"))
                })
                .collect::<Result<Vec<_>>>()?;
            if brokers > 1 {
                if port.is_some() || sasl_port.is_some() {
                    bail!("--port and --sasl-port apply to the single broker only");
                }
                println!("{}", xtask::kafka::start_cluster(brokers, &heap, &users)?);
                return Ok(());
            }
            let b = xtask::kafka::start_with_scram(port, &heap, sasl_port, &users)?;
            println!("{}", b.bootstrap);
            Ok(())
        }
        Action::Stop => xtask::kafka::stop(),
        Action::Status => xtask::kafka::status(),
        Action::Logs { lines } => xtask::kafka::logs(lines),
        Action::Tool { name, args } => xtask::kafka::tool(&name, &args),
    }
}
