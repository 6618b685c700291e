//! `orderly-fuzz [--iterations N] [--seed S] [target...]`: runs every decoder target (or the
//! named ones) for N mutated inputs each and prints one line per target; exit 1 on a crash.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut iterations: u64 = 1_000_000;
    let mut seed: u64 = 1;
    let mut only: Vec<String> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |what: &str| -> Option<u64> {
            let v = args.next().and_then(|v| v.replace('_', "").parse().ok());
            if v.is_none() {
                eprintln!("{what} needs a number");
            }
            v
        };
        match a.as_str() {
            "--iterations" => match num("--iterations") {
                Some(n) => iterations = n,
                None => return ExitCode::from(2),
            },
            "--seed" => match num("--seed") {
                Some(n) => seed = n,
                None => return ExitCode::from(2),
            },
            "--list" => {
                for t in orderly_fuzz::targets() {
                    println!("{:26} {}", t.name, t.what);
                }
                return ExitCode::SUCCESS;
            }
            other => only.push(other.to_string()),
        }
    }
    let all = orderly_fuzz::targets();
    for name in &only {
        if !all.iter().any(|t| t.name == name) {
            eprintln!("no target {name:?}; `--list` shows them");
            return ExitCode::from(2);
        }
    }
    // Panics are caught and reported with their input; the default hook's output would only
    // repeat the message.
    std::panic::set_hook(Box::new(|_| {}));
    println!("fuzzing {iterations} inputs per target, seed {seed}");
    println!(
        "{:26} {:>12} {:>9} {:>7} {:>9} {:>9}",
        "target", "iterations", "accepted", "corpus", "seconds", "µs/input"
    );
    let mut total = 0u64;
    let started = std::time::Instant::now();
    for t in all
        .iter()
        .filter(|t| only.is_empty() || only.iter().any(|n| n == t.name))
    {
        match orderly_fuzz::fuzz(t, iterations, seed) {
            Ok(s) => {
                let secs = s.elapsed.as_secs_f64();
                println!(
                    "{:26} {:>12} {:>8.1}% {:>7} {:>9.1} {:>9.2}",
                    s.target,
                    s.iterations,
                    100.0 * s.accepted as f64 / s.iterations.max(1) as f64,
                    s.corpus,
                    secs,
                    1e6 * secs / s.iterations.max(1) as f64
                );
                total += s.iterations;
            }
            Err(crash) => {
                println!("CRASH {crash}");
                println!(
                    "reproduce: cargo xtask fuzz --iterations {} --seed {seed} {}",
                    crash.iteration + 1,
                    crash.target
                );
                return ExitCode::FAILURE;
            }
        }
    }
    println!(
        "no crash: {total} inputs in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}
