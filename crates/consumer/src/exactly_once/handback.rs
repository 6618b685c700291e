//! A revoke fences its partitions' writes: once the engine handed them back, writes of their
//! records are refused, and output of theirs that the open transaction holds commits before the
//! revoke is acknowledged to the group.

use super::*;

impl Transactions {
    /// The engine handed `partitions` back (drained, committed, acknowledged): writes of their
    /// records are refused from now on (the next owner handles those records) until they are
    /// assigned here again. Output of theirs that the open transaction already holds (queued
    /// before the revoke's commit took the gate but acknowledged only since, or a revoke that
    /// had nothing to commit) commits now, with their offsets, while the member still owns them:
    /// once the revoke is acknowledged it could only commit beside the next owner's.
    pub(crate) async fn handed_back(&self, partitions: &[TopicPartition]) {
        let held = {
            let mut st = self.inner.lock();
            st.handed_back.extend(partitions.iter().cloned());
            partitions.iter().any(|tp| st.pending.contains_key(tp))
        };
        if held {
            // A failure rewinds (the output is aborted, the next owner handles its records) or
            // stops the mode; either way nothing of it commits later.
            if let Err(e) = self.commit(Vec::new()).await {
                tracing::warn!(error = %e, partitions = partitions.len(),
                    "committing the output of handed-back partitions failed: the next owner handles their records");
            }
        }
    }
}
