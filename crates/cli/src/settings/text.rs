//! Serde for a setting written as text that orderly parses itself (a duration, a size, the
//! session source, the admin address): serialized as its `Display` text, so the file, the flags
//! laid over it and `config check` all hold the same text, and deserialized from a string through
//! `FromStr`, the parser clap uses for the flag. A value that does not parse is reported as
//! `invalid value "<text>": <why>`; anything but a string as what the setting expects.

/// Implements `Serialize` and `Deserialize` for `$t` (`Display` and `FromStr` with an error that
/// displays); `$expected` says what the setting takes, for a value that is not a string.
macro_rules! text_serde {
    ($t:ty, $expected:expr) => {
        impl ::serde::Serialize for $t {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $t {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl ::serde::de::Visitor<'_> for V {
                    type Value = $t;
                    fn expecting(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                        f.write_str($expected)
                    }
                    fn visit_str<E: ::serde::de::Error>(self, s: &str) -> Result<$t, E> {
                        s.parse()
                            .map_err(|e| E::custom(format!("invalid value {s:?}: {e}")))
                    }
                }
                d.deserialize_str(V)
            }
        }
    };
}

pub(super) use text_serde;
