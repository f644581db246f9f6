//! Typed reads from toml's spanned document tree. Every problem is recorded with its
//! byte span and reading goes on, so one `check` run lists all mistakes at once.
//! Turning spans into `file:line:column` is left to `config.rs`.

use std::cell::RefCell;
use std::ops::Range;
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::expand::expand;
use super::units::{parse_duration, parse_size};

/// Problems found so far, each at a byte span of the source.
#[derive(Default)]
pub struct Sink {
    items: RefCell<Vec<(Range<usize>, String)>>,
}

impl Sink {
    pub fn push(&self, span: Range<usize>, message: String) {
        self.items.borrow_mut().push((span, message));
    }

    pub fn is_empty(&self) -> bool {
        self.items.borrow().is_empty()
    }

    pub fn into_items(self) -> Vec<(Range<usize>, String)> {
        self.items.into_inner()
    }
}

/// The keys of a sub-table, so a key written one level too high can be pointed there.
pub type Section = (&'static str, &'static [&'static str]);

/// Reads one TOML table; remembers which keys were asked for so `finish` can report
/// the rest as unknown.
pub struct TableReader<'t, 'i> {
    table: &'t DeTable<'i>,
    span: Range<usize>,
    sink: &'t Sink,
    env: &'t dyn Fn(&str) -> Option<String>,
    /// `upstream "orders": ` — said before every message about this table.
    context: String,
    /// `sleeper.` — the key path of this table below the context.
    prefix: String,
    known: Vec<&'static str>,
}

impl<'t, 'i> TableReader<'t, 'i> {
    pub fn new(
        table: &'t Spanned<DeTable<'i>>,
        sink: &'t Sink,
        env: &'t dyn Fn(&str) -> Option<String>,
    ) -> Self {
        TableReader {
            table: table.get_ref(),
            span: table.span(),
            sink,
            env,
            context: String::new(),
            prefix: String::new(),
            known: Vec::new(),
        }
    }

    /// Says `context` before every later message about this table.
    pub fn set_context(&mut self, context: String) {
        self.context = context;
    }

    pub fn span(&self) -> Range<usize> {
        self.span.clone()
    }

    /// `upstream "orders": sleeper.max_interval` — how messages name a key.
    pub fn describe(&self, key: &str) -> String {
        format!("{}{}{key}", self.context, self.prefix)
    }

    /// Records a problem about `key` at `span`: `<key> <message>`.
    pub fn error(&self, span: Range<usize>, key: &str, message: impl std::fmt::Display) {
        self.sink
            .push(span, format!("{} {message}", self.describe(key)));
    }

    /// Records a value that did not parse: `<key>: <why>`.
    pub fn invalid(&self, span: Range<usize>, key: &str, why: impl std::fmt::Display) {
        self.sink
            .push(span, format!("{}: {why}", self.describe(key)));
    }

    /// Whether the table has `key` at all (valid or not).
    pub fn has(&self, key: &str) -> bool {
        self.table.get(key).is_some()
    }

    fn raw(&mut self, key: &'static str) -> Option<&'t Spanned<DeValue<'i>>> {
        self.known.push(key);
        self.table.get(key)
    }

    fn wrong_type(&self, key: &str, value: &Spanned<DeValue<'_>>, want: &str) {
        self.error(
            value.span(),
            key,
            format_args!("must be {want}, got {}", describe_value(value.get_ref())),
        );
    }

    /// A string, with `${VAR}` expanded.
    pub fn string(&mut self, key: &'static str) -> Option<Spanned<String>> {
        let value = self.raw(key)?;
        self.string_value(key, value, "a string")
    }

    fn string_value(
        &self,
        key: &str,
        value: &Spanned<DeValue<'_>>,
        want: &str,
    ) -> Option<Spanned<String>> {
        let DeValue::String(s) = value.get_ref() else {
            self.wrong_type(key, value, want);
            return None;
        };
        match expand(s, self.env) {
            Ok(text) => Some(Spanned::new(value.span(), text)),
            Err(e) => {
                self.invalid(value.span(), key, e);
                None
            }
        }
    }

    /// A string turned into `T` by `parse`, whose error says what form was expected.
    pub fn parsed<T>(
        &mut self,
        key: &'static str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<Spanned<T>> {
        let value = self.raw(key)?;
        self.parse_value(key, value, "a string", parse)
    }

    fn parse_value<T>(
        &self,
        key: &str,
        value: &Spanned<DeValue<'_>>,
        want: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<Spanned<T>> {
        let text = self.string_value(key, value, want)?;
        match parse(text.get_ref()) {
            Ok(v) => Some(Spanned::new(text.span(), v)),
            Err(e) => {
                self.invalid(text.span(), key, e);
                None
            }
        }
    }

    pub fn duration(&mut self, key: &'static str) -> Option<Spanned<Duration>> {
        let value = self.raw(key)?;
        self.parse_value(
            key,
            value,
            "a duration string like \"500ms\" or \"15m\"",
            parse_duration,
        )
    }

    /// A byte size: an integer count or a string like `"1MiB"`.
    pub fn size(&mut self, key: &'static str) -> Option<Spanned<u64>> {
        let value = self.raw(key)?;
        match value.get_ref() {
            DeValue::Integer(_) => self.unsigned_value(key, value),
            _ => self.parse_value(
                key,
                value,
                "a size like \"1MiB\" or a byte count",
                parse_size,
            ),
        }
    }

    /// A number; integers are accepted where a float is expected.
    pub fn float(&mut self, key: &'static str) -> Option<Spanned<f64>> {
        let value = self.raw(key)?;
        let number = match value.get_ref() {
            DeValue::Float(f) => f.as_str().parse::<f64>().ok(),
            DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
                .ok()
                .map(|i| i as f64),
            _ => None,
        };
        match number {
            Some(n) if n.is_finite() => Some(Spanned::new(value.span(), n)),
            _ => {
                self.wrong_type(key, value, "a number");
                None
            }
        }
    }

    pub fn unsigned(&mut self, key: &'static str) -> Option<Spanned<u64>> {
        let value = self.raw(key)?;
        self.unsigned_value(key, value)
    }

    fn unsigned_value(&self, key: &str, value: &Spanned<DeValue<'_>>) -> Option<Spanned<u64>> {
        match value.get_ref() {
            DeValue::Integer(i) => match u64::from_str_radix(i.as_str(), i.radix()) {
                Ok(n) => Some(Spanned::new(value.span(), n)),
                Err(_) => {
                    self.wrong_type(key, value, "a whole number of at least 0");
                    None
                }
            },
            _ => {
                self.wrong_type(key, value, "a whole number");
                None
            }
        }
    }

    /// A whole number, or a string turned into `T` by `words` (`"off"`, `"learn"`);
    /// `number` turns the number into `T` or says why it cannot.
    pub fn number_or_words<T>(
        &mut self,
        key: &'static str,
        number: impl FnOnce(u64) -> Result<T, String>,
        words: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<Spanned<T>> {
        let value = self.raw(key)?;
        if let DeValue::Integer(_) = value.get_ref() {
            let n = self.unsigned_value(key, value)?;
            return match number(*n.get_ref()) {
                Ok(v) => Some(Spanned::new(n.span(), v)),
                Err(e) => {
                    self.invalid(n.span(), key, e);
                    None
                }
            };
        }
        self.parse_value(key, value, "a whole number or a string", words)
    }

    pub fn boolean(&mut self, key: &'static str) -> Option<Spanned<bool>> {
        let value = self.raw(key)?;
        match value.get_ref() {
            DeValue::Boolean(b) => Some(Spanned::new(value.span(), *b)),
            _ => {
                self.wrong_type(key, value, "true or false");
                None
            }
        }
    }

    /// One of `choices`, with a did-you-mean when the string is close to one.
    pub fn choice(
        &mut self,
        key: &'static str,
        choices: &[&'static str],
    ) -> Option<Spanned<usize>> {
        let text = self.string(key)?;
        if let Some(i) = choices.iter().position(|c| c == text.get_ref()) {
            return Some(Spanned::new(text.span(), i));
        }
        let list = choices.join(" | ");
        let hint = did_you_mean("", &suggest(text.get_ref(), choices.iter().copied()));
        self.error(
            text.span(),
            key,
            format_args!("must be one of {list}, got \"{}\"{hint}", text.get_ref()),
        );
        None
    }

    /// An array of whole numbers.
    pub fn unsigned_array(&mut self, key: &'static str) -> Option<Spanned<Vec<Spanned<u64>>>> {
        let value = self.raw(key)?;
        let DeValue::Array(items) = value.get_ref() else {
            self.wrong_type(key, value, "an array of whole numbers");
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        for item in items.iter() {
            out.push(self.unsigned_value(key, item)?);
        }
        Some(Spanned::new(value.span(), out))
    }

    /// An array of strings, or one string standing for an array of one.
    pub fn string_array(&mut self, key: &'static str) -> Option<Vec<Spanned<String>>> {
        let value = self.raw(key)?;
        self.strings_of(key, value)
    }

    fn strings_of(&self, key: &str, value: &Spanned<DeValue<'_>>) -> Option<Vec<Spanned<String>>> {
        let items: Vec<&Spanned<DeValue<'_>>> = match value.get_ref() {
            DeValue::Array(items) => items.iter().collect(),
            DeValue::String(_) => vec![value],
            _ => {
                self.wrong_type(key, value, "an array of strings");
                return None;
            }
        };
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            match item.get_ref() {
                DeValue::String(s) => match expand(s, self.env) {
                    Ok(text) => out.push(Spanned::new(item.span(), text)),
                    Err(e) => self.invalid(item.span(), key, e),
                },
                _ => self.wrong_type(key, item, "a string"),
            }
        }
        Some(out)
    }

    /// A table whose keys are free-form names and whose values are strings or arrays of
    /// strings (`headers = { "x-throttled" = ["true"] }`).
    pub fn string_lists(
        &mut self,
        key: &'static str,
    ) -> Vec<(Spanned<String>, Vec<Spanned<String>>)> {
        let Some(value) = self.raw(key) else {
            return Vec::new();
        };
        let DeValue::Table(table) = value.get_ref() else {
            self.wrong_type(key, value, "a table of name = [\"substring\", ...]");
            return Vec::new();
        };
        let mut out = Vec::new();
        for (name, v) in table.iter() {
            let entry = format!("{key}.{}", name.get_ref());
            if let Some(list) = self.strings_of(&entry, v) {
                out.push((Spanned::new(name.span(), name.get_ref().to_string()), list));
            }
        }
        out
    }

    /// A table whose keys are free-form names and whose values are whole numbers
    /// (`weights = { batch = 3 }`).
    pub fn name_numbers(&mut self, key: &'static str) -> Vec<(Spanned<String>, Spanned<u64>)> {
        let Some(value) = self.raw(key) else {
            return Vec::new();
        };
        let DeValue::Table(table) = value.get_ref() else {
            self.wrong_type(key, value, "a table of name = whole number");
            return Vec::new();
        };
        let mut out = Vec::new();
        for (name, v) in table.iter() {
            let entry = format!("{key}.{}", name.get_ref());
            if let Some(n) = self.unsigned_value(&entry, v) {
                out.push((Spanned::new(name.span(), name.get_ref().to_string()), n));
            }
        }
        out
    }

    /// A sub-table (`[upstream.sleeper]`), read with the same context.
    pub fn table(&mut self, key: &'static str) -> Option<TableReader<'t, 'i>> {
        let value = self.raw(key)?;
        match value.get_ref() {
            DeValue::Table(table) => Some(TableReader {
                table,
                span: value.span(),
                sink: self.sink,
                env: self.env,
                context: self.context.clone(),
                prefix: format!("{}{key}.", self.prefix),
                known: Vec::new(),
            }),
            _ => {
                self.wrong_type(key, value, "a table");
                None
            }
        }
    }

    /// An array of tables (`[[upstream]]`).
    pub fn tables(&mut self, key: &'static str) -> Vec<TableReader<'t, 'i>> {
        let Some(value) = self.raw(key) else {
            return Vec::new();
        };
        let DeValue::Array(items) = value.get_ref() else {
            self.wrong_type(key, value, "an array of tables ([[upstream]])");
            return Vec::new();
        };
        let mut out = Vec::new();
        for item in items.iter() {
            match item.get_ref() {
                DeValue::Table(table) => out.push(TableReader {
                    table,
                    span: item.span(),
                    sink: self.sink,
                    env: self.env,
                    context: self.context.clone(),
                    prefix: String::new(),
                    known: Vec::new(),
                }),
                _ => self.wrong_type(key, item, "a table"),
            }
        }
        out
    }

    /// Reports every key nobody asked for, with a did-you-mean among the known keys,
    /// or the section it belongs in when it is a key of one of `sections`.
    pub fn finish(self, sections: &[Section]) {
        for (key, _) in self.table.iter() {
            let name: &str = key.get_ref();
            if self.known.contains(&name) {
                continue;
            }
            let suggestions = suggest(name, self.known.iter().copied());
            let hint = if !suggestions.is_empty() {
                did_you_mean(&self.prefix, &suggestions)
            } else if let Some((section, _)) =
                sections.iter().find(|(_, keys)| keys.contains(&name))
            {
                format!(" (it belongs in the {section} table)")
            } else {
                String::new()
            };
            self.sink.push(
                key.span(),
                format!(
                    "{}unknown key \"{}{name}\"{hint}",
                    self.context, self.prefix
                ),
            );
        }
    }
}

/// Likely meant instead of `word`: the closest candidate if it is a plausible typo,
/// else the candidates that contain `word` as a `_`-separated part (`timeout` →
/// `connect_timeout`, `request_timeout`).
pub fn suggest<'a>(word: &str, candidates: impl Iterator<Item = &'a str> + Clone) -> Vec<&'a str> {
    let typo = candidates
        .clone()
        .map(|c| (strsim::damerau_levenshtein(word, c), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 4) && *d < c.len())
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c);
    if let Some(c) = typo {
        return vec![c];
    }
    let mut parts: Vec<&str> = candidates
        .filter(|c| c.split('_').any(|p| p == word))
        .collect();
    parts.sort_unstable();
    parts.dedup();
    parts
}

/// ` (did you mean "a" or "b"?)`, or nothing without suggestions.
fn did_you_mean(prefix: &str, suggestions: &[&str]) -> String {
    let quoted: Vec<String> = suggestions
        .iter()
        .map(|s| format!("\"{prefix}{s}\""))
        .collect();
    match quoted.as_slice() {
        [] => String::new(),
        [one] => format!(" (did you mean {one}?)"),
        [init @ .., last] => format!(" (did you mean {} or {last}?)", init.join(", ")),
    }
}

fn describe_value(value: &DeValue<'_>) -> String {
    match value {
        DeValue::String(s) => format!("string \"{s}\""),
        DeValue::Integer(i) => format!("integer {i}"),
        DeValue::Float(f) => format!("float {}", f.as_str()),
        DeValue::Boolean(b) => format!("boolean {b}"),
        DeValue::Datetime(d) => format!("datetime {d}"),
        DeValue::Array(_) => "an array".into(),
        DeValue::Table(_) => "a table".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_catch_typos_but_not_unrelated_words() {
        let keys = ["max_interval", "min_interval", "initial_interval"];
        assert_eq!(
            suggest("max_intrval", keys.iter().copied()),
            ["max_interval"]
        );
        assert_eq!(
            suggest("initial_intreval", keys.iter().copied()),
            ["initial_interval"]
        );
        assert!(suggest("colour", keys.iter().copied()).is_empty());
    }

    #[test]
    fn a_word_that_is_part_of_keys_suggests_them_all() {
        let keys = ["connect_timeout", "request_timeout", "url"];
        let found = suggest("timeout", keys.iter().copied());
        assert_eq!(found, ["connect_timeout", "request_timeout"]);
        assert_eq!(
            did_you_mean("", &found),
            " (did you mean \"connect_timeout\" or \"request_timeout\"?)"
        );
    }
}
