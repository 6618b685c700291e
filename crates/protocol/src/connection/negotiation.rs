//! Version negotiation with a broker: ApiVersions at connect, the APIs every command needs (the
//! broker floor) and the optional ones, and what was [`Negotiated`] per API.

use std::collections::HashMap;

use rskafka::messenger::Messenger;
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::debug;

use crate::error::{Error, ErrorCode, Result};
use crate::messages::api_versions::ApiVersionsRequest;
use crate::messages::{Request, encode_request};
use crate::wire::{WireRequest, pick_version, rs_api_key, rs_range};

/// The `(min, max)` version each API key a broker advertised.
pub(super) type Versions = HashMap<i16, (i16, i16)>;

/// One API's negotiation with a broker, for logs and the compatibility report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// API name.
    pub api: &'static str,
    /// Kafka API key.
    pub api_key: i16,
    /// The versions orderly speaks.
    pub ours: (i16, i16),
    /// The broker's advertised range, if it has the API.
    pub offered: Option<(i16, i16)>,
    /// The version requests are sent at, if the ranges meet.
    pub chosen: Option<i16>,
    /// Whether every command needs it (a broker without it is refused at connect).
    pub required: bool,
}

/// One API orderly may use, and whether every command needs it.
struct ApiCheck {
    describe: fn(&Versions, bool) -> Negotiated,
    required: bool,
}

/// The check of `R`.
const fn api<R: Request>(required: bool) -> ApiCheck {
    ApiCheck {
        describe: describe::<R>,
        required,
    }
}

/// `R`'s negotiation with a broker that advertised `versions`: sent at `min(our max, broker
/// max)`, if the ranges meet.
fn describe<R: Request>(versions: &Versions, required: bool) -> Negotiated {
    let offered = versions.get(&R::API_KEY).copied();
    Negotiated {
        api: R::NAME,
        api_key: R::API_KEY,
        ours: (R::MIN_VERSION, R::MAX_VERSION),
        offered,
        chosen: offered.and_then(|b| pick_version((R::MIN_VERSION, R::MAX_VERSION), b)),
        required,
    }
}

/// The APIs every command (and the library's consumer) needs: a broker without one of them in a
/// version we speak is older than [`OLDEST_KAFKA`](crate::messages::OLDEST_KAFKA) and refused.
const REQUIRED_APIS: &[ApiCheck] = {
    use crate::messages::*;
    &[
        api::<produce::ProduceRequest>(true),
        api::<fetch::FetchRequest>(true),
        api::<list_offsets::ListOffsetsRequest>(true),
        api::<metadata::MetadataRequest>(true),
        api::<offset_commit::OffsetCommitRequest>(true),
        api::<offset_fetch::OffsetFetchRequest>(true),
        api::<find_coordinator::FindCoordinatorRequest>(true),
        api::<join_group::JoinGroupRequest>(true),
        api::<heartbeat::HeartbeatRequest>(true),
        api::<leave_group::LeaveGroupRequest>(true),
        api::<sync_group::SyncGroupRequest>(true),
    ]
};

/// APIs that only some features use; each feature says what it does without one.
const OPTIONAL_APIS: &[ApiCheck] = {
    use crate::messages::*;
    &[
        api::<describe_groups::DescribeGroupsRequest>(false),
        api::<create_topics::CreateTopicsRequest>(false),
        api::<init_producer_id::InitProducerIdRequest>(false),
        api::<consumer_group_heartbeat::ConsumerGroupHeartbeatRequest>(false),
        api::<add_partitions_to_txn::AddPartitionsToTxnRequest>(false),
        api::<add_offsets_to_txn::AddOffsetsToTxnRequest>(false),
        api::<txn_offset_commit::TxnOffsetCommitRequest>(false),
        api::<end_txn::EndTxnRequest>(false),
        api::<describe_configs::DescribeConfigsRequest>(false),
    ]
};

/// ApiVersions' API key.
const API_VERSIONS_KEY: i16 = 18;

/// The exchanges of the connection itself, spoken before any request: ApiVersions (v3, else v0:
/// [`negotiate_versions`]) and the SASL exchange of rskafka's messenger (SaslHandshake v1, the
/// version that frames the tokens in SaslAuthenticate, and SaslAuthenticate v0-v2, the highest
/// the broker offers). Name, key, the versions spoken, whether every connection uses it.
const CONNECTION_APIS: &[(&str, i16, (i16, i16), bool)] = &[
    ("ApiVersions", API_VERSIONS_KEY, (0, 3), true),
    ("SaslHandshake", 17, (1, 1), false),
    ("SaslAuthenticate", 36, (0, 2), false),
];

