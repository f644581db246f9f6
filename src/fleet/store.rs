//! The fleet's Redis side: one Lua script that merges a member's report for one lane
//! into the lane's hash and answers with the lane's state and the other members'
//! demands, and the pipelined round trip that runs it for every lane of a member.
//!
//! A lane is one hash, `easeoff:{<group>:<upstream>:<lane>}:state` (the braces a hash
//! tag, so in a Redis Cluster each lane's script touches one slot): field `i` the fleet
//! interval in microseconds, `e` the epoch, and `m:<member>` = `<last seen ms> <demand> <used> <fingerprint>`
//! per member (`demand::entry`), the time by Redis's clock (`TIME`), so the members' clocks need not
//! agree. A member counts only while it was seen within the reader's `member_ttl`
//! (`learning::live`); the script deletes the others' entries as it finds them and
//! renews the key's TTL, so a lane nobody syncs disappears and nothing grows without
//! bound. The merge rule and the liveness rule are `learning.rs`'s, written again in Lua
//! (the simulator runs the Rust ones): a change to either goes into both, and a test
//! in `memory.rs` feeds both the same reports and compares their answers.

use std::borrow::Cow;
use std::path::Path;
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, IntoConnectionInfo, RedisResult, Script,
    TlsCertificates,
};
use tokio::sync::watch;

use super::learning::{Proposal, Shared};
use crate::config::{FleetSettings, RedisMode, RedisUrl};

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
    target: Target,
    script: Script,
    conn: Option<Link>,
    /// The last sync found the script gone: load it before the next.
    reload: bool,
    /// With Sentinel: the primary connected to, and the one the sentinels name now
    /// (asked by a task of its own, so no sync waits for them).
    primary: Option<(
        redis::ConnectionAddr,
        watch::Receiver<Option<redis::ConnectionAddr>>,
    )>,
    /// The sentinels the watching task asks, until it starts.
    watch: Option<SentinelClient>,
}

/// How often a member asks the sentinels which server is the primary. A failover
/// leaves the old primary taking writes until a sentinel demotes it, up to ten seconds
/// later; asking keeps a member from writing to it for more than this long.
const PRIMARY_CHECK: Duration = Duration::from_secs(1);

/// Where the fleet's Redis is, by `redis_mode`.
enum Target {
    Single(Box<Client>),
    Cluster(Box<ClusterClient>),
    /// Asked for the primary at each connection, so a failover is followed.
    Sentinel(Box<SentinelClient>),
}

