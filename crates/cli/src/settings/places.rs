//! Where things are: the place of a record's session id (`--session`) and the address the admin
//! endpoint listens on (`--admin-addr`). Each type parses its text (clap through `FromStr`, the
//! file through serde) and prints back the text it was given, which is what `config check` shows.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::str::FromStr;

use orderly_handlers::SessionFrom;

use super::text::text_serde;

/// `--session`: where a record's session id comes from, `key`, `header:NAME` or `json:/pointer`
/// (parsed and printed as [`SessionFrom`] does).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionSource(pub SessionFrom);

/// `--admin-addr`: the socket address the admin endpoint listens on, or `off` (also `none`, an
/// empty text) for no endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdminAddr(pub Option<SocketAddr>);

impl AdminAddr {
    /// Loopback only, port 9898.
    pub const DEFAULT: Self = Self(Some(SocketAddr::V4(SocketAddrV4::new(
        Ipv4Addr::LOCALHOST,
        9898,
    ))));
}

const SESSION_EXPECTED: &str = "`key`, `header:NAME` or `json:/pointer`";
const ADMIN_ADDR_EXPECTED: &str = "host:port such as 127.0.0.1:9898, or off";

impl FromStr for SessionSource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        s.parse().map(Self).map_err(|e| e.to_string())
    }
}

impl FromStr for AdminAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" | "none" | "" => Ok(Self(None)),
            a => a
                .parse()
                .map(|a| Self(Some(a)))
                .map_err(|e| format!("expected {ADMIN_ADDR_EXPECTED}: {e}")),
        }
    }
}

impl fmt::Display for SessionSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for AdminAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("off"),
            Some(a) => a.fmt(f),
        }
    }
}

text_serde!(SessionSource, SESSION_EXPECTED);
text_serde!(AdminAddr, ADMIN_ADDR_EXPECTED);

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use super::*;

    #[test]
    fn session_sources_parse_print_and_name_the_bad_ones() {
        for text in ["key", "header:user", "json:/user/id", "json:"] {
            let s: SessionSource = text.parse().unwrap();
            assert_eq!(s.to_string(), text);
        }
        assert_eq!(
            "header:user".parse::<SessionSource>().unwrap().0,
            SessionFrom::Header("user".into())
        );
        assert_eq!(SessionSource::default().0, SessionFrom::Key);
        let e = "value".parse::<SessionSource>().unwrap_err();
        assert!(e.contains(SESSION_EXPECTED), "{e}");
        assert!("header:".parse::<SessionSource>().is_err());
        assert!("json:user".parse::<SessionSource>().is_err());
    }

    #[test]
    fn admin_addresses_are_socket_addresses_or_off() {
        for off in ["off", "none", ""] {
            assert_eq!(off.parse::<AdminAddr>(), Ok(AdminAddr(None)), "{off:?}");
        }
        for text in ["127.0.0.1:9898", "0.0.0.0:9000", "[::1]:9000"] {
            let a: AdminAddr = text.parse().unwrap();
            assert_eq!(a.0.unwrap().to_string(), text);
            assert_eq!(a.to_string(), text);
        }
        assert_eq!(AdminAddr(None).to_string(), "off");
        assert_eq!(AdminAddr::DEFAULT.to_string(), "127.0.0.1:9898");
        for bad in ["localhost", "9898", "localhost:9898", "127.0.0.1"] {
            let e = bad.parse::<AdminAddr>().unwrap_err();
            assert!(e.starts_with("expected host:port"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_file_reads_text_and_names_what_it_expected() {
        #[derive(Deserialize, Serialize)]
        struct F {
            s: SessionSource,
            a: AdminAddr,
        }
        let f: F = toml::from_str("s = \"json:/id\"\na = \"off\"\n").unwrap();
        assert_eq!(f.s.0, SessionFrom::Json("/id".into()));
        assert_eq!(f.a, AdminAddr(None));
        assert_eq!(
            toml::to_string(&f).unwrap(),
            "s = \"json:/id\"\na = \"off\"\n"
        );
        let e = toml::from_str::<F>("s = \"value\"\na = \"off\"\n")
            .err()
            .unwrap();
        assert!(e.message().starts_with("invalid value \"value\": "), "{e}");
        let e = toml::from_str::<F>("s = \"key\"\na = 9898\n")
            .err()
            .unwrap();
        assert!(e.message().contains(ADMIN_ADDR_EXPECTED), "{e}");
    }
}
