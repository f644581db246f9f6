//! End to end with real AWS clients against moto's server, which checks every
//! request's SigV4 signature. The clients have wrong credentials; easeoff, given the
//! right ones in its environment, re-signs.
//!
//! - boto3 writes DynamoDB items through `easeoff run` and every item arrives; the
//!   control run, without `[upstream.sigv4]`, is refused.
//! - curl sends `Expect: 100-continue` with a DynamoDB call and an S3 PUT
//!   (`service = "s3"`), and both pass the signature check.
//! - The AWS SDK for JavaScript v3 (`tests/e2e/dynamodb_js.cjs`) makes the calls of a
//!   DynamoDB application, `Expect: 100-continue` included, and gets a 17 MiB item
//!   refused with a 413 it can read.
//!
//! Needs a venv with boto3 and moto[server] (`.ci/run` installs it): at
//! `$EASEOFF_E2E_VENV`, else `~/.cache/easeoff-e2e`. Without it the tests say so and
//! pass, unless `EASEOFF_REQUIRE_MOTO=1` (set by CI). The JavaScript test also needs
//! node and `@aws-sdk/client-dynamodb` in `$EASEOFF_E2E_NODE_MODULES`, else
//! `~/.cache/easeoff-e2e-js/node_modules`; `EASEOFF_REQUIRE_JS_SDK=1` (set by CI) makes
//! them required.

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "test figures are small"
)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

const ITEMS: usize = 25;

/// A child process killed when the test ends, also on a failed assertion.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn venv() -> Option<PathBuf> {
    let dir = std::env::var_os("EASEOFF_E2E_VENV")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/easeoff-e2e")))?;
    let ready = dir.join("bin/python").exists() && dir.join("bin/moto_server").exists();
    ready.then_some(dir)
}

/// Held from drawing a free port until the server started on it listens. The tests of
/// this file run at once: a port drawn but not yet bound could be drawn again by
/// another test, whose server would then take it; this one's would fail to bind, its
/// wait would find the other test's listener, and that listener goes when the other
/// test ends (boto3's setup then got "Connection refused" from a moto that had
/// "listened").
static DRAWING: Mutex<()> = Mutex::new(());

fn drawing() -> MutexGuard<'static, ()> {
    DRAWING.lock().unwrap_or_else(PoisonError::into_inner)
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Waits until something accepts connections on `port`; panics after `timeout`.
fn wait_for_port(port: u16, what: &str, child: &mut Killed, timeout: Duration) {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let start = Instant::now();
    // A port from the ephemeral range can connect to itself while nothing listens
    // (TCP simultaneous open, when the kernel picks that same port as the source):
    // that is not the server.
    let listening = || {
        TcpStream::connect_timeout(&addr, Duration::from_millis(200))
            .is_ok_and(|stream| stream.local_addr().is_ok_and(|local| local != addr))
    };
    while !listening() {
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("{what} exited early: {status}");
        }
        assert!(
            start.elapsed() < timeout,
            "{what} not listening on {port} after {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/dynamodb_writer.py")
}

fn python(venv: &Path, args: &[&str]) -> Output {
    Command::new(venv.join("bin/python"))
        .arg(script())
        .args(args)
        .env_remove("AWS_PROFILE")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .unwrap()
}

/// Starts `easeoff run` in front of moto; `sigv4` adds the section, `keys` go into
/// its environment (and nothing else of the caller's AWS set-up).
fn easeoff(dir: &Path, moto: u16, sigv4: bool, keys: (&str, &str)) -> (Killed, u16) {
    let section = if sigv4 {
        "[upstream.sigv4]\nservice = \"dynamodb\"\nregion = \"${AWS_REGION:-us-east-1}\"\n"
    } else {
        ""
    };
    let upstream = format!(
        "name = \"dynamodb\"\nurl = \"http://127.0.0.1:{moto}\"\npreset = \"dynamodb\"\n{section}"
    );
    let (child, ports) = easeoff_for(dir, &format!("easeoff-{sigv4}"), &[&upstream], keys);
    (child, ports[0])
}

