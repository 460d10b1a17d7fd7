//! Chat templates (Hugging Face Jinja) rendered with minijinja.
//!
//! Key design choice: reproduce what `transformers.apply_chat_template` gives the
//! template: `trim_blocks` + `lstrip_blocks`, Python string methods (minijinja-contrib
//! pycompat), `raise_exception`, `strftime_now`, and a `tojson` that prints exactly like
//! Python's `json.dumps(x, ensure_ascii=False)` (", " and ": " separators, key order kept),
//! because tool schemas are pasted into prompts with it and must match byte for byte.

use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::value::Kwargs;
use minijinja::{Environment, Error, ErrorKind, Value};

use super::TokenizerError;

const NAME: &str = "chat";

/// A compiled chat template plus the BOS/EOS strings it may reference.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source_len", &self.source.len())
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish()
    }
}

fn flatten(e: &Error) -> String {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    msg
}

impl ChatTemplate {
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, TokenizerError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, source.to_owned())
            .map_err(|e| TokenizerError::TemplateSyntax {
                message: flatten(&e),
            })?;
        Ok(ChatTemplate {
            env,
            source: source.to_owned(),
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
        })
    }

    /// Renders `messages` (a JSON array of message objects), `tools` (JSON array or none).
    pub fn render(
        &self,
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        self.render_with(messages, tools, add_generation_prompt, None)
    }

    /// Like [`ChatTemplate::render`], with extra top-level variables (e.g.
    /// `enable_thinking`) taken from a JSON object.
    pub fn render_with(
        &self,
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
        extra: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<String, TokenizerError> {
        let tmpl = self
            .env
            .get_template(NAME)
            .map_err(|e| TokenizerError::TemplateRender {
                message: flatten(&e),
            })?;
        let mut ctx: Vec<(String, Value)> = Vec::new();
        if let Some(extra) = extra {
            for (k, v) in extra {
                ctx.push((k.clone(), Value::from_serialize(v)));
            }
        }
        ctx.push(("messages".into(), Value::from_serialize(messages)));
        ctx.push((
            "tools".into(),
            tools.map_or(Value::from(()), Value::from_serialize),
        ));
        ctx.push((
            "add_generation_prompt".into(),
            Value::from(add_generation_prompt),
        ));
        ctx.push(("bos_token".into(), Value::from(self.bos_token.as_str())));
        ctx.push(("eos_token".into(), Value::from(self.eos_token.as_str())));
        let ctx: Value = ctx.into_iter().collect();
        tmpl.render(ctx)
            .map_err(|e| TokenizerError::TemplateRender {
                message: flatten(&e),
            })
    }

    pub fn source(&self) -> &str {
        &self.source
    }
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

fn strftime_now(format: String) -> Result<Value, Error> {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Ok(Value::from(format_utc(&format, secs)))
}

/// Python `json.dumps` compatible filter: `tojson(indent=None, ensure_ascii=False,
/// sort_keys=False, separators=None)`; `indent` may also be positional.
fn tojson(value: Value, indent: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = match indent {
        Some(v) if !v.is_none() => Some(v),
        _ => kwargs.get::<Option<Value>>("indent")?,
    };
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(if let Some(s) = v.as_str() {
            s.to_owned()
        } else {
            let n = usize::try_from(v.clone()).map_err(|_| {
                Error::new(ErrorKind::InvalidOperation, "tojson indent must be an int")
            })?;
            " ".repeat(n)
        }),
    };
    let ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let separators = kwargs.get::<Option<Vec<String>>>("separators")?;
    kwargs.assert_all_used()?;
    let (item_sep, key_sep) = match separators.as_deref() {
        Some([a, b]) => (a.clone(), b.clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson separators must be a pair",
            ));
        }
        None if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        None => (", ".to_owned(), ": ".to_owned()),
    };
    let json = serde_json::to_value(&value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let mut out = String::new();
    let style = PyJson {
        indent,
        item_sep,
        key_sep,
        ensure_ascii,
        sort_keys,
    };
    style.write(&json, 0, &mut out);
    Ok(Value::from_safe_string(out))
}

