//! DescribeConfigs (key 32) v1-v4: the configuration a broker applies to a resource (itself, a
//! topic, a consumer group), each entry with its value and where the value comes from.
//!
//! Version 1 adds the synonyms and each entry's source (v0's `IsDefault` flag is gone, and Kafka
//! 4.0 no longer serves v0), version 3 adds each entry's type and documentation, version 4 is
//! flexible (KIP-482). A group resource ([`RESOURCE_GROUP`]) is answered by brokers that keep
//! per-group configs (Kafka 4.0 does); an older broker answers it with an error for that resource
//! (or for the whole request), so ask for a group in a request of its own.

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// Resource type: a topic (name: the topic).
pub const RESOURCE_TOPIC: i8 = 2;
/// Resource type: a broker (name: its node id in decimal; empty for the cluster-wide defaults).
/// Only the broker with that id answers for it.
pub const RESOURCE_BROKER: i8 = 4;
/// Resource type: a consumer group (name: the group id). Its entries are the group's own
/// settings, or the broker's `group.*` defaults where the group has none.
pub const RESOURCE_GROUP: i8 = 32;

/// One resource to describe.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeConfigsResource {
    /// [`RESOURCE_TOPIC`], [`RESOURCE_BROKER`], [`RESOURCE_GROUP`], ...
    pub resource_type: i8,
    /// The resource's name.
    pub resource_name: String,
    /// The configuration keys to return; `None` returns every key.
    pub configuration_keys: Option<Vec<String>>,
}

/// DescribeConfigs request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeConfigsRequest {
    /// The resources.
    pub resources: Vec<DescribeConfigsResource>,
    /// Whether to return every entry's synonyms.
    pub include_synonyms: bool,
    /// Whether to return every entry's documentation (v3+).
    pub include_documentation: bool,
}

/// Another name under which an entry's value is (or could be) set, in precedence order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigSynonym {
    /// The synonym's name.
    pub name: String,
    /// Its value.
    pub value: Option<String>,
    /// Where it is set (see [`DescribedConfig::config_source`]).
    pub source: i8,
}

/// One configuration entry of a described resource.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribedConfig {
    /// The configuration key.
    pub name: String,
    /// Its value (`None` for a sensitive one).
    pub value: Option<String>,
    /// Whether it cannot be changed at run time.
    pub read_only: bool,
    /// Where the value comes from: 1 dynamic topic, 2 dynamic broker, 3 dynamic cluster-wide
    /// default, 4 static broker, 5 default, 6 broker logger, 7 client metrics, 8 group.
    pub config_source: i8,
    /// Whether the value is secret.
    pub is_sensitive: bool,
    /// The synonyms (when asked for).
    pub synonyms: Vec<ConfigSynonym>,
    /// The value's type (v3+; 0 when unknown).
    pub config_type: i8,
    /// The documentation (v3+, when asked for).
    pub documentation: Option<String>,
}

/// One resource's result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeConfigsResult {
    /// Error for this resource.
    pub error_code: ErrorCode,
    /// The broker's message for it.
    pub error_message: Option<String>,
    /// The resource type asked for.
    pub resource_type: i8,
    /// The resource name asked for.
    pub resource_name: String,
    /// The entries.
    pub configs: Vec<DescribedConfig>,
}

/// DescribeConfigs response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeConfigsResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// One result per resource asked for.
    pub results: Vec<DescribeConfigsResult>,
}

impl Message for DescribeConfigsRequest {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.array(&self.resources, |e, r| {
            e.i8(r.resource_type);
            e.string(&r.resource_name);
            e.narray(r.configuration_keys.as_deref(), |e, k| e.string(k));
            e.tags();
        });
        e.bool(self.include_synonyms);
        if version >= 3 {
            e.bool(self.include_documentation);
        }
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let resources = d.array(|d| {
            let r = DescribeConfigsResource {
                resource_type: d.i8()?,
                resource_name: d.string()?,
                configuration_keys: d.narray(Decoder::string)?,
            };
            d.tags()?;
            Ok(r)
        })?;
        let include_synonyms = d.bool()?;
        let include_documentation = if version >= 3 { d.bool()? } else { false };
        d.tags()?;
        Ok(Self {
            resources,
            include_synonyms,
            include_documentation,
        })
    }
}

fn encode_config(e: &mut Encoder<'_>, c: &DescribedConfig, version: i16) {
    e.string(&c.name);
    e.nstring(c.value.as_deref());
    e.bool(c.read_only);
    e.i8(c.config_source);
    e.bool(c.is_sensitive);
    e.array(&c.synonyms, |e, s| {
        e.string(&s.name);
        e.nstring(s.value.as_deref());
        e.i8(s.source);
        e.tags();
    });
    if version >= 3 {
        e.i8(c.config_type);
        e.nstring(c.documentation.as_deref());
    }
    e.tags();
}

