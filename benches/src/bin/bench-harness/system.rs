//! The systems compared: orderly's rows, the Go peer's and Parallel Consumer's, each as written
//! and tuned, grouped in suites by the scenarios they run.

/// One row of the comparison: a system and the settings it runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum System {
    /// orderly through the library with its default configuration (`bench-orderly`).
    Orderly,
    /// The product binary, `orderly run` with its default flags (backlog scenarios but S5): its
    /// own synthetic handler and report, measured beside `bench-orderly` in the same run.
    OrderlyRun,
    /// The Go peer tuned as a Go engineer tunes it, per scenario
    /// ([`go_tuned_args`](crate::command::go_tuned_args)).
    GoSeedTuned,
    /// The Go peer as written: the design's own settings and franz-go's defaults.
    GoSeed,
    /// Parallel Consumer tuned with its documented settings, per scenario
    /// ([`pc_tuned_args`](crate::command::pc_tuned_args)).
    PcTuned,
    /// Parallel Consumer with the library's defaults (`maxConcurrency` 16, batch size 1,
    /// asynchronous periodic commits).
    ParallelConsumer,
    /// HTTP scenarios: the product binary, `orderly consume --http` with its default flags (one
    /// record per request).
    OrderlyHttp,
    /// HTTP scenarios: `orderly consume --http` sending several records of a session per request
    /// ([`ORDERLY_BATCH_ARGS`]); run only when `orderly consume --help` lists `--http-batch-max`.
    OrderlyHttpBatch,
    /// HTTP scenarios: the Go peer with a `net/http` client, tuned ([`GO_TUNED_ARGS`]).
    GoSeedHttpTuned,
    /// HTTP scenarios: the Go peer with a `net/http` client, as written (franz-go's defaults).
    GoSeedHttp,
    /// HTTP scenarios: Parallel Consumer's Vert.x module, tuned ([`PC_VERTX_TUNED_ARGS`]).
    PcVertxTuned,
    /// HTTP scenarios: Parallel Consumer's Vert.x module with its defaults.
    PcVertx,
    /// Reply scenarios: `bench-orderly` with the library's default configuration and a reply
    /// topic (replies at-least-once, written before their record counts as done).
    OrderlyReplies,
    /// Reply scenarios: the same in the library's exactly-once mode (`ConsumerConfig::exactly_once`).
    OrderlyExactlyOnce,
    /// Reply scenarios: the Go peer producing its replies in franz-go's `GroupTransactSession`
    /// transactions, tuned ([`go_tuned_args`](crate::command::go_tuned_args)).
    GoSeedTransact,
    /// Reply scenarios: Parallel Consumer in its transactional commit mode, producing its replies
    /// with `pollAndProduce`, tuned ([`pc_tuned_args`](crate::command::pc_tuned_args),
    /// [`PC_TRANSACTIONAL_ARGS`]).
    PcTransactional,
}

/// The scenarios a system belongs to: it runs in those only, and its rows are compared with the
/// suite's [`Suite::reference`] row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Suite {
    /// An in-process handler writing the handler log (S1 ... S6).
    Handler,
    /// Every system posting to the shared HTTP endpoint (S1-http, S1k-http, S2-http).
    Http,
    /// An in-process handler answering each record with a reply (S1k-reply).
    Reply,
}

impl Suite {
    /// The row the others are compared with: orderly with its defaults.
    pub fn reference(self) -> System {
        match self {
            Suite::Handler => System::Orderly,
            Suite::Http => System::OrderlyHttp,
            Suite::Reply => System::OrderlyReplies,
        }
    }

    /// The file of the suite's backlog throughput chart, its title and its alt text.
    pub fn chart(self) -> [&'static str; 3] {
        match self {
            Suite::Handler => [
                "throughput.svg",
                "Backlog throughput (median)",
                "throughput per system",
            ],
            Suite::Http => [
                "throughput-http.svg",
                "HTTP endpoint, backlog throughput (median)",
                "HTTP throughput per system",
            ],
            Suite::Reply => [
                "throughput-replies.svg",
                "Replies, backlog throughput (median)",
                "reply throughput per system",
            ],
        }
    }
}

/// What the batched orderly row adds to `orderly consume --http`.
pub const ORDERLY_BATCH_ARGS: &[&str] = &["--http-batch-max", "64"];
/// The Go peer tuned as a Go engineer tunes franz-go: a 20 ms fetch max wait instead of franz-go's
/// 5 s, a 10,000-record session channel instead of 256.
pub const GO_TUNED_ARGS: &[&str] = &["-fetch-max-wait", "20ms", "-session-chan", "10000"];
/// Parallel Consumer's transactional commit mode as the reply scenarios run it, with the mode's own
/// settings (a 100 ms commit interval, no processing while a transaction commits;
/// benches/peers/README.md says why).
pub const PC_TRANSACTIONAL_ARGS: &[&str] = &["--commit-mode", "PERIODIC_TRANSACTIONAL_PRODUCER"];
/// Parallel Consumer's Vert.x module tuned: `maxConcurrency` 1000 (its README's example value;
/// the module sizes Vert.x's connection pool to it), against its default of 16.
pub const PC_VERTX_TUNED_ARGS: &[&str] = &["--max-concurrency", "1000"];

