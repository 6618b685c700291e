//! `embedded`: the example application as a program: consume a topic of chat messages until Ctrl-C.
//!
//! ```text
//! cargo run -p orderly-example-embedded -- <bootstrap host:port> <topic> [group]
//! ```

// An example program talks to its user on stdout.
#![allow(clippy::print_stdout)]

use orderly_example_embedded::{Itineraries, config, run};

const USAGE: &str = "usage: embedded <bootstrap> <topic> [group]";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The application, not the library, installs logging.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().ok_or(USAGE)?;
    let topic = args.next().ok_or(USAGE)?;
    let group = args.next().unwrap_or_else(|| "itineraries".into());

    // Dead letters go to `<topic>.dlq`, which must exist.
    let config = config(&bootstrap, &group, &topic);
    let trips = Itineraries::new();
    let stats = run(config, trips.clone(), async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    println!(
        "handled {} messages, {} dead-lettered, {} retries; {} sessions",
        stats.handled(),
        stats.dead_lettered(),
        stats.retried(),
        trips.snapshot().len()
    );
    Ok(())
}
