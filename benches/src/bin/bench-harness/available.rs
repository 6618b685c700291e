//! The systems this machine can run: the product binary next to the harness, the Go peer
//! (`go build`), Parallel Consumer (`mvn package`); the ones `--systems` names among them.

use std::path::Path;

use tokio::process::Command;

use crate::args::Args;
use crate::system::System;

/// The systems of this run, in report order: orderly's library rows always, the others where
/// their program is built (the smoke form: orderly's library alone), kept to those `--systems`
/// names (a row's name or its family) if it names any.
pub async fn available_systems(args: &Args, root: &Path, bin: &Path) -> Vec<System> {
    let mut systems = vec![System::Orderly];
    if !args.smoke {
        systems.extend([System::OrderlyReplies, System::OrderlyExactlyOnce]);
        // The HTTP scenarios run the product binary, built next to this one by `cargo xtask bench`.
        if bin.join("orderly").exists() {
            systems.extend([System::OrderlyRun, System::OrderlyHttp]);
            if orderly_batches(bin).await {
                systems.push(System::OrderlyHttpBatch);
            } else {
                eprintln!(
                    "    orderly consume --help lists no --http-batch-max: the batched orderly row of the HTTP scenarios is left out"
                );
            }
        } else {
            eprintln!(
                "    no orderly binary next to the harness ({}): no `orderly run` row, and the HTTP scenarios run without orderly",
                bin.join("orderly").display()
            );
        }
        if build_go(root).await {
            systems.extend([
                System::GoSeedTuned,
                System::GoSeed,
                System::GoSeedHttpTuned,
                System::GoSeedHttp,
                System::GoSeedTransact,
            ]);
        }
        if build_pc(root).await {
            systems.extend([
                System::PcTuned,
                System::ParallelConsumer,
                System::PcVertxTuned,
                System::PcVertx,
                System::PcTransactional,
            ]);
        }
    }
    systems.sort();
    if !args.systems.is_empty() {
        systems.retain(|s| {
            args.systems
                .iter()
                .any(|n| n == s.name() || n == s.family())
        });
    }
    systems
}

/// Builds the Go peer; whether it built.
async fn build_go(root: &Path) -> bool {
    let dir = root.join("benches/peers/go-seed");
    eprintln!("==> building the Go peer (go build)");
    let ok = Command::new("go")
        .args(["build", "-o", "target/go-seed", "."])
        .current_dir(&dir)
        .status()
        .await
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("    go is missing or the build failed: the Go peer is left out");
    }
    ok
}

/// Builds the Parallel Consumer peer; whether it built.
async fn build_pc(root: &Path) -> bool {
    let dir = root.join("benches/peers/parallel-consumer");
    eprintln!("==> building the Parallel Consumer peer (mvn package)");
    let ok = Command::new("mvn")
        .args(["-q", "-B", "package", "-DskipTests"])
        .current_dir(&dir)
        .status()
        .await
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("    mvn is missing or the build failed: the Parallel Consumer peer is left out");
    }
    ok
}

/// Whether this build of `orderly consume` can send several records per request.
async fn orderly_batches(bin: &Path) -> bool {
    Command::new(bin.join("orderly"))
        .args(["consume", "--help"])
        .output()
        .await
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("--http-batch-max"))
}
