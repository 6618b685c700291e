//! `orderly`: the command-line binary of the orderly Kafka consumer stack.
//!
//! `orderly consume` runs the ordering engine in a consumer group and hands records to a webhook
//! (`--http`), a process per record (`--exec`) or a long-lived JSON-lines child (`--pipe`);
//! `orderly config check` prints its effective configuration. `orderly produce`, `orderly dlq`
//! and `orderly status` are the operator's tools; `orderly seed` and `orderly run` are the
//! benchmark's workload and synthetic consumer; `orderly reference` (hidden) prints the flag and
//! metric references of `docs/reference/`. Each command is a module of [`commands`] and only
//! wires library types. The binary, not the libraries, installs logging, the Prometheus recorder
//! and signal handling.

// A command-line tool reports to its user on stdout and stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod admin;
mod commands;
mod kafka;
mod reference;
mod report;
mod settings;

use std::process::ExitCode;

/// The pure-Rust dlmalloc port as the global allocator: the default of the static (musl) builds,
/// chosen because it costs less CPU per record than musl's mallocng (BENCHMARKS.md, allocator);
/// `--features alloc-system` keeps the platform's allocator there, `--features alloc-dlmalloc`
/// uses dlmalloc on glibc too.
#[cfg(any(
    feature = "alloc-dlmalloc",
    all(target_env = "musl", not(feature = "alloc-system"))
))]
#[global_allocator]
static GLOBAL: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "orderly",
    version,
    about = "Per-session ordered Kafka consumption: parallel across sessions, in order within each",
    long_about = "orderly consumes Kafka topics whose partitions carry many interleaved sessions. Records \
                  of one session are handled one at a time in offset order; sessions run in parallel; \
                  transient failures are retried in place, permanent ones go to a dead-letter topic; \
                  offsets are committed only up to the highest contiguous finished offset.\n\n\
                  Logging: RUST_LOG (default info), --log-format text|json."
)]
struct Cli {
    /// Log line format on stderr.
    #[arg(long, global = true, env = "ORDERLY_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Consume topics with per-session order, handing each record to --http URL, --exec CMD or --pipe CMD.
    Consume(Box<settings::ConsumeOpts>),
    /// Configuration tools.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Produce records from stdin or a file (--format lines|kv|jsonl), or --generate a session workload.
    Produce(commands::produce::ProduceArgs),
    /// Dead-letter tools: ls, show, replay.
    Dlq {
        #[command(subcommand)]
        action: commands::dlq::DlqCommand,
    },
    /// A group's committed offsets, completed offsets above them (commit metadata), lag, oldest unfinished offset.
    Status(commands::status::StatusArgs),
    /// Produce synthetic records: key `s-000042`, 100-byte value, headers `event-id` and `seq`
    /// (1, 2, 3 per session), partitioned like Java's default partitioner.
    Seed(commands::seed::SeedArgs),
    /// Consume with the ordering engine and a synthetic handler, then print a report.
    ///
    /// The handler fails a record transiently on its first attempt when fnv1a(event-id) % 100 <
    /// --transient-pct, permanently when fnv1a(event-id) % 1000 == 999 (if --permanent), and checks
    /// that each session's `seq` header arrives 1, 2, 3, ...
    Run(commands::run::RunArgs),
    /// Print a reference generated from this binary: its flags or its metrics, as Markdown.
    #[command(hide = true)]
    Reference {
        #[command(subcommand)]
        which: reference::Reference,
    },
}

#[derive(Subcommand)]
enum ConfigAction {
    /// Print the effective `orderly consume` configuration (flags > ORDERLY_* > --config file,
    /// defaults filled in, secrets masked) or the first thing wrong with it.
    Check(Box<settings::ConsumeOpts>),
}

impl Command {
    /// Among alternatives (a password or its file, one handler), a flag wins over a variable;
    /// `m` is the matches of the subcommand that runs.
    fn prefer_flags(&mut self, m: &clap::ArgMatches) {
        match self {
            Command::Consume(o)
            | Command::Config {
                action: ConfigAction::Check(o),
            } => o.prefer_flags(m),
            Command::Produce(a) => a.kafka.connection.prefer_flags(m),
            Command::Dlq { action } => action.kafka_mut().connection.prefer_flags(m),
            Command::Status(a) => a.kafka.connection.prefer_flags(m),
            Command::Run(a) => a.connection.prefer_flags(m),
            Command::Seed(_) | Command::Reference { .. } => {}
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() -> ExitCode {
    let cli = {
        use clap::{CommandFactory, FromArgMatches};
        // Computed once per process at start-up; clap keeps a `'static` string.
        let version: &'static str = Box::leak(settings::long_version().into_boxed_str());
        let parsed = Cli::command()
            .long_version(version)
            .try_get_matches()
            .and_then(|m| Cli::from_arg_matches(&m).map(|cli| (cli, m)));
        match parsed {
            Ok((mut cli, m)) => {
                let mut leaf = &m;
                while let Some((_, sub)) = leaf.subcommand() {
                    leaf = sub;
                }
                cli.command.prefer_flags(leaf);
                cli
            }
            // Help and version go to stdout with exit 0; every usage error is bad input: its
            // message on stderr and exit 1, like every other configuration error.
            Err(e) if !e.use_stderr() => e.exit(),
            // A value that does not parse (a duration, a size, a number) is one line naming the
            // flag and what it expects, like a value orderly itself refuses.
            Err(e) if e.kind() == clap::error::ErrorKind::ValueValidation => {
                let text = e.to_string();
                eprintln!("{}", text.lines().next().unwrap_or_default());
                return ExitCode::FAILURE;
            }
            Err(e) => {
                let _ = e.print();
                return ExitCode::FAILURE;
            }
        }
    };
    init_logging(cli.log_format);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async move {
        match cli.command {
            Command::Consume(o) => commands::consume::run(*o).await,
            Command::Config {
                action: ConfigAction::Check(o),
            } => commands::config::check(*o),
            Command::Produce(a) => commands::produce::run(a).await,
            Command::Dlq { action } => commands::dlq::run(action).await,
            Command::Status(a) => commands::status::run(a).await,
            Command::Seed(a) => commands::seed::run(a).await,
            Command::Run(a) => commands::run::run(a).await,
            Command::Reference { which } => {
                use clap::CommandFactory;
                reference::render(which, Cli::command()).map(|text| {
                    print!("{text}");
                    ExitCode::SUCCESS
                })
            }
        }
    });
    // Do not wait for tasks still running (admin server, pipe supervisor): the command is over.
    rt.shutdown_background();
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, each cause only if the message so far does not already say it (our
/// library errors include their cause in their own message).
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}
