//! `easeoff train`: runs the request path the way production does, for a
//! profile-guided build (the Dockerfile's): HTTP/1.1 and h2c clients, pass-through,
//! the dynamodb preset's lanes, the DynamoDB recipe (an https upstream, SigV4 signing),
//! gRPC, throttles and retries, against in-process mocks.
//! The build optimises the code this run makes hot, so every path a user takes is in
//! it; a path left out is compiled as cold: smaller, and no faster than without a
//! profile (BENCHMARKS.md).

use std::error::Error;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use http::Method;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::config::Config;
use crate::demo::DemoError;
use crate::load::{self, Shot, Tally, Until};
use crate::mock_upstream::{self, MockOptions, MockUpstream, Style};
use crate::server::Server;
use crate::sigv4::SigningEnv;

/// One kind of traffic: what is sent, to which upstream.
struct Phase {
    name: &'static str,
    upstream: &'static str,
    shot: Shot,
    /// Whether a request may end in a throttle passed on to the client.
    may_throttle: bool,
    /// This phase's share of the requests, in tenths.
    tenths: u64,
}

const GET_H1: Shot = Shot {
    method: Method::GET,
    headers: &[],
    body: b"",
    h2: false,
};
const GET_H2: Shot = Shot { h2: true, ..GET_H1 };
/// A unary gRPC call; its message frame is uncompressed and 5 bytes long.
const GRPC_CALL: Shot = Shot {
    method: Method::POST,
    headers: &[("content-type", "application/grpc"), ("te", "trailers")],
    body: &[0, 0, 0, 0, 5, b'h', b'e', b'l', b'l', b'o'],
    h2: true,
};

const PHASES: &[Phase] = &[
    Phase {
        name: "pass-through GET, HTTP/1.1",
        upstream: "plain",
        shot: GET_H1,
        may_throttle: false,
        tenths: 2,
    },
    Phase {
        name: "pass-through GET, h2c",
        upstream: "plain",
        shot: GET_H2,
        may_throttle: false,
        tenths: 2,
    },
    Phase {
        name: "dynamodb PutItem, HTTP/1.1",
        upstream: "dynamodb",
        shot: Shot::PUT_ITEM,
        may_throttle: false,
        tenths: 2,
    },
    Phase {
        name: "dynamodb PutItem, https, signed (SigV4)",
        upstream: "signed",
        shot: Shot::PUT_ITEM,
        may_throttle: false,
        tenths: 2,
    },
    Phase {
        name: "dynamodb PutItem, throttled",
        upstream: "throttled",
        shot: Shot::PUT_ITEM,
        may_throttle: true,
        tenths: 1,
    },
    Phase {
        name: "gRPC, h2c",
        upstream: "grpc",
        shot: GRPC_CALL,
        may_throttle: false,
        tenths: 1,
    },
];

/// One mock upstream of the training and how easeoff is configured for it.
struct Upstream {
    name: &'static str,
    /// The `preset` easeoff applies, if any.
    preset: Option<&'static str>,
    /// The DynamoDB recipe: https to the upstream, signed by easeoff.
    recipe: bool,
    style: Style,
    /// The mock's capacity in requests per second.
    rate: f64,
}

const UPSTREAMS: &[Upstream] = &[
    Upstream {
        name: "plain",
        preset: None,
        recipe: false,
        style: Style::Http429,
        rate: 1e9,
    },
    Upstream {
        name: "dynamodb",
        preset: Some("dynamodb"),
        recipe: false,
        style: Style::Dynamodb,
        rate: 1e9,
    },
    Upstream {
        name: "signed",
        preset: Some("dynamodb"),
        recipe: true,
        style: Style::Dynamodb,
        rate: 1e9,
    },
    Upstream {
        name: "throttled",
        preset: Some("dynamodb"),
        recipe: false,
        style: Style::Dynamodb,
        rate: 2000.0,
    },
    Upstream {
        name: "grpc",
        preset: Some("grpc"),
        recipe: false,
        style: Style::Grpc,
        rate: 1e9,
    },
];

