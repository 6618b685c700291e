//! The handler URL's secrets: credentials in its userinfo are sent as `Authorization: Basic` (as
//! curl does) and never shown; query values are masked wherever the URL is shown.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use orderly_engine::{Attempt, Handler, Record, TopicPartition};
use orderly_handlers::redact_url;
use orderly_handlers::{HttpConfig, HttpHandler, SessionRouter};

/// The request line target and the `authorization` header of each request.
type Log = Arc<Mutex<Vec<(String, Option<String>)>>>;

async fn server() -> (std::net::SocketAddr, Log) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log = Log::default();
    let l = log.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let log = l.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let auth = req
                        .headers()
                        .get("authorization")
                        .map(|v| v.to_str().unwrap().to_owned());
                    log.lock().unwrap().push((req.uri().to_string(), auth));
                    async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::new()))) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, log)
}

fn record() -> Record {
    Record::new(
        TopicPartition::new("t", 0),
        1,
        Some(Bytes::from_static(b"s")),
        Some(Bytes::from_static(b"v")),
    )
}

#[tokio::test]
async fn userinfo_is_sent_as_basic_auth_and_never_shown() {
    let (addr, log) = server().await;
    // Percent-encoded userinfo is decoded first, as curl does: `al@ice` / `p:ss`.
    let url = format!("http://al%40ice:p%3Ass@{addr}/in?token=t0k");
    let h = HttpHandler::new(HttpConfig::new(url), SessionRouter::default()).unwrap();
    h.handle(&record(), Attempt::FIRST).await.unwrap();
    let seen = log.lock().unwrap().clone();
    use base64::Engine as _;
    let want = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("al@ice:p:ss")
    );
    assert_eq!(seen, vec![("/in?token=t0k".to_owned(), Some(want))]);
    // What the handler shows of its URL (logs, start-up warnings) holds neither secret.
    assert_eq!(h.url(), format!("http://al%40ice:***@{addr}/in?token=***"));
    assert!(!format!("{h:?}").contains("p%3Ass"), "{h:?}");
    assert!(!format!("{:?}", HttpConfig::new("http://u:pw@h/?k=t0k")).contains("t0k"));

    // Without userinfo no Authorization header is sent.
    let h = HttpHandler::new(
        HttpConfig::new(format!("http://{addr}/plain")),
        SessionRouter::default(),
    )
    .unwrap();
    h.handle(&record(), Attempt::FIRST).await.unwrap();
    assert_eq!(log.lock().unwrap()[1], ("/plain".to_owned(), None));
}

#[test]
fn errors_about_the_url_mask_it() {
    let e = HttpHandler::new(
        HttpConfig::new("ftp://u:pw1@h/?token=t0k"),
        SessionRouter::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("ftp") && !e.contains("pw1") && !e.contains("t0k"),
        "{e}"
    );
}

#[test]
fn redaction() {
    assert_eq!(redact_url("http://h:80/p"), "http://h:80/p");
    assert_eq!(redact_url("http://u:p@h/p"), "http://u:***@h/p");
    assert_eq!(redact_url("http://tok@h/p"), "http://***@h/p");
    assert_eq!(
        redact_url("http://h/p?a=1&b&c=x#frag"),
        "http://h/p?a=***&***&c=***#frag"
    );
    assert_eq!(redact_url("http://h?k=v"), "http://h?k=***");
    // Not a URL at all: shown whole only if nothing in it looks like a secret.
    assert_eq!(redact_url("nope"), "nope");
    assert_eq!(redact_url("x@y?z"), "***@y?***");
}

#[tokio::test]
async fn redaction_finds_the_userinfo_by_its_last_at_sign() {
    // A password with an unencoded `/`, `?`, `#` or `@` is masked whole.
    for (url, shown) in [
        ("https://u:ab/cd@h/x", "https://u:***@h/x"),
        (
            "https://u:12/cd@h:8443/x?k=v",
            "https://u:***@h:8443/x?k=***",
        ),
        ("https://u:ab?cd@h/x", "https://u:***@h/x"),
        ("https://u:ab#cd@h/x#frag", "https://u:***@h/x#frag"),
        ("https://u:a@b@h/x", "https://u:***@h/x"),
        ("https://tok/en@h/x", "https://***@h/x"),
    ] {
        assert_eq!(redact_url(url), shown, "{url}");
    }
    // Such a URL is refused (it would send the rest of the password to the wrong host), and the
    // error shows it masked.
    for url in [
        "https://u:1234/w0rd@h/x",
        "https://u:ab/w0rd@h/x",
        "http://h/x@y",
    ] {
        let e = HttpHandler::new(HttpConfig::new(url), SessionRouter::default()).unwrap_err();
        assert!(e.to_string().contains("%40"), "{url}: {e}");
        assert!(!e.to_string().contains("w0rd"), "{url}: {e}");
    }
}
