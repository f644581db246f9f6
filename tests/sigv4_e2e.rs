//! End to end with a real AWS SDK: boto3 writes DynamoDB items through `easeoff run`
//! to moto's server, which checks every request's SigV4 signature. The writer has
//! wrong credentials; easeoff, given the right ones in its environment, re-signs, and
//! every item arrives. The control run, without `[upstream.sigv4]`, is refused.
//!
//! Needs a venv with boto3 and moto[server] (`.ci/run` installs it): at
//! `$EASEOFF_E2E_VENV`, else `~/.cache/easeoff-e2e`. Without it the test says so and
//! passes, unless `EASEOFF_REQUIRE_MOTO=1` (set by CI).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
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

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Waits until something accepts connections on `port`; panics after `timeout`.
fn wait_for_port(port: u16, what: &str, child: &mut Killed, timeout: Duration) {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let start = Instant::now();
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
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
    let (listen, admin) = (free_port(), free_port());
    let mut text = format!(
        "[server]\nadmin_listen = \"127.0.0.1:{admin}\"\nshutdown_grace = \"1s\"\n\n[[upstream]]\nname = \"dynamodb\"\nlisten = \"127.0.0.1:{listen}\"\nurl = \"http://127.0.0.1:{moto}\"\npreset = \"dynamodb\"\n"
    );
    if sigv4 {
        text.push_str(
            "[upstream.sigv4]\nservice = \"dynamodb\"\nregion = \"${AWS_REGION:-us-east-1}\"\n",
        );
    }
    let config = dir.join(format!("easeoff-{sigv4}.toml"));
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
    wait_for_port(listen, "easeoff", &mut child, Duration::from_secs(10));
    (child, listen)
}

#[test]
fn boto3_writes_through_easeoff_to_a_dynamodb_that_checks_signatures() {
    let Some(venv) = venv() else {
        assert!(
            std::env::var("EASEOFF_REQUIRE_MOTO").as_deref() != Ok("1"),
            "EASEOFF_REQUIRE_MOTO=1 but no venv with boto3 and moto[server] (see .ci/run)"
        );
        println!(
            "skipped: no venv with boto3 and moto[server] at $EASEOFF_E2E_VENV or ~/.cache/easeoff-e2e"
        );
        return;
    };
    let started = Instant::now();
    let dir = std::env::temp_dir().join(format!("easeoff-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let moto_port = free_port();
    let moto = Command::new(venv.join("bin/moto_server"))
        .args(["-H", "127.0.0.1", "-p", &moto_port.to_string()])
        // Three unchecked requests: the IAM user, its key and its policy.
        .env("INITIAL_NO_AUTH_ACTION_COUNT", "3")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut moto = Killed(moto);
    wait_for_port(moto_port, "moto_server", &mut moto, Duration::from_secs(30));
    let moto_url = format!("http://127.0.0.1:{moto_port}");

    let setup = python(&venv, &["setup", &moto_url]);
    let stdout = String::from_utf8_lossy(&setup.stdout);
    assert!(
        setup.status.success(),
        "setup failed: {stdout}{}",
        String::from_utf8_lossy(&setup.stderr)
    );
    let (key_id, secret) = stdout.trim().split_once(' ').expect("KEY_ID SECRET");

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

    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}