/// An open connection: to one server (single, or the primary Sentinel named), or to
/// a cluster, which routes each script call by its key's slot and follows `MOVED`
/// and `ASK` itself.
enum Link {
    Node(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Store {
    /// A store for `settings`' Redis, not yet connected, trusting the CAs in `ca_file`
    /// (PEM) for TLS instead of the bundled roots and presenting `client_cert`; fails on
    /// URLs `check` would refuse or TLS files that cannot be read.
    pub fn new(settings: &FleetSettings) -> RedisResult<Store> {
        let tls = certificates(settings)?;
        let urls: Vec<&str> = settings.redis.urls().iter().map(RedisUrl::expose).collect();
        let mut watch = None;
        let target = match settings.redis_mode {
            RedisMode::Single => {
                let url = urls.first().copied().unwrap_or_default();
                Target::Single(Box::new(match tls {
                    Some(tls) => Client::build_with_tls(url, tls)?,
                    None => Client::open(url)?,
                }))
            }
            RedisMode::Cluster => {
                let mut builder = ClusterClient::builder(urls);
                if let Some(tls) = tls {
                    builder = builder.certs(tls);
                }
                Target::Cluster(Box::new(builder.build()?))
            }
            RedisMode::Sentinel => {
                watch = Some(sentinel(settings, &urls, tls.clone())?);
                Target::Sentinel(Box::new(sentinel(settings, &urls, tls)?))
            }
        };
        Ok(Store {
            target,
            script: Script::new(SYNC),
            conn: None,
            reload: false,
            primary: None,
            watch,
        })
    }

    /// Whether a connection is up.
    pub fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    /// Connects (through the sentinels: to the primary they name now) and loads the
    /// script (in a cluster: on every primary), each step within `timeout`.
    pub async fn connect(&mut self, timeout: Duration) -> RedisResult<()> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        let mut link = match &mut self.target {
            Target::Single(client) => Link::Node(
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?,
            ),
            Target::Sentinel(sentinels) => {
                let primary = tokio::time::timeout(timeout, sentinels.async_get_client())
                    .await
                    .map_err(|_| timed_out("no sentinel answered"))??;
                let conn = primary
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                let addr = primary.get_connection_info().addr().clone();
                let named = match self.primary.take() {
                    Some((_, named)) => named,
                    None => watch_primary(self.watch.take(), addr.clone(), timeout),
                };
                self.primary = Some((addr, named));
                Link::Node(conn)
            }
            Target::Cluster(client) => {
                let cluster = tokio::time::timeout(timeout, client.get_async_connection())
                    .await
                    .map_err(|_| timed_out("the cluster's nodes did not answer"))??;
                Link::Cluster(cluster)
            }
        };
        match &mut link {
            Link::Node(conn) => self.script.load_async(conn).await?,
            Link::Cluster(conn) => self.script.load_async(conn).await?,
        };
        self.conn = Some(link);
        self.reload = false;
        Ok(())
    }

    /// Whether the sentinels name another primary than the one connected to.
    fn primary_moved(&self) -> bool {
        self.primary
            .as_ref()
            .is_some_and(|(at, named)| named.borrow().as_ref().is_some_and(|now| now != at))
    }

    /// Drops the connection; the next [`Store::connect`] makes a new one.
    pub fn disconnect(&mut self) {
        self.conn = None;
    }

    /// One round trip: the script once per lane, pipelined (in a cluster, each call
    /// sent to its slot's node, all at once); each lane's answer or error on its own,
    /// so one bad key fails only its lane. A script Redis lost (restarted, `SCRIPT
    /// FLUSH`, a node new to the cluster) is loaded again.
    pub async fn sync(
        &mut self,
        member: &str,
        lanes: &[Report<'_>],
        member_ttl: Duration,
        key_ttl: Duration,
        hold: Duration,
    ) -> RedisResult<Vec<RedisResult<Answer>>> {
        if lanes.is_empty() {
            return Ok(Vec::new());
        }
        if self.primary_moved() {
            self.conn = None;
            return Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "the sentinels name another primary now",
            )));
        }
        let Some(link) = self.conn.as_mut() else {
            return Err(not_connected());
        };
        let ttls = [member_ttl, key_ttl, hold].map(millis);
        let conn = match link {
            Link::Cluster(conn) => {
                return Ok(sync_cluster(conn, &self.script, member, lanes, ttls).await);
            }
            Link::Node(conn) => conn,
        };
        if self.reload {
            self.script.load_async(conn).await?;
            self.reload = false;
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for lane in lanes {
            let call = pipe.cmd("EVALSHA").arg(self.script.get_hash()).arg(1);
            for arg in &arguments(lane, member, ttls) {
                call.arg(arg.as_ref());
            }
        }
        let raw: Vec<RedisResult<Vec<String>>> = pipe.query_async(conn).await?;
        let lost = |r: &RedisResult<_>| matches!(r, Err(e) if e.code() == Some("NOSCRIPT"));
        self.reload = raw.iter().any(lost);
        Ok(raw
            .into_iter()
            .map(|fields| fields.map(|f| answer(&f)))
            .collect())
    }

    /// Deletes this member's entries from `keys` at once (one pipelined round trip; in
    /// a cluster, one call per key, all at once).
    pub async fn leave(&mut self, member: &str, keys: &[String]) -> RedisResult<()> {
        let Some(link) = self.conn.as_mut() else {
            return Err(not_connected());
        };
        let field = format!("m:{member}");
        match link {
            Link::Node(conn) => {
                if keys.is_empty() {
                    return Ok(());
                }
                let mut pipe = redis::pipe();
                for key in keys {
                    pipe.cmd("HDEL").arg(key).arg(&field).ignore();
                }
                pipe.query_async::<()>(conn).await
            }
            Link::Cluster(conn) => {
                let calls = keys.iter().map(|key| {
                    let mut conn = conn.clone();
                    let field = &field;
                    async move {
                        redis::cmd("HDEL")
                            .arg(key)
                            .arg(field)
                            .query_async::<()>(&mut conn)
                            .await
                    }
                });
                join_all(calls).await.into_iter().collect()
            }
        }
    }
}