impl System {
    /// The row's name on the command line (`--systems`) and in file names.
    pub fn name(self) -> &'static str {
        match self {
            System::Orderly => "orderly",
            System::OrderlyRun => "orderly-run",
            System::GoSeedTuned => "go-seed-tuned",
            System::GoSeed => "go-seed",
            System::PcTuned => "pc-tuned",
            System::ParallelConsumer => "parallel-consumer",
            System::OrderlyHttp => "orderly-http",
            System::OrderlyHttpBatch => "orderly-http-batch",
            System::GoSeedHttpTuned => "go-seed-http-tuned",
            System::GoSeedHttp => "go-seed-http",
            System::PcVertxTuned => "pc-vertx-tuned",
            System::PcVertx => "pc-vertx",
            System::OrderlyReplies => "orderly-replies",
            System::OrderlyExactlyOnce => "orderly-exactly-once",
            System::GoSeedTransact => "go-seed-transact",
            System::PcTransactional => "pc-transactional",
        }
    }
    /// The row's label in the report.
    pub fn label(self) -> &'static str {
        match self {
            System::Orderly => "orderly (library, default configuration)",
            System::OrderlyRun => "orderly run (the product binary, default flags)",
            System::GoSeedTuned => "seed design (Go, franz-go), tuned",
            System::GoSeed => "seed design (Go, franz-go), as written",
            System::PcTuned => "Parallel Consumer 0.5.3.3, tuned",
            System::ParallelConsumer => "Parallel Consumer 0.5.3.3, defaults",
            System::OrderlyHttp => "orderly consume --http (batch 1, default flags)",
            System::OrderlyHttpBatch => "orderly consume --http --http-batch-max 64",
            System::GoSeedHttpTuned => "seed design (Go, net/http), tuned",
            System::GoSeedHttp => "seed design (Go, net/http), as written",
            System::PcVertxTuned => "Parallel Consumer 0.5.3.3 Vert.x, tuned",
            System::PcVertx => "Parallel Consumer 0.5.3.3 Vert.x, defaults",
            System::OrderlyReplies => {
                "orderly (library, default configuration), replies at-least-once"
            }
            System::OrderlyExactlyOnce => "orderly (library, default configuration), exactly-once",
            System::GoSeedTransact => "seed design (Go, franz-go GroupTransactSession), tuned",
            System::PcTransactional => "Parallel Consumer 0.5.3.3 transactional, tuned",
        }
    }
    /// The system family `--systems` also accepts: `orderly`, `go-seed`, `parallel-consumer`.
    pub fn family(self) -> &'static str {
        match self {
            System::Orderly
            | System::OrderlyRun
            | System::OrderlyHttp
            | System::OrderlyHttpBatch
            | System::OrderlyReplies
            | System::OrderlyExactlyOnce => "orderly",
            System::GoSeedTuned
            | System::GoSeed
            | System::GoSeedHttpTuned
            | System::GoSeedHttp
            | System::GoSeedTransact => "go-seed",
            System::PcTuned
            | System::ParallelConsumer
            | System::PcVertxTuned
            | System::PcVertx
            | System::PcTransactional => "parallel-consumer",
        }
    }
    /// The scenarios this system belongs to.
    pub fn suite(self) -> Suite {
        match self {
            System::OrderlyHttp
            | System::OrderlyHttpBatch
            | System::GoSeedHttpTuned
            | System::GoSeedHttp
            | System::PcVertxTuned
            | System::PcVertx => Suite::Http,
            System::OrderlyReplies
            | System::OrderlyExactlyOnce
            | System::GoSeedTransact
            | System::PcTransactional => Suite::Reply,
            System::Orderly
            | System::OrderlyRun
            | System::GoSeedTuned
            | System::GoSeed
            | System::PcTuned
            | System::ParallelConsumer => Suite::Handler,
        }
    }
    /// Whether this peer row runs with its tuned settings
    /// ([`go_tuned_args`](crate::command::go_tuned_args),
    /// [`pc_tuned_args`](crate::command::pc_tuned_args)).
    pub fn tuned(self) -> bool {
        matches!(
            self,
            System::GoSeedTuned
                | System::PcTuned
                | System::GoSeedTransact
                | System::PcTransactional
        )
    }
    /// What this system adds to its command line in the reply scenarios (the reply topic itself
    /// comes with [`RunOpts::reply_topic`](crate::command::RunOpts::reply_topic)): its
    /// transactional mode.
    pub fn reply_args(self, group: &str) -> Vec<String> {
        match self {
            System::OrderlyExactlyOnce => vec!["--exactly-once".into()],
            System::GoSeedTransact => vec!["-transactional-id".into(), format!("{group}.txn")],
            System::PcTransactional => PC_TRANSACTIONAL_ARGS.iter().map(|a| (*a).into()).collect(),
            _ => Vec::new(),
        }
    }
}
