//! Dead-letter log lines that stay readable in a burst: each dead letter gets a line, up to
//! [`LINES_PER_SECOND`] a second; beyond that they are counted, and the count is said every
//! [`SUMMARY_EVERY`] while the burst lasts.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Dead letters a second that get a line each.
pub(crate) const LINES_PER_SECOND: u32 = 10;

/// How often the dead letters beyond that are summed up in a line.
pub(crate) const SUMMARY_EVERY: Duration = Duration::from_secs(5);

/// The dead-letter lines of one sink.
#[derive(Debug, Default)]
pub(crate) struct BurstLog {
    state: Arc<Mutex<Burst>>,
}

#[derive(Debug, Default)]
struct Burst {
    /// The start of the current second and the lines said in it.
    second: Option<Instant>,
    in_second: u32,
    /// Dead letters without a line since the last summary.
    unsaid: u64,
    /// Whether a task is summing them up.
    summarizing: bool,
}

impl BurstLog {
    /// Whether this dead letter gets a line of its own. If not, it is counted for the next
    /// summary, which a task started here (in the caller's runtime) says for `dlq`.
    pub(crate) fn line(&self, dlq: &str) -> bool {
        let now = Instant::now();
        let mut b = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if b.second
            .is_none_or(|s| now.duration_since(s) >= Duration::from_secs(1))
        {
            b.second = Some(now);
            b.in_second = 0;
        }
        b.in_second += 1;
        if b.in_second <= LINES_PER_SECOND {
            return true;
        }
        b.unsaid += 1;
        if !b.summarizing {
            b.summarizing = true;
            tokio::spawn(summarize(self.state.clone(), dlq.to_owned()));
        }
        false
    }
}

/// Says how many dead letters went without a line, every [`SUMMARY_EVERY`], until a period
/// passes without any.
async fn summarize(state: Arc<Mutex<Burst>>, dlq: String) {
    loop {
        tokio::time::sleep(SUMMARY_EVERY).await;
        let unsaid = {
            let mut b = state.lock().unwrap_or_else(PoisonError::into_inner);
            let n = std::mem::take(&mut b.unsaid);
            b.summarizing = n > 0;
            n
        };
        if unsaid == 0 {
            return;
        }
        tracing::warn!(
            dlq = %dlq,
            records = unsaid,
            "{unsaid} more records dead-lettered in the last {} s (a line each for the first {LINES_PER_SECOND} a second); see /metrics and `orderly dlq ls`",
            SUMMARY_EVERY.as_secs()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unsaid(log: &BurstLog) -> (u64, bool) {
        let b = log.state.lock().unwrap();
        (b.unsaid, b.summarizing)
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_gets_ten_lines_a_second_and_the_rest_is_summed_up() {
        let log = BurstLog::default();
        let lines = (0..25).filter(|_| log.line("t.dlq")).count();
        assert_eq!(lines, 10);
        assert_eq!(unsaid(&log), (15, true));
        // The next second has lines again.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert!(log.line("t.dlq"));
        // The summary takes the count; a quiet period ends the summing task.
        tokio::time::sleep(SUMMARY_EVERY).await;
        assert_eq!(unsaid(&log), (0, true));
        tokio::time::sleep(SUMMARY_EVERY).await;
        assert_eq!(unsaid(&log), (0, false));
        // A later burst starts it again.
        let lines = (0..12).filter(|_| log.line("t.dlq")).count();
        assert_eq!(lines, 10);
        assert_eq!(unsaid(&log), (2, true));
    }
}
