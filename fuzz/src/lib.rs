//! Seeded, structure-aware mutation fuzzing of every decoder that reads bytes from outside the
//! process: Kafka responses (and requests), record batches, the decompression codecs, the classic
//! consumer protocol's payloads and orderly's commit metadata. Pure Rust, no libFuzzer.
//!
//! # Layout
//!
//! - [`mutate`]: the mutator (boundary integers, compact-length tokens, splices, bit flips).
//! - [`targets`](mod@targets): one [`Target`] per decoder: its seeds (valid encodings built with the
//!   crate's own encoders) and how to run one input.
//! - [`fuzz`]: the loop. A seeded RNG picks a corpus entry, mutates it and runs the decoder
//!   under `catch_unwind`; an input the decoder accepts joins the corpus (bounded), so the corpus
//!   drifts towards deeper valid structures without coverage feedback. A panic, or an accepted
//!   value that breaks the decoder's documented invariants, is a [`Crash`] with the input and the
//!   iteration; the same seed reproduces it.
//!
//! `cargo xtask fuzz` runs the `orderly-fuzz` binary in the `fuzz` profile (release with overflow
//! checks and debug assertions on, so an arithmetic overflow is a crash too).

pub mod mutate;
pub mod targets;

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub use targets::{Outcome, Target, targets};

/// Accepted inputs kept beyond the seeds.
const CORPUS_MAX: usize = 512;

/// Figures of one target's run.
#[derive(Debug, Clone)]
pub struct Stats {
    /// Target name.
    pub target: &'static str,
    /// Inputs run.
    pub iterations: u64,
    /// Inputs the decoder accepted.
    pub accepted: u64,
    /// Corpus size at the end (seeds and accepted mutants).
    pub corpus: usize,
    /// Wall time.
    pub elapsed: Duration,
}

/// A panic or a broken invariant, with what reproduces it.
#[derive(Debug, Clone)]
pub struct Crash {
    /// Target name.
    pub target: &'static str,
    /// The seed given to [`fuzz`].
    pub seed: u64,
    /// The iteration (0-based) that failed.
    pub iteration: u64,
    /// The input.
    pub input: Vec<u8>,
    /// The panic message or the invariant broken.
    pub message: String,
}

impl std::fmt::Display for Crash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} crashed at iteration {} (seed {}): {}\ninput ({} bytes): ",
            self.target,
            self.iteration,
            self.seed,
            self.message,
            self.input.len()
        )?;
        for b in &self.input {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// The RNG seed of `target` under the run seed `seed` (targets differ, runs repeat).
fn target_seed(seed: u64, target: &str) -> u64 {
    target.bytes().fold(seed ^ 0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The text of a panic payload.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-text payload".to_string()
    }
}

/// Runs `iterations` mutated inputs through `target`. Install a quiet panic hook first (the
/// binary does) if the default hook's output for a crash is unwanted.
pub fn fuzz(target: &Target, iterations: u64, seed: u64) -> Result<Stats, Box<Crash>> {
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(target_seed(seed, target.name));
    let mut corpus = (target.seeds)(&mut rng);
    if corpus.is_empty() {
        corpus.push(Vec::new());
    }
    let seeds = corpus.len();
    let mut accepted = 0u64;
    let mut buf = Vec::new();
    let crash = |iteration, input: &[u8], message| {
        Box::new(Crash {
            target: target.name,
            seed,
            iteration,
            input: input.to_vec(),
            message,
        })
    };
    for i in 0..iterations {
        let a = rng.random_range(0..corpus.len());
        let b = rng.random_range(0..corpus.len());
        buf.clear();
        buf.extend_from_slice(&corpus[a]);
        mutate::mutate(&mut rng, &mut buf, &corpus[b], target.max_len);
        if let Some(fix) = target.fixup.filter(|_| rng.random_bool(0.5)) {
            fix(&mut buf);
        }
        match std::panic::catch_unwind(AssertUnwindSafe(|| (target.run)(&buf))) {
            Ok(Outcome::Rejected) => {}
            Ok(Outcome::Accepted) => {
                accepted += 1;
                if corpus.len() < seeds + CORPUS_MAX {
                    corpus.push(buf.clone());
                } else if rng.random_ratio(1, 8) {
                    let at = rng.random_range(seeds..corpus.len());
                    corpus[at].clone_from(&buf);
                }
            }
            Ok(Outcome::Violation(why)) => return Err(crash(i, &buf, why)),
            Err(p) => return Err(crash(i, &buf, format!("panic: {}", panic_text(&*p)))),
        }
    }
    Ok(Stats {
        target: target.name,
        iterations,
        accepted,
        corpus: corpus.len(),
        elapsed: started.elapsed(),
    })
}
