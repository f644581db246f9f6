//! The kinds of value only one key has: an upstream's name and url, a CA file, the
//! sleeper's `initial_interval`, the throttle rules. The general kinds (numbers in a
//! range, sizes, choices, text) are in `keys.rs`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::HeaderName;
use http::uri::{Authority, Scheme, Uri};
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::sign::CertifiedKey;
use toml::Spanned;

use super::keys::{Bounds, Kind, quote, strings};
use super::reader::TableReader;
use super::units::{format_duration, parse_duration};
use crate::concurrency::CapSetting;
use crate::route::{Part, parse_part};
use crate::sleeper::Initial;

/// An upstream's name; every later message about the upstream is prefixed with it,
/// so it is read first.
pub struct Name;

impl Kind<String> for Name {
    fn read(&self, t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Spanned<String>> {
        let Some(name) = t.string(key) else {
            t.set_context("upstream: ".to_string());
            let at = t.span().start;
            t.error(at..at, key, "is missing (every [[upstream]] needs a name)");
            return None;
        };
        t.set_context(format!("upstream \"{}\": ", name.get_ref()));
        let text = name.get_ref();
        if text.is_empty()
            || !text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            t.error(
                name.span(),
                key,
                format_args!("must be letters, digits, '-', '_' or '.', got \"{text}\""),
            );
        }
        Some(name)
    }

    fn show(&self, value: &String) -> Option<String> {
        Some(quote(value))
    }
}

/// A PEM file, loaded at `check` exactly as the upstream client loads it.
pub struct PemFile {
    /// What the file holds, for the message: "CA certificates".
    what: &'static str,
    load: fn(&Path) -> Result<(), String>,
}

/// `ca_file`: extra trusted CA certificates.
pub const CA_FILE: PemFile = PemFile {
    what: "CA certificates",
    load: |path| ca_roots(path).map(drop),
};

/// `client_cert`: the client certificate chain for mutual TLS.
pub const CERT_FILE: PemFile = PemFile {
    what: "a client certificate",
    load: |path| cert_chain(path).map(drop),
};

/// `client_key`: the private key of `client_cert`.
pub const KEY_FILE: PemFile = PemFile {
    what: "a private key",
    load: |path| private_key(path).map(drop),
};

impl Kind<Option<PathBuf>> for PemFile {
    fn read(
        &self,
        t: &mut TableReader<'_, '_>,
        key: &'static str,
    ) -> Option<Spanned<Option<PathBuf>>> {
        let path = t.parsed(key, |path| {
            (self.load)(Path::new(path))
                .map(|_| PathBuf::from(path))
                .map_err(|e| format!("cannot load {} from \"{path}\": {e}", self.what))
        })?;
        let span = path.span();
        Some(Spanned::new(span, Some(path.into_inner())))
    }

    fn show(&self, value: &Option<PathBuf>) -> Option<String> {
        value.as_ref().map(|p| quote(&p.display().to_string()))
    }
}

/// `server_name`: a DNS name or IP address for SNI and the certificate check.
pub struct TlsName;

impl Kind<Option<String>> for TlsName {
    fn read(
        &self,
        t: &mut TableReader<'_, '_>,
        key: &'static str,
    ) -> Option<Spanned<Option<String>>> {
        let name = t.parsed(key, |name| {
            ServerName::try_from(name)
                .map(|_| name.to_string())
                .map_err(|_| format!("must be a DNS name or an IP address, got \"{name}\""))
        })?;
        let span = name.span();
        Some(Spanned::new(span, Some(name.into_inner())))
    }

    fn show(&self, value: &Option<String>) -> Option<String> {
        value.as_deref().map(quote)
    }
}

/// The certificates of a `ca_file` as trust roots; the error says why the file cannot
/// serve as one (unreadable, not PEM, no certificate, a certificate that does not parse).
pub fn ca_roots(path: &Path) -> Result<RootCertStore, String> {
    let certs = cert_chain(path)?;
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| match e {
            rustls::Error::InvalidCertificate(why) => {
                format!("a certificate in the file is not valid ({why:?})")
            }
            e => e.to_string(),
        })?;
    }
    Ok(roots)
}

