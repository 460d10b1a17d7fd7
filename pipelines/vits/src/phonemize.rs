//! Text → sentences of Piper phoneme ids, through espeak-ng: its library
//! (`espeak_lib.rs`, the translation Piper uses) when it loads, else the
//! `espeak-ng` program.
//!
//! Key design choices:
//! - Clause splitting is ours, espeak-ng only phonemizes: Piper's phonemizer
//!   (espeak-ng's `TextToPhonemesWithTerminator`) keeps each clause's
//!   terminator (`. ? ! , : ;`), which the CLI does not print, so we cut the text
//!   at those marks ourselves (a mark followed by whitespace or the end; a single
//!   `.` followed by a lower-case word is an abbreviation, not a cut; `...`/`…`
//!   is a cut without a terminator), phonemize each clause (library:
//!   `espeak_TextToPhonemes`; program: `espeak-ng -q --ipa -v <voice>`, text on
//!   stdin, so a leading `-` is never an option), and re-attach
//!   the terminator as Piper does: `, : ;` add the mark and a space and continue
//!   the sentence; `. ? !` add the mark and end it.
//! - Ids follow Piper's rules: `^`, `_`, then each phoneme (one NFD code point)
//!   followed by `_`, then `$`; a phoneme missing from the map is skipped.
//! - A missing espeak-ng (neither library nor program) is an error at open
//!   that says how to install it. `$FAVLO_ESPEAK_NG` forces the program path.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use unicode_normalization::UnicodeNormalization;

use crate::error::VitsError;

/// How to install the phonemizer, in every error about it.
pub const INSTALL_HINT: &str = "install espeak-ng (apt install espeak-ng)";

/// One sentence ready for synthesis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sentence {
    /// The source text of the sentence's clauses.
    pub text: String,
    /// IPA phonemes with Piper's punctuation (`həlˈoʊ, wˈɜːld!`).
    pub phonemes: String,
    /// Phoneme ids with BOS, EOS and interleaved padding.
    pub ids: Vec<i64>,
}

/// How a clause ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Terminator {
    /// `.`, `?` or `!`: the mark is kept and the sentence ends.
    End(char),
    /// `,`, `:` or `;`: the mark and a space are kept; the sentence goes on.
    Pause(char),
    /// An ellipsis: nothing is kept; the sentence goes on.
    Ellipsis,
    /// End of text without a mark: the sentence ends.
    None,
}

/// A piece of text that espeak-ng phonemizes on its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Clause {
    /// The clause text, its punctuation included.
    pub text: String,
    /// How it ends.
    pub terminator: Terminator,
}

fn is_closer(c: char) -> bool {
    matches!(c, '"' | '\'' | ')' | ']' | '}' | '»' | '”' | '’')
}

/// Cuts `text` into clauses (see the module docs for the rules).
pub fn clauses(text: &str) -> Vec<Clause> {
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < n {
        let c = chars[i];
        if !matches!(c, '.' | '!' | '?' | ',' | ':' | ';' | '…') {
            i += 1;
            continue;
        }
        let mut j = i;
        if matches!(c, '.' | '!' | '?' | '…') {
            while j + 1 < n && matches!(chars[j + 1], '.' | '!' | '?' | '…') {
                j += 1;
            }
        }
        let mut k = j + 1;
        while k < n && is_closer(chars[k]) {
            k += 1;
        }
        if k < n && !chars[k].is_whitespace() {
            i = k.max(i + 1);
            continue;
        }
        let run = &chars[i..=j];
        let dots = run.iter().filter(|c| **c == '.').count();
        let ellipsis = run.contains(&'…') || dots >= 2;
        let strong = run.iter().copied().find(|c| matches!(c, '?' | '!'));
        let terminator = match (c, strong, ellipsis) {
            (',' | ':' | ';', _, _) => Terminator::Pause(c),
            (_, Some(s), _) => Terminator::End(s),
            (_, None, true) => Terminator::Ellipsis,
            _ => Terminator::End('.'),
        };
        if terminator == Terminator::End('.') && run.len() == 1 {
            // "Mr. and": a period before a lower-case word is an abbreviation.
            let next = chars[k..].iter().find(|c| !c.is_whitespace());
            if next.is_some_and(|c| c.is_lowercase()) {
                i = k;
                continue;
            }
        }
        let piece: String = chars[start..k].iter().collect();
        if !piece.trim().is_empty() {
            out.push(Clause {
                text: piece.trim().to_string(),
                terminator,
            });
        }
        start = k;
        i = k;
    }
    let rest: String = chars[start.min(n)..].iter().collect();
    if !rest.trim().is_empty() {
        out.push(Clause {
            text: rest.trim().to_string(),
            terminator: Terminator::None,
        });
    }
    out
}

