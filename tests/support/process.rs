//! The easeoff binary run as a child process, with its JSON log collected.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The easeoff binary running a config file; killed when dropped.
pub struct Process {
    pub child: Child,
    pub admin: SocketAddr,
    /// Bound listen address by upstream name, from the start-up log.
    pub listens: HashMap<String, SocketAddr>,
    /// Every log line so far.
    pub log: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl Process {
    pub fn start(config: &Path) -> Process {
        Process::spawn(Process::command(config))
    }

    /// `easeoff run` of `config` with JSON logs, to adjust before [`Process::spawn`].
    pub fn command(config: &Path) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_easeoff"));
        command
            .args(["run", "--log-format", "json", "--config"])
            .arg(config);
        command
    }

    /// As [`Process::start`], with at most `nofile` file descriptors.
    pub fn start_limited(config: &Path, nofile: u32) -> Process {
        let mut command = Command::new("prlimit");
        command
            .arg(format!("--nofile={nofile}:{nofile}"))
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_easeoff"))
            .args(["run", "--log-format", "json", "--config"])
            .arg(config);
        Process::spawn(command)
    }

    /// Runs `command` and waits for its ready line.
    pub fn spawn(mut command: Command) -> Process {
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
        let lines = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let value = serde_json::from_str(&line).unwrap_or(serde_json::Value::String(line));
                lines.lock().unwrap().push(value);
            }
        });
        let mut process = Process {
            child,
            admin: "0.0.0.0:0".parse().unwrap(),
            listens: HashMap::new(),
            log,
        };
        let started = Instant::now();
        loop {
            assert!(
                started.elapsed() < super::PATIENCE,
                "no ready line: {:?}",
                process.log.lock().unwrap()
            );
            if let Some(admin) = process.logged("easeoff ready", "admin").pop() {
                process.admin = admin.parse().unwrap();
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for line in process.log.lock().unwrap().iter() {
            if line["message"] == "forwarding" {
                let name = line["upstream"].as_str().unwrap().to_string();
                process
                    .listens
                    .insert(name, line["listen"].as_str().unwrap().parse().unwrap());
            }
        }
        process
    }

    /// The `field` of every log line with `message`.
    pub fn logged(&self, message: &str, field: &str) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|line| line["message"] == message)
            .filter_map(|line| line[field].as_str().map(str::to_string))
            .collect()
    }

    pub fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    }

    /// Waits for the process to end ([`super::PATIENCE`] at most).
    pub fn wait(&mut self) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(started.elapsed() < super::PATIENCE, "easeoff did not exit");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn url(&self, upstream: &str) -> String {
        format!("http://{}/", self.listens[upstream])
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A config file in a fresh temporary directory, removed with everything in it when
/// dropped (declare it before the [`Process`] that reads it, so the process goes first).
pub fn config_file(text: &str) -> ConfigFile {
    let dir = std::env::temp_dir().join(format!(
        "easeoff-lifecycle-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("easeoff.toml");
    std::fs::write(&path, text).unwrap();
    ConfigFile { path }
}

/// The path of a config file written by [`config_file`]; its directory goes when this
/// is dropped, so test runs leave nothing in the temporary directory.
pub struct ConfigFile {
    path: PathBuf,
}

impl std::ops::Deref for ConfigFile {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for ConfigFile {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<std::ffi::OsStr> for ConfigFile {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.path.as_os_str()
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

pub fn upstream_table(name: &str, target: SocketAddr, extra: &str) -> String {
    format!(
        "[[upstream]]\nname = \"{name}\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{target}\"\n{extra}\n"
    )
}
