//! The machine lock: one JSON file that takes the device away from the daemon.
//!
//! Key design choice: the file is the whole protocol. `favlo lock acquire`
//! writes `{pipeline, pid, command}` with create-new semantics; the daemon's
//! device worker sees a live holder, closes its resident runtime and answers
//! chat with 503 until the file is gone. A holder whose pid has exited is
//! stale and the next acquire removes it; only the owning pid may release.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file's one JSON object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    /// The pipeline stem under test.
    pub pipeline: String,
    /// The shell that owns the lock.
    pub pid: u32,
    /// The short name of the test command.
    pub command: String,
}

/// Why a lock operation did nothing.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another live process holds it.
    #[error("the machine lock is held by pid {} ({} on {})", .0.pid, .0.command, .0.pipeline)]
    Held(LockInfo),
    /// Release by someone who does not own it.
    #[error("the machine lock belongs to pid {}, not {pid}", .holder.pid)]
    NotOwner {
        /// The owner.
        holder: LockInfo,
        /// Who asked.
        pid: u32,
    },
    /// Nothing to release.
    #[error("the machine lock is not held")]
    NotHeld,
    /// The file could not be read or written.
    #[error("machine lock file {path}: {source}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Whether a process with this pid is running.
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    if cfg!(target_os = "linux") {
        Path::new("/proc").join(pid.to_string()).exists()
    } else {
        std::process::Command::new("kill")
            .args(["-0", &pid.to_string()])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

/// The lock file of a Favlo home.
#[derive(Clone, Debug)]
pub struct MachineLock {
    path: PathBuf,
}

impl MachineLock {
    /// `<home>/pipeline.lock`.
    pub fn new(home: &Path) -> Self {
        MachineLock {
            path: home.join("pipeline.lock"),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read_raw(&self) -> Result<Option<LockInfo>, LockError> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => Ok(serde_json::from_str(&text).ok()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(LockError::Io {
                path: self.path.clone(),
                source,
            }),
        }
    }

    /// The live holder, if any (a stale or unreadable file counts as free).
    pub fn holder(&self) -> Option<LockInfo> {
        self.read_raw()
            .ok()
            .flatten()
            .filter(|info| pid_alive(info.pid))
    }

    /// Take the lock for `info.pid`, removing a stale file first. Taking a
    /// lock the same pid already holds succeeds (a nested command).
    pub fn acquire(&self, info: &LockInfo) -> Result<(), LockError> {
        let io = |source| LockError::Io {
            path: self.path.clone(),
            source,
        };
        if self.path.exists() {
            match self.read_raw()? {
                Some(h) if h.pid == info.pid => return Ok(()),
                Some(h) if pid_alive(h.pid) => return Err(LockError::Held(h)),
                _ => {
                    tracing::info!(path = %self.path.display(), "removing a stale machine lock");
                    match std::fs::remove_file(&self.path) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(io(e)),
                    }
                }
            }
        }
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let mut f = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&self.path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // Lost a race with another acquire.
                return match self.read_raw()? {
                    Some(h) => Err(LockError::Held(h)),
                    None => Err(io(e)),
                };
            }
            Err(e) => return Err(io(e)),
        };
        let text = serde_json::to_string(info).map_err(|e| io(std::io::Error::other(e)))?;
        f.write_all(text.as_bytes()).map_err(io)?;
        Ok(())
    }

    /// Remove the file if `pid` owns it (or the file is stale).
    pub fn release(&self, pid: u32) -> Result<(), LockError> {
        match self.read_raw()? {
            None if !self.path.exists() => Err(LockError::NotHeld),
            Some(h) if h.pid != pid && pid_alive(h.pid) => {
                Err(LockError::NotOwner { holder: h, pid })
            }
            _ => std::fs::remove_file(&self.path).map_err(|source| LockError::Io {
                path: self.path.clone(),
                source,
            }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn info(pid: u32) -> LockInfo {
        LockInfo {
            pipeline: "dcgan".into(),
            pid,
            command: "kernels".into(),
        }
    }

    #[test]
    fn acquire_hold_release_and_stale() {
        let home = tempfile::tempdir().unwrap();
        let lock = MachineLock::new(home.path());
        let me = std::process::id();
        assert!(lock.holder().is_none());
        lock.acquire(&info(me)).unwrap();
        let text = std::fs::read_to_string(lock.path()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"pipeline":"dcgan","pid":me,"command":"kernels"})
        );
        assert_eq!(lock.holder(), Some(info(me)));
        // pid 1 is alive and is not us: held.
        assert!(matches!(lock.acquire(&info(1)), Err(LockError::Held(_))));
        assert!(matches!(lock.release(1), Err(LockError::NotOwner { .. })));
        lock.release(me).unwrap();
        assert!(matches!(lock.release(me), Err(LockError::NotHeld)));
        // A dead pid's file is stale: invisible and replaced.
        std::fs::write(
            lock.path(),
            serde_json::to_string(&info(u32::MAX - 1)).unwrap(),
        )
        .unwrap();
        assert!(lock.holder().is_none());
        lock.acquire(&info(me)).unwrap();
        assert_eq!(lock.holder().unwrap().pid, me);
    }
}
