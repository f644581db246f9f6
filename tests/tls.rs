//! HTTPS upstreams that cannot be used, each answered at once with its cause in the 502
//! and in the log: an unknown issuer, a wrong name, an expired or self-signed
//! certificate, a plaintext port, a refused connection, a missing client certificate;
//! and the ones that work: a CA from `ca_file`, `server_name`, mutual TLS.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, date_time_ymd};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use support::process::*;
use support::*;

/// A leaf certificate and its key, in PEM.
struct Leaf {
    cert: String,
    key: String,
}

struct Pki {
    ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Pki {
    fn new() -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "easeoff test CA");
        let key = KeyPair::generate().unwrap();
        let ca_pem = params.self_signed(&key).unwrap().pem();
        Pki {
            ca_pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for `name` signed by the CA; `expired` puts its validity in 2020.
    fn leaf(&self, name: &str, expired: bool) -> Leaf {
        let params = leaf_params(name, expired);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap().pem();
        Leaf {
            cert,
            key: key.serialize_pem(),
        }
    }
}

fn leaf_params(name: &str, expired: bool) -> CertificateParams {
    let mut params = CertificateParams::new(vec![name.to_string()]).unwrap();
    if expired {
        params.not_before = date_time_ymd(2019, 1, 1);
        params.not_after = date_time_ymd(2020, 1, 1);
    }
    params
}

fn self_signed(name: &str) -> Leaf {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec![name.to_string()]).unwrap();
    // A subject of its own: a system store may hold some other "localhost" root.
    params
        .distinguished_name
        .push(DnType::CommonName, "easeoff self-signed test");
    let cert = params.self_signed(&key).unwrap().pem();
    Leaf {
        cert,
        key: key.serialize_pem(),
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// An HTTPS server on loopback answering 200 `tls ok`; with `client_ca`, it requires
/// a client certificate signed by that CA.
async fn tls_server(leaf: &Leaf, client_ca: Option<&str>) -> SocketAddr {
    let chain = vec![CertificateDer::from_pem_slice(leaf.cert.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(leaf.key.as_bytes()).unwrap();
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
                .unwrap();
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = service_fn(|_| async { Ok::<_, std::convert::Infallible>(ok()) });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// The `cause` of the first `cannot connect; backing off` line about `upstream`.
fn logged_cause(process: &Process, upstream: &str) -> Option<String> {
    process
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l["message"] == "cannot connect; backing off")
        .find(|l| l["upstream"] == upstream)
        .and_then(|l| l["cause"].as_str().map(str::to_string))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tls_failure_is_answered_at_once_with_its_cause() {
    let pki = Pki::new();
    let good = tls_server(&pki.leaf("localhost", false), None).await;
    let expired = tls_server(&pki.leaf("localhost", true), None).await;
    let other_name = tls_server(&pki.leaf("other.example", false), None).await;
    let own = tls_server(&self_signed("localhost"), None).await;
    let client = pki.leaf("easeoff-client", false);
    let mtls = tls_server(&pki.leaf("localhost", false), Some(&pki.ca_pem)).await;
    let plain = upstream(|_| async { ok() }).await;
    let dead = refusing_port();

    // Kept to the end: its directory (with the files written below) goes with it.
    let scratch = config_file("");
    let dir = scratch.parent().unwrap().to_path_buf();
    let ca = write(&dir, "ca.pem", &pki.ca_pem);
    let cert = write(&dir, "client.pem", &client.cert);
    let key = write(&dir, "client.key", &client.key);
    let trusted = format!("ca_file = \"{ca}\"");
    let identity = format!("{trusted}\nclient_cert = \"{cert}\"\nclient_key = \"{key}\"");
    let port = |a: SocketAddr| a.port();
    // (upstream, url, extra keys, status, cause)
    let cases: Vec<(&str, String, String, u16, &str)> = vec![
        (
            "good",
            format!("https://localhost:{}", port(good)),
            trusted.clone(),
            200,
            "",
        ),
        (
            "unknown",
            format!("https://localhost:{}", port(good)),
            String::new(),
            502,
            "tls: unknown issuer",
        ),
        (
            "expired",
            format!("https://localhost:{}", port(expired)),
            trusted.clone(),
            502,
            "tls: certificate expired",
        ),
        (
            "wrongname",
            format!("https://localhost:{}", port(other_name)),
            trusted.clone(),
            502,
            "tls: name mismatch for localhost",
        ),
        (
            "sni",
            format!("https://127.0.0.1:{}", port(other_name)),
            format!("{trusted}\nserver_name = \"other.example\""),
            200,
            "",
        ),
        (
            "selfsigned",
            format!("https://localhost:{}", port(own)),
            trusted.clone(),
            502,
            "tls: self-signed certificate",
        ),
        (
            "plaintext",
            format!("https://localhost:{}", port(plain.addr)),
            trusted.clone(),
            502,
            "protocol: not TLS",
        ),
        (
            "refused",
            format!("https://127.0.0.1:{}", port(dead)),
            format!("{trusted}\n[upstream.retry]\nmax_attempts = 1"),
            502,
            "connect: refused",
        ),
        (
            "mtls",
            format!("https://localhost:{}", port(mtls)),
            identity,
            200,
            "",
        ),
        (
            "nocert",
            format!("https://localhost:{}", port(mtls)),
            trusted.clone(),
            502,
            "tls: the upstream wants a client certificate it trusts",
        ),
    ];
    let mut text = "[server]\nadmin_listen = \"127.0.0.1:0\"\n".to_string();
    for (name, url, extra, _, _) in &cases {
        text.push_str(&format!(
            "\n[[upstream]]\nname = \"{name}\"\nlisten = \"127.0.0.1:0\"\nurl = \"{url}\"\n{extra}\n"
        ));
    }
    let config = dir.join("easeoff.toml");
    std::fs::write(&config, text).unwrap();
    let process = Process::start(&config);
    for (name, _, _, status, cause) in &cases {
        let started = Instant::now();
        let answer = get(&process.url(name)).await;
        let took = started.elapsed();
        eprintln!(
            "{name}: {} in {took:.1?}; x-easeoff-cause: {:?}; body: {}",
            answer.status,
            answer.headers.get("x-easeoff-cause"),
            answer.text().trim()
        );
        assert_eq!(answer.status, *status, "{name}: {}", answer.text());
        // At once: one connection tried, no retry after a backoff.
        let counted = |family: &str, labels: &str| {
            let sample = format!("{family}{{{labels}upstream=\"{name}\"}}");
            async move { metric(process.admin, &sample).await }
        };
        let failures = counted("easeoff_connect_failures_total", "").await;
        let retried = counted("easeoff_retries_total", "reason=\"connect\",").await;
        assert_eq!(
            (failures, retried),
            (f64::from(u8::from(*status != 200)), 0.0),
            "{name}: connection failures and retries"
        );
        // Nor left hanging in a handshake (the bound is a loaded host's, not a speed).
        assert!(took < Duration::from_secs(10), "{name} took {took:?}");
        if *status == 200 {
            assert_eq!(answer.text(), "ok", "{name}");
            continue;
        }
        assert_eq!(answer.headers["x-easeoff-reason"], "upstream-unavailable");
        assert_eq!(answer.headers["x-easeoff-cause"], *cause, "{name}");
        assert!(answer.text().contains(cause), "{name}: {}", answer.text());
        eventually("the log line", || async {
            logged_cause(&process, name).is_some()
        })
        .await;
        assert_eq!(
            logged_cause(&process, name).as_deref(),
            Some(*cause),
            "{name}"
        );
    }
}

#[test]
fn check_and_run_refuse_a_client_identity_that_cannot_work_with_exit_2() {
    let pki = Pki::new();
    let (one, two) = (pki.leaf("a", false), pki.leaf("b", false));
    // Kept to the end: its directory (with the files written below) goes with it.
    let scratch = config_file("");
    let dir = scratch.parent().unwrap().to_path_buf();
    let cert = write(&dir, "a.pem", &one.cert);
    let wrong_key = write(&dir, "b.key", &two.key);
    let no_key = write(&dir, "empty.key", "");
    let head = "[server]\nadmin_listen = \"127.0.0.1:0\"\n[[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:0\"\nurl = \"https://127.0.0.1:9\"\n";
    let cases = [
        (
            format!("client_cert = \"{cert}\"\nclient_key = \"{wrong_key}\"\n"),
            format!("client_key does not belong to client_cert \"{cert}\""),
        ),
        (
            format!("client_cert = \"{cert}\"\n"),
            "client_cert needs client_key".to_string(),
        ),
        (
            format!("client_cert = \"{cert}\"\nclient_key = \"{no_key}\"\n"),
            format!(
                "client_key: cannot load a private key from \"{no_key}\": no PEM private key in the file"
            ),
        ),
        (
            "server_name = \"not a name\"\n".to_string(),
            "server_name: must be a DNS name or an IP address".to_string(),
        ),
    ];
    for (keys, want) in cases {
        let config = dir.join("easeoff.toml");
        std::fs::write(&config, format!("{head}{keys}")).unwrap();
        for command in ["check", "run"] {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_easeoff"))
                .arg(command)
                .arg("--config")
                .arg(&config)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{command} {keys}: {stderr}");
            assert!(stderr.contains(&want), "{command}: {stderr}\nwant: {want}");
        }
    }
}
