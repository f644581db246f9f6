//! The fleet's Redis side: one Lua script that merges a member's report for one lane
//! into the lane's hash and answers with the lane's state and the other members'
//! demands, and the pipelined round trip that runs it for every lane of a member.
//!
//! A lane is one hash, `easeoff:<group>:<upstream>:<lane>:state`: field `i` the fleet
//! interval in microseconds, `e` the epoch, and `m:<member>` = `<last seen ms> <demand> <used> <fingerprint>`
//! per member (`demand::entry`), the time by Redis's clock (`TIME`), so the members' clocks need not
//! agree. A member counts only while it was seen within the reader's `member_ttl`
//! (`learning::live`); the script deletes the others' entries as it finds them and
//! renews the key's TTL, so a lane nobody syncs disappears and nothing grows without
//! bound. The merge rule and the liveness rule are `learning.rs`'s, written again in Lua
//! (the simulator runs the Rust ones): a change to either goes into both, and a test
//! in `memory.rs` feeds both the same reports and compares their answers.

use std::path::Path;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisResult, Script, TlsCertificates};

use super::learning::{Proposal, Shared};
use crate::config::RedisUrl;

/// The script: KEYS[1] the lane's hash; ARGV: member, demand, proposed interval (µs,
/// empty for none), epoch, epoch raised from (empty for none), member TTL (ms), key
/// TTL (ms), hold (ms: how long after a raise another counts as the same burst); the
/// hash's `r` is when the last raise landed. Returns the interval and epoch (empty
/// while there is no state), then the other live members' demands.
const SYNC: &str = r"
local key = KEYS[1]
local me = 'm:' .. ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local fields = redis.call('HGETALL', key)
-- The first write may be refused (OOM); once a script has written, Redis lets it
-- write on, so a refusal must come before any other write.
redis.call('HSET', key, me, string.format('%d', now) .. ' ' .. ARGV[2])
local i, e, r = nil, nil, nil
local others = {}
for k = 1, #fields, 2 do
  local f, v = fields[k], fields[k + 1]
  if f == 'i' then
    i = tonumber(v)
  elseif f == 'e' then
    e = tonumber(v)
  elseif f == 'r' then
    r = tonumber(v)
  elseif f ~= me and string.sub(f, 1, 2) == 'm:' then
    local sp = string.find(v, ' ', 1, true)
    if sp == nil or now - tonumber(string.sub(v, 1, sp - 1)) > tonumber(ARGV[6]) then
      redis.call('HDEL', key, f)
    else
      others[#others + 1] = string.sub(v, sp + 1)
    end
  end
end
if ARGV[3] ~= '' then
  local pi, pe, from = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  if i == nil or e == nil then
    i, e = pi, pe
  elseif from ~= nil then
    if from == e and (r == nil or now - r >= tonumber(ARGV[8])) then
      i = math.max(i, pi)
      e = math.max(pe, e + 1)
      redis.call('HSET', key, 'r', string.format('%d', now))
    end
  elseif pe == e then
    i = math.min(i, pi)
  end
  redis.call('HSET', key, 'i', string.format('%d', i), 'e', string.format('%d', e))
end
redis.call('PEXPIRE', key, ARGV[7])
local out = {'', ''}
if i ~= nil then
  out[1] = string.format('%d', i)
  out[2] = string.format('%d', e)
end
for k = 1, #others do
  out[#out + 1] = others[k]
end
return out
";

/// One lane's part of a sync.
#[derive(Clone, Debug)]
pub struct Report<'a> {
    /// The lane's hash.
    pub key: &'a str,
    /// This member's demand, requests per second.
    pub demand: f64,
    /// This member's recent dispatch rate, requests per second: bounds what its
    /// demand claims (`demand::claim`).
    pub used: f64,
    /// The fingerprint of this member's settings for the lane (`fingerprint.rs`),
    /// empty if it has none.
    pub fingerprint: &'a str,
    /// What the member learned; `None` before it learned anything.
    pub proposal: Option<Proposal>,
}

/// One lane's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// The lane's state after the merge; `None` while no member has proposed any.
    pub shared: Option<Shared>,
    /// What the other live members' demands claim (`demand::claim`).
    pub others: Vec<f64>,
    /// The other live members' recent dispatch rates, in the same order.
    pub others_used: Vec<f64>,
    /// The other live members' fingerprints, in the same order (empty where none).
    pub fingerprints: Vec<String>,
}

/// A connection to the fleet's Redis, with the script loaded.
pub struct Store {
    client: Client,
    script: Script,
    conn: Option<MultiplexedConnection>,
    /// The last sync found the script gone: load it before the next.
    reload: bool,
}

