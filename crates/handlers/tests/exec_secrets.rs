//! The `--exec` command line may carry secrets (`curl -H "Authorization: ..."`): the handler's
//! error texts, which go to logs and to the dead-letter record's error header, never hold it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use bytes::Bytes;
use orderly_engine::{Attempt, Handler, HandlerError, Record, TopicPartition};
use orderly_handlers::{ExecConfig, ExecHandler, SessionRouter};

#[tokio::test]
async fn error_texts_do_not_quote_the_command() {
    let record = Record::new(
        TopicPartition::new("t", 0),
        1,
        Some(Bytes::from_static(b"s")),
        Some(Bytes::from_static(b"v")),
    );
    // Timed out: the limit is far below the command's run time.
    let mut cfg = ExecConfig::new("sleep 30 # SECRET-TOKEN-1");
    cfg.timeout = Duration::from_millis(50);
    let e = ExecHandler::new(cfg, SessionRouter::default())
        .handle(&record, Attempt::FIRST)
        .await
        .unwrap_err();
    let HandlerError::Transient { message: text, .. } = &e else {
        panic!("a timeout is transient: {e:?}");
    };
    assert!(!text.contains("SECRET-TOKEN"), "{text}");
    assert!(text.contains("did not finish"), "{text}");
    // Failed: the reason is the exit code and the child's own stderr.
    let cfg = ExecConfig::new("echo broken >&2; exit 3 # SECRET-TOKEN-2");
    let e = ExecHandler::new(cfg, SessionRouter::default())
        .handle(&record, Attempt::FIRST)
        .await
        .unwrap_err();
    assert_eq!(e, HandlerError::permanent("exit 3: broken"));
}