/// Removes espeak-ng's language-switch flags such as `(en)` / `(fr)`.
fn strip_flags(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut depth = 0usize;
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// Piper's id rule over the NFD code points of `phonemes`.
pub fn phoneme_ids(phonemes: &str, map: &HashMap<String, Vec<i64>>) -> Vec<i64> {
    let one = |k: &str| map.get(k).cloned().unwrap_or_default();
    let pad = one("_");
    let mut ids = one("^");
    ids.extend(&pad);
    let mut key = String::new();
    for c in phonemes.nfd() {
        key.clear();
        key.push(c);
        if let Some(v) = map.get(&key) {
            ids.extend(v);
            ids.extend(&pad);
        }
    }
    ids.extend(one("$"));
    ids
}

/// Which espeak-ng does the phonemizing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// `libespeak-ng.so.1` (`espeak_TextToPhonemes`, as Piper).
    Library,
    /// The `espeak-ng` program at this path.
    Program(PathBuf),
}

/// The espeak-ng front end of one voice.
#[derive(Clone, Debug)]
pub struct Phonemizer {
    backend: Backend,
    voice: String,
    map: HashMap<String, Vec<i64>>,
}

impl Phonemizer {
    /// espeak-ng's library when it loads, else the `espeak-ng` program;
    /// `$FAVLO_ESPEAK_NG` forces that program.
    pub fn new(voice: &str, map: HashMap<String, Vec<i64>>) -> Result<Self, VitsError> {
        if let Some(program) = std::env::var_os("FAVLO_ESPEAK_NG") {
            return Self::with_program(PathBuf::from(program), voice, map);
        }
        match crate::espeak_lib::check() {
            Ok(()) => Ok(Phonemizer {
                backend: Backend::Library,
                voice: voice.to_string(),
                map,
            }),
            Err(_) => Self::with_program(PathBuf::from("espeak-ng"), voice, map),
        }
    }

