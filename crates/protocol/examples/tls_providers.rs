//! Compares the built-in TLS crypto providers on this CPU: bulk record protection and key exchange.
//!
//! ```text
//! cargo run --release -p orderly-protocol --example tls_providers
//! ```
//!
//! For each provider the CPU supports: AES-256-GCM and ChaCha20-Poly1305 (TLS 1.3 suites) sealing
//! 16 KiB records, in MB/s of plaintext (a consumer's cost per fetched byte is the same operation
//! in reverse), and X25519 and P-256 key exchanges per second (one per connection). BENCHMARKS.md
//! quotes its output.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use orderly_protocol::TlsProvider;
use orderly_protocol::tls::rustls::crypto::CryptoProvider;
use orderly_protocol::tls::rustls::crypto::cipher::{
    AeadKey, Iv, OutboundChunks, OutboundPlainMessage,
};
use orderly_protocol::tls::rustls::{
    CipherSuite, ContentType, NamedGroup, ProtocolVersion, SupportedCipherSuite,
};

const RECORD: usize = 16 * 1024;
const BUDGET: Duration = Duration::from_secs(2);

fn seal_mb_per_s(provider: &CryptoProvider, suite: CipherSuite) -> Option<f64> {
    let s = provider.cipher_suites.iter().find_map(|s| match s {
        SupportedCipherSuite::Tls13(t) if t.common.suite == suite => Some(*t),
        _ => None,
    })?;
    let mut enc = s
        .aead_alg
        .encrypter(AeadKey::from([7u8; 32]), Iv::from([9u8; 12]));
    let payload = vec![0x5au8; RECORD];
    let t0 = Instant::now();
    let mut n: u64 = 0;
    while t0.elapsed() < BUDGET {
        for _ in 0..64 {
            let msg = OutboundPlainMessage {
                typ: ContentType::ApplicationData,
                version: ProtocolVersion::TLSv1_3,
                payload: OutboundChunks::Single(&payload),
            };
            let out = enc.encrypt(msg, n).expect("seal");
            std::hint::black_box(out);
            n += 1;
        }
    }
    Some(n as f64 * RECORD as f64 / t0.elapsed().as_secs_f64() / 1e6)
}

fn kx_per_s(provider: &CryptoProvider, group: NamedGroup) -> Option<f64> {
    let kx = provider.kx_groups.iter().find(|g| g.name() == group)?;
    let peer = kx.start().expect("peer key").pub_key().to_vec();
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed() < BUDGET {
        let mine = kx.start().expect("start");
        std::hint::black_box(mine.pub_key());
        std::hint::black_box(mine.complete(&peer).expect("complete"));
        n += 1;
    }
    Some(n as f64 / t0.elapsed().as_secs_f64())
}

fn main() {
    println!(
        "CPU: {} ({}); auto picks {}",
        std::env::consts::ARCH,
        orderly_protocol::tls::GRAVIOLA_NEEDS,
        TlsProvider::detect()
    );
    println!(
        "| provider | AES-256-GCM seal MB/s | ChaCha20-Poly1305 seal MB/s | X25519 kx/s | P-256 kx/s |"
    );
    println!("|---|---|---|---|---|");
    for p in TlsProvider::ALL {
        if !p.is_supported() {
            println!("| {p} | not supported on this CPU | | | |");
            continue;
        }
        let provider = p.crypto_provider().expect("supported provider");
        let f = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.0}"));
        println!(
            "| {p} | {} | {} | {} | {} |",
            f(seal_mb_per_s(
                &provider,
                CipherSuite::TLS13_AES_256_GCM_SHA384
            )),
            f(seal_mb_per_s(
                &provider,
                CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
            )),
            f(kx_per_s(&provider, NamedGroup::X25519)),
            f(kx_per_s(&provider, NamedGroup::secp256r1)),
        );
    }
}
