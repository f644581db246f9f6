//! The mock's capacity in the DynamoDB style: the shared bucket (`--rate`), a bucket per
//! table and access kind (`--table-rate`) and one per partition key value (`--key-rate`,
//! and for writes `--partition-wcu`), and the verdict on a request that needs tokens from several of them. Pure: time
//! comes in; which tables and key a request names comes from [`crate::route::dynamodb`].

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use super::bucket::Bucket;
use crate::clock::Instant;
use crate::route::dynamodb::{Access, Limit};

/// `--table-rate`: the table's own capacity for reads, writes or both.
#[derive(Clone, Debug, PartialEq)]
pub struct TableRate {
    /// The table's name.
    pub table: String,
    /// `Read` or `Write`; `None` gives reads and writes each a bucket at `rate`.
    pub access: Option<Access>,
    /// Requests per second.
    pub rate: f64,
}

/// Parses `NAME=RATE`, `NAME:read=RATE` or `NAME:write=RATE`.
pub fn parse_table_rate(text: &str) -> Result<TableRate, String> {
    let Some((target, rate)) = text.split_once('=') else {
        return Err(format!(
            "\"{text}\": expected NAME=RATE, NAME:read=RATE or NAME:write=RATE, e.g. \"orders=20\""
        ));
    };
    let (table, access) = match target.split_once(':') {
        None => (target, None),
        Some((table, "read")) => (table, Some(Access::Read)),
        Some((table, "write")) => (table, Some(Access::Write)),
        Some((_, other)) => {
            return Err(format!(
                "\"{text}\": \"{other}\" is not read or write, e.g. \"orders:write=20\""
            ));
        }
    };
    if table.is_empty() {
        return Err(format!("\"{text}\": the table name is empty"));
    }
    let rate = rate
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|r| r.is_finite() && *r > 0.0)
        .ok_or_else(|| format!("\"{text}\": the rate must be a number above 0"))?;
    Ok(TableRate {
        table: table.to_owned(),
        access,
        rate,
    })
}

/// What one request asks of the capacity.
#[derive(Clone, Copy, Debug)]
pub struct Demand<'a> {
    pub access: Access,
    /// The base tables it names, sorted and distinct.
    pub tables: &'a [&'a str],
    /// The partition key hash of a single-item request.
    pub key: Option<u64>,
    /// A batch whose tables are served or left unprocessed each on its own.
    pub partial: bool,
    /// The tokens it takes from each bucket (1, or its capacity units by size).
    pub units: f64,
}

/// One exhausted bucket named in a throttle's `ThrottlingReasons`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exhausted {
    pub table: String,
    pub access: Access,
    pub limit: Limit,
}

/// The answer to a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// Throttled: `wait` until the next token; `reasons` is empty when the shared bucket
    /// alone ran out.
    Throttled {
        wait: Duration,
        reasons: Vec<Exhausted>,
    },
    /// A batch served for some tables; these (base names) were left unprocessed.
    Partial {
        unprocessed: Vec<String>,
    },
}

/// Partition key buckets kept at most; full ones are dropped first (a full bucket is
/// what a new one would be), then all.
pub const MAX_KEYS: usize = 100_000;

/// Where a request takes a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit<'a> {
    Shared,
    Table(&'a str),
    Key(&'a str, u64),
}

/// Every bucket of a mock.
#[derive(Debug)]
pub struct Capacity {
    shared: Bucket,
    /// Per table: the read bucket, the write bucket.
    tables: HashMap<String, [Option<Bucket>; 2]>,
    key_rate: Option<f64>,
    /// DynamoDB's per-partition write limit, units per second of a key's writes.
    partition_wcu: Option<f64>,
    keys: HashMap<u64, Bucket>,
    max_keys: usize,
}

fn slot(access: Access) -> usize {
    usize::from(access == Access::Write)
}

/// A bucket's burst for a rate the flags give without one.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float to integer `as` saturates, as wanted here"
)]
pub fn default_burst(rate: f64) -> u32 {
    ((rate / 10.0).ceil() as u32).max(1)
}

impl Capacity {
    /// Full buckets: `shared` for requests no table rate covers, plus `tables` and
    /// `key_rate`; a later `tables` entry for the same table and access wins.
    pub fn new(
        shared: Bucket,
        tables: &[TableRate],
        key_rate: Option<f64>,
        now: Instant,
    ) -> Capacity {
        let mut buckets: HashMap<String, [Option<Bucket>; 2]> = HashMap::new();
        for t in tables {
            let entry = buckets.entry(t.table.clone()).or_default();
            let accesses = match t.access {
                Some(access) => vec![access],
                None => vec![Access::Read, Access::Write],
            };
            for access in accesses {
                entry[slot(access)] = Some(Bucket::new(t.rate, default_burst(t.rate), None, now));
            }
        }
        Capacity {
            shared,
            tables: buckets,
            key_rate,
            partition_wcu: None,
            keys: HashMap::new(),
            max_keys: MAX_KEYS,
        }
    }

