//! The fleet's Redis side: one Lua script that merges a member's reports for a batch
//! of lanes into the lanes' hashes and answers, per lane, with the lane's state and a
//! summary of its live members, and the pipelined round trip that runs it.
//!
//! A lane is one hash, `easeoff:{<group>:<upstream>:<lane>}:state` (the braces a hash
//! tag, so in a Redis Cluster each lane's script touches one slot): field `i` the fleet
//! interval in microseconds, `e` the epoch, `n` the last seat given, `v` and `t` the
//! fleet's progress through its schedule when the interval last changed and when (µs),
//! and `m:<member>` = `<last seen ms> <demand> <used> <fingerprint> <through> <tried>`
//! per member (`demand::entry`), the time by Redis's clock (`TIME`), so the members' clocks need not
//! agree. A member counts only while it was seen within the reader's `member_ttl`
//! (`learning::live`). A sync writes its own entry and reads the summary `s`
//! (`summary.rs`) instead of every member's entry, so its cost does not grow with the
//! members; the first sync that finds the summary older than the refresh time while
//! entries changed (`d`), or past the expiry of the oldest entry it counted, reads
//! every entry, deletes those not seen within `member_ttl` and writes the summary
//! again, so no summary counts a member `member_ttl` after its last sync. Writing the
//! summary renews the key's TTL, so a lane nobody syncs disappears and nothing grows
//! without bound.
//! The merge, liveness and summary rules are `learning.rs`'s and `summary.rs`'s,
//! written again in Lua (the simulator runs the Rust ones): a change to either goes
//! into both, and a test in `memory.rs` feeds both the same reports and compares
//! their answers.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, IntoConnectionInfo, RedisResult, Script,
    TlsCertificates,
};
use tokio::sync::watch;

use super::demand::Capped;
use super::learning::{Proposal, Shared};
pub use super::summary::Answer;
use super::summary::Summary;
use crate::config::{FleetSettings, RedisMode, RedisUrl};

/// The script: KEYS the lanes' hashes; ARGV: member, member TTL (ms), key TTL (ms),
/// hold (ms: how long after a raise another counts as the same burst), refresh (ms:
/// how old the summary may grow while entries change), then per lane: the entry
/// (`demand::entry`), when the summary that last counted this member's entry was
/// written (`Report::counted_in`), proposed interval (µs, empty for none), epoch,
/// epoch raised from (empty for none), the member's seat (`?` to ask for one), and
/// `1` for a raise to what the fleet got through (`Proposal::capped`). The
/// hash's `r` is when the last raise landed, `s` the summary (`summary.rs`), `a` the
/// attempts it summed with the learned caps shared through the key and what their
/// members want out (`<written ms> <tried> <caps> <wants>`, apart so that a member whose script
/// does not know them reads `s` as before; `Summary::tried_from`), `d` set
/// while entries changed since it, `n` the last seat given, `v` the fleet's
/// progress (`summary::Answer::progress`) when the interval last changed, at `t` (µs
/// by Redis's clock). Returns per lane the interval and epoch (empty while there is
/// no state), the summary, this member's entry as the summary counted it (empty if it
/// did not: it was written after the summary, and the member was not counted
/// before), the fleet's progress now (empty while unpaced), the seat given (empty
/// if none was asked for) and `a` (empty if none), or the lane's own error (a key
/// that is not a hash). A seat a member holds keeps `n` at or above it, so that seats
/// given after Redis lost the hash (a restart) do not repeat those the members hold.
const SYNC: &str = r"
local me = 'm:' .. ARGV[1]
local ttl, hold, refresh = tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5])
-- DEEP_CUT is `learning::DEEP_CUT`.
local GROUPS, FINGERPRINTS, CAP, DEEP_CUT = 16, 4, 1e300, 2
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local stamp = string.format('%d', now)
local function num(x)
  return string.format('%.17g', x)
