//! Embeds the web UI (`web/dist`, built by Vite) into the binary.
//!
//! When `web/dist` is missing or older than the UI sources and `npm` is on the
//! PATH, the UI is built first (`npm ci` when `web/node_modules` is missing,
//! then `npm run build`). Without npm, or with `FAVLO_SKIP_WEB_BUILD=1`, the
//! binary embeds whatever `web/dist` holds, or a page that says how to build
//! the UI. The generated file lists every asset with `include_bytes!`, so the
//! running daemon serves the UI from memory on its one port.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

fn newest(dir: &Path) -> Option<SystemTime> {
    let mut best = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let p = entry.path();
        let t = if p.is_dir() {
            newest(&p)
        } else {
            entry.metadata().ok()?.modified().ok()
        };
        best = best.max(t);
    }
    best
}

fn files(dir: &Path, base: &Path, out: &mut Vec<(String, PathBuf)>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = rd.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(&p, base, out);
        } else if let Ok(rel) = p.strip_prefix(base) {
            out.push((rel.to_string_lossy().replace('\\', "/"), p.clone()));
        }
    }
}

fn npm(web: &Path, args: &[&str]) -> bool {
    Command::new("npm")
        .args(args)
        .current_dir(web)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let web = manifest.join("../../web");
    let dist = web.join("dist");
    for p in ["src", "index.html", "package.json", "dist"] {
        println!("cargo:rerun-if-changed={}", web.join(p).display());
    }
    println!("cargo:rerun-if-env-changed=FAVLO_SKIP_WEB_BUILD");

    let built = std::fs::metadata(dist.join("index.html"))
        .and_then(|m| m.modified())
        .ok();
    let sources = [
        newest(&web.join("src")),
        std::fs::metadata(web.join("index.html"))
            .and_then(|m| m.modified())
            .ok(),
    ]
    .into_iter()
    .flatten()
    .max();
    let stale = built.is_none() || sources > built;
    let skip = std::env::var("FAVLO_SKIP_WEB_BUILD").is_ok_and(|v| v == "1");
    if stale && !skip && web.join("package.json").is_file() {
        let ok = (web.join("node_modules").is_dir()
            || npm(&web, &["ci", "--no-audit", "--no-fund"]))
            && npm(&web, &["run", "build"]);
        if !ok {
            println!(
                "cargo:warning=could not build the web UI with npm; the binary embeds a placeholder page"
            );
        }
    }

    let mut assets = Vec::new();
    files(&dist, &dist, &mut assets);
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default());
    let mut code = String::from(
        "/// Embedded web UI files: (path relative to the UI root, bytes).\npub static ASSETS: &[(&str, &[u8])] = &[\n",
    );
    if assets.iter().any(|(p, _)| p == "index.html") {
        for (rel, path) in &assets {
            code += &format!(
                "    ({rel:?}, include_bytes!({:?})),\n",
                path.display().to_string()
            );
        }
    } else {
        let page = out.join("placeholder.html");
        let _ = std::fs::write(
            &page,
            "<!doctype html><meta charset=utf-8><title>Favlo</title><h1>Favlo</h1>\
             <p>The web UI was not built into this binary. Install Node.js and npm, then rebuild \
             (<code>cargo build -p favlo</code> runs <code>npm ci</code> and <code>npm run build</code> in <code>web/</code>).</p>\
             <p>The API is up: <a href=/v1/models>/v1/models</a>, <a href=/health>/health</a>.</p>",
        );
        code += &format!(
            "    (\"index.html\", include_bytes!({:?})),\n",
            page.display().to_string()
        );
    }
    code += "];\n";
    let _ = std::fs::write(out.join("web_assets.rs"), code);
}