/// Every lane's script call on its own, all in flight at once: a cluster takes no
/// pipeline across slots, and a call on its own is what it redirects after a slot
/// moved (`MOVED`, `ASK`) and loads the script for on a node that lacks it.
async fn sync_cluster(
    conn: &ClusterConnection,
    script: &Script,
    member: &str,
    lanes: &[Report<'_>],
    ttls: [u64; 3],
) -> Vec<RedisResult<Answer>> {
    let calls = lanes.iter().map(|lane| {
        let mut conn = conn.clone();
        let mut invocation = script.prepare_invoke();
        let mut args = arguments(lane, member, ttls).into_iter();
        if let Some(key) = args.next() {
            invocation.key(key.as_ref());
        }
        for arg in args {
            invocation.arg(arg.as_ref());
        }
        async move {
            let fields: Vec<String> = invocation.invoke_async(&mut conn).await?;
            Ok(answer(&fields))
        }
    });
    join_all(calls).await
}

/// One lane's script call: its key, then ARGV (see [`SYNC`]).
fn arguments<'a>(lane: &Report<'a>, member: &'a str, ttls: [u64; 3]) -> [Cow<'a, str>; 9] {
    let p = lane.proposal;
    let [member_ttl, key_ttl, hold] = ttls.map(|t| Cow::Owned(t.to_string()));
    let text = |v: Option<String>| v.map_or(Cow::Borrowed(""), Cow::Owned);
    [
        Cow::Borrowed(lane.key),
        Cow::Borrowed(member),
        Cow::Owned(super::demand::entry(
            lane.demand,
            lane.used,
            lane.fingerprint,
        )),
        text(p.map(|p| p.interval.as_micros().to_string())),
        text(p.map(|p| p.epoch.to_string())),
        text(p.and_then(|p| p.raised_from).map(|e| e.to_string())),
        member_ttl,
        key_ttl,
        hold,
    ]
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The TLS files of `settings` as redis-rs takes them; `None` without any.
fn certificates(settings: &FleetSettings) -> RedisResult<Option<TlsCertificates>> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|e| {
            redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "cannot read a TLS file",
                format!("{}: {e}", path.display()),
            ))
        })
    };
    let root_cert = settings.ca_file.as_deref().map(read).transpose()?;
    let client_tls = match (&settings.client_cert, &settings.client_key) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: read(cert)?,
            client_key: read(key)?,
        }),
        _ => None,
    };
    Ok(
        (root_cert.is_some() || client_tls.is_some()).then_some(TlsCertificates {
            client_tls,
            root_cert,
        }),
    )
}

/// The sentinels at `urls`, which name the primary `sentinel_master`: the sentinels
/// and the primary are reached with the first url's user, password, TLS and database.
fn sentinel(
    settings: &FleetSettings,
    urls: &[&str],
    tls: Option<TlsCertificates>,
) -> RedisResult<SentinelClient> {
    let mut sentinels = Vec::with_capacity(urls.len());
    let mut first = None;
    for url in urls {
        let info = url.into_connection_info()?;
        sentinels.push(info.addr().clone());
        first.get_or_insert(info);
    }
    let Some(first) = first else {
        return Err(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "no sentinel url",
        )));
    };
    let master = settings.sentinel_master.as_deref().unwrap_or_default();
    let mut builder = SentinelClientBuilder::new(sentinels, master, SentinelServerType::Master)?
        .set_client_to_redis_db(first.redis_settings().db());
    let redis = first.redis_settings();
    if let Some(user) = redis.username() {
        builder = builder
            .set_client_to_redis_username(user)
            .set_client_to_sentinel_username(user);
    }
    if let Some(password) = redis.password() {
        builder = builder
            .set_client_to_redis_password(password)
            .set_client_to_sentinel_password(password);
    }
    if let redis::ConnectionAddr::TcpTls { insecure, .. } = first.addr() {
        let mode = if *insecure {
            redis::TlsMode::Insecure
        } else {
            redis::TlsMode::Secure
        };
        builder = builder
            .set_client_to_redis_tls_mode(mode)
            .set_client_to_sentinel_tls_mode(mode);
    }
    if let Some(tls) = tls {
        builder = builder
            .set_client_to_redis_certificates(tls.clone())
            .set_client_to_sentinel_certificates(tls);
    }
    builder.build()
}

/// Asks `sentinels` which server is the primary every [`PRIMARY_CHECK`], until the
/// store is gone. A failover leaves the old primary taking writes until a sentinel
/// demotes it, up to ten seconds later: a member that asks leaves it within a second
/// or two of the switch.
fn watch_primary(
    sentinels: Option<SentinelClient>,
    first: redis::ConnectionAddr,
    timeout: Duration,
) -> watch::Receiver<Option<redis::ConnectionAddr>> {
    let (tell, named) = watch::channel(Some(first));
    if let Some(mut sentinels) = sentinels {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(PRIMARY_CHECK).await;
                let asked = tokio::time::timeout(timeout, sentinels.async_get_client()).await;
                let Ok(Ok(primary)) = asked else { continue };
                let addr = primary.get_connection_info().addr().clone();
                if tell.send(Some(addr)).is_err() {
                    return;
                }
            }
        });
    }
    named
}

fn timed_out(what: &'static str) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, what))
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