/// Fails with [`Error::UnsupportedVersion`] (not retriable) unless `broker`, which advertised
/// `versions`, serves every API each command needs ([`REQUIRED_APIS`]) in a version we speak: a
/// broker older than [`OLDEST_KAFKA`](crate::messages::OLDEST_KAFKA) is refused at the first
/// connection, before a group is joined or a record is written, rather than failing one request
/// type later.
pub(super) fn check_required(broker: &str, versions: &Versions) -> Result<()> {
    for api in REQUIRED_APIS {
        let n = (api.describe)(versions, api.required);
        if n.chosen.is_none() {
            return Err(Error::UnsupportedVersion {
                broker: broker.to_string(),
                api: n.api,
                min: n.ours.0,
                max: n.ours.1,
                offered: n.offered,
                needs: crate::messages::OLDEST_KAFKA,
            });
        }
    }
    Ok(())
}

/// What was negotiated with a broker that advertised `versions` for every API orderly may use:
/// the APIs every command needs, the optional ones, then the connection's own exchanges
/// (ApiVersions and, with [`ConnectionConfig::sasl`](super::ConnectionConfig::sasl),
/// SaslHandshake and SaslAuthenticate).
pub(super) fn negotiated(versions: &Versions) -> Vec<Negotiated> {
    let mut out: Vec<Negotiated> = REQUIRED_APIS
        .iter()
        .chain(OPTIONAL_APIS)
        .map(|api| (api.describe)(versions, api.required))
        .collect();
    for &(api, api_key, ours, required) in CONNECTION_APIS {
        let offered = versions.get(&api_key).copied();
        let chosen = offered.and_then(|(min, max)| {
            if api_key == API_VERSIONS_KEY {
                // `negotiate_versions` asks at v3, else at v0.
                Some(if max >= 3 { 3 } else { 0 })
            } else {
                let v = max.min(ours.1);
                (v >= min.max(ours.0)).then_some(v)
            }
        });
        out.push(Negotiated {
            api,
            api_key,
            ours,
            offered,
            chosen,
            required,
        });
    }
    out
}

/// ApiVersions v3 (flexible body, v0 response header), falling back to v0 if the broker refuses v3.
pub(super) async fn negotiate_versions<RW>(
    messenger: &mut Messenger<RW>,
    addr: &str,
) -> Result<Versions>
where
    RW: AsyncRead + AsyncWrite + Send + 'static,
{
    let req = ApiVersionsRequest {
        client_software_name: "orderly-protocol".to_string(),
        client_software_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let mut last = ErrorCode::NONE;
    for version in [3i16, 0] {
        let range = rs_range(version, version)
            .into_iter()
            .map(|r| (rs_api_key(18), r));
        messenger.override_version_ranges(range.collect());
        let body = encode_request(&req, version).map_err(|source| Error::Encode {
            api: ApiVersionsRequest::NAME,
            source,
        })?;
        let resp = messenger
            .request(WireRequest::<ApiVersionsRequest>::new(body, version))
            .await
            .map_err(|e| Error::Transport {
                broker: addr.to_string(),
                api: ApiVersionsRequest::NAME,
                detail: e.to_string(),
            })?;
        let resp = match resp.0 {
            Ok(r) => r,
            // A broker that refuses v3 answers in the v0 layout, which v3 cannot decode.
            Err(e) if version > 0 => {
                debug!(broker = addr, %e, "ApiVersions v{version} unreadable; trying v0");
                continue;
            }
            Err(source) => {
                return Err(Error::Decode {
                    broker: addr.to_string(),
                    api: ApiVersionsRequest::NAME,
                    source,
                });
            }
        };
        if resp.error_code == ErrorCode::NONE {
            return Ok(resp
                .api_keys
                .iter()
                .filter(|k| k.min_version <= k.max_version)
                .map(|k| (k.api_key, (k.min_version, k.max_version)))
                .collect());
        }
        last = resp.error_code;
    }
    Err(Error::Kafka {
        broker: addr.to_string(),
        api: ApiVersionsRequest::NAME,
        code: last,
        context: Default::default(),
        message: None,
    })
}
