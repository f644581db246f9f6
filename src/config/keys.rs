//! Key descriptors: what a section's key is called, how its value is read, checked
//! against its range and printed back, and how its default is kept. The schema
//! (`schema.rs`) lists one descriptor per key with [`keys!`]; reading (`sections.rs`)
//! and the effective config (`effective.rs`) only walk those lists.

use std::fmt::Display;
use std::ops::Range;
use std::time::Duration;

use toml::Spanned;

use super::reader::{Section, TableReader};
use super::units::{format_duration, format_size};

/// How one key's value is read, checked and printed; `T` is its field's type.
pub trait Kind<T> {
    /// Reads and checks `key`, recording every problem with the reader; `None` when the
    /// key is absent or unusable.
    fn read(&self, t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Spanned<T>>;
    /// The value as TOML, or `None` to leave the key out of the printout.
    fn show(&self, value: &T) -> Option<String>;
}

/// One key of a section `S`, as [`keys!`] builds it.
pub struct Key<S> {
    /// The key as written in the file (and the field's name).
    pub name: &'static str,
    /// Reads the key into its field; the value's span when the file set it.
    pub read: fn(&mut TableReader<'_, '_>, &mut S) -> Option<Range<usize>>,
    /// The field as TOML, `None` to leave it out.
    pub show: fn(&S) -> Option<String>,
    /// Copies the field from a section's defaults.
    pub keep: fn(&mut S, &S),
}

/// Every key of one section, in the order `check` prints them.
pub struct Schema<S: 'static> {
    /// The table header, e.g. `[upstream.retry]`.
    pub header: &'static str,
    /// The key names, for unknown-key hints in other tables.
    pub names: &'static [&'static str],
    /// The descriptors.
    pub keys: &'static [Key<S>],
}

impl<S> Schema<S> {
    /// The header and names, as `TableReader::finish` takes them.
    pub const fn section(&self) -> Section {
        (self.header, self.names)
    }
}

/// Builds a [`Schema`] for the struct `S`, one `field: kind` line per key; `field` is
/// also the key's name. Fields listed after `tables:` are not keys (sub-tables, or
/// read before the rest). Every field of `S` must appear, so a field cannot be added
/// without saying how it is read.
macro_rules! keys {
    ($header:literal, $S:path { $($field:ident: $kind:expr),* $(,)? } $(tables: $($table:ident),*)?) => {{
        // Never called: fails to compile when a field of `S` has no line here.
        let _ = |s: &$S| {
            let $S { $($field: _,)* $($($table: _,)*)? } = s;
        };
        $crate::config::keys::Schema {
            header: $header,
            names: &[$(stringify!($field)),*],
            keys: &[$($crate::config::keys::Key {
                name: stringify!($field),
                read: |t, s: &mut $S| {
                    let v = $crate::config::keys::Kind::read(&$kind, t, stringify!($field))?;
                    let span = v.span();
                    s.$field = v.into_inner();
                    Some(span)
                },
                show: |s: &$S| $crate::config::keys::Kind::show(&$kind, &s.$field),
                keep: |s: &mut $S, d| s.$field = d.$field.clone(),
            }),*],
        }
    }};
}
pub(crate) use keys;

/// The keys a section's file table set, with their spans; what cross-field checks
/// point at.
pub struct Set {
    spans: Vec<(&'static str, Range<usize>)>,
    table: Range<usize>,
}

impl Set {
    /// Whether the file set `key` to a usable value.
    pub fn has(&self, key: &str) -> bool {
        self.spans.iter().any(|(k, _)| *k == key)
    }