impl Store {
    /// A store for `url`, not yet connected, trusting the CAs in `ca_file` (PEM) for
    /// TLS instead of the bundled roots; fails on a URL `check` would refuse or a
    /// `ca_file` that cannot be read.
    pub fn new(url: &RedisUrl, ca_file: Option<&Path>) -> RedisResult<Store> {
        let client = match ca_file {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    redis::RedisError::from((
                        redis::ErrorKind::InvalidClientConfig,
                        "cannot read ca_file",
                        format!("{}: {e}", path.display()),
                    ))
                })?;
                let certificates = TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem),
                };
                Client::build_with_tls(url.expose(), certificates)?
            }
            None => Client::open(url.expose())?,
        };
        Ok(Store {
            client,
            script: Script::new(SYNC),
            conn: None,
            reload: false,
        })
    }

    /// Whether a connection is up.
    pub fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    /// Connects and loads the script, each step within `timeout`.
    pub async fn connect(&mut self, timeout: Duration) -> RedisResult<()> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        let mut conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        self.script.load_async(&mut conn).await?;
        self.conn = Some(conn);
        self.reload = false;
        Ok(())
    }

    /// Drops the connection; the next [`Store::connect`] makes a new one.
    pub fn disconnect(&mut self) {
        self.conn = None;
    }

    /// One round trip: the script once per lane, pipelined; each lane's answer or
    /// error on its own, so one bad key fails only its lane. A script Redis lost
    /// (restarted, `SCRIPT FLUSH`) is loaded again first.
    pub async fn sync(
        &mut self,
        member: &str,
        lanes: &[Report<'_>],
        member_ttl: Duration,
        key_ttl: Duration,
        hold: Duration,
    ) -> RedisResult<Vec<RedisResult<Answer>>> {
        let Some(conn) = self.conn.as_mut() else {
            return Err(not_connected());
        };
        if lanes.is_empty() {
            return Ok(Vec::new());
        }
        if self.reload {
            self.script.load_async(conn).await?;
            self.reload = false;
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for lane in lanes {
            let p = lane.proposal;
            pipe.cmd("EVALSHA")
                .arg(self.script.get_hash())
                .arg(1)
                .arg(lane.key)
                .arg(member)
                .arg(super::demand::entry(
                    lane.demand,
                    lane.used,
                    lane.fingerprint,
                ))
                .arg(p.map_or(String::new(), |p| p.interval.as_micros().to_string()))
                .arg(p.map_or(String::new(), |p| p.epoch.to_string()))
                .arg(
                    p.and_then(|p| p.raised_from)
                        .map_or(String::new(), |e| e.to_string()),
                )
                .arg(u64::try_from(member_ttl.as_millis()).unwrap_or(u64::MAX))
                .arg(u64::try_from(key_ttl.as_millis()).unwrap_or(u64::MAX))
                .arg(u64::try_from(hold.as_millis()).unwrap_or(u64::MAX));
        }
        let raw: Vec<RedisResult<Vec<String>>> = pipe.query_async(conn).await?;
        let lost = |r: &RedisResult<_>| matches!(r, Err(e) if e.code() == Some("NOSCRIPT"));
        self.reload = raw.iter().any(lost);
        Ok(raw
            .into_iter()
            .map(|fields| fields.map(|f| answer(&f)))
            .collect())
    }

    /// Deletes this member's entries from `keys` at once (one pipelined round trip).
    pub async fn leave(&mut self, member: &str, keys: &[String]) -> RedisResult<()> {
        let Some(conn) = self.conn.as_mut() else {
            return Err(not_connected());
        };
        if keys.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("HDEL")
                .arg(key)
                .arg(format!("m:{member}"))
                .ignore();
        }
        pipe.query_async::<()>(conn).await
    }
}

fn not_connected() -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Io, "not connected"))
}

/// Reads the script's answer; unreadable parts count as absent.
fn answer(fields: &[String]) -> Answer {
    let number = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
    let shared = number(0).zip(number(1)).map(|(micros, epoch)| Shared {
        interval: Duration::from_micros(micros),
        epoch,
    });
    let (mut others, mut others_used, mut fingerprints) = (Vec::new(), Vec::new(), Vec::new());
    for (claim, used, fingerprint) in fields
        .iter()
        .skip(2)
        .filter_map(|d| super::demand::parse(d))
    {
        others.push(claim);
        others_used.push(used);
        fingerprints.push(fingerprint.to_string());
    }
    Answer {
        shared,
        others,
        others_used,
        fingerprints,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_answer_carries_the_state_and_the_other_demands() {
        assert_eq!(
            answer(&strings(&["20000", "3", "12.5 10 ab", "inf inf", "1e9"])),
            Answer {
                shared: Some(Shared {
                    interval: Duration::from_millis(20),
                    epoch: 3
                }),
                others: vec![12.5, f64::INFINITY, 0.0],
                others_used: vec![10.0, f64::INFINITY, 0.0],
                fingerprints: strings(&["ab", "", ""]),
            }
        );
    }

    #[test]
    fn an_answer_without_state_has_none() {
        assert_eq!(
            answer(&strings(&["", "", "1 1"])),
            Answer {
                shared: None,
                others: vec![1.0],
                others_used: vec![1.0],
                fingerprints: strings(&[""]),
            }
        );
    }
}