end
-- Reads every entry of the lane, deletes those not seen within the member TTL, and
-- writes the summary of the others (`summary.rs`).
local function summarize(key)
  local fields = redis.call('HGETALL', key)
  local claims, through, tried, seen_fps, dead, oldest = {}, 0, 0, {}, {}, now
  local caps, wants = 0, 0
  for k = 1, #fields, 2 do
    if string.sub(fields[k], 1, 2) == 'm:' then
      local seen, d, u, fp, g, a, c, w = string.match(fields[k + 1], '^(%S*) ?(%S*) ?(%S*) ?(%S*) ?(%S*) ?(%S*) ?(%S*) ?(%S*)')
      seen = tonumber(seen)
      if seen == nil or now - seen > ttl then
        dead[#dead + 1] = fields[k]
      else
        oldest = math.min(oldest, seen)
        d = tonumber(d)
        if d ~= nil then
          u = tonumber(u) or 0
          if u ~= u or u < 0 then u = 0 end
          if d ~= d or d < 0 then d = 0 end
          -- What got through (`demand::Used::through`); the dispatch rate if unsaid.
          g = tonumber(g) or u
          if g ~= g or g < 0 then g = 0 end
          -- The attempts made (`demand::Used::tried`); what got through if unsaid.
          a = tonumber(a) or g
          if a ~= a or a < 0 then a = 0 end
          claims[#claims + 1] = math.min(d, 2 * u, CAP)
          if g < math.huge then through = through + g end
          if a < math.huge then tried = tried + a end
          -- A learned concurrency cap and what the member wants out (`demand::Capped`).
          c, w = tonumber(c) or 0, tonumber(w) or 0
          if c == c and c >= 0 and c < math.huge then caps = caps + c end
          if w == w and w >= 0 and w < math.huge then wants = wants + w end
          if fp ~= '' and fp ~= '-' then seen_fps[fp] = true end
        end
      end
    end
  end
  for k = 1, #dead, 1000 do
    redis.call('HDEL', key, unpack(dead, k, math.min(k + 999, #dead)))
  end
  table.sort(claims)
  local fps = {}
  for fp in pairs(seen_fps) do fps[#fps + 1] = fp end
  table.sort(fps)
  local shown = {}
  for k = 1, math.min(FINGERPRINTS, #fps) do shown[k] = fps[k] end
  local expires = string.format('%d', oldest + ttl)
  local parts = {stamp, expires, num(through), #shown > 0 and table.concat(shown, ',') or '-'}
  local n = #claims
  for g = 0, GROUPS - 1 do
    local lo, hi = math.floor(g * n / GROUPS), math.floor((g + 1) * n / GROUPS)
    if hi > lo then
      local sum = 0
      for k = lo + 1, hi do sum = sum + claims[k] end
      parts[#parts + 1] = string.format('%d', hi - lo) .. ' ' .. num(sum) .. ' ' .. num(claims[hi])
    end
  end
  local s = table.concat(parts, ' ')
  local a = stamp .. ' ' .. num(tried) .. ' ' .. num(caps) .. ' ' .. num(wants)
  redis.call('HSET', key, 's', s, 'a', a)
  redis.call('HDEL', key, 'd')
  -- Written again at least once a member TTL while anyone syncs: the key outlives
  -- its last sync by up to the key TTL.
  redis.call('PEXPIRE', key, ARGV[3])
  return s, a
end
local function sync(k)
  local key, b = KEYS[k], 5 + (k - 1) * 7
  local got = redis.pcall('HMGET', key, 'i', 'e', 'r', 's', 'd', me, 'v', 't', 'n', 'a')
  if got.err then
    return got
  end
  local i, e, r, s, dirty, old = tonumber(got[1]), tonumber(got[2]), tonumber(got[3]), got[4], got[5], got[6]
  local v, tv, a = tonumber(got[7]), tonumber(got[8]), got[10] or ''
  local entry = ARGV[b + 1]
  local write = {me, stamp .. ' ' .. entry}
  local was = nil
  if old then
    local sp = string.find(old, ' ', 1, true) or #old
    was = string.sub(old, sp + 1)
    old = tonumber(string.sub(old, 1, sp - 1)) or now
  end
  local changed = was ~= entry
  if changed and not dirty then
    write[#write + 1] = 'd'
    write[#write + 1] = '1'
  end
  if ARGV[b + 3] ~= '' then
    local pi, pe, from = tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
    if i == nil or e == nil then
      i, e = pi, pe
    elseif from ~= nil then
      local capped = ARGV[b + 7] == '1' and pi > i
      if from == e and (r == nil or now - r >= hold or capped or (i > 0 and pi >= DEEP_CUT * i)) then
        i = math.max(i, pi)
        e = math.max(pe, e + 1)
        write[#write + 1] = 'r'
        write[#write + 1] = stamp
        r = now
      end
    elseif pe == e then
      i = math.min(i, pi)
    end
    -- The fleet's progress counts slots of the interval in force until it changes.
    local was_i = tonumber(got[1])
    if v == nil or tv == nil or i ~= was_i then
      if v == nil or tv == nil or was_i == nil then
        v = 0
      elseif was_i > 0 then
        v = v + (now_us - tv) / was_i
      end
      tv = now_us
      write[#write + 1] = 'v'
      write[#write + 1] = num(v)
      write[#write + 1] = 't'
      write[#write + 1] = string.format('%d', tv)
    end
    -- An unchanged state is neither written again nor formatted for the answer.
    if i == tonumber(got[1]) and e == tonumber(got[2]) then
      i, e = got[1], got[2]
    else
      i, e = string.format('%d', i), string.format('%d', e)
      write[#write + 1] = 'i'
      write[#write + 1] = i
      write[#write + 1] = 'e'
      write[#write + 1] = e
    end
  end
  -- The first write may be refused (OOM); once a script has written, Redis lets it
  -- write on, so a refusal must come before any other write.
  redis.call('HSET', key, unpack(write))
  local seat, held = '', tonumber(ARGV[b + 6])
  if ARGV[b + 6] == '?' then
    -- A field `n` that is not a number gives no seat (the member goes on unseated).
    local n = redis.pcall('HINCRBY', key, 'n', 1)
    if type(n) == 'number' then seat = string.format('%d', n) end
  elseif held ~= nil and (tonumber(got[9]) or 0) < held then
    redis.call('HSET', key, 'n', string.format('%d', held))
  end
  local progress = ''
  local paced = tonumber(i)
  if paced ~= nil and paced > 0 and v ~= nil and tv ~= nil then
    progress = num(v + (now_us - tv) / paced)
  end
  local at, expires = nil, nil
  if s then
    at, expires = string.match(s, '^(%d+) (%d+)')
    at, expires = tonumber(at), tonumber(expires)
  end
  local counted = ''
  if at == nil or expires == nil or now > expires or ((changed or dirty) and now - at >= refresh) then
    s, a = summarize(key)
    counted = entry
  elseif was and (old < at or ARGV[b + 2] == string.format('%d', at)) then
    counted = was
  end
  if i == nil or e == nil then
    return {'', '', s, counted, progress, seat, a}
  end
  if i ~= got[1] then i = string.format('%d', i) end
  if e ~= got[2] then e = string.format('%d', e) end
  return {i, e, s, counted, progress, seat, a}
end
local out = {}
for k = 1, #KEYS do
  out[k] = sync(k)
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
    /// What got through of its dispatches recently, per second
    /// (`demand::Used::through`): the fleet's sum of it bounds a raise.
    pub through: f64,
    /// The attempts it made recently, per second (`demand::Used::tried`).
    pub tried: f64,
    /// The fingerprint of this member's settings for the lane (`fingerprint.rs`),
    /// empty if it has none.
    pub fingerprint: &'a str,
    /// What the member learned; `None` before it learned anything.
    pub proposal: Option<Proposal>,
    /// When the summary that last counted this member's entry was written
    /// ([`Answer::counted_in`]): an entry rewritten since still counts in it.
    pub counted_in: u64,
    /// The member's seat in the lane, or `None` to ask for one ([`Answer::seat`]).
    pub seat: Option<u64>,
    /// The learned concurrency cap the member shares through the key, if it does.
    pub capped: Option<Capped>,
}

/// The times a sync passes to the script.
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    /// A member counts while it was seen within this.
    pub member_ttl: Duration,
    /// A lane's hash outlives its last sync by this.
    pub key_ttl: Duration,
    /// A raise this soon after the last one belongs to the same burst.
    pub hold: Duration,
    /// How old a lane's summary may grow while its entries change.
    pub refresh: Duration,
}

/// Lanes per script call: enough that the call's own cost is spread thin, few enough
/// that no call holds Redis (which runs one script at a time) for long.
const BATCH: usize = 100;

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

    /// One round trip: the script once per [`BATCH`] lanes, pipelined (in a cluster,
    /// once per slot and [`BATCH`] lanes, each call sent to its slot's node, all at
    /// once); each lane's answer or error on its own, so one bad key fails only its
    /// lane. A script Redis lost (restarted, `SCRIPT FLUSH`, a node new to the
    /// cluster) is loaded again.
    pub async fn sync(
        &mut self,
        member: &str,
        lanes: &[Report<'_>],
        timings: Timings,
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
        let conn = match link {
            Link::Cluster(conn) => {
                return Ok(sync_cluster(conn, &self.script, member, lanes, timings).await);
            }
            Link::Node(conn) => conn,
        };
        if self.reload {
            self.script.load_async(conn).await?;
            self.reload = false;
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for batch in lanes.chunks(BATCH) {
            let call = pipe.cmd("EVALSHA").arg(self.script.get_hash());
            let (keys, args) = arguments(batch, member, timings);
            call.arg(keys.len()).arg(keys);
            for arg in &args {
                call.arg(arg.as_ref());
            }
        }
        let raw: Vec<RedisResult<Vec<redis::Value>>> = pipe.query_async(conn).await?;
        let lost = |r: &RedisResult<_>| matches!(r, Err(e) if e.code() == Some("NOSCRIPT"));
        self.reload = raw.iter().any(lost);
        let mut answers = Vec::with_capacity(lanes.len());
        for (batch, result) in lanes.chunks(BATCH).zip(raw) {
            answers.extend(batch_answers(batch.len(), result));
        }
        Ok(answers)
    }

    /// Deletes this member's entries from `keys` at once (one pipelined round trip; in
    /// a cluster, one call per key, all at once), and their summaries, so the next
    /// sync of each lane summarizes it without this member.
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
                    pipe.cmd("HDEL").arg(key).arg(&field).arg("s").ignore();
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
                            .arg("s")
                            .query_async::<()>(&mut conn)
                            .await
                    }
                });
                join_all(calls).await.into_iter().collect()
            }
        }
    }
}

/// The lanes grouped by their key's slot, up to [`BATCH`] a script call, every call in
/// flight at once: a script in a cluster may touch keys of one slot only, and a cluster
/// takes no pipeline across slots; a call of one slot is what the cluster connection
/// redirects after the slot moved (`MOVED`, `ASK`) and loads the script for on a node
/// that lacks it. Lanes whose keys share a slot (many lanes a member, or keys whose
/// hash tags collide) so share a call, as in single mode.
async fn sync_cluster(
    conn: &ClusterConnection,
    script: &Script,
    member: &str,
    lanes: &[Report<'_>],
    timings: Timings,
) -> Vec<RedisResult<Answer>> {
    let batches = slot_batches(lanes.iter().map(|lane| lane.key));
    let calls = batches.iter().map(|batch| {
        let mut conn = conn.clone();
        let mut invocation = script.prepare_invoke();
        let reports: Vec<Report<'_>> = batch.iter().map(|&i| lanes[i].clone()).collect();
        let (keys, args) = arguments(&reports, member, timings);
        invocation.key(keys);
        for arg in &args {
            invocation.arg(arg.as_ref());
        }
        async move {
            let result = invocation.invoke_async(&mut conn).await;
            batch_answers(batch.len(), result)
        }
    });
    let mut answers: Vec<RedisResult<Answer>> = lanes.iter().map(|_| Err(unreadable())).collect();
    for (batch, results) in batches.iter().zip(join_all(calls).await) {
        for (&i, answer) in batch.iter().zip(results) {
            answers[i] = answer;
        }
    }
    answers
}

/// The positions of `keys` grouped by their slot, in the order each slot first comes,
/// up to [`BATCH`] a group: one script call each.
fn slot_batches<'a>(keys: impl Iterator<Item = &'a str>) -> Vec<Vec<usize>> {
    let mut by_slot: HashMap<Slot, usize> = HashMap::new();
    let mut batches: Vec<Vec<usize>> = Vec::new();
    for (i, key) in keys.enumerate() {
        let slot = Slot::for_key(key);
        match by_slot.get(&slot) {
            Some(&b) if batches[b].len() < BATCH => batches[b].push(i),
            _ => {
                by_slot.insert(slot, batches.len());
                batches.push(vec![i]);
            }
        }
    }
    batches
}

/// Each of `lanes` lanes' answer from one script call's `result`: its own part, or the
/// call's error for all of them.
fn batch_answers(lanes: usize, result: RedisResult<Vec<redis::Value>>) -> Vec<RedisResult<Answer>> {
    match result {
        Ok(values) if values.len() == lanes => values.into_iter().map(lane_answer).collect(),
        Ok(_) => (0..lanes).map(|_| Err(unreadable())).collect(),
        Err(e) => (0..lanes).map(|_| Err(e.clone())).collect(),
    }
}

/// One script call's KEYS and ARGV for `lanes` (see [`SYNC`]).
fn arguments<'a>(
    lanes: &[Report<'a>],
    member: &'a str,
    timings: Timings,
) -> (Vec<&'a str>, Vec<Cow<'a, str>>) {
    let t = timings;
    let mut args = vec![Cow::Borrowed(member)];
    for d in [t.member_ttl, t.key_ttl, t.hold, t.refresh] {
        args.push(Cow::Owned(millis(d).to_string()));
    }
    let text = |v: Option<String>| v.map_or(Cow::Borrowed(""), Cow::Owned);
    for lane in lanes {
        let p = lane.proposal;
        args.extend([
            Cow::Owned(super::demand::entry(
                lane.demand,
                lane.used,
                lane.fingerprint,
                lane.through,
                lane.tried,
                lane.capped,
            )),
            Cow::Owned(lane.counted_in.to_string()),
            text(p.map(|p| p.interval.as_micros().to_string())),
            text(p.map(|p| p.epoch.to_string())),
            text(p.and_then(|p| p.raised_from).map(|e| e.to_string())),
            lane.seat
                .map_or(Cow::Borrowed("?"), |seat| Cow::Owned(seat.to_string())),
            Cow::Borrowed(if p.is_some_and(|p| p.capped) { "1" } else { "" }),
        ]);
    }
    (lanes.iter().map(|l| l.key).collect(), args)
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

fn unreadable() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Parse,
        "the sync script's answer cannot be read",
    ))
}

/// One lane's part of the script's answer: its error, or its fields.
fn lane_answer(value: redis::Value) -> RedisResult<Answer> {
    match value {
        redis::Value::ServerError(e) => Err(e.into()),
        value => {
            let fields: Vec<String> = redis::from_redis_value(value)?;
            Ok(answer(&fields))
        }
    }
}

/// Reads one lane's fields; unreadable parts count as absent.
fn answer(fields: &[String]) -> Answer {
    let number = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
    let shared = number(0).zip(number(1)).map(|(micros, epoch)| Shared {
        interval: Duration::from_micros(micros),
        epoch,
    });
    let summary = fields
        .get(2)
        .and_then(|s| Summary::parse(s))
        .map(|s| s.tried_from(fields.get(6).map_or("", String::as_str)))
        .unwrap_or_default();
    let counted = fields.get(3).map(String::as_str).filter(|c| !c.is_empty());
    Answer {
        progress: fields
            .get(4)
            .and_then(|p| p.parse::<f64>().ok())
            .filter(|p| p.is_finite()),
        seat: number(5),
        ..summary.answer(shared, counted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn in_a_cluster_lanes_of_one_slot_share_a_call_of_at_most_a_batch() {
        let mut keys = vec!["a{x}1".to_string(), "b{y}".to_string(), "c{x}2".to_string()];
        keys.extend((0..150).map(|i| format!("{{z}}{i}")));
        let batches = slot_batches(keys.iter().map(String::as_str));
        assert_eq!(batches.len(), 4);
        assert_eq!(batches[0], [0, 2]);
        assert_eq!(batches[1], [1]);
        assert_eq!(batches[2], (3..103).collect::<Vec<_>>());
        assert_eq!(batches[3], (103..153).collect::<Vec<_>>());
    }

    #[test]
    fn an_answer_carries_the_state_and_the_summary_less_this_member() {
        let summary = "1700000000000 1700000005000 30 ab 1 2.5 2.5 1 12.5 12.5 1 1e300 1e300";
        assert_eq!(
            answer(&strings(&[
                "20000",
                "3",
                summary,
                "12.5 10 ab",
                "",
                "",
                "1700000000000 50"
            ])),
            Answer {
                shared: Some(Shared {
                    interval: Duration::from_millis(20),
                    epoch: 3
                }),
                others: vec![2.5, 1e300],
                others_through: vec![10.0, 10.0],
                others_tried: 40.0,
                fingerprints: strings(&["ab"]),
                counted_in: 1_700_000_000_000,
                progress: None,
                seat: None,
                others_capped: Capped::default(),
            }
        );
        let seated = answer(&strings(&["20000", "3", summary, "", "1500", "7"]));
        assert_eq!(seated.progress, Some(1500.0));
        assert_eq!(seated.seat, Some(7));
        // Attempts written with another summary, or not at all: what got through.
        let other = answer(&strings(&["20000", "3", summary, "", "", "", "1699 50"]));
        assert_eq!(other.others_tried, 30.0);
    }

    #[test]
    fn an_answer_without_state_has_none_and_an_uncounted_member_sees_every_entry() {
        assert_eq!(
            answer(&strings(&["", "", "1 2 1 - 1 1 1", ""])),
            Answer {
                shared: None,
                others: vec![1.0],
                others_through: vec![1.0],
                others_tried: 1.0,
                fingerprints: Vec::new(),
                counted_in: 0,
                progress: None,
                seat: None,
                others_capped: Capped::default(),
            }
        );
        assert_eq!(answer(&strings(&["", ""])), Answer::default());
    }
}
