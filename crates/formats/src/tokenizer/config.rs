//! Reading the Hugging Face side files next to `tokenizer.json`.
//!
//! Key design choice: the side files are optional and only a handful of fields are read
//! (bos/eos token, chat template, generation EOS ids); a present but malformed file is an
//! error naming that file, a missing one is not.

use std::path::Path;

use serde_json::Value;

use super::{SpecialInfo, TokenizerError};

fn read_json(path: &Path) -> Result<Option<Value>, TokenizerError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(TokenizerError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| TokenizerError::Config {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
}

/// A token field is either a string or an `AddedToken` object with `content`.
fn token_field(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(m) => m.get("content").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

/// `chat_template` is a string or a list of `{name, template}`; "default" wins.
fn chat_template_field(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(list) => {
            let pick = list
                .iter()
                .find(|e| e["name"].as_str() == Some("default"))
                .or_else(|| list.first())?;
            pick["template"].as_str().map(str::to_owned)
        }
        _ => None,
    }
}

pub(crate) fn read_sibling_configs(tokenizer_json: &Path) -> Result<SpecialInfo, TokenizerError> {
    let mut info = SpecialInfo::default();
    let Some(dir) = tokenizer_json.parent() else {
        return Ok(info);
    };
    if let Some(cfg) = read_json(&dir.join("tokenizer_config.json"))? {
        info.bos_token = token_field(&cfg["bos_token"]);
        info.eos_token = token_field(&cfg["eos_token"]);
        info.chat_template = chat_template_field(&cfg["chat_template"]);
    }
    if info.chat_template.is_none() {
        let jinja = dir.join("chat_template.jinja");
        if jinja.is_file() {
            info.chat_template =
                Some(
                    std::fs::read_to_string(&jinja).map_err(|source| TokenizerError::Io {
                        path: jinja.clone(),
                        source,
                    })?,
                );
        }
    }
    if let Some(gen_cfg) = read_json(&dir.join("generation_config.json"))? {
        match &gen_cfg["eos_token_id"] {
            Value::Number(n) => info.extra_eos_ids.extend(n.as_u64().map(|x| x as u32)),
            Value::Array(list) => info
                .extra_eos_ids
                .extend(list.iter().filter_map(Value::as_u64).map(|x| x as u32)),
            _ => {}
        }
    }
    Ok(info)
}
