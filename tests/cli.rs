//! The real binary: `check` on the config fixtures, `run` until SIGTERM, `--version`,
//! usage errors of `mock-upstream`, `probe` against listeners that answer or do not.
//!
//! Every `tests/fixtures/config/valid/*.toml` must pass `check`; every
//! `invalid/*.toml` must fail with exit 2 and print exactly its `.expected` file.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn easeoff() -> Command {
    Command::new(env!("CARGO_BIN_EXE_easeoff"))
}

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/config")
        .join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files
}

#[test]
fn valid_fixtures_pass_check_and_print_a_config_that_passes_again() {
    for file in fixtures("valid") {
        let out = easeoff()
            .arg("check")
            .arg("--config")
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}: {stderr}", file.display());
        let printed =
            std::env::temp_dir().join(format!("easeoff-effective-{}.toml", std::process::id()));
        std::fs::write(&printed, &out.stdout).unwrap();
        let again = easeoff()
            .arg("check")
            .arg("--config")
            .arg(&printed)
            .output()
            .unwrap();
        assert!(
            again.status.success(),
            "{}: the effective config does not load: {}",
            file.display(),
            String::from_utf8_lossy(&again.stderr)
        );
        assert_eq!(
            again.stdout,
            out.stdout,
            "{}: check output is not stable",
            file.display()
        );
        let _ = std::fs::remove_file(printed);
    }
}

#[test]
fn invalid_fixtures_fail_check_with_their_expected_messages() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in fixtures("invalid") {
        let relative = file.strip_prefix(root).unwrap();
        let out = easeoff()
            .current_dir(root)
            .arg("check")
            .arg("--config")
            .arg(relative)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", file.display());
        let expected = std::fs::read_to_string(file.with_extension("expected")).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            expected,
            "{}",
            file.display()
        );
    }
}

#[test]
fn the_config_can_come_from_the_environment() {
    let file = &fixtures("valid")[0];
    let out = easeoff()
        .arg("check")
        .env("EASEOFF_CONFIG", file)
        .output()
        .unwrap();
    assert!(out.status.success());
}

#[test]
fn no_config_is_a_usage_error() {
    let out = easeoff()
        .arg("check")
        .env_remove("EASEOFF_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("pass --config FILE or set EASEOFF_CONFIG")
    );
    let missing = easeoff()
        .args(["check", "--config", "/nonexistent/easeoff.toml"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&missing.stderr)
            .starts_with("/nonexistent/easeoff.toml: cannot read the config file")
    );
}

#[test]
fn a_bad_mock_schedule_is_a_usage_error() {
    let cases = [
        (
            vec!["--schedule", "0s:100,60s"],
            "item 2 \"60s\": expected TIME:RATE",
        ),
        (
            vec!["--schedule", "0s:100,10s:0"],
            "item 2 \"10s:0\": the rate must be above 0",
        ),
        (vec!["--schedule", "30s:100"], "does not start at 0s"),
        (vec![], "--rate"),
    ];
    mock_usage_errors(&cases);
}

#[test]
fn bad_mock_table_and_key_rates_are_usage_errors() {
    let cases = [
        (vec!["--table-rate", "slow"], "expected NAME=RATE"),
        (
            vec!["--table-rate", "t:scan=5"],
            "\"scan\" is not read or write",
        ),
        (
            vec!["--table-rate", "t=0"],
            "the rate must be a number above 0",
        ),
        (vec!["--table-rate", "t=5"], "need --style dynamodb"),
        (vec!["--key-rate", "5"], "need --style dynamodb"),
        (
            vec!["--style", "dynamodb", "--key-rate", "0"],
            "--key-rate must be above 0",
        ),
        (
            vec!["--style", "dynamodb", "--partition-wcu=-1"],
            "--partition-wcu must be 0 or above",
        ),
        (
            vec!["--burst-seconds", "0"],
            "--burst-seconds must be above 0",
        ),
    ];
    let with_rate: Vec<(Vec<&str>, &str)> = cases
        .into_iter()
        .map(|(args, want)| ([vec!["--rate", "5"], args].concat(), want))
        .collect();
    mock_usage_errors(&with_rate);
}

