//! `favlo lock` as a process: exit codes, the file's JSON, owner-only release,
//! stale locks, and the daemon handshake against a live `favlo serve`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn favlo(home: &Path, addr: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_favlo"))
        .args(args)
        .env("FAVLO_HOME", home)
        .env("FAVLO_ADDR", addr)
        .output()
        .unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap()
}

/// An address nothing listens on.
fn closed_addr() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

#[test]
fn acquire_status_release_without_a_daemon() {
    let home = tempfile::tempdir().unwrap();
    let addr = closed_addr();
    let o = favlo(
        home.path(),
        &addr,
        &[
            "lock",
            "acquire",
            "--pipeline",
            "dcgan",
            "--command",
            "kernels",
        ],
    );
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(home.path().join("pipeline.lock")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    // The recorded pid is this test process (the "shell" that ran favlo).
    assert_eq!(
        v,
        serde_json::json!({"pipeline": "dcgan", "pid": std::process::id(), "command": "kernels"})
    );
    let o = favlo(home.path(), &addr, &["lock", "status"]);
    assert_eq!(code(&o), 0);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap(),
        v
    );
    // Acquiring again from the same shell is fine (a nested command).
    let o = favlo(
        home.path(),
        &addr,
        &["lock", "acquire", "--pipeline", "dcgan", "--command", "x"],
    );
    assert_eq!(code(&o), 0);
    let o = favlo(home.path(), &addr, &["lock", "release"]);
    assert_eq!(code(&o), 0);
    assert!(!home.path().join("pipeline.lock").exists());
    let o = favlo(home.path(), &addr, &["lock", "release"]);
    assert_eq!(code(&o), 1, "nothing to release");
}

#[test]
fn another_live_pid_holds_and_a_dead_one_is_stale() {
    let home = tempfile::tempdir().unwrap();
    let addr = closed_addr();
    let file = home.path().join("pipeline.lock");
    // pid 1 is alive and is not us.
    std::fs::write(&file, r#"{"pipeline":"x","pid":1,"command":"other"}"#).unwrap();
    let o = favlo(
        home.path(),
        &addr,
        &["lock", "acquire", "--pipeline", "dcgan", "--command", "t"],
    );
    assert_eq!(code(&o), 3, "{}", String::from_utf8_lossy(&o.stderr));
    let o = favlo(home.path(), &addr, &["lock", "release"]);
    assert_eq!(code(&o), 3, "only the owner releases");
    assert!(file.exists());
    // A pid that cannot exist: stale, replaced by the next acquire.
    std::fs::write(
        &file,
        r#"{"pipeline":"x","pid":4000000000,"command":"gone"}"#,
    )
    .unwrap();
    let o = favlo(home.path(), &addr, &["lock", "status"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "null");
    let o = favlo(
        home.path(),
        &addr,
        &["lock", "acquire", "--pipeline", "dcgan", "--command", "t"],
    );
    assert_eq!(code(&o), 0);
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains(&std::process::id().to_string())
    );
}

struct Serve(Child);
impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

#[test]
fn the_daemon_yields_chat_to_the_lock_holder() {
    let home = tempfile::tempdir().unwrap();
    let addr = closed_addr();
    let port = addr.rsplit(':').next().unwrap();
    let _serve = Serve(
        Command::new(env!("CARGO_BIN_EXE_favlo"))
            .args([
                "serve",
                "--port",
                port,
                "--no-default-pull",
                "--pull",
                "never",
            ])
            .env("FAVLO_HOME", home.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t = Instant::now();
    while get(&addr, "/health").is_none() {
        assert!(t.elapsed() < Duration::from_secs(30), "serve did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = favlo(
        home.path(),
        &addr,
        &["lock", "acquire", "--pipeline", "dcgan", "--command", "t"],
    );
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let health = get(&addr, "/health").unwrap();
    assert!(
        health.contains(&format!("\"pid\":{}", std::process::id())),
        "{health}"
    );
    let o = favlo(home.path(), &addr, &["lock", "release"]);
    assert_eq!(code(&o), 0);
    let health = get(&addr, "/health").unwrap();
    assert!(health.contains("\"locked\":null"), "{health}");
}
