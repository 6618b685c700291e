//! `orderly consume --http https://...` end to end against the real broker and an mTLS server
//! started here: CA file, client certificate, an extra header from the environment, the request
//! signature, CloudEvents headers, a redirect dead-lettered; `config check` masks the secrets.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Response, StatusCode};
use orderly_handlers::http::SigningKey;
use orderly_testkit::broker;
use orderly_testkit::https::{HttpsOptions, HttpsServer, cert};

use crate::common;

use common::{BIN, Consume, dlq_letters, produce_kv, tmp};

#[derive(Clone)]
struct Seen {
    headers: hyper::HeaderMap,
    body: Bytes,
}

/// An HTTPS server requiring client certificates signed by the test CA; answers 302 to the
/// body `redirect`, 200 otherwise.
async fn mtls_server() -> (HttpsServer, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let options = HttpsOptions {
        client_auth: true,
        ..HttpsOptions::default()
    };
    let server = HttpsServer::start(options, move |req| {
        let seen = s2.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            let redirect = &body[..] == b"redirect";
            seen.lock().unwrap().push(Seen {
                headers: parts.headers,
                body,
            });
            let mut r = Response::new(Full::new(Bytes::new()));
            if redirect {
                *r.status_mut() = StatusCode::FOUND;
                r.headers_mut().insert(
                    "location",
                    hyper::header::HeaderValue::from_static("https://moved.example/in"),
                );
            }
            r
        }
    })
    .await
    .unwrap();
    (server, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_to_an_mtls_endpoint_with_headers_signature_and_cloudevents() {
    let b = broker();
    let topic = b.topic("cli-https", 2).await.unwrap().name.clone();
    let dlq = format!("{topic}.dlq");
    b.create_topic(&dlq, 1).await.unwrap();
    let (server, seen) = mtls_server().await;
    let url = format!("https://localhost:{}/in", server.port());

    let mut lines = String::new();
    for i in 0..20 {
        lines.push_str(&format!("s-{}\tv-{i}\n", i % 4));
    }
    lines.push_str("s-9\tredirect\n");
    produce_kv(&topic, &lines);
    let secret = tmp("signing-secret");
    std::fs::write(&secret, "the-shared-secret\n").unwrap();

    let ca = cert("ca.pem");
    let client_cert = cert("client.pem");
    let client_key = cert("client.key");
    let args: Vec<&std::ffi::OsStr> = vec![
        "--group".as_ref(),
        topic.as_ref(),
        "--topic".as_ref(),
        topic.as_ref(),
        "--dlq-topic".as_ref(),
        dlq.as_ref(),
        "--http".as_ref(),
        url.as_ref(),
        "--http-ca-file".as_ref(),
        ca.as_os_str(),
        "--http-client-cert".as_ref(),
        client_cert.as_os_str(),
        "--http-client-key".as_ref(),
        client_key.as_os_str(),
        "--http-header".as_ref(),
        "Authorization: env:HOOK_TOKEN".as_ref(),
        "--http-signing-secret-file".as_ref(),
        secret.as_os_str(),
        "--http-format".as_ref(),
        "cloudevents".as_ref(),
        "--admin-addr".as_ref(),
        "off".as_ref(),
        "--commit-interval".as_ref(),
        "500ms".as_ref(),
    ];

    // `config check` prints where the header comes from and masks the signing secret.
    let check = Command::new(BIN)
        .args(["config", "check"])
        .args(&args)
        .args(["--http-header", "X-Literal: lit-value-123"])
        .env("ORDERLY_BOOTSTRAP", b.bootstrap())
        .env("HOOK_TOKEN", "Bearer tok-from-env")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(text.contains("Authorization: env:HOOK_TOKEN"), "{text}");
    assert!(text.contains("X-Literal: ********"), "{text}");
    assert!(
        !text.contains("lit-value-123") && !text.contains("tok-from-env"),
        "{text}"
    );
    assert!(text.contains("http-format = \"cloudevents\""), "{text}");

    let log = tmp("consume.log");
    let mut cmd = Command::new(BIN);
    cmd.env("HOOK_TOKEN", "Bearer tok-from-env");
    let mut child = Consume::start_with(cmd, &args, &log);
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.lock().unwrap().len() < 21 {
        assert!(
            Instant::now() < deadline,
            "the endpoint saw {} of 21 records; log:\n{}",
            seen.lock().unwrap().len(),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let code = child.stop(Duration::from_secs(60));
    assert_eq!(code, 0, "{}", std::fs::read_to_string(&log).unwrap());
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(!stderr.contains("tok-from-env"), "{stderr}");
    assert!(!stderr.contains("the-shared-secret"), "{stderr}");

    let key = SigningKey::new(b"the-shared-secret".to_vec());
    for s in seen.lock().unwrap().iter() {
        let h = |n: &str| s.headers.get(n).unwrap().to_str().unwrap().to_owned();
        assert_eq!(h("authorization"), "Bearer tok-from-env");
        let sig = h("orderly-signature");
        let t: u64 = sig
            .strip_prefix("t=")
            .and_then(|r| r.split(',').next())
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            sig,
            key.signature(t, &s.body, |n| s.headers.get(n).map(|v| v.as_bytes()))
        );
        assert_eq!(h("ce-specversion"), "1.0");
        assert_eq!(h("ce-subject"), h("orderly-session"));
        assert!(h("ce-id").starts_with(&format!("{topic}/")));
    }

    // The redirect was dead-lettered with a reason naming where it pointed.
    let letters = dlq_letters(&dlq);
    assert_eq!(letters.len(), 1, "{letters:?}");
    let error = letters[0]["error"].as_str().unwrap();
    assert!(
        error.contains("302") && error.contains("https://moved.example/in"),
        "{error}"
    );
    let _ = std::fs::remove_file(&secret);
}
