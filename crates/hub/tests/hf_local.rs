//! `hf:` pulls against a hub stand-in: a std TcpListener server in a thread serving the listing
//! and resolve routes (resolve redirects to a blob route that honours `Range`). Stored files are
//! compared byte for byte with what the server holds; the hub code's own digest is compared with
//! the listing's LFS digest, computed here independently of the code under test's paths.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use favlo_hub::hf::HfClient;
use favlo_hub::{Home, HubError, Manifest, NoProgress, PullTarget, parse_source, pull_with_client};
use sha2::{Digest, Sha256};

#[derive(Clone, Debug)]
struct Seen {
    path: String,
    range: Option<String>,
    auth: Option<String>,
}

#[derive(Default)]
struct Behaviour {
    /// Cut the next full (non-ranged) blob response after this many body bytes.
    cut_next_at: Option<usize>,
}

struct Hub {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    behaviour: Arc<Mutex<Behaviour>>,
}

fn sha_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Deterministic non-trivial bytes (xorshift64*), no zero runs.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

fn start_hub(files: HashMap<String, Vec<u8>>, listed_sha: HashMap<String, String>) -> Hub {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let behaviour = Arc::new(Mutex::new(Behaviour::default()));
    let mut siblings = vec![serde_json::json!({"rfilename": ".gitattributes", "size": 10})];
    let mut names: Vec<&String> = files.keys().collect();
    names.sort();
    for name in names {
        let data = &files[name];
        if name.ends_with(".json") {
            siblings.push(serde_json::json!({"rfilename": name, "size": data.len()}));
        } else {
            let sha = listed_sha
                .get(name)
                .cloned()
                .unwrap_or_else(|| sha_hex(data));
            siblings.push(serde_json::json!({
                "rfilename": name, "size": data.len(),
                "lfs": {"sha256": sha, "size": data.len(), "pointerSize": 134}
            }));
        }
    }
    let listing = serde_json::json!({
        "id": "org/tiny", "sha": COMMIT, "siblings": siblings,
        "cardData": {"license": "apache-2.0"}
    })
    .to_string();
    let files = Arc::new(files);
    let (seen2, behaviour2) = (seen.clone(), behaviour.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (files, seen, behaviour, listing) = (
                files.clone(),
                seen2.clone(),
                behaviour2.clone(),
                listing.clone(),
            );
            std::thread::spawn(move || handle(stream, &files, &seen, &behaviour, &listing));
        }
    });
    Hub {
        base,
        seen,
        behaviour,
    }
}

fn handle(
    mut stream: TcpStream,
    files: &HashMap<String, Vec<u8>>,
    seen: &Mutex<Vec<Seen>>,
    behaviour: &Mutex<Behaviour>,
    listing: &str,
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let (mut range, mut auth) = (None, None);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap() == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            match k.to_ascii_lowercase().as_str() {
                "range" => range = Some(v.trim().to_string()),
                "authorization" => auth = Some(v.trim().to_string()),
                _ => {}
            }
        }
    }
    seen.lock().unwrap().push(Seen {
        path: path.clone(),
        range: range.clone(),
        auth,
    });
    let reply = |stream: &mut TcpStream, status: &str, headers: &str, body: &[u8]| {
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n{headers}\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        let _ = stream.write_all(body);
    };
    if path == "/api/models/org/tiny/revision/main?blobs=true" {
        reply(
            &mut stream,
            "200 OK",
            "Content-Type: application/json\r\n",
            listing.as_bytes(),
        );
    } else if let Some(file) = path.strip_prefix(&format!("/org/tiny/resolve/{COMMIT}/")) {
        let loc = format!("Location: /blobs/{file}\r\n");
        reply(&mut stream, "302 Found", &loc, b"");
    } else if let Some(data) = path.strip_prefix("/blobs/").and_then(|f| files.get(f)) {
        match range
            .as_deref()
            .and_then(|r| r.strip_prefix("bytes="))
            .and_then(|r| r.strip_suffix('-'))
        {
            Some(start) => {
                let start: usize = start.parse().unwrap();
                let cr = format!(
                    "Content-Range: bytes {start}-{}/{}\r\n",
                    data.len() - 1,
                    data.len()
                );
                reply(&mut stream, "206 Partial Content", &cr, &data[start..]);
            }
            None => {
                let cut = behaviour.lock().unwrap().cut_next_at.take();
                match cut {
                    Some(n) => {
                        let head = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            data.len()
                        );
                        stream.write_all(head.as_bytes()).unwrap();
                        stream.write_all(&data[..n]).unwrap();
                        stream.flush().unwrap();
                        let _ = stream.shutdown(Shutdown::Both);
                    }
                    None => reply(&mut stream, "200 OK", "", data),
                }
            }
        }
    } else {
        reply(&mut stream, "404 Not Found", "", b"not found");
    }
}