/// The PEM certificates in `path`, at least one.
fn cert_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| e.to_string())?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no PEM certificates in the file".into());
    }
    Ok(certs)
}

/// The first PEM private key (PKCS#8, PKCS#1 or SEC1) in `path`.
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => "no PEM private key in the file".into(),
        e => e.to_string(),
    })
}

/// A client certificate chain and its key, checked to belong together, as the upstream
/// client presents them for mutual TLS.
pub fn client_identity(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let what = |e: String, file: &Path| format!("cannot load \"{}\": {e}", file.display());
    let chain = cert_chain(cert).map_err(|e| what(e, cert))?;
    let private = private_key(key).map_err(|e| what(e, key))?;
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(chain.clone(), private.clone_key(), &provider).map_err(|e| {
        format!(
            "does not belong to client_cert \"{}\" ({e})",
            cert.display()
        )
    })?;
    Ok((chain, private))
}

/// `"auto"` or a duration within `.0`.
pub struct InitialInterval(pub Bounds<Duration>);

impl Kind<Initial> for InitialInterval {
    fn read(&self, t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Spanned<Initial>> {
        let v = t.parsed(key, |text| {
            if text == "auto" {
                Ok(Initial::Auto)
            } else {
                parse_duration(text)
                    .map(Initial::Fixed)
                    .map_err(|e| format!("{e}, or \"auto\""))
            }
        })?;
        match *v.get_ref() {
            Initial::Auto => Some(v),
            Initial::Fixed(d) => self.0.within(t, key, Spanned::new(v.span(), d)).map(|_| v),
        }
    }

    fn show(&self, value: &Initial) -> Option<String> {
        Some(match value {
            Initial::Auto => quote("auto"),
            Initial::Fixed(d) => quote(&format_duration(*d)),
        })
    }
}

/// `max_in_flight`: `"off"`, a whole number from 1, or `"learn"`.
pub struct InFlightCap;

impl Kind<CapSetting> for InFlightCap {
    fn read(&self, t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Spanned<CapSetting>> {
        const SAYS: &str = "\"off\", a whole number from 1 to 100000 (a fixed cap), or \"learn\"";
        t.number_or_words(
            key,
            |n| match u32::try_from(n) {
                Ok(n @ 1..=100_000) => Ok(CapSetting::Fixed(n)),
                _ => Err(format!("must be {SAYS}, got {n}")),
            },
            |text| match text {
                "off" => Ok(CapSetting::Off),
                "learn" => Ok(CapSetting::Learn),
                _ => Err(format!("must be {SAYS}, got \"{text}\"")),
            },
        )
    }

    fn show(&self, value: &CapSetting) -> Option<String> {
        Some(match value {
            CapSetting::Fixed(n) => n.to_string(),
            _ => quote(&value.to_string()),
        })
    }
}

/// HTTP statuses.
pub struct Statuses;

impl Kind<Vec<u16>> for Statuses {
    fn read(&self, t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Spanned<Vec<u16>>> {
        let list = t.unsigned_array(key)?;
        let span = list.span();
        let mut statuses = Vec::new();
        for code in list.into_inner() {
            match u16::try_from(*code.get_ref()) {
                Ok(c) if (100..=599).contains(&c) => statuses.push(c),
                _ => t.error(
                    code.span(),
                    key,
                    format_args!(
                        "must hold HTTP statuses from 100 to 599, got {}",
                        code.get_ref()
                    ),
                ),
            }
        }
        Some(Spanned::new(span, statuses))
    }

    fn show(&self, value: &Vec<u16>) -> Option<String> {
        let statuses: Vec<String> = value.iter().map(u16::to_string).collect();
        Some(format!("[{}]", statuses.join(", ")))
    }
}

/// Substrings, none of them empty.
pub struct Needles;

impl Kind<Vec<String>> for Needles {
    fn read(&self, t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Spanned<Vec<String>>> {
        let span = t.span();
        let codes = t.string_array(key)?;
        let mut out = Vec::new();
        for code in codes {
            if code.get_ref().is_empty() {
                t.error(code.span(), key, "must not hold an empty string");
            } else {
                out.push(code.into_inner());
            }
        }
        Some(Spanned::new(span, out))
    }

    fn show(&self, value: &Vec<String>) -> Option<String> {
        Some(strings(value))
    }
}

/// `{ "header-name" = ["substring", ...] }`.
pub struct HeaderRules;

impl Kind<Vec<(HeaderName, Vec<String>)>> for HeaderRules {
    fn read(
        &self,
        t: &mut TableReader<'_, '_>,
        key: &'static str,
    ) -> Option<Spanned<Vec<(HeaderName, Vec<String>)>>> {
        let span = t.span();
        let present = t.has(key);
        let lists = t.string_lists(key);
        if !present {
            return None;
        }
        let mut rules = Vec::new();
        for (name, needles) in lists {
            match HeaderName::from_bytes(name.get_ref().as_bytes()) {
                Ok(header) => rules.push((
                    header,
                    needles.into_iter().map(Spanned::into_inner).collect(),
                )),
                Err(_) => t.error(
                    name.span(),
                    key,
                    format_args!("has an invalid header name \"{}\"", name.get_ref()),
                ),
            }
        }
        Some(Spanned::new(span, rules))
    }

