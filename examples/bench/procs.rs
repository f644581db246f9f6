//! The real binaries as child processes that die with their handle, free loopback
//! ports, and the small HTTP GETs that wait for readiness and read `/metrics`.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A child process, killed and reaped when dropped.
pub struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    /// Starts `bin args`, stdout and stderr to `log`.
    pub fn spawn(bin: &Path, args: &[String], log: PathBuf) -> Result<Proc, String> {
        let out = std::fs::File::create(&log)
            .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let err = out
            .try_clone()
            .map_err(|e| format!("cannot open {}: {e}", log.display()))?;
        let child = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        Ok(Proc { child, log })
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status if it has stopped, with the end of its log.
    pub fn exited(&mut self) -> Option<String> {
        let status = self.child.try_wait().ok()??;
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        Some(format!("exited with {status}: {}", tail.join("\n")))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `easeoff run`: the process, its upstream listener and its admin address.
pub struct Easeoff {
    pub proc: Proc,
    pub listen: SocketAddr,
    pub admin: SocketAddr,
}

/// Starts `easeoff run` with one upstream `name` at `url` (plus `extra` TOML lines in
/// the upstream's table) on free ports, its config and log in `work`; waits for /readyz.
pub async fn start_easeoff(
    bin: &Path,
    work: &Path,
    name: &str,
    url: &str,
    extra: &str,
) -> Result<Easeoff, String> {
    let (listen, admin) = (free_addr()?, free_addr()?);
    let config = format!(
        "[server]\nadmin_listen = \"{admin}\"\n\n[[upstream]]\nname = \"{name}\"\nlisten = \"{listen}\"\nurl = \"{url}\"\n{extra}"
    );
    let path = work.join("easeoff.toml");
    std::fs::write(&path, config).map_err(|e| format!("{}: {e}", path.display()))?;
    let args = [
        "run",
        "--config",
        &path.to_string_lossy(),
        "--log-format",
        "json",
        "--log-level",
        "warn",
    ]
    .map(String::from);
    let mut proc = Proc::spawn(bin, &args, work.join("easeoff.log"))?;
    Getter::default()
        .wait_ready(&format!("http://{admin}/readyz"), &mut proc, "easeoff run")
        .await?;
    Ok(Easeoff {
        proc,
        listen,
        admin,
    })
}

/// A loopback port free right now (the kernel picks it; it stays free long enough in
/// practice for the child we hand it to).
pub fn free_addr() -> Result<SocketAddr, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

/// An HTTP/1 client for GETs on the admin ports.
#[derive(Clone)]
pub struct Getter {
    client: Client<HttpConnector, Empty<Bytes>>,
}

impl Default for Getter {
    fn default() -> Getter {
        Getter {
            client: Client::builder(TokioExecutor::new()).build(HttpConnector::new()),
        }
    }
}

impl Getter {
    /// The body of a 2xx answer to GET `url`.
    pub async fn get(&self, url: &str) -> Result<String, String> {
        let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
        let response = tokio::time::timeout(Duration::from_secs(5), async {
            let response = self.client.get(uri).await.map_err(|e| e.to_string())?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((status, body.to_bytes()))
        })
        .await
        .map_err(|_| format!("{url}: no answer within 5 s"))?
        .map_err(|e| format!("{url}: {e}"))?;
        if !response.0.is_success() {
            return Err(format!("{url}: {}", response.0));
        }
        Ok(String::from_utf8_lossy(&response.1).into_owned())
    }

    /// Polls `url` until it answers 2xx, failing early if `proc` exits.
    pub async fn wait_ready(&self, url: &str, proc: &mut Proc, name: &str) -> Result<(), String> {
        for _ in 0..200 {
            if self.get(url).await.is_ok() {
                return Ok(());
            }
            if let Some(why) = proc.exited() {
                return Err(format!("{name} {why}"));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Err(format!("{name}: {url} did not answer within 5 s"))
    }
}

/// The value of `series` (name with its labels, exactly as exposed) in a /metrics page.
pub fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_found_by_their_full_series_name() {
        let page = "# HELP mock_rate x\nmock_rate 50\nmock_requests_total{result=\"ok\"} 1234\nmock_requests_total{result=\"throttled\"} 7\n";
        assert_eq!(sample(page, "mock_rate"), Some(50.0));
        assert_eq!(
            sample(page, "mock_requests_total{result=\"throttled\"}"),
            Some(7.0)
        );
        assert_eq!(sample(page, "mock_requests_total"), None);
        assert_eq!(sample(page, "easeoff_upstream_interval_seconds"), None);
    }
}