fn tiny_files() -> HashMap<String, Vec<u8>> {
    HashMap::from([
        (
            "config.json".to_string(),
            br#"{"hidden_size": 64}"#.to_vec(),
        ),
        ("model.safetensors".to_string(), noise(700_001, 7)),
        ("sub/extra.bin".to_string(), noise(4_099, 11)),
    ])
}

fn stored(home: &Home, name: &str, file: &str) -> Vec<u8> {
    std::fs::read(home.model_dir(name).unwrap().join(file)).unwrap()
}

fn hidden_entries(home: &Home) -> Vec<String> {
    std::fs::read_dir(home.models_dir())
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn full_download_stores_every_file_and_manifest() {
    let files = tiny_files();
    let hub = start_hub(files.clone(), HashMap::new());
    let tmp = tempfile::tempdir().unwrap();
    let home = Home::new(tmp.path());
    let client = HfClient::new(&hub.base, Some("secret-token".into()));
    let source = parse_source("hf:org/tiny").unwrap();
    let m = pull_with_client(
        &home,
        PullTarget::Source {
            source: &source,
            name: None,
        },
        &client,
        &NoProgress,
    )
    .unwrap();
    for (name, data) in &files {
        assert_eq!(&stored(&home, "tiny", name), data, "{name}");
        let entry = m.files.iter().find(|f| &f.path == name).unwrap();
        assert_eq!(entry.sha256, sha_hex(data));
        assert_eq!(entry.size, data.len() as u64);
    }
    assert_eq!(m.files.len(), 3, ".gitattributes must be skipped");
    assert_eq!(m.revision.as_deref(), Some(COMMIT));
    assert_eq!(m.license, "apache-2.0");
    assert_eq!(Manifest::read(&home.model_dir("tiny").unwrap()).unwrap(), m);
    assert!(
        hidden_entries(&home).is_empty(),
        "{:?}",
        hidden_entries(&home)
    );
    let seen = hub.seen.lock().unwrap().clone();
    assert!(
        seen.iter()
            .all(|s| s.auth.as_deref() == Some("Bearer secret-token")),
        "{seen:?}"
    );
    assert!(seen.iter().all(|s| s.range.is_none()));
}

#[test]
fn interrupted_download_resumes_with_range() {
    let files = tiny_files();
    let hub = start_hub(files.clone(), HashMap::new());
    let tmp = tempfile::tempdir().unwrap();
    let home = Home::new(tmp.path());
    let client = HfClient::new(&hub.base, None);
    let source = parse_source("hf:org/tiny#model.safetensors").unwrap();
    let target = PullTarget::Source {
        source: &source,
        name: Some("tiny-model"),
    };

    hub.behaviour.lock().unwrap().cut_next_at = Some(300_000);
    let err = pull_with_client(&home, target, &client, &NoProgress).unwrap_err();
    assert!(
        matches!(err, HubError::Io { .. } | HubError::Http { .. }),
        "{err}"
    );
    assert!(!home.model_dir("tiny-model").unwrap().exists());
    let part = home
        .models_dir()
        .join(".partial-tiny-model/model.safetensors.part");
    assert_eq!(std::fs::metadata(&part).unwrap().len(), 300_000);

    let m = pull_with_client(&home, target, &client, &NoProgress).unwrap();
    assert_eq!(
        stored(&home, "tiny-model", "model.safetensors"),
        files["model.safetensors"]
    );
    assert_eq!(m.files[0].sha256, sha_hex(&files["model.safetensors"]));
    let ranges: Vec<Option<String>> = hub
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.path.starts_with("/blobs/"))
        .map(|s| s.range.clone())
        .collect();
    assert_eq!(ranges, vec![None, Some("bytes=300000-".to_string())]);
    assert!(
        hidden_entries(&home).is_empty(),
        "{:?}",
        hidden_entries(&home)
    );
}