fn decode_config(d: &mut Decoder, version: i16) -> Result<DescribedConfig, DecodeError> {
    let name = d.string()?;
    let value = d.nstring()?;
    let read_only = d.bool()?;
    let config_source = d.i8()?;
    let is_sensitive = d.bool()?;
    let synonyms = d.array(|d| {
        let s = ConfigSynonym {
            name: d.string()?,
            value: d.nstring()?,
            source: d.i8()?,
        };
        d.tags()?;
        Ok(s)
    })?;
    let (config_type, documentation) = if version >= 3 {
        (d.i8()?, d.nstring()?)
    } else {
        (0, None)
    };
    d.tags()?;
    Ok(DescribedConfig {
        name,
        value,
        read_only,
        config_source,
        is_sensitive,
        synonyms,
        config_type,
        documentation,
    })
}

impl Message for DescribeConfigsResponse {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.i32(self.throttle_time_ms);
        e.array(&self.results, |e, r| {
            e.i16(r.error_code.0);
            e.nstring(r.error_message.as_deref());
            e.i8(r.resource_type);
            e.string(&r.resource_name);
            e.array(&r.configs, |e, c| encode_config(e, c, version));
            e.tags();
        });
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = d.i32()?;
        let results = d.array(|d| {
            let r = DescribeConfigsResult {
                error_code: ErrorCode(d.i16()?),
                error_message: d.nstring()?,
                resource_type: d.i8()?,
                resource_name: d.string()?,
                configs: d.array(|d| decode_config(d, version))?,
            };
            d.tags()?;
            Ok(r)
        })?;
        d.tags()?;
        Ok(Self {
            throttle_time_ms,
            results,
        })
    }
}

impl Request for DescribeConfigsRequest {
    type Response = DescribeConfigsResponse;
    const API_KEY: i16 = 32;
    const NAME: &'static str = "DescribeConfigs";
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 4;
    const FIRST_FLEXIBLE: i16 = 4;
}

