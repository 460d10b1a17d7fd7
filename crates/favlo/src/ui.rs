//! The web UI's files, embedded at build time by `build.rs` from `web/dist`.

include!(concat!(env!("OUT_DIR"), "/web_assets.rs"));