    fn show(&self, value: &Vec<(HeaderName, Vec<String>)>) -> Option<String> {
        let headers: Vec<String> = value
            .iter()
            .map(|(name, needles)| format!("{} = {}", quote(name.as_str()), strings(needles)))
            .collect();
        Some(format!("{{ {} }}", headers.join(", ")).replace("{  }", "{}"))
    }
}

/// `[upstream.lanes] by`: a list of request parts (`method`, `header:NAME`, `path:N`).
pub struct LaneParts;

impl Kind<Option<Vec<Part>>> for LaneParts {
    fn read(
        &self,
        t: &mut TableReader<'_, '_>,
        key: &'static str,
    ) -> Option<Spanned<Option<Vec<Part>>>> {
        let span = t.span();
        let texts = t.string_array(key)?;
        let mut parts = Vec::new();
        for text in texts {
            match parse_part(text.get_ref()) {
                Ok(part) if parts.contains(&part) => t.error(
                    text.span(),
                    key,
                    format_args!("names \"{}\" twice", text.get_ref()),
                ),
                Ok(part) => parts.push(part),
                Err(message) => t.error(text.span(), key, message),
            }
        }
        Some(Spanned::new(span, Some(parts)))
    }

    fn show(&self, value: &Option<Vec<Part>>) -> Option<String> {
        let parts: Vec<String> = value.as_ref()?.iter().map(Part::to_string).collect();
        Some(strings(&parts))
    }
}

/// A list of header names.
pub struct HeaderNames;

impl Kind<Vec<HeaderName>> for HeaderNames {
    fn read(
        &self,
        t: &mut TableReader<'_, '_>,
        key: &'static str,
    ) -> Option<Spanned<Vec<HeaderName>>> {
        let span = t.span();
        let texts = t.string_array(key)?;
        let mut names = Vec::new();
        for text in texts {
            match HeaderName::from_bytes(text.get_ref().as_bytes()) {
                Ok(name) => names.push(name),
                Err(_) => t.error(
                    text.span(),
                    key,
                    format_args!("must hold header names, got \"{}\"", text.get_ref()),
                ),
            }
        }
        Some(Spanned::new(span, names))
    }

    fn show(&self, value: &Vec<HeaderName>) -> Option<String> {
        let names: Vec<String> = value.iter().map(|n| n.as_str().to_owned()).collect();
        Some(strings(&names))
    }
}

/// An optional header name.
pub struct HeaderKey;

impl Kind<Option<HeaderName>> for HeaderKey {
    fn read(
        &self,
        t: &mut TableReader<'_, '_>,
        key: &'static str,
    ) -> Option<Spanned<Option<HeaderName>>> {
        let name = t.parsed(key, |text| {
            HeaderName::from_bytes(text.as_bytes())
                .map_err(|_| format!("must be a header name, got \"{text}\""))
        })?;
        let span = name.span();
        Some(Spanned::new(span, Some(name.into_inner())))
    }