impl DescribeConfigsResponse {
    /// The value of `key` in the result for (`resource_type`, `resource_name`): `Err` with the
    /// resource's error code if the broker refused to describe it, `Ok(None)` if the broker does
    /// not know the key (or hides its value).
    pub fn value(
        &self,
        resource_type: i8,
        resource_name: &str,
        key: &str,
    ) -> Result<Option<&str>, ErrorCode> {
        let Some(result) = self
            .results
            .iter()
            .find(|r| r.resource_type == resource_type && r.resource_name == resource_name)
        else {
            return Ok(None);
        };
        if result.error_code != ErrorCode::NONE {
            return Err(result.error_code);
        }
        Ok(result
            .configs
            .iter()
            .find(|c| c.name == key)
            .and_then(|c| c.value.as_deref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testutil::*;
    use crate::messages::{decode_response, encode_request, encode_response};
    use bytes::Bytes;
    use proptest::prelude::*;

    fn group_request() -> DescribeConfigsRequest {
        DescribeConfigsRequest {
            resources: vec![DescribeConfigsResource {
                resource_type: RESOURCE_GROUP,
                resource_name: "g".into(),
                configuration_keys: Some(vec!["k".into()]),
            }],
            include_synonyms: false,
            include_documentation: false,
        }
    }

    #[test]
    fn describe_configs_request_bytes_classic_and_flexible() {
        let req = group_request();
        // v1: INT32 counts, INT16 string lengths, IncludeSynonyms, no tags.
        assert_eq!(
            encode_request(&req, 1).unwrap(),
            [0, 0, 0, 1, 32, 0, 1, b'g', 0, 0, 0, 1, 0, 1, b'k', 0]
        );
        // v3 adds IncludeDocumentation.
        assert_eq!(
            encode_request(&req, 3).unwrap(),
            [0, 0, 0, 1, 32, 0, 1, b'g', 0, 0, 0, 1, 0, 1, b'k', 0, 0]
        );
        // v4: compact lengths (n + 1) and a tag section per resource and at the end.
        assert_eq!(
            encode_request(&req, 4).unwrap(),
            [2, 32, 2, b'g', 2, 2, b'k', 0, 0, 0, 0]
        );
        // Every key: a null key list.
        let all = DescribeConfigsRequest {
            resources: vec![DescribeConfigsResource {
                resource_type: RESOURCE_BROKER,
                resource_name: "1".into(),
                configuration_keys: None,
            }],
            ..DescribeConfigsRequest::default()
        };
        assert_eq!(
            encode_request(&all, 2).unwrap(),
            [0, 0, 0, 1, 4, 0, 1, b'1', 0xff, 0xff, 0xff, 0xff, 0]
        );
        assert_eq!(
            encode_request(&all, 4).unwrap(),
            [2, 4, 2, b'1', 0, 0, 0, 0, 0]
        );
    }

    /// A group's `consumer.session.timeout.ms` as a Kafka 4.0 broker answers it, at v4 and v2.
    #[test]
    fn describe_configs_response_bytes_classic_and_flexible() {
        const KEY: &[u8] = b"consumer.session.timeout.ms";
        let mut v4 = vec![0, 0, 0, 0, 2, 0, 0, 0, 32, 2, b'g', 2];
        v4.push(KEY.len() as u8 + 1);
        v4.extend_from_slice(KEY);
        // value "6000", read-only false, source 4 (static broker config), not sensitive, no
        // synonyms, type 3 (INT), no documentation, then the three tag sections.
        v4.extend_from_slice(&[5, b'6', b'0', b'0', b'0', 0, 4, 0, 1, 3, 0, 0, 0, 0]);
        let r = decode_response::<DescribeConfigsRequest>(Bytes::from(v4.clone()), 4).unwrap();
        assert_eq!(
            r.value(RESOURCE_GROUP, "g", "consumer.session.timeout.ms"),
            Ok(Some("6000"))
        );
        assert_eq!(r.results[0].configs[0].config_source, 4);
        assert_eq!(r.results[0].configs[0].config_type, 3);
        assert_eq!(
            encode_response::<DescribeConfigsRequest>(&r, 4).unwrap(),
            v4
        );

        let mut v2 = vec![
            0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0xff, 0xff, 32, 0, 1, b'g', 0, 0, 0, 1,
        ];
        v2.extend_from_slice(&[0, KEY.len() as u8]);
        v2.extend_from_slice(KEY);
        v2.extend_from_slice(&[0, 4, b'6', b'0', b'0', b'0', 0, 4, 0, 0, 0, 0, 0]);
        let r2 = decode_response::<DescribeConfigsRequest>(Bytes::from(v2.clone()), 2).unwrap();
        assert_eq!(
            r2.value(RESOURCE_GROUP, "g", "consumer.session.timeout.ms"),
            Ok(Some("6000"))
        );
        assert_eq!(r2.results[0].configs[0].config_type, 0, "no type below v3");
        assert_eq!(
            encode_response::<DescribeConfigsRequest>(&r2, 2).unwrap(),
            v2
        );

        // A broker that keeps no group configs: INVALID_REQUEST (42) for the resource.
        let refused = [
            0, 0, 0, 0, 0, 0, 0, 1, 0, 42, 0, 1, b'x', 32, 0, 1, b'g', 0, 0, 0, 0,
        ];
        let r3 =
            decode_response::<DescribeConfigsRequest>(Bytes::copy_from_slice(&refused), 1).unwrap();
        assert_eq!(
            r3.value(RESOURCE_GROUP, "g", "consumer.session.timeout.ms"),
            Err(ErrorCode::INVALID_REQUEST)
        );
        assert_eq!(r3.results[0].error_message.as_deref(), Some("x"));
        // A key the broker does not know, or a resource it did not answer for.
        assert_eq!(r2.value(RESOURCE_GROUP, "g", "other"), Ok(None));
        assert_eq!(
            r2.value(RESOURCE_BROKER, "1", "consumer.session.timeout.ms"),
            Ok(None)
        );
    }

    fn synonym() -> impl Strategy<Value = ConfigSynonym> {
        (s(), ns(), any::<i8>()).prop_map(|(name, value, source)| ConfigSynonym {
            name,
            value,
            source,
        })
    }

    fn config() -> impl Strategy<Value = DescribedConfig> {
        (s(), ns(), any::<(bool, i8, bool, i8)>(), v(synonym()), ns()).prop_map(
            |(
                name,
                value,
                (read_only, config_source, is_sensitive, config_type),
                synonyms,
                documentation,
            )| {
                DescribedConfig {
                    name,
                    value,
                    read_only,
                    config_source,
                    is_sensitive,
                    synonyms,
                    config_type,
                    documentation,
                }
            },
        )
    }

    proptest! {
        #[test]
        fn describe_configs_request_rt(t: i8, n in s(), keys in proptest::option::of(v(s())), syn: bool, doc: bool) {
            request_round_trip(&DescribeConfigsRequest {
                resources: vec![DescribeConfigsResource { resource_type: t, resource_name: n, configuration_keys: keys }],
                include_synonyms: syn,
                include_documentation: doc,
            })?;
        }
        #[test]
        fn describe_configs_response_rt(t: i32, c: i16, m in ns(), rt: i8, n in s(), cs in v(config())) {
            response_round_trip::<DescribeConfigsRequest>(&DescribeConfigsResponse {
                throttle_time_ms: t,
                results: vec![DescribeConfigsResult {
                    error_code: ErrorCode(c),
                    error_message: m,
                    resource_type: rt,
                    resource_name: n,
                    configs: cs,
                }],
            })?;
        }
        #[test]
        fn describe_configs_never_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<DescribeConfigsRequest>(&b);
        }
    }
}
