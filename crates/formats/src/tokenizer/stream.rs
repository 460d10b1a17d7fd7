//! Incremental UTF-8 assembly of generated tokens.
//!
//! Key design choice: the decoder works on raw token bytes (see
//! `Tokenizer::token_bytes`), holds back only an incomplete trailing UTF-8 sequence,
//! and replaces bytes that can never become valid with U+FFFD as soon as that is known.

use super::Tokenizer;

/// Accumulates token bytes and yields only complete UTF-8 text.
#[derive(Debug, Default, Clone)]
pub struct StreamDecoder {
    pending: Vec<u8>,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds raw bytes; returns the text that is now complete.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = start + e.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&self.pending[start..valid]));
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            start = valid + n;
                        }
                        None => {
                            start = valid;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        out
    }

    /// Adds one token; returns the text that is now complete.
    pub fn push_token(&mut self, tokenizer: &Tokenizer, id: u32) -> String {
        self.push_bytes(tokenizer.token_bytes_ref(id))
    }

    /// Bytes held back waiting for the rest of a UTF-8 sequence.
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// Flushes what is left (an incomplete sequence becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_multibyte_sequences() {
        let text = "a€😀b";
        let mut d = StreamDecoder::new();
        let mut got = String::new();
        for b in text.as_bytes() {
            got.push_str(&d.push_bytes(&[*b]));
        }
        got.push_str(&d.finish());
        assert_eq!(got, text);
        let mut d = StreamDecoder::new();
        assert_eq!(d.push_bytes(&[0xE2, 0x82]), "");
        assert_eq!(d.pending().len(), 2);
        assert_eq!(d.push_bytes(&[0xAC, b'x']), "€x");
    }

    #[test]
    fn invalid_bytes_become_replacement() {
        let mut d = StreamDecoder::new();
        assert_eq!(d.push_bytes(&[b'a', 0xFF, b'b']), "a\u{FFFD}b");
        assert_eq!(d.push_bytes(&[0xF0, 0x9F]), "");
        assert_eq!(d.finish(), "\u{FFFD}");
    }
}