    /// Which espeak-ng this phonemizer runs.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// Uses `program` as espeak-ng, after checking that it runs.
    pub fn with_program(
        program: PathBuf,
        voice: &str,
        map: HashMap<String, Vec<i64>>,
    ) -> Result<Self, VitsError> {
        let probe = Command::new(&program)
            .arg("--version")
            .stdin(Stdio::null())
            .output();
        match probe {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                return Err(VitsError::Espeak {
                    reason: format!(
                        "{} --version failed ({}); {INSTALL_HINT}",
                        program.display(),
                        o.status
                    ),
                });
            }
            Err(e) => {
                return Err(VitsError::Espeak {
                    reason: format!("cannot run {} ({e}); {INSTALL_HINT}", program.display()),
                });
            }
        }
        Ok(Phonemizer {
            backend: Backend::Program(program),
            voice: voice.to_string(),
            map,
        })
    }

    /// IPA of one clause: espeak-ng's clauses joined, flags removed.
    pub fn ipa(&self, clause: &str) -> Result<String, VitsError> {
        let program = match &self.backend {
            Backend::Library => {
                let ipa = crate::espeak_lib::ipa(&self.voice, clause)
                    .map_err(|reason| VitsError::Espeak { reason })?;
                return Ok(strip_flags(ipa.trim()));
            }
            Backend::Program(p) => p,
        };
        let fail = |reason: String| VitsError::Espeak { reason };
        let mut child = Command::new(program)
            .args(["-q", "--ipa", "-v", &self.voice])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                fail(format!(
                    "cannot run {} ({e}); {INSTALL_HINT}",
                    program.display()
                ))
            })?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(clause.as_bytes())
                .map_err(|e| fail(e.to_string()))?;
        }
        let out = child.wait_with_output().map_err(|e| fail(e.to_string()))?;
        if !out.status.success() {
            return Err(fail(format!(
                "voice {:?}: {} {}",
                self.voice,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        Ok(text
            .lines()
            .map(|l| strip_flags(l.trim()))
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(""))
    }

    /// Splits `text` into sentences of phoneme ids (empty sentences dropped).
    pub fn sentences(&self, text: &str) -> Result<Vec<Sentence>, VitsError> {
        let mut out = Vec::new();
        let (mut src, mut ph) = (String::new(), String::new());
        for clause in clauses(text) {
            ph.push_str(&self.ipa(&clause.text)?);
            if !src.is_empty() {
                src.push(' ');
            }
            src.push_str(&clause.text);
            let end = match clause.terminator {
                Terminator::End(c) => {
                    ph.push(c);
                    true
                }
                Terminator::Pause(c) => {
                    ph.push(c);
                    ph.push(' ');
                    false
                }
                Terminator::Ellipsis => false,
                Terminator::None => true,
            };
            if end {
                self.push(&mut out, &mut src, &mut ph);
            }
        }
        self.push(&mut out, &mut src, &mut ph);
        Ok(out)
    }

    fn push(&self, out: &mut Vec<Sentence>, src: &mut String, ph: &mut String) {
        if !ph.trim().is_empty() {
            out.push(Sentence {
                text: std::mem::take(src),
                ids: phoneme_ids(ph, &self.map),
                phonemes: std::mem::take(ph),
            });
        }
        src.clear();
        ph.clear();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn terms(text: &str) -> Vec<(String, Terminator)> {
        clauses(text)
            .into_iter()
            .map(|c| (c.text, c.terminator))
            .collect()
    }

    #[test]
    fn clause_rules() {
        use Terminator::*;
        assert_eq!(
            terms("Hello, world! Mr. and Mrs. Brown left 3.5 km at 10:30"),
            vec![
                ("Hello,".into(), Pause(',')),
                ("world!".into(), End('!')),
                ("Mr. and Mrs.".into(), End('.')),
                ("Brown left 3.5 km at 10:30".into(), None),
            ]
        );
        assert_eq!(
            terms("Wait... what?! \"Yes.\" No"),
            vec![
                ("Wait...".into(), Ellipsis),
                ("what?!".into(), End('?')),
                ("\"Yes.\"".into(), End('.')),
                ("No".into(), None),
            ]
        );
        assert!(clauses("  ").is_empty());
    }

    #[test]
    fn ids_follow_piper_rules() {
        let map: HashMap<String, Vec<i64>> = [
            ("_", 0),
            ("^", 1),
            ("$", 2),
            ("a", 14),
            ("c", 16),
            ("\u{327}", 140),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), vec![v]))
        .collect();
        // "ç" decomposes to c + combining cedilla; "x" is not in the map.
        assert_eq!(
            phoneme_ids("açx", &map),
            vec![1, 0, 14, 0, 16, 0, 140, 0, 2]
        );
        assert_eq!(strip_flags("(en)hˈɛloʊ(fr)"), "hˈɛloʊ");
    }

    #[test]
    fn missing_program_says_how_to_install() {
        let e = Phonemizer::with_program("/nonexistent/espeak-ng".into(), "en-us", HashMap::new())
            .unwrap_err();
        let msg = favlo_pipeline::PipelineError::from(e).to_string();
        assert!(
            msg.contains("install espeak-ng (apt install espeak-ng)"),
            "{msg}"
        );
    }
}
