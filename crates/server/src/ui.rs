//! The web UI: static files the binary embedded, served from memory on the
//! daemon's one port.
//!
//! Key design choice: the server knows nothing about how the files were built
//! or embedded; it receives `(path, bytes)` pairs. `/` and any unknown path
//! that is not an API path get `index.html` (the UI routes with `#` anchors,
//! so this only matters for bookmarks); API paths keep their JSON 404s.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Embedded files: (path relative to the UI root, bytes).
pub type UiAssets = &'static [(&'static str, &'static [u8])];

fn mime(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, e)| e) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json" | "map") => "application/json",
        Some("woff2") => "font/woff2",
        Some("txt") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// Is `path` one of the daemon's API paths (which must never get the UI)?
pub fn is_api_path(path: &str) -> bool {
    path.starts_with("/v1/")
        || path == "/v1"
        || path == "/health"
        || path == "/metrics"
        || path.starts_with("/mcp")
}

/// The response for a GET of `path`, or `None` when no asset matches and the
/// path looks like a file (has an extension).
pub fn serve(assets: UiAssets, path: &str) -> Option<Response> {
    let rel = path.trim_start_matches('/');
    let rel = if rel.is_empty() { "index.html" } else { rel };
    let hit = assets.iter().find(|(p, _)| *p == rel);
    let (name, bytes) = match hit {
        Some((p, b)) => (*p, *b),
        None if rel
            .rsplit('/')
            .next()
            .is_some_and(|last| last.contains('.')) =>
        {
            return None;
        }
        None => assets
            .iter()
            .find(|(p, _)| *p == "index.html")
            .map(|(p, b)| (*p, *b))?,
    };
    // Vite names bundles by content hash: those can be cached for good.
    let cache = if name.starts_with("assets/") {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    let mut resp = (StatusCode::OK, Body::from(bytes)).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(mime(name)));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    Some(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    static ASSETS: &[(&str, &[u8])] = &[
        ("index.html", b"<html>ui</html>"),
        ("assets/app-1234.js", b"js"),
    ];

    #[test]
    fn serves_index_assets_and_spa_paths() {
        let r = serve(ASSETS, "/").map(|r| r.headers()[header::CONTENT_TYPE].clone());
        assert_eq!(
            r,
            Some(HeaderValue::from_static("text/html; charset=utf-8"))
        );
        let js = serve(ASSETS, "/assets/app-1234.js")
            .map(|r| r.headers()[header::CACHE_CONTROL].clone());
        assert_eq!(
            js,
            Some(HeaderValue::from_static(
                "public, max-age=31536000, immutable"
            ))
        );
        assert!(
            serve(ASSETS, "/chat").is_some(),
            "an app path gets index.html"
        );
        assert!(
            serve(ASSETS, "/missing.js").is_none(),
            "a missing file is a 404"
        );
        assert!(is_api_path("/v1/models") && is_api_path("/health") && is_api_path("/mcp"));
        assert!(!is_api_path("/") && !is_api_path("/assets/x.js"));
    }
}