    /// Makes the shared and the tables' buckets hold `seconds` of their rate, full
    /// (DynamoDB's burst capacity); partition keys' buckets keep theirs.
    pub fn set_burst_seconds(&mut self, seconds: f64) {
        self.shared.set_burst_seconds(seconds);
        for bucket in self.tables.values_mut().flatten().flatten() {
            bucket.set_burst_seconds(seconds);
        }
    }

    /// Caps each partition key value's writes at `wcu` units a second, below
    /// `key_rate` if that is higher.
    pub fn set_partition_wcu(&mut self, wcu: Option<f64>) {
        self.partition_wcu = wcu;
    }

    /// The rate of a partition key's bucket for `access`, if keys have buckets.
    fn key_rate(&self, access: Access) -> Option<f64> {
        let cap = self.partition_wcu.filter(|_| access == Access::Write);
        match (self.key_rate, cap) {
            (Some(rate), Some(cap)) => Some(rate.min(cap)),
            (rate, cap) => rate.or(cap),
        }
    }

    /// The shared bucket.
    pub fn shared(&mut self) -> &mut Bucket {
        &mut self.shared
    }

    /// Takes the tokens `demand` needs, all or none per group: one group of every
    /// table, or for a partial batch one group per table.
    pub fn decide(&mut self, demand: &Demand<'_>, now: Instant) -> Verdict {
        if demand.tables.is_empty() || demand.access == Access::Control {
            return match self.shared.take_units(now, demand.units) {
                Ok(()) => Verdict::Ok,
                Err(wait) => Verdict::Throttled {
                    wait,
                    reasons: Vec::new(),
                },
            };
        }
        let groups: Vec<&[&str]> = if demand.partial {
            demand.tables.chunks(1).collect()
        } else {
            vec![demand.tables]
        };
        let (mut wait, mut reasons, mut unprocessed) = (Duration::ZERO, Vec::new(), Vec::new());
        for group in &groups {
            let mut units = Vec::new();
            for table in group.iter() {
                for unit in self.units(table, demand.access, demand.key) {
                    if !units.contains(&unit) {
                        units.push(unit);
                    }
                }
            }
            let short: Vec<Unit<'_>> = units
                .iter()
                .copied()
                .filter(|&unit| {
                    !self
                        .bucket(unit, demand.access, now)
                        .has_units(now, demand.units)
                })
                .collect();
            if short.is_empty() {
                for &unit in &units {
                    let _ = self
                        .bucket(unit, demand.access, now)
                        .take_units(now, demand.units);
                }
                continue;
            }
            for unit in short {
                if let Err(w) = self
                    .bucket(unit, demand.access, now)
                    .take_units(now, demand.units)
                {
                    wait = wait.max(w);
                }
                let (table, limit) = match unit {
                    Unit::Shared => continue,
                    Unit::Table(table) => (table, Limit::ProvisionedThroughputExceeded),
                    Unit::Key(table, _) => (table, Limit::KeyRangeThroughputExceeded),
                };
                reasons.push(Exhausted {
                    table: table.to_owned(),
                    access: demand.access,
                    limit,
                });
            }
            unprocessed.extend(group.iter().map(|t| (*t).to_owned()));
        }
        if unprocessed.is_empty() {
            Verdict::Ok
        } else if unprocessed.len() == demand.tables.len() {
            Verdict::Throttled { wait, reasons }
        } else {
            Verdict::Partial { unprocessed }
        }
    }

    fn units<'a>(&self, table: &'a str, access: Access, key: Option<u64>) -> Vec<Unit<'a>> {
        let own = self
            .tables
            .get(table)
            .is_some_and(|buckets| buckets[slot(access)].is_some());
        let mut units = vec![if own {
            Unit::Table(table)
        } else {
            Unit::Shared
        }];
        if let (Some(_), Some(key)) = (self.key_rate(access), key) {
            let mut h = DefaultHasher::new();
            (table, slot(access), key).hash(&mut h);
            units.push(Unit::Key(table, h.finish()));
        }
        units
    }

    fn bucket(&mut self, unit: Unit<'_>, access: Access, now: Instant) -> &mut Bucket {
        let key_rate = self.key_rate(access);
        let Capacity {
            shared,
            tables,
            keys,
            max_keys,
            ..
        } = self;
        match unit {
            Unit::Shared => shared,
            Unit::Table(table) => match tables
                .get_mut(table)
                .and_then(|buckets| buckets[slot(access)].as_mut())
            {
                Some(bucket) => bucket,
                None => shared,
            },
            Unit::Key(_, id) => {
                let rate = key_rate.unwrap_or(1.0);
                if keys.len() >= *max_keys && !keys.contains_key(&id) {
                    keys.retain(|_, bucket| !bucket.is_full(now));
                    if keys.len() >= *max_keys {
                        keys.clear();
                    }
                }
                keys.entry(id)
                    .or_insert_with(|| Bucket::new(rate, default_burst(rate), None, now))
            }
        }
    }
}

#[cfg(test)]
mod tests;
