//! Token string -> raw bytes, for each tokenizer family.
//!
//! Key design choice: the mode is decided once from the tokenizer document (decoder and
//! model fields), then every vocabulary entry is converted with the same rule. The
//! GPT-2 byte<->unicode table is derived from its definition (printable Latin-1 bytes map
//! to themselves, the other 68 bytes to U+0100.. in byte order), not copied.

/// How a token's string form encodes its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteMode {
    /// GPT-2 style byte-level BPE: each char stands for one byte.
    ByteLevel,
    /// SentencePiece: `▁` is a space, `<0xNN>` is a raw byte.
    SentencePiece,
    /// The token string is the text (WordPiece and others).
    Plain,
}

/// Whether byte `b` is kept as its own code point by the GPT-2 mapping.
fn byte_is_printable(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// The GPT-2 byte -> char table (the forward direction, used to check the inverse).
#[cfg(test)]
pub(crate) fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        table[b as usize] = if byte_is_printable(b) {
            char::from(b)
        } else {
            let c = char::from_u32(next).unwrap_or('\u{FFFD}');
            next += 1;
            c
        };
    }
    table
}

/// The inverse of [`byte_to_char_table`], indexed by code point (all lie below 0x144).
fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    if cp < 256 {
        let b = cp as u8;
        return byte_is_printable(b).then_some(b);
    }
    let idx = cp.checked_sub(256)? as usize;
    (0..=255u8).filter(|b| !byte_is_printable(*b)).nth(idx)
}

/// Parses `<0xNN>`.
fn parse_byte_token(tok: &str) -> Option<u8> {
    let hex = tok.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

impl ByteMode {
    /// Decides the mode from a parsed `tokenizer.json` document.
    pub(crate) fn detect(doc: &serde_json::Value) -> ByteMode {
        let decoder = &doc["decoder"];
        if has_type(decoder, "ByteLevel") || has_type(&doc["pre_tokenizer"], "ByteLevel") {
            ByteMode::ByteLevel
        } else if doc["model"]["byte_fallback"].as_bool() == Some(true)
            || has_type(decoder, "ByteFallback")
            || has_type(decoder, "Metaspace")
        {
            ByteMode::SentencePiece
        } else {
            ByteMode::Plain
        }
    }

    /// Raw bytes of one vocabulary token string.
    pub fn token_bytes(self, tok: &str) -> Vec<u8> {
        match self {
            ByteMode::ByteLevel => {
                let mut out = Vec::with_capacity(tok.len());
                for c in tok.chars() {
                    match char_to_byte(c) {
                        Some(b) => out.push(b),
                        None => {
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        }
                    }
                }
                out
            }
            ByteMode::SentencePiece => match parse_byte_token(tok) {
                Some(b) => vec![b],
                None => tok.replace('\u{2581}', " ").into_bytes(),
            },
            ByteMode::Plain => tok.as_bytes().to_vec(),
        }
    }
}

/// True when `v` (a component object or a `Sequence` of them) has a part of type `ty`.
fn has_type(v: &serde_json::Value, ty: &str) -> bool {
    if v["type"].as_str() == Some(ty) {
        return true;
    }
    ["decoders", "pretokenizers", "normalizers"]
        .iter()
        .any(|k| {
            v[*k]
                .as_array()
                .is_some_and(|parts| parts.iter().any(|p| has_type(p, ty)))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_a_bijection_with_known_points() {
        let t = byte_to_char_table();
        assert_eq!(t[b' ' as usize], '\u{120}'); // 'Ġ'
        assert_eq!(t[b'\n' as usize], '\u{10A}'); // 'Ċ'
        assert_eq!(t[0xAD], '\u{143}');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(t[b as usize]), Some(b));
        }
    }

    #[test]
    fn sentencepiece_bytes() {
        assert_eq!(ByteMode::SentencePiece.token_bytes("<0x0A>"), vec![b'\n']);
        assert_eq!(
            ByteMode::SentencePiece.token_bytes("\u{2581}hi"),
            b" hi".to_vec()
        );
    }
}