#[test]
fn digest_mismatch_fails_and_leaves_nothing() {
    let files = tiny_files();
    let wrong = HashMap::from([("model.safetensors".to_string(), "ab".repeat(32))]);
    let hub = start_hub(files, wrong);
    let tmp = tempfile::tempdir().unwrap();
    let home = Home::new(tmp.path());
    let client = HfClient::new(&hub.base, None);
    let source = parse_source("hf:org/tiny").unwrap();
    let err = pull_with_client(
        &home,
        PullTarget::Source {
            source: &source,
            name: None,
        },
        &client,
        &NoProgress,
    )
    .unwrap_err();
    match &err {
        HubError::Mismatch {
            file,
            expected,
            expected_size,
            actual_size,
            ..
        } => {
            assert_eq!(file, "model.safetensors");
            assert_eq!(expected, &"ab".repeat(32));
            assert_eq!((*expected_size, *actual_size), (700_001, 700_001));
        }
        other => panic!("{other}"),
    }
    assert!(!home.model_dir("tiny").unwrap().exists());
    assert!(
        hidden_entries(&home).is_empty(),
        "{:?}",
        hidden_entries(&home)
    );
}

#[test]
fn missing_repository_is_a_clear_404() {
    let hub = start_hub(tiny_files(), HashMap::new());
    let tmp = tempfile::tempdir().unwrap();
    let home = Home::new(tmp.path());
    let client = HfClient::new(&hub.base, None);
    let source = parse_source("hf:org/nope").unwrap();
    let err = pull_with_client(
        &home,
        PullTarget::Source {
            source: &source,
            name: None,
        },
        &client,
        &NoProgress,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}/api/models/org/nope/revision/main?blobs=true answered HTTP 404 (no such repository, revision or file)",
            hub.base
        )
    );
}

#[test]
fn partial_files_of_another_commit_are_not_resumed() {
    let files = tiny_files();
    let hub = start_hub(files.clone(), HashMap::new());
    let tmp = tempfile::tempdir().unwrap();
    let home = Home::new(tmp.path());
    let client = HfClient::new(&hub.base, None);
    let source = parse_source("hf:org/tiny#model.safetensors").unwrap();
    let target = PullTarget::Source {
        source: &source,
        name: Some("m"),
    };
    hub.behaviour.lock().unwrap().cut_next_at = Some(200_000);
    pull_with_client(&home, target, &client, &NoProgress).unwrap_err();
    // Pretend the interrupted pull was of an older commit.
    std::fs::write(home.models_dir().join(".partial-m/.commit"), "feedface").unwrap();
    pull_with_client(&home, target, &client, &NoProgress).unwrap();
    assert_eq!(
        stored(&home, "m", "model.safetensors"),
        files["model.safetensors"]
    );
    let blob_ranges: Vec<Option<String>> = hub
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.path.starts_with("/blobs/"))
        .map(|s| s.range.clone())
        .collect();
    assert_eq!(blob_ranges, vec![None, None]);
    assert!(!home.model_dir("m").unwrap().join(".commit").exists());
}