fn mock_usage_errors(cases: &[(Vec<&str>, &str)]) {
    for (args, want) in cases {
        let out = easeoff()
            .args(["mock-upstream", "--listen", "127.0.0.1:0"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}

#[test]
fn version_prints_the_crate_version() {
    let out = easeoff().arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("easeoff {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn run_gets_ready_and_exits_zero_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("easeoff-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("easeoff.toml");
    std::fs::write(
        &config,
        "[server]\nadmin_listen = \"127.0.0.1:0\"\n[[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://127.0.0.1:9\"\n",
    )
    .unwrap();
    let mut child = easeoff()
        .args(["--log-format", "json", "--config"])
        .arg(&config)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut ready = false;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if line.contains("easeoff ready") {
            ready = true;
            break;
        }
        assert!(Instant::now() < deadline, "not ready within 10 s");
    }
    assert!(ready, "the process ended before it was ready");
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert!(rest.iter().any(|l| l.contains("SIGTERM")), "{rest:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_port_in_use_is_a_runtime_failure() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = std::env::temp_dir().join(format!("easeoff-busy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("easeoff.toml");
    std::fs::write(
        &config,
        format!("[server]\nadmin_listen = \"127.0.0.1:0\"\n[[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:{port}\"\nurl = \"http://127.0.0.1:9\"\n"),
    )
    .unwrap();
    let out = easeoff().arg("--config").arg(&config).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!(
        "cannot listen on 127.0.0.1:{port} for upstream \"up\""
    )));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn sigv4_without_credentials_fails_at_start_up_naming_every_source() {
    let dir = std::env::temp_dir().join(format!("easeoff-nocreds-{}", std::process::id()));
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let config = dir.join("easeoff.toml");
    std::fs::write(
        &config,
        "[server]\nadmin_listen = \"127.0.0.1:0\"\n[[upstream]]\nname = \"orders\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://127.0.0.1:9\"\npreset = \"dynamodb\"\n[upstream.sigv4]\nservice = \"dynamodb\"\nregion = \"${AWS_REGION:-us-east-1}\"\n",
    )
    .unwrap();
    let started = Instant::now();
    let mut command = easeoff();
    // Nothing of the developer's or CI's AWS set-up may leak in.
    command.env_clear();
    for (key, value) in std::env::vars_os() {
        if key == "PATH" {
            command.env(key, value);
        }
    }
    let out = command
        .env("HOME", &home)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .arg("run")
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let home = home.display();
    for expected in [
        "easeoff: upstream \"orders\": [upstream.sigv4]: no AWS credentials found; sources tried, in order:",
        "  - environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY): not configured",
        &format!(
            "  - profile \"default\" in {home}/.aws/config and {home}/.aws/credentials: not configured"
        ),
        "  - web identity / IRSA (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN): not configured",
        "  - container: ECS or EKS Pod Identity",
        "  - instance metadata (IMDS): not configured (IMDS disabled by AWS_EC2_METADATA_DISABLED",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(dir);
}

/// Waits for `child` to end, killing it after `limit` (a hang guard, not a speed test).
fn wait_ended(mut child: std::process::Child, limit: Duration) -> std::process::Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn an_endless_config_file_is_refused_after_a_mebibyte() {
    let child = easeoff()
        .args(["check", "--config", "/dev/zero"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_ended(child, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "/dev/zero: the config file is larger than 1 MiB; is it the right file?\n"
    );
}

#[test]
fn a_ca_file_without_certificates_fails_check_and_run_alike_with_exit_2() {
    let dir = std::env::temp_dir().join(format!("easeoff-emptyca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, "").unwrap();
    let config = dir.join("easeoff.toml");
    std::fs::write(
        &config,
        format!("[server]\nadmin_listen = \"127.0.0.1:0\"\n[[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:0\"\nurl = \"https://127.0.0.1:9\"\nca_file = \"{}\"\n", ca.display()),
    )
    .unwrap();
    let want = format!(
        "{}:7:11: upstream \"up\": ca_file: cannot load CA certificates from \"{}\": no PEM certificates in the file\n",
        config.display(),
        ca.display()
    );
    for command in ["check", "run"] {
        let child = easeoff()
            .arg(command)
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = wait_ended(child, Duration::from_secs(20));
        assert_eq!(out.status.code(), Some(2), "{command}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), want, "{command}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A listener that answers one request with `status` and the port it listens on.
fn answers_once(status: &'static str) -> (std::thread::JoinHandle<String>, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).unwrap();
            assert!(n > 0, "the probe closed before its request was complete");
            request.extend_from_slice(&buf[..n]);
        }
        write!(stream, "HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n").unwrap();
        String::from_utf8_lossy(&request).into_owned()
    });
    (server, port)
}

fn probe(args: &[&str]) -> (Option<i32>, String, String) {
    let out = easeoff().arg("probe").args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn probe_exits_zero_on_a_2xx_answer() {
    let (server, port) = answers_once("204 No Content");
    let url = format!("http://127.0.0.1:{port}/readyz?full=1");
    let (code, stdout, stderr) = probe(&[&url]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.trim(), "204 No Content");
    let request = server.join().unwrap();
    assert!(
        request.starts_with("GET /readyz?full=1 HTTP/1.1\r\n"),
        "{request}"
    );
    assert!(
        request
            .to_ascii_lowercase()
            .contains(&format!("host: 127.0.0.1:{port}\r\n")),
        "{request}"
    );
}

#[test]
fn probe_exits_one_on_any_other_answer() {
    let (server, port) = answers_once("503 Service Unavailable");
    let url = format!("http://127.0.0.1:{port}/readyz");
    let (code, _, stderr) = probe(&[&url]);
    assert_eq!(code, Some(1));
    assert_eq!(
        stderr.trim(),
        format!("easeoff probe: {url}: answered 503 Service Unavailable")
    );
    server.join().unwrap();
}

#[test]
fn probe_exits_one_when_nothing_listens() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/healthz");
    let (code, _, stderr) = probe(&[&url]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.starts_with(&format!(
            "easeoff probe: {url}: cannot connect to 127.0.0.1:{port}: "
        )),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn probe_gives_up_after_its_timeout_on_a_silent_listener() {
    // Connections complete in the kernel's backlog; nothing ever answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}/healthz");
    let (code, _, stderr) = probe(&["--timeout", "200ms", &url]);
    assert_eq!(code, Some(1));
    assert_eq!(
        stderr.trim(),
        format!("easeoff probe: {url}: no answer within 200ms")
    );
    drop(silent);
}

#[test]
fn probe_refuses_what_it_cannot_fetch_with_exit_one() {
    for (url, want) in [
        ("https://127.0.0.1/", "only http:// URLs can be probed"),
        ("127.0.0.1:9901", "invalid URL \"127.0.0.1:9901\""),
    ] {
        let (code, _, stderr) = probe(&[url]);
        assert_eq!(code, Some(1), "{url}");
        assert!(stderr.contains(want), "{url}: {stderr}");
    }
}

#[test]
fn the_demo_shows_the_interval_its_table_is_paced_at() {
    // The mock takes 50 requests/s and 16 clients ask for more: easeoff is throttled
    // at once, and from then on paces the table's lane.
    let dir = std::env::temp_dir().join(format!("easeoff-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = easeoff()
        .args(["demo", "--duration", "3s", "--out"])
        .arg(dir.join("demo.svg"))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    // "   2s       19.1 ms          51             0               0"
    let intervals: Vec<f64> = stdout
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            words.next()?.strip_suffix('s')?.parse::<u32>().ok()?;
            words.next()?.parse().ok()
        })
        .collect();
    assert_eq!(intervals.len(), 3, "{stdout}");
    assert!(intervals[1..].iter().all(|&ms| ms > 0.0), "{stdout}");
}

#[test]
fn the_training_run_sends_every_kind_of_traffic_through_and_all_of_it_arrives() {
    // The profile-guided build (Dockerfile) learns from this run: every phase must
    // reach its upstream, or the build would optimise for a path nobody takes.
    let out = easeoff()
        .args(["train", "--requests", "2000", "--clients", "4"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (phase, total) in [
        ("pass-through GET, HTTP/1.1", 400),
        ("pass-through GET, h2c", 400),
        ("dynamodb PutItem, HTTP/1.1", 400),
        // Signing failures are answered 503 and TLS ones 502: all were signed, over TLS.
        ("dynamodb PutItem, https, signed (SigV4)", 400),
        ("gRPC, h2c", 200),
    ] {
        assert!(
            stdout.contains(&format!("{phase}: {total} of {total} answered 2xx")),
            "{phase}: {stdout}"
        );
    }
    assert!(stdout.contains("dynamodb PutItem, throttled: "), "{stdout}");
}
