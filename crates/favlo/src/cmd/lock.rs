//! `favlo lock acquire|release|status`: take the machine from the daemon for a test stretch.
//!
//! Exit codes (acquire): 0 this shell holds the lock and the device is free;
//! 2 a request is open on the daemon, the lock was not taken (wait, retry);
//! 3 another live pid holds it. Release: 0 released, 3 held by another pid,
//! 1 not held. The recorded pid is the shell that ran the command (wrappers
//! such as `cargo` are skipped), so acquire, the test and release run in one
//! shell.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand};
use favlo_hub::Home;
use favlo_server::lock::{LockError, LockInfo, MachineLock};

#[derive(Args, Debug)]
pub struct LockArgs {
    #[command(subcommand)]
    pub action: LockAction,
    /// The daemon to ask (host:port).
    #[arg(
        long,
        global = true,
        env = "FAVLO_ADDR",
        default_value = "127.0.0.1:8129"
    )]
    pub addr: String,
}

#[derive(Subcommand, Debug)]
pub enum LockAction {
    /// Take the lock: the daemon closes its resident model and answers chat with 503 until release.
    Acquire {
        /// The pipeline stem under test (e.g. `dcgan`).
        #[arg(long)]
        pipeline: String,
        /// Short name of the test command (e.g. `kernels`).
        #[arg(long)]
        command: String,
    },
    /// Remove the lock (only the shell that took it).
    Release,
    /// Print the holder as JSON (`null` when free).
    Status,
}

/// Process names that are wrappers, not the shell that owns a test stretch.
const WRAPPERS: &[&str] = &[
    "cargo", "favlo", "uv", "python", "python3", "timeout", "env",
];

fn proc_field(pid: u32) -> Option<(String, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let ppid = stat
        .get(close + 2..)?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some((comm, ppid))
}

/// The shell this command runs under.
fn shell_pid() -> u32 {
    let mut pid = std::os::unix::process::parent_id();
    for _ in 0..8 {
        match proc_field(pid) {
            Some((comm, ppid)) if WRAPPERS.contains(&comm.as_str()) && ppid > 1 => pid = ppid,
            _ => break,
        }
    }
    pid
}

/// `GET /health` of the daemon; `None` when nothing listens.
fn health(addr: &str) -> Option<serde_json::Value> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let mut resp = agent.get(format!("http://{addr}/health")).call().ok()?;
    let text = resp.body_mut().read_to_string().ok()?;
    serde_json::from_str(&text).ok()
}

pub fn run(args: LockArgs) -> anyhow::Result<ExitCode> {
    let home = Home::from_env()?;
    let lock = MachineLock::new(home.root());
    match args.action {
        LockAction::Status => {
            let holder = lock.holder();
            println!("{}", serde_json::to_string(&holder)?);
            Ok(ExitCode::SUCCESS)
        }
        LockAction::Release => match lock.release(shell_pid()) {
            Ok(()) => {
                eprintln!("machine lock released");
                Ok(ExitCode::SUCCESS)
            }
            Err(e @ LockError::NotOwner { .. }) => {
                eprintln!("{e}");
                Ok(ExitCode::from(3))
            }
            Err(e @ LockError::NotHeld) => {
                eprintln!("{e}");
                Ok(ExitCode::FAILURE)
            }
            Err(e) => Err(e).context("releasing the machine lock"),
        },
        LockAction::Acquire { pipeline, command } => {
            let info = LockInfo {
                pipeline,
                pid: shell_pid(),
                command,
            };
            match lock.acquire(&info) {
                Ok(()) => {}
                Err(e @ LockError::Held(_)) => {
                    eprintln!("{e}; wait and run acquire again");
                    return Ok(ExitCode::from(3));
                }
                Err(e) => return Err(e).context("taking the machine lock"),
            }
            let Some(h) = health(&args.addr) else {
                eprintln!(
                    "machine lock taken (pid {}); no daemon at {}",
                    info.pid, args.addr
                );
                return Ok(ExitCode::SUCCESS);
            };
            let open = h["open_requests"].as_u64().unwrap_or(0);
            if open > 0 {
                lock.release(info.pid).context("backing out of the lock")?;
                eprintln!(
                    "{open} request(s) open on the daemon at {}; the lock was not taken. Wait and run acquire again",
                    args.addr
                );
                return Ok(ExitCode::from(2));
            }
            // The daemon notices the file within a fraction of a second and
            // closes its resident runtime.
            let t = Instant::now();
            loop {
                match health(&args.addr) {
                    Some(h) if h["locked"].is_null() || !h["resident"].is_null() => {
                        if t.elapsed() > Duration::from_secs(30) {
                            lock.release(info.pid).context("backing out of the lock")?;
                            eprintln!(
                                "the daemon at {} did not yield within 30 s (does it use this FAVLO_HOME, {}?); the lock was not taken",
                                args.addr,
                                home.root().display()
                            );
                            return Ok(ExitCode::FAILURE);
                        }
                        std::thread::sleep(Duration::from_millis(100))
                    }
                    _ => break,
                }
            }
            eprintln!(
                "machine lock taken (pid {}); the daemon at {} closed its model and holds chat until `favlo lock release`",
                info.pid, args.addr
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