/// Starts `easeoff run` with one `[[upstream]]` per entry of `upstreams` (its keys
/// but `listen`), and returns the ports they listen on, in order.
fn easeoff_for(
    dir: &Path,
    name: &str,
    upstreams: &[&str],
    keys: (&str, &str),
) -> (Killed, Vec<u16>) {
    let drawing = drawing();
    let admin = free_port();
    let mut text =
        format!("[server]\nadmin_listen = \"127.0.0.1:{admin}\"\nshutdown_grace = \"1s\"\n");
    let mut ports = Vec::new();
    for upstream in upstreams {
        let listen = free_port();
        ports.push(listen);
        text.push_str(&format!(
            "\n[[upstream]]\nlisten = \"127.0.0.1:{listen}\"\n{upstream}"
        ));
    }
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(&config, text).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_easeoff"));
    command.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        command.env("PATH", path);
    }
    let child = command
        .env("HOME", dir)
        .env("AWS_ACCESS_KEY_ID", keys.0)
        .env("AWS_SECRET_ACCESS_KEY", keys.1)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .args(["run", "--log-format", "text", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    for port in &ports {
        wait_for_port(*port, "easeoff", &mut child, Duration::from_secs(10));
    }
    drop(drawing);
    (child, ports)
}

/// moto's server with an IAM user allowed DynamoDB and S3, a table and a bucket.
struct Moto {
    _server: Killed,
    port: u16,
    key_id: String,
    secret: String,
    /// A scratch directory of this test's own, removed at the end.
    dir: PathBuf,
}

impl Moto {
    /// Starts moto (signature checks on) and sets it up with `venv`'s boto3.
    fn start(venv: &Path, test: &str) -> Moto {
        let dir = std::env::temp_dir().join(format!("easeoff-e2e-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let drawing = drawing();
        let port = free_port();
        let server = Command::new(venv.join("bin/moto_server"))
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            // Three unchecked requests: the IAM user, its key and its policy.
            .env("INITIAL_NO_AUTH_ACTION_COUNT", "3")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut server = Killed(server);
        wait_for_port(port, "moto_server", &mut server, Duration::from_secs(30));
        drop(drawing);
        let setup = python(venv, &["setup", &format!("http://127.0.0.1:{port}")]);
        let stdout = String::from_utf8_lossy(&setup.stdout);
        assert!(
            setup.status.success(),
            "setup failed: {stdout}{}",
            String::from_utf8_lossy(&setup.stderr)
        );
        let (key_id, secret) = stdout.trim().split_once(' ').expect("KEY_ID SECRET");
        Moto {
            _server: server,
            port,
            key_id: key_id.to_string(),
            secret: secret.to_string(),
            dir,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn keys(&self) -> (&str, &str) {
        (&self.key_id, &self.secret)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The venv, or `None` when the test may be skipped (said on stdout).
fn venv_or_skip() -> Option<PathBuf> {
    let venv = venv();
    if venv.is_none() {
        assert!(
            std::env::var("EASEOFF_REQUIRE_MOTO").as_deref() != Ok("1"),
            "EASEOFF_REQUIRE_MOTO=1 but no venv with boto3 and moto[server] (see .ci/run)"
        );
        println!(
            "skipped: no venv with boto3 and moto[server] at $EASEOFF_E2E_VENV or ~/.cache/easeoff-e2e"
        );
    }
    venv
}

#[test]
fn boto3_writes_through_easeoff_to_a_dynamodb_that_checks_signatures() {
    let Some(venv) = venv_or_skip() else {
        return;
    };
    let started = Instant::now();
    let moto = Moto::start(&venv, "boto3");
    let (dir, moto_port, moto_url) = (moto.dir.clone(), moto.port, moto.url());
    let (key_id, secret) = moto.keys();

    // Re-signed by easeoff: every item arrives.
    let (signing, port) = easeoff(&dir, moto_port, true, (key_id, secret));
    let url = format!("http://127.0.0.1:{port}");
    let items = ITEMS.to_string();
    let run = python(&venv, &["write", &url, &moto_url, key_id, secret, &items]);
    let out = String::from_utf8_lossy(&run.stdout);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(out.contains(&format!("all {ITEMS} items arrived")), "{out}");
    drop(signing);

    // Control: without [upstream.sigv4] the writer's wrong credentials reach moto.
    let (_plain, port) = easeoff(&dir, moto_port, false, (key_id, secret));
    let url = format!("http://127.0.0.1:{port}");
    let run = python(&venv, &["write", &url, &moto_url, key_id, secret, "1"]);
    let out = String::from_utf8_lossy(&run.stdout);
    assert_eq!(
        run.status.code(),
        Some(3),
        "expected a signature error: {out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    println!("control run: {}", out.trim());

    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}

/// Whether `program --version` runs; when it does not and `required` names a set
/// variable, the test fails instead of skipping.
fn runs(program: &str, required: &str) -> bool {
    let ok = Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var(required).as_deref() != Ok("1"),
            "{required}=1 but {program} does not run"
        );
        println!("skipped: {program} does not run");
    }
    ok
}

/// curl's answer as "STATUS BODY", sending `Expect: 100-continue`.
fn curl_expecting_continue(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-sS", "-H", "Expect: 100-continue", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // -w writes after the body: put the status first.
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    format!("{status} {body}")
}

#[test]
fn expect_100_continue_passes_the_signature_check_for_dynamodb_and_s3() {
    let Some(venv) = venv_or_skip() else {
        return;
    };
    if !runs("curl", "EASEOFF_REQUIRE_MOTO") {
        return;
    }
    let moto = Moto::start(&venv, "expect");
    let dynamodb = format!(
        "name = \"dynamodb\"\nurl = \"{}\"\npreset = \"dynamodb\"\n[upstream.sigv4]\nservice = \"dynamodb\"\nregion = \"us-east-1\"\n",
        moto.url()
    );
    let s3 = format!(
        "name = \"s3\"\nurl = \"{}\"\n[upstream.sigv4]\nservice = \"s3\"\nregion = \"us-east-1\"\n",
        moto.url()
    );
    let (_easeoff, ports) = easeoff_for(&moto.dir, "expect", &[&dynamodb, &s3], moto.keys());

    let put = curl_expecting_continue(&[
        "-X",
        "POST",
        "-H",
        "content-type: application/x-amz-json-1.0",
        "-H",
        "x-amz-target: DynamoDB_20120810.PutItem",
        "--data",
        r#"{"TableName":"orders","Item":{"id":{"S":"curl-expect"}}}"#,
        &format!("http://127.0.0.1:{}/", ports[0]),
    ]);
    assert_eq!(put, "200 {}", "DynamoDB PutItem with Expect");

    // Larger than curl's own threshold for Expect, as an SDK upload would be.
    let object = moto.dir.join("object");
    let content: Vec<u8> = (0..2 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    std::fs::write(&object, &content).unwrap();
    let url = format!("http://127.0.0.1:{}/uploads/expect", ports[1]);
    let put = curl_expecting_continue(&[
        "-X",
        "PUT",
        "-H",
        "content-type: application/octet-stream",
        "--data-binary",
        &format!("@{}", object.display()),
        &url,
    ]);
    assert_eq!(put, "200 ", "S3 PUT with Expect");
    let got = Command::new("curl")
        .args(["-sS", "--fail", &url])
        .output()
        .unwrap();
    assert!(
        got.status.success(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    assert!(got.stdout == content, "the object came back different");
}

/// Where `@aws-sdk/client-dynamodb` is installed, when node runs and it is.
fn node_modules() -> Option<PathBuf> {
    let dir = std::env::var_os("EASEOFF_E2E_NODE_MODULES")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| Path::new(&h).join(".cache/easeoff-e2e-js/node_modules"))
        })?;
    let ready = dir.join("@aws-sdk/client-dynamodb/package.json").exists();
    if !ready {
        assert!(
            std::env::var("EASEOFF_REQUIRE_JS_SDK").as_deref() != Ok("1"),
            "EASEOFF_REQUIRE_JS_SDK=1 but no @aws-sdk/client-dynamodb in {} (see .ci/run)",
            dir.display()
        );
        println!("skipped: no @aws-sdk/client-dynamodb in {}", dir.display());
    }
    ready.then_some(dir)
}

#[test]
fn the_javascript_sdk_works_through_easeoff_against_a_dynamodb_that_checks_signatures() {
    let Some(venv) = venv_or_skip() else {
        return;
    };
    if !runs("node", "EASEOFF_REQUIRE_JS_SDK") {
        return;
    }
    let Some(modules) = node_modules() else {
        return;
    };
    let moto = Moto::start(&venv, "js");
    let (_easeoff, port) = easeoff(&moto.dir, moto.port, true, moto.keys());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/dynamodb_js.cjs");
    let run = Command::new("node")
        .arg("--no-warnings")
        .arg(script)
        .arg(format!("http://127.0.0.1:{port}"))
        .env("NODE_PATH", &modules)
        .env_remove("AWS_PROFILE")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    println!("{out}");
    assert_eq!(
        run.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    for check in [
        "ok PutItem and GetItem",
        "ok Query",
        "ok conditional failure is named (ConditionalCheckFailedException)",
        "ok cancelled transaction is named (TransactionCanceledException)",
        "ok 300 KB item round-trips",
        "ok Expect: 100-continue passes the signature check",
        "ok a 17 MiB item gets the 413, not a broken pipe",
        "all checks passed",
    ] {
        assert!(out.contains(check), "missing {check:?} in:\n{out}");
    }
}
