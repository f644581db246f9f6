//! The IETF fields: `RateLimit` and `RateLimit-Policy` as draft -11 writes them
//! (structured fields: `"default";r=50;t=30` and `"default";q=100;w=60`), the earlier
//! drafts' dictionary (`limit=100, remaining=7, reset=20`, Honeycomb) and the separate
//! `RateLimit-Limit`/`-Remaining`/`-Reset` (envoyproxy/ratelimit; Envoy Gateway writes
//! the limit as `3, 3;w=3600`). Structured fields are parsed with `sfv`; a field that
//! is not valid structured text is ignored, as the draft says.

use std::time::{Duration, SystemTime};

use http::HeaderMap;
use sfv::{BareItem, Dictionary, List, ListEntry, Parameters, Parser};

use super::values::{self, text};
use super::{Quota, Reading};

/// Reads the IETF fields into `reading`.
pub fn read(headers: &HeaderMap, now: SystemTime, reading: &mut Reading) {
    let quota = match text(headers, "ratelimit") {
        Some(field) => structured(field, text(headers, "ratelimit-policy")),
        None => separate(headers, now),
    };
    if reading.requests.is_none() {
        reading.requests = quota;
    }
}

/// The tightest policy of a `RateLimit` field: draft -11's list, else the earlier
/// drafts' dictionary.
fn structured(field: &str, policy: Option<&str>) -> Option<Quota> {
    if let Ok(list) = Parser::new(field).parse::<List>() {
        let policies = policy.and_then(|p| Parser::new(p).parse::<List>().ok());
        return list
            .iter()
            .filter_map(|entry| policy_quota(entry, policies.as_deref()))
            .reduce(tighter);
    }
    let dictionary = Parser::new(field).parse::<Dictionary>().ok()?;
    let number = |key: &str| match dictionary.get(key)? {
        ListEntry::Item(item) => non_negative(&item.bare_item),
        ListEntry::InnerList(_) => None,
    };
    Some(Quota {
        remaining: number("remaining")?,
        reset: Duration::from_secs(number("reset")?),
        limit: number("limit"),
        refills: false,
    })
}

/// One named policy's quota: `r` left, reset in `t` seconds (or, without `t`, at
/// most the policy's window `w`), of `q` from the policy field.
fn policy_quota(entry: &ListEntry, policies: Option<&[ListEntry]>) -> Option<Quota> {
    let ListEntry::Item(item) = entry else {
        return None;
    };
    let name = name_of(&item.bare_item)?;
    let policy = policies.and_then(|all| {
        all.iter().find_map(|p| match p {
            ListEntry::Item(p) if name_of(&p.bare_item) == Some(name) => Some(&p.params),
            _ => None,
        })
    });
    let reset = param(&item.params, "t").or_else(|| param(policy?, "w"))?;
    Some(Quota {
        remaining: param(&item.params, "r")?,
        reset: Duration::from_secs(reset),
        limit: policy.and_then(|p| param(p, "q")),
        refills: false,
    })
}

/// A policy name: a string in draft -11, a token in earlier ones.
fn name_of(item: &BareItem) -> Option<&str> {
    match item {
        BareItem::String(s) => Some(s.as_str()),
        BareItem::Token(t) => Some(t.as_str()),
        _ => None,
    }
}

fn param(params: &Parameters, key: &str) -> Option<u64> {
    non_negative(params.get(key)?)
}

fn non_negative(item: &BareItem) -> Option<u64> {
    u64::try_from(i64::from(item.as_integer()?)).ok()
}

/// The tighter of two quotas: the one with less left per second of window
/// (exhausted beats everything), compared crosswise in u128 so that nothing divides
/// or overflows.
fn tighter(a: Quota, b: Quota) -> Quota {
    let window = |q: Quota| q.reset.as_millis().max(1);
    let b_rate = u128::from(b.remaining).saturating_mul(window(a));
    let a_rate = u128::from(a.remaining).saturating_mul(window(b));
    if b_rate < a_rate { b } else { a }
}

/// `RateLimit-Remaining` and `RateLimit-Reset`, with `RateLimit-Limit` when sent.
fn separate(headers: &HeaderMap, now: SystemTime) -> Option<Quota> {
    let limit = text(headers, "ratelimit-limit").and_then(|field| {
        // `3, 3;w=3600`: the first member is the limit in force.
        let list = Parser::new(field).parse::<List>().ok()?;
        match list.first()? {
            ListEntry::Item(item) => non_negative(&item.bare_item),
            ListEntry::InnerList(_) => None,
        }
    });
    Some(Quota {
        remaining: values::count(text(headers, "ratelimit-remaining")?)?,
        reset: values::reset(text(headers, "ratelimit-reset")?, now)?,
        limit,
        refills: false,
    })
}
