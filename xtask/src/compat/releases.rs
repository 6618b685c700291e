//! The releases the matrix runs, and what orderly expects of a release: refused below the floor,
//! message format v0/v1 topics before 3.0.

use orderly_testkit::releases::Release;

/// The releases `cargo xtask compat` runs by default: the oldest supported, the last of 2.x
/// (ZooKeeper), the first and last of 3.x, the first 4.x and the current one, and two releases
/// below the floor (1.1.1 and 2.0.1, which must be refused).
pub const DEFAULT_VERSIONS: &[&str] = &[
    "1.1.1", "2.0.1", "2.1.1", "2.8.2", "3.0.2", "3.9.1", "4.0.0", "4.3.1",
];

/// The oldest release orderly supports, which CI runs besides the current one.
pub const OLDEST_SUPPORTED: &str = "2.1.1";

/// Whether orderly must refuse `release`: anything before Apache Kafka 2.1.0.
pub(super) fn expect_refused(release: Release) -> bool {
    release
        < Release {
            major: 2,
            minor: 1,
            patch: 0,
        }
}

/// Whether `release` still stores message format v0/v1 on a topic pinned to an old
/// `message.format.version` (from 3.0 on the setting is ignored and every batch is v2).
pub(super) fn writes_legacy_format(release: Release) -> bool {
    release.major < 3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_below_the_floor_are_expected_refused() {
        assert!(expect_refused("2.0.1".parse().unwrap()));
        assert!(!expect_refused("2.1.0".parse().unwrap()));
        assert!(!expect_refused("4.3.1".parse().unwrap()));
    }
}