struct PyJson {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    ensure_ascii: bool,
    sort_keys: bool,
}

impl PyJson {
    fn newline(&self, level: usize, out: &mut String) {
        if let Some(ind) = &self.indent {
            out.push('\n');
            for _ in 0..level {
                out.push_str(ind);
            }
        }
    }

    fn string(&self, s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ensure_ascii && (c as u32) > 0x7e) => {
                    let mut buf = [0u16; 2];
                    for unit in c.encode_utf16(&mut buf) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }

    fn write(&self, v: &serde_json::Value, level: usize, out: &mut String) {
        use serde_json::Value as J;
        match v {
            J::Null => out.push_str("null"),
            J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            J::Number(n) => out.push_str(&py_number(n)),
            J::String(s) => self.string(s, out),
            J::Array(items) if items.is_empty() => out.push_str("[]"),
            J::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&self.item_sep);
                    }
                    self.newline(level + 1, out);
                    self.write(item, level + 1, out);
                }
                self.newline(level, out);
                out.push(']');
            }
            J::Object(map) if map.is_empty() => out.push_str("{}"),
            J::Object(map) => {
                let mut entries: Vec<(&String, &serde_json::Value)> = map.iter().collect();
                if self.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(b.0));
                }
                out.push('{');
                for (i, (k, item)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push_str(&self.item_sep);
                    }
                    self.newline(level + 1, out);
                    self.string(k, out);
                    out.push_str(&self.key_sep);
                    self.write(item, level + 1, out);
                }
                self.newline(level, out);
                out.push('}');
            }
        }
    }
}

/// Python `repr(float)` style for floats (`1.0`, `1e-05`, `1e+20`); ints as is.
fn py_number(n: &serde_json::Number) -> String {
    let Some(f) = n.as_f64().filter(|_| n.is_f64()) else {
        return n.to_string();
    };
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-4..1e16).contains(&abs) {
        // Shortest round-trip digits in exponent form, Python spelling.
        let s = format!("{f:e}");
        if let Some((mant, exp)) = s.split_once('e') {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            return format!("{mant}e{sign}{digits:0>2}");
        }
        return s;
    }
    let s = format!("{f:?}");
    if s.contains('.') || s.contains('e') {
        s
    } else {
        format!("{s}.0")
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Civil date (year, month 1-12, day 1-31) of a count of days since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A subset of C `strftime` for a UTC Unix time: %Y %y %m %d %e %B %b %A %a %H %I %M %S
/// %p %j %%; other directives are copied through unchanged.
pub fn format_utc(format: &str, unix_secs: u64) -> String {
    let secs = i64::try_from(unix_secs).unwrap_or(i64::MAX);
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss) = (tod / 3600, tod / 60 % 60, tod % 60);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let (y0, _, _) = civil_from_days(days);
    let jan1 = days_from_civil(y0);
    let month = MONTHS[(m as usize).saturating_sub(1) % 12];
    let day_name = DAYS[weekday];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y.rem_euclid(100))),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('e') => out.push_str(&format!("{d:>2}")),
            Some('B') => out.push_str(month),
            Some('b') => out.push_str(&month[..3]),
            Some('A') => out.push_str(day_name),
            Some('a') => out.push_str(&day_name[..3]),
            Some('H') => out.push_str(&format!("{hh:02}")),
            Some('I') => out.push_str(&format!("{:02}", (hh + 11) % 12 + 1)),
            Some('M') => out.push_str(&format!("{mm:02}")),
            Some('S') => out.push_str(&format!("{ss:02}")),
            Some('p') => out.push_str(if hh < 12 { "AM" } else { "PM" }),
            Some('j') => out.push_str(&format!("{:03}", days - jan1 + 1)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Days since 1970-01-01 of January 1st of `year`.
fn days_from_civil(year: i64) -> i64 {
    let y = year - 1; // March-based year containing Jan 1
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let doy = 306; // Jan 1 is day 306 of the March-based year
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}