    /// Where `key` was set, else the table itself.
    pub fn span(&self, key: &str) -> Range<usize> {
        self.spans
            .iter()
            .find(|(k, _)| *k == key)
            .map_or_else(|| self.table.clone(), |(_, s)| s.clone())
    }
}

/// Reads every key of `schema` from `t` into `into`.
pub fn read_keys<S>(t: &mut TableReader<'_, '_>, schema: &Schema<S>, into: &mut S) -> Set {
    let mut spans = Vec::new();
    for key in schema.keys {
        if let Some(span) = (key.read)(t, into) {
            spans.push((key.name, span));
        }
    }
    Set {
        spans,
        table: t.span(),
    }
}

/// Gives every key the file did not set its value from `defaults`.
pub fn keep_unset<S>(schema: &Schema<S>, into: &mut S, defaults: &S, set: &Set) {
    for key in schema.keys.iter().filter(|k| !set.has(k.name)) {
        (key.keep)(into, defaults);
    }
}

/// A value whose reading and printing follow from its type alone.
pub trait Value: Sized {
    /// Reads the value of `key`.
    fn read(t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Spanned<Self>>;
    /// The value as TOML.
    fn show(&self) -> String;
}

/// A key read and printed by its type's [`Value`], with no range.
pub struct Plain;

impl<T: Value> Kind<T> for Plain {
    fn read(&self, t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Spanned<T>> {
        T::read(t, key)
    }

    fn show(&self, value: &T) -> Option<String> {
        Some(value.show())
    }
}

impl Value for bool {
    fn read(t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Spanned<Self>> {
        t.boolean(key)
    }

    fn show(&self) -> String {
        self.to_string()
    }
}

impl Value for String {
    fn read(t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Spanned<Self>> {
        t.string(key)
    }

    fn show(&self) -> String {
        quote(self)
    }
}

/// An enum the file names by one of a fixed set of words.
pub trait Choice: Copy + 'static {
    /// Every variant, in the order the error message lists them.
    fn all() -> impl Iterator<Item = Self> + Clone;
    /// The word the file uses for this variant.
    fn word(self) -> &'static str;
}

impl<T: Choice> Value for T {
    fn read(t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Spanned<Self>> {
        let words: Vec<&'static str> = T::all().map(T::word).collect();
        let i = t.choice(key, &words)?;
        let span = i.span();
        T::all().nth(i.into_inner()).map(|v| Spanned::new(span, v))
    }

    fn show(&self) -> String {
        quote(self.word())
    }
}

/// Non-empty text.
pub struct NonEmpty;

impl Kind<String> for NonEmpty {
    fn read(&self, t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Spanned<String>> {
        let v = t.string(key)?;
        if v.get_ref().is_empty() {
            t.error(v.span(), key, "must not be empty");
            return None;
        }
        Some(v)
    }

    fn show(&self, value: &String) -> Option<String> {
        Some(quote(value))
    }
}

/// A key that must be present; `.1` is said after "is missing".
pub struct Required<K>(pub K, pub &'static str);

impl<T, K: Kind<T>> Kind<T> for Required<K> {
    fn read(&self, t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Spanned<T>> {
        let value = self.0.read(t, key);
        if value.is_none() && !t.has(key) {
            let at = t.span().start;
            t.error(at..at, key, format_args!("is missing{}", self.1));
        }
        value
    }

    fn show(&self, value: &T) -> Option<String> {
        self.0.show(value)
    }
}

/// A string parsed by a function whose error says what form was expected.
pub struct Parsed<T: 'static>(pub fn(&str) -> Result<T, String>);

impl<T: Display> Kind<T> for Parsed<T> {
    fn read(&self, t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Spanned<T>> {
        t.parsed(key, self.0)
    }

    fn show(&self, value: &T) -> Option<String> {
        Some(quote(&value.to_string()))
    }
}

/// The range a number must lie in, ends included unless marked open.
#[derive(Clone, Copy)]
pub struct Bounds<T> {
    low: T,
    high: T,
    low_open: bool,
    high_open: bool,
    /// The whole range in words (`"in (0, 1]"`) when that reads better than the bound
    /// that was crossed.
    says: Option<&'static str>,
}

impl<T: Copy> Bounds<T> {
    /// From `low` to `high`, both included.
    pub const fn new(low: T, high: T) -> Self {
        Bounds {
            low,
            high,
            low_open: false,
            high_open: false,
            says: None,
        }
    }

    /// Leaves `low` itself out.
    pub const fn open_low(self) -> Self {
        Bounds {
            low_open: true,
            ..self
        }
    }

    /// Leaves `high` itself out.
    pub const fn open_high(self) -> Self {
        Bounds {
            high_open: true,
            ..self
        }
    }

    /// Errors say "must be `says`, got …" instead of naming the crossed bound.
    pub const fn says(self, says: &'static str) -> Self {
        Bounds {
            says: Some(says),
            ..self
        }
    }
}

impl<T: PartialOrd + Copy> Bounds<T> {
    /// Why `v` is out of range, or `None` when it is in.
    fn check(&self, v: T, show: impl Fn(T) -> String) -> Option<String> {
        let too_low = v < self.low || (self.low_open && v == self.low);
        let too_high = v > self.high || (self.high_open && v == self.high);
        if let Some(says) = self.says.filter(|_| too_low || too_high) {
            return Some(format!("must be {says}"));
        }
        match (too_low, too_high) {
            (true, _) if self.low_open => Some(format!("must be greater than {}", show(self.low))),
            (true, _) => Some(format!("must be at least {}", show(self.low))),
            (_, true) if self.high_open => Some(format!("must be below {}", show(self.high))),
            (_, true) => Some(format!("must be at most {}", show(self.high))),
            _ => None,
        }
    }
}

impl Kind<Duration> for Bounds<Duration> {
    fn read(&self, t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Spanned<Duration>> {
        let v = t.duration(key)?;
        self.within(t, key, v)
    }

    fn show(&self, value: &Duration) -> Option<String> {
        Some(quote(&format_duration(*value)))
    }
}

impl Bounds<Duration> {
    /// Reports `v` when out of range.
    pub fn within(
        &self,
        t: &TableReader<'_, '_>,
        key: &str,
        v: Spanned<Duration>,
    ) -> Option<Spanned<Duration>> {
        let d = *v.get_ref();
        match self.check(d, show_duration) {
            None => Some(v),
            // Below the range the value is 0 or tiny, which the message makes plain;
            // above it, it may be written in another unit than the limit.
            Some(why) if d > self.high => {
                t.error(
                    v.span(),
                    key,
                    format_args!("{why}, got {}", format_duration(d)),
                );
                None
            }
            Some(why) => {
                t.error(v.span(), key, why);
                None
            }
        }
    }
}

impl Kind<f64> for Bounds<f64> {
    fn read(&self, t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Spanned<f64>> {
        let v = t.float(key)?;
        match self.check(*v.get_ref(), |x| x.to_string()) {
            None => Some(v),
            Some(why) => {
                t.error(
                    v.span(),
                    key,
                    format_args!("{why}, got {}", number(*v.get_ref())),
                );
                None
            }
        }
    }

    fn show(&self, value: &f64) -> Option<String> {
        Some(float(*value))
    }
}

/// A whole number within bounds, stored as `T`; the bounds must fit `T`.
impl<T: TryFrom<u64> + Display> Kind<T> for Bounds<u64> {
    fn read(&self, t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Spanned<T>> {
        let v = t.unsigned(key)?;
        self.whole(t, key, v, |n| n.to_string())
    }

    fn show(&self, value: &T) -> Option<String> {
        Some(value.to_string())
    }
}

impl Bounds<u64> {
    /// `v` as a `T` when it is in range; `show` prints numbers in messages.
    fn whole<T: TryFrom<u64>>(
        &self,
        t: &TableReader<'_, '_>,
        key: &str,
        v: Spanned<u64>,
        show: fn(u64) -> String,
    ) -> Option<Spanned<T>> {
        let n = *v.get_ref();
        let why = self
            .check(n, show)
            .or_else(|| T::try_from(n).is_err().then(|| "is too large".to_string()));
        match why {
            None => T::try_from(n).ok().map(|n| Spanned::new(v.span(), n)),
            Some(why) => {
                t.error(v.span(), key, format_args!("{why}, got {}", show(n)));
                None
            }
        }
    }
}

/// A byte size: a count or a string like `"1MiB"`.
pub struct Size(pub Bounds<u64>);

impl Kind<u64> for Size {
    fn read(&self, t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Spanned<u64>> {
        let v = t.size(key)?;
        self.0.whole(t, key, v, format_size)
    }

    fn show(&self, value: &u64) -> Option<String> {
        Some(quote(&format_size(*value)))
    }
}

/// A duration as an error message shows it; zero as the plain `0` the file may use.
fn show_duration(d: Duration) -> String {
    if d.is_zero() {
        "0".into()
    } else {
        format_duration(d)
    }
}

/// A float as an error message shows it: `1.2`, `1e30`.
fn number(x: f64) -> String {
    if x.abs() >= 1e15 {
        format!("{x:e}")
    } else {
        x.to_string()
    }
}

/// A float that TOML reads back as a float (`1.0`, not `1`).
pub fn float(value: f64) -> String {
    let text = value.to_string();
    if text.contains(['.', 'e', 'E']) {
        text
    } else {
        format!("{text}.0")
    }
}

/// A TOML array of strings.
pub fn strings(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| quote(v)).collect();
    format!("[{}]", quoted.join(", "))
}

/// A TOML basic string; `$` is doubled so `${...}` is not expanded again on reload.
pub fn quote(value: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '$' => out.push_str("$$"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
