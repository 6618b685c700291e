//! A record's W3C `traceparent` becomes the parent of the handler's span (as span fields).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use orderly_engine::mem::{MemDeadLetters, MemSource};
use orderly_engine::{
    Attempt, Engine, EngineConfig, Handler, HandlerError, Header, Record, TopicPartition,
};
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<(String, String)>>>);

struct Fields<'a>(&'a mut Vec<(String, String)>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
}

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: Context<'_, S>,
    ) {
        attrs.record(&mut Fields(&mut self.0.lock().unwrap()));
    }
    fn on_record(
        &self,
        _: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: Context<'_, S>,
    ) {
        values.record(&mut Fields(&mut self.0.lock().unwrap()));
    }
}

/// Records the span the handler runs in.
struct InSpan(Arc<Mutex<Vec<String>>>);

impl Handler for InSpan {
    async fn handle(&self, _: &Record, _: Attempt) -> Result<(), HandlerError> {
        let name = tracing::Span::current()
            .metadata()
            .map(|m| m.name().to_owned())
            .unwrap_or_default();
        self.0.lock().unwrap().push(name);
        Ok(())
    }
}

#[test]
fn traceparent_becomes_the_handler_span_parent() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let seen = Arc::new(Mutex::new(Vec::new()));
    tracing::subscriber::with_default(subscriber, || {
        let (source, handle) = MemSource::new(10);
        let tp = TopicPartition::new("t", 0);
        let mut r = Record::new(tp.clone(), 0, Some(Bytes::from_static(b"k")), None);
        r.headers.push(Header::new(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ));
        handle.produce(&tp, [r]);
        handle.assign(&[tp]);
        handle.finish_when_drained();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let cfg = EngineConfig {
            workers: 1,
            ..EngineConfig::default()
        };
        rt.block_on(
            Engine::new(cfg, InSpan(seen.clone()), MemDeadLetters::new())
                .run(source, std::future::pending()),
        )
        .unwrap();
    });
    assert_eq!(*seen.lock().unwrap(), vec!["orderly.handle".to_owned()]);
    let fields = capture.0.lock().unwrap().clone();
    assert!(
        fields.contains(&("trace_id".into(), "4bf92f3577b34da6a3ce929d0e0e4736".into())),
        "{fields:?}"
    );
    assert!(
        fields.contains(&("parent_span_id".into(), "00f067aa0ba902b7".into())),
        "{fields:?}"
    );
}

/// The per-record span is DEBUG: a subscriber at `info` (the CLI's default) never sees it, so a
/// formatting subscriber pays nothing per record for it.
#[test]
fn the_handler_span_is_off_at_info() {
    let run = |level: tracing_subscriber::filter::LevelFilter| {
        let capture = Capture::default();
        let subscriber = tracing_subscriber::registry()
            .with(level)
            .with(capture.clone());
        let seen = Arc::new(Mutex::new(Vec::new()));
        tracing::subscriber::with_default(subscriber, || {
            let (source, handle) = MemSource::new(10);
            let tp = TopicPartition::new("t", 0);
            handle.produce(
                &tp,
                [Record::new(
                    tp.clone(),
                    0,
                    Some(Bytes::from_static(b"k")),
                    None,
                )],
            );
            handle.assign(&[tp]);
            handle.finish_when_drained();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            let cfg = EngineConfig {
                workers: 1,
                ..EngineConfig::default()
            };
            rt.block_on(
                Engine::new(cfg, InSpan(seen.clone()), MemDeadLetters::new())
                    .run(source, std::future::pending()),
            )
            .unwrap();
        });
        seen.lock().unwrap().clone()
    };
    assert_eq!(
        run(tracing_subscriber::filter::LevelFilter::INFO),
        vec![String::new()]
    );
    assert_eq!(
        run(tracing_subscriber::filter::LevelFilter::DEBUG),
        vec!["orderly.handle".to_owned()]
    );
}