/// Runs every phase, `requests` in all, with `clients` concurrent senders each;
/// prints one line per phase.
pub async fn run(requests: u64, clients: usize, out: &mut dyn Write) -> Result<(), DemoError> {
    // Held to the end: a mock stops when its handle is dropped.
    let (_mocks, config, _ca) = upstreams().await?;
    // Keys of its own: the mock checks no signature, and the run needs no AWS account.
    let signing = SigningEnv {
        credentials: Some(SharedCredentialsProvider::new(Credentials::new(
            "AKIDEASEOFFTRAIN",
            "easeoff-train-secret",
            None,
            None,
            "easeoff train",
        ))),
        clock: None,
    };
    let config = Config::parse(&config, "train.toml", &|_| None)?;
    let server = Server::bind_signing(config, None, signing).await?;
    let mut targets = Vec::new();
    for phase in PHASES {
        let upstream = server
            .upstream(phase.upstream)
            .ok_or_else(|| DemoError::Run(std::io::Error::other("training upstream missing")))?;
        targets.push(upstream.listen);
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let proxy = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    let mut failed = None;
    for (phase, target) in PHASES.iter().zip(targets) {
        let total = requests * phase.tenths / 10;
        let tally: Arc<Tally> = Arc::default();
        load::write(
            target,
            &phase.shot,
            clients,
            Until::Requests(total),
            Arc::clone(&tally),
        )
        .await;
        let ok = tally.ok.load(Ordering::Relaxed);
        let _ = writeln!(out, "{}: {ok} of {total} answered 2xx", phase.name);
        // Anything but a throttle failing means the profile would miss the path it was
        // meant to cover.
        if ok < total && !phase.may_throttle {
            failed.get_or_insert(format!("{}: {} of {total} failed", phase.name, total - ok));
        }
    }
    let _ = stop.send(());
    proxy
        .await
        .map_err(|e| DemoError::Run(std::io::Error::other(e)))?
        .map_err(DemoError::Run)?;
    match failed {
        Some(failed) => Err(DemoError::Run(std::io::Error::other(failed))),
        None => Ok(()),
    }
}

/// Starts a mock for each of [`UPSTREAMS`]; returns them, easeoff's config for them,
/// and the CA file the https one's certificate is trusted from.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float to integer `as` saturates, as wanted here"
)]
async fn upstreams() -> Result<(Vec<MockUpstream>, String, CaFile), DemoError> {
    let (tls, ca_pem) = certificate().map_err(|e| DemoError::Mock(std::io::Error::other(e)))?;
    let ca = CaFile::write(&ca_pem).map_err(DemoError::Mock)?;
    let ca_path = toml::Value::String(ca.0.display().to_string());
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut config = String::from("[server]\nadmin_listen = \"127.0.0.1:0\"\n");
    let mut mocks = Vec::new();
    for upstream in UPSTREAMS {
        let &Upstream {
            name,
            preset,
            recipe,
            style,
            rate,
        } = upstream;
        let options = MockOptions::new(rate, (rate / 10.0).min(1e6) as u32, style);
        let (mock, addr) = if recipe {
            mock_upstream::spawn_tls(options, loopback, Arc::clone(&tls)).await
        } else {
            mock_upstream::spawn(options, loopback).await
        }
        .map_err(DemoError::Mock)?;
        mocks.push(mock);
        let scheme = if recipe { "https" } else { "http" };
        config.push_str(&format!(
            "[[upstream]]\nname = \"{name}\"\nlisten = \"127.0.0.1:0\"\nurl = \"{scheme}://{addr}\"\n"
        ));
        if let Some(preset) = preset {
            config.push_str(&format!("preset = \"{preset}\"\n"));
        }
        if recipe {
            config.push_str(&format!(
                "ca_file = {ca_path}\n[upstream.sigv4]\nservice = \"dynamodb\"\nregion = \"us-east-1\"\n"
            ));
        }
    }
    Ok((mocks, config, ca))
}

/// A CA of the run's own and a certificate for 127.0.0.1 it signed: the https mock's
/// server config, and the CA in PEM for easeoff to trust.
fn certificate() -> Result<(Arc<rustls::ServerConfig>, String), Box<dyn Error + Send + Sync>> {
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "easeoff train CA");
    let ca_key = KeyPair::generate()?;
    let ca_pem = ca.self_signed(&ca_key)?.pem();
    let issuer = Issuer::new(ca, ca_key);
    let leaf_key = KeyPair::generate()?;
    let leaf =
        CertificateParams::new(vec!["127.0.0.1".to_string()])?.signed_by(&leaf_key, &issuer)?;
    let key = PrivateKeyDer::from(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let mut server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(vec![leaf.der().clone()], key)?;
    // As DynamoDB's endpoints: HTTP/1.1 only.
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((Arc::new(server), ca_pem))
}

/// A CA certificate in a file of its own for `ca_file`, removed when dropped.
struct CaFile(PathBuf);

impl CaFile {
    fn write(pem: &str) -> std::io::Result<CaFile> {
        let path = std::env::temp_dir().join(format!("easeoff-train-{}.pem", std::process::id()));
        std::fs::write(&path, pem)?;
        Ok(CaFile(path))
    }
}

impl Drop for CaFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