    fn show(&self, value: &Option<HeaderName>) -> Option<String> {
        value.as_ref().map(|name| quote(name.as_str()))
    }
}

/// `priority = "header:NAME"`: an optional header, written as a request part.
pub struct HeaderPart;

impl Kind<Option<HeaderName>> for HeaderPart {
    fn read(
        &self,
        t: &mut TableReader<'_, '_>,
        key: &'static str,
    ) -> Option<Spanned<Option<HeaderName>>> {
        let name = t.parsed(key, super::schema::parse_priority)?;
        let span = name.span();
        Some(Spanned::new(span, Some(name.into_inner())))
    }

    fn show(&self, value: &Option<HeaderName>) -> Option<String> {
        value.as_ref().map(|name| quote(&format!("header:{name}")))
    }
}

/// `weights = { NAME = N }`: whole numbers from 1 to 1000 by free-form name.
pub struct Weights;

/// The largest weight: a thousand to one is as uneven as a share gets useful.
pub const MAX_WEIGHT: u64 = 1000;

impl Kind<Vec<(String, u32)>> for Weights {
    fn read(
        &self,
        t: &mut TableReader<'_, '_>,
        key: &'static str,
    ) -> Option<Spanned<Vec<(String, u32)>>> {
        let span = t.span();
        let present = t.has(key);
        let numbers = t.name_numbers(key);
        if !present {
            return None;
        }
        let mut weights = Vec::new();
        for (name, n) in numbers {
            match u32::try_from(*n.get_ref()) {
                Ok(w) if (1..=MAX_WEIGHT).contains(&u64::from(w)) => {
                    weights.push((name.into_inner(), w));
                }
                _ => t.error(
                    n.span(),
                    key,
                    format_args!(
                        "{}: must be from 1 to {MAX_WEIGHT}, got {}",
                        name.get_ref(),
                        n.get_ref()
                    ),
                ),
            }
        }
        Some(Spanned::new(span, weights))
    }

    fn show(&self, value: &Vec<(String, u32)>) -> Option<String> {
        let weights: Vec<String> = value
            .iter()
            .map(|(name, w)| format!("{} = {w}", quote(name)))
            .collect();
        Some(format!("{{ {} }}", weights.join(", ")).replace("{  }", "{}"))
    }
}

/// An `IP:port` a socket is bound to.
pub fn parse_socket_addr(text: &str) -> Result<SocketAddr, String> {
    text.parse().map_err(|_| {
        format!("invalid address \"{text}\": write an IP and a port, e.g. \"127.0.0.1:8000\" or \"[::1]:8000\"")
    })
}

/// The upstream's address, split the way forwarding needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct UpstreamUrl {
    pub scheme: Scheme,
    pub authority: Authority,
    /// Prefixed to every request path; empty or starting with `/`, never ending in `/`.
    pub base_path: String,
}

impl UpstreamUrl {
    /// Scheme, host and port, for `/status` and logs: a base path can carry a token.
    pub fn origin(&self) -> String {
        format!("{}://{}", self.scheme, self.authority)
    }
}

impl std::fmt::Display for UpstreamUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.base_path)
    }
}

/// An upstream url: http or https, a host, an optional base path, nothing else.
pub fn parse_url(text: &str) -> Result<UpstreamUrl, String> {
    let uri: Uri = text
        .parse()
        .map_err(|e| format!("invalid url \"{text}\": {e}"))?;
    let scheme = match uri.scheme_str() {
        Some("http") => Scheme::HTTP,
        Some("https") => Scheme::HTTPS,
        _ => {
            return Err(format!(
                "invalid url \"{text}\": scheme must be http or https"
            ));
        }
    };
    let authority = uri
        .authority()
        .filter(|a| !a.host().is_empty())
        .cloned()
        .ok_or_else(|| format!("invalid url \"{text}\": it has no host"))?;
    if authority.as_str().contains('@') {
        return Err(format!(
            "invalid url \"{text}\": credentials in the url are not supported"
        ));
    }
    if uri.query().is_some() {
        return Err(format!(
            "invalid url \"{text}\": a query string is not allowed"
        ));
    }
    let base_path = uri.path().trim_end_matches('/').to_string();
    Ok(UpstreamUrl {
        scheme,
        authority,
        base_path,
    })
}
