"""Consistency check of a delayq deployment's Redis state, run as one Lua
script so that it sees an atomic snapshot even while the service is busy.

check(resp, prefix="{dq}") -> dict with
  jobs           number of jobs
  states         {state: count}
  by_topic       {topic: {state: count}}
  stats          {topic: {field: int}} (the P:s:<topic> hashes)
  stale_ready    ready-set members that do not name a ready job of that topic
  stale_buried   buried-set members that do not name a buried job of that topic
  bucket_entries total bucket zset members
  problems       list of strings (empty when every invariant holds)

Invariants:
  - every job (a string key P:j:<id>, decoded by job_keys; or a hash and a
    body key P:v:<id>, the layout before it, which functions read and
    rewrite) has a known state s (delay, ready,
    reserved, buried), a topic t and a bucket k; every body key P:v:<id>
    belongs to a job hash;
  - a job whose head says delay is delayed while it is in its topic's delay
    set (P:d:<t>, or P:dc:<t> with a callback), and ready once it is not
    (the move writes no head); it then became ready at its due time d;
  - a delayed job is a member of exactly one delay set, its own, scored by
    d, and in no bucket; that set is listed in P:bt:<b> for its topic's
    bucket b (a hash of the topic, see topic_bucket in lib/50-placement.lua) and no
    other, scored at or before its earliest entry; every delay set member
    is a delayed job (no orphan entries);
  - a reserved job is a member of exactly one bucket zset, its own P:b:<k>,
    scored by its TTR deadline d;
  - a ready or buried job is in no bucket and is a member of the set of its
    state (P:r:<t>, P:push for a ready job with a callback, or P:x:<t>; a
    ready push job push_take held back for its paused topic is in its hold
    P:ph:<t> instead of P:push, never both); those
    sets hold nothing else (no stale
    entries: they are sorted sets from which finish and delete remove);
  - every bucket member is a reserved job (no orphan entries);
  - the per-topic indexes that `jobs` pages hold exactly their jobs, with
    the same scores: P:w:<t> the reserved jobs of t (by deadline), P:q:<t>
    the ready push jobs of t (by their P:push score);
  - every topic with a job is in P:topics and not in P:idle; the gauges
    delay/ready/reserved/buried of P:s:<t> equal the counts of jobs by
    state, and so does its `jobs` field in total; a topic listed in P:idle
    holds no job; the deployment's totals (P:totals) gauges equal the counts
    of all jobs by state;
  - a ready job has rt (when it became ready), unless made before rt
    existed (still an older layout's hash: the functions read its created
    time instead); a hold P:ph:<t> is only left while a resume moves it back or
    its topic is paused, and no job of the topic in P:push scores between
    the hold's lowest and highest (the topic's order is kept);
  - a ready job set aside in its key's lane (per-key limits) is in its
    topic's P:kr:<t> and in no queue, hold or P:q; the lanes P:kl hold as
    many jobs as the P:kr sets; P:ko:<t> names only reserved jobs of t and
    P:kc:<t> counts them by key;
  - P:timerlag names only timers (P:timers) and holds "<ms>:<ms>";
  - P:leases names only timers and holds a lease (ms); P:horizon, the
    wake-up horizon, is at least each timer's (src/job/job.h: lease / 3 +
    DQ_HEAD_RECHECK_MS + DQ_HEAD_READ_SPARE_MS; DQ_WAKE_HORIZON_MS for a
    timer with none recorded), and is there while any timer is;
  - kept history: every record P:h:<id> expires (a TTL) and is in its
    topic's index of its outcome (P:hf:<t> or P:hd:<t>) scored by minus its
    ended time (an index may hold entries whose record has gone: they are
    trimmed lazily); every delivery log P:dl:<id> belongs to a job, or to
    a record and then expires.
"""

from . import job_keys
from .deployment import job_h_int

SCRIPT = job_keys.LUA + r"""
local P = ARGV[1]
local HEAD_READ_MS, WAKE_HORIZON_MS = tonumber(ARGV[2]), tonumber(ARGV[3])
local problems = {}
local nproblems = 0
local function bad(msg)
    nproblems = nproblems + 1
    if #problems < 200 then problems[#problems + 1] = msg end
end
local plen = #P + 4  -- strlen("{dq}:j:")

-- Gathers the members of sorted set `key` (named `where`) into `into`:
-- id -> {where (the first set holding it), s (its score there), n (how
-- many sets hold it), names (theirs)}. Returns the members and scores.
local function gather(into, key, where)
    local m = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
    for i = 1, #m, 2 do
        local e = into[m[i]]
        if e then
            e.n = e.n + 1
            e.names = e.names .. ',' .. where
        else
            into[m[i]] = {where = where, s = m[i + 1], n = 1, names = where, seen = false}
        end
    end
    return m
end

-- bucket entries (reserved jobs): id -> as gather makes it, where its bucket
local inb = {}
local bucket_entries = 0
for _, bk in ipairs(redis.call('KEYS', P .. ':b:*')) do
    bucket_entries = bucket_entries + #gather(inb, bk, string.sub(bk, plen)) / 2
end

-- delay sets: id -> as gather makes it, where its set's name
local nbuckets = tonumber(redis.call('GET', P .. ':buckets') or '1')
local function topic_bucket(topic)
    local h = 0
    for i = 1, #topic do h = (h * 31 + string.byte(topic, i)) % 4294967296 end
    return h % nbuckets
end
local indelay = {}
local delay_sets = {}
for _, kind in ipairs({'d', 'dc'}) do
    for _, dk in ipairs(redis.call('KEYS', P .. ':' .. kind .. ':*')) do
        local name = string.sub(dk, #P + 2)
        local m = gather(indelay, dk, name)
        delay_sets[name] = m[2] and tonumber(m[2]) or false
    end
end
-- every delay set is listed in its topic's bucket's P:bt, and only there
local listed_in = {}
for _, btk in ipairs(redis.call('KEYS', P .. ':bt:*')) do
    local b = tonumber(string.sub(btk, #P + 5))
    local m = redis.call('ZRANGE', btk, 0, -1, 'WITHSCORES')
    for i = 1, #m, 2 do
        local name, score = m[i], tonumber(m[i + 1])
        local topic = string.match(name, '^dc?:(.*)$')
        if listed_in[name] then bad('delay set ' .. name .. ' is listed in two buckets') end
        listed_in[name] = b
        if not topic or topic_bucket(topic) ~= b then
            bad(btk .. ' lists ' .. name .. ', not a delay set of its topics')
        elseif delay_sets[name] and score > delay_sets[name] then
            bad(btk .. ' scores ' .. name .. ' ' .. score .. ', after its earliest entry ' ..
                delay_sets[name])
        end
    end
end
for name, head in pairs(delay_sets) do
    if head and not listed_in[name] then bad('delay set ' .. name .. ' is in no ' .. P .. ':bt') end
end

-- members of the ready (r) and buried (x) sets: kind|topic|id -> true
local entries = {}
local nentries = {r = 0, x = 0, p = 0}
-- ready push jobs (a callback URL) wait in P:push, whatever their topic
for _, id in ipairs(redis.call('ZRANGE', P .. ':push', 0, -1)) do
    entries['p||' .. id] = true
    nentries['p'] = nentries['p'] + 1
end
-- per-topic indexes: w (reserved), q (ready push): kind|topic|id -> score
local index = {}
local nindex = 0
for _, kind in ipairs({'w', 'q'}) do
    for _, lk in ipairs(redis.call('KEYS', P .. ':' .. kind .. ':*')) do
        local topic = string.sub(lk, plen)
        local m = redis.call('ZRANGE', lk, 0, -1, 'WITHSCORES')
        for i = 1, #m, 2 do
            index[kind .. '|' .. topic .. '|' .. m[i]] = m[i + 1]
            nindex = nindex + 1
        end
    end
end
local push_scores = {}
do
    local m = redis.call('ZRANGE', P .. ':push', 0, -1, 'WITHSCORES')
    for i = 1, #m, 2 do push_scores[m[i]] = m[i + 1] end
end
local indexed = 0
-- push jobs held back for paused topics: h|topic|id -> score
local holds = {}
local nheld = 0
for _, lk in ipairs(redis.call('KEYS', P .. ':ph:*')) do
    local topic = string.sub(lk, plen + 1)
    local m = redis.call('ZRANGE', lk, 0, -1, 'WITHSCORES')
    for i = 1, #m, 2 do
        holds['h|' .. topic .. '|' .. m[i]] = tonumber(m[i + 1])
        nheld = nheld + 1
        if not holds['max|' .. topic] or tonumber(m[i + 1]) > holds['max|' .. topic] then
            holds['max|' .. topic] = tonumber(m[i + 1])
        end
        if not holds['min|' .. topic] or tonumber(m[i + 1]) < holds['min|' .. topic] then
            holds['min|' .. topic] = tonumber(m[i + 1])
        end
    end
end
-- ready jobs set aside in their key's lane: lane|topic|id -> true
local lanes = {}
local nlane = 0
for _, lk in ipairs(redis.call('KEYS', P .. ':kr:*')) do
    local topic = string.sub(lk, plen + 1)
    for _, id in ipairs(redis.call('ZRANGE', lk, 0, -1)) do
        lanes[topic .. '|' .. id] = true
        nlane = nlane + 1
    end
end
local live_lane = 0
local nlane_keys = 0
for _, lk in ipairs(redis.call('KEYS', P .. ':kl:*')) do
    nlane_keys = nlane_keys + redis.call('ZCARD', lk)
end
if nlane_keys ~= nlane then
    bad('the key lanes (P:kl) hold ' .. nlane_keys .. ' jobs, their topics\' index (P:kr) ' .. nlane)
end
local live_held = 0
for _, kind in ipairs({'r', 'x'}) do
    for _, lk in ipairs(redis.call('KEYS', P .. ':' .. kind .. ':*')) do
        local topic = string.sub(lk, plen)
        for _, id in ipairs(redis.call('ZRANGE', lk, 0, -1)) do
            entries[kind .. '|' .. topic .. '|' .. id] = true
            nentries[kind] = nentries[kind] + 1
        end
    end
end

-- A job's {s, k, t, d, u, rt, made before rt existed} in either layout
-- (see the docstring): a job still in an older layout's hash may lack rt.
local legacy_bodies = {}
for _, vk in ipairs(redis.call('KEYS', P .. ':v:*')) do legacy_bodies[string.sub(vk, plen)] = true end
local function read_job(jk, id)
    if redis.call('TYPE', jk)['ok'] == 'hash' then
        if not legacy_bodies[id] then bad('job hash ' .. id .. ' has no body key') end
        legacy_bodies[id] = nil
        local v = redis.call('HMGET', jk, 's', 'k', 't', 'd', 'u', 'rt')
        v[7] = true
        return v
    end
    local j = decode_job(redis.call('GET', jk))
    if j.bad then bad('job ' .. id .. ': ' .. j.bad) end
    return {j.s, j.k and tostring(j.k), j.t, j.d, j.u, j.rt, false}
end
-- The state a job is in: a head (or hash) that says delay is ready once
-- the job has left its delay set, since its due time.
local function settle(j, id)
    if j[1] == 'delay' and not indelay[id] then
        j[1], j[6] = 'ready', j[4]
    end
    return j
end

local counts = {}
local states = {}
local live = {r = 0, x = 0, p = 0}
local njobs = 0
for _, jk in ipairs(redis.call('KEYS', P .. ':j:*')) do
    local id = string.sub(jk, plen)
    local j = settle(read_job(jk, id), id)
    local s, k, t, d, u = j[1], j[2], j[3], j[4], j[5]
    njobs = njobs + 1
    if not s or not t or not k then
        bad('job ' .. id .. ': missing field s/t/k')
    else
        states[s] = (states[s] or 0) + 1
        counts[t] = counts[t] or {}
        counts[t][s] = (counts[t][s] or 0) + 1
        local e = inb[id]
        if e then e.seen = true end
        local in_lane = s == 'ready' and lanes[t .. '|' .. id]
        local ikind = (s == 'reserved' and 'w') or
            ((s == 'ready' and u and not in_lane) and 'q') or nil
        if ikind then
            -- a ready push job waits in P:push, or in its topic's hold
            -- while paused, with the same score
            local want = ikind == 'q' and (push_scores[id] or holds['h|' .. t .. '|' .. id]) or d
            local have = index[ikind .. '|' .. t .. '|' .. id]
            if not have then
                bad('job ' .. id .. ' (' .. s .. ') is not in ' .. P .. ':' .. ikind .. ':' .. t)
            else
                indexed = indexed + 1
                if tonumber(have) ~= tonumber(want) then
                    bad('job ' .. id .. ' (' .. s .. ') scored ' .. have .. ' in ' .. P .. ':' ..
                        ikind .. ':' .. t .. ', want ' .. tostring(want))
                end
            end
        end
        if s == 'delay' then
            local de = indelay[id]
            local want = (u and 'dc:' or 'd:') .. t
            de.seen = true
            if e then
                bad('job ' .. id .. ' (delay) is also in bucket(s) ' .. e.names)
            elseif de.n > 1 then
                bad('job ' .. id .. ' (delay) is in delay sets ' .. de.names)
            elseif de.where ~= want then
                bad('job ' .. id .. ' (delay) is in ' .. de.where .. ', its own is ' .. want)
            elseif tonumber(de.s) ~= tonumber(d) then
                bad('job ' .. id .. ' (delay) scored ' .. de.s .. ' in ' .. de.where .. ', d=' ..
                    tostring(d))
            end
        elseif s == 'reserved' then
            if not e then
                bad('job ' .. id .. ' (' .. s .. ') is in no bucket')
            elseif e.n > 1 then
                bad('job ' .. id .. ' (' .. s .. ') is in buckets ' .. e.names)
            elseif e.where ~= k then
                bad('job ' .. id .. ' (' .. s .. ') is in bucket ' .. e.where .. ', its own is ' .. k)
            elseif tonumber(e.s) ~= tonumber(d) then
                bad('job ' .. id .. ' (' .. s .. ') scored ' .. e.s .. ' in its bucket, d=' .. tostring(d))
            end
        elseif s == 'ready' or s == 'buried' then
            if e then
                bad('job ' .. id .. ' (' .. s .. ') is also in bucket(s) ' .. e.names)
            end
            local kind = (s == 'ready') and (u and 'p' or 'r') or 'x'
            local where = kind == 'p' and '' or t
            local held = kind == 'p' and holds['h|' .. t .. '|' .. id]
            local listed = entries[kind .. '|' .. where .. '|' .. id]
            if in_lane and (held or listed) then
                bad('job ' .. id .. ' is in its key lane and also queued')
            elseif in_lane then
                live_lane = live_lane + 1
            elseif held and entries['p||' .. id] then
                bad('job ' .. id .. ' is both in ' .. P .. ':push and held in ' .. P .. ':ph:' .. t)
            elseif held then
                live_held = live_held + 1
            elseif not entries[kind .. '|' .. where .. '|' .. id] then
                bad('job ' .. id .. ' (' .. s .. ') is not in ' .. P .. ':' ..
                    (kind == 'p' and 'push' or (kind .. ':' .. t)))
            else
                live[kind] = live[kind] + 1
            end
        else
            bad('job ' .. id .. ': unknown state ' .. s)
        end
        if s == 'ready' and not j[6] and not j[7] then
            bad('job ' .. id .. ' is ready but has no rt')
        end
        if s == 'ready' and u and entries['p||' .. id] and holds['max|' .. t] then
            local sc = tonumber(redis.call('ZSCORE', P .. ':push', id))
            if sc > holds['min|' .. t] and sc < holds['max|' .. t] then
                bad('job ' .. id .. ' in ' .. P .. ':push scores between held jobs of ' .. t)
            end
        end
    end
end
for id, _ in pairs(legacy_bodies) do
    bad('body key ' .. P .. ':v:' .. id .. ' belongs to no job hash')
end
for id, e in pairs(inb) do
    if not e.seen then
        bad('bucket ' .. e.names .. ' holds ' .. id .. ', which has no reserved job')
    end
end
for id, e in pairs(indelay) do
    if not e.seen then
        bad('delay set ' .. e.names .. ' holds ' .. id .. ', which has no delayed job')
    end
end

local topics = {}
for _, t in ipairs(redis.call('ZRANGE', P .. ':topics', 0, -1)) do topics[t] = true end
local idle = {}
for _, t in ipairs(redis.call('ZRANGE', P .. ':idle', 0, -1)) do idle[t] = true end
for t, _ in pairs(counts) do
    if not topics[t] then bad('topic ' .. t .. ' has jobs but is not in ' .. P .. ':topics') end
    if idle[t] then bad('topic ' .. t .. ' has jobs but is in ' .. P .. ':idle') end
end
for t, _ in pairs(idle) do
    if not topics[t] then bad('idle topic ' .. t .. ' is not in ' .. P .. ':topics') end
end
local stats = {}
local GAUGES = {'delay', 'ready', 'reserved', 'buried'}
-- every counter GET stats shows, then the hidden job count (last)
local FIELDS = {'delay', 'ready', 'reserved', 'buried', 'added', 'popped', 'finished',
                'deleted', 'redelivered', 'buries', 'kicked', 'push_failed', 'jobs'}
for t, _ in pairs(topics) do
    local v = redis.call('HMGET', P .. ':s:' .. t, unpack(FIELDS))
    local row = {}
    for i, f in ipairs(FIELDS) do
        if f ~= 'jobs' then row[#row + 1] = f; row[#row + 1] = tonumber(v[i] or 0) end
    end
    stats[#stats + 1] = {t, row}
    local sum = 0
    for i, f in ipairs(GAUGES) do
        local have = tonumber(v[i] or 0)
        local want = (counts[t] and counts[t][f]) or 0
        sum = sum + have
        if have ~= want then
            bad('stats ' .. t .. ': gauge ' .. f .. ' = ' .. have .. ' but ' .. want .. ' jobs are ' .. f)
        end
    end
    if tonumber(v[#FIELDS] or 0) ~= sum then
        bad('stats ' .. t .. ': jobs = ' .. tostring(v[#FIELDS]) .. ' but the gauges sum to ' .. sum)
    end
    if sum == 0 and not idle[t] then
        bad('topic ' .. t .. ' holds no job but is not in ' .. P .. ':idle')
    end
    local added, finished, deleted = tonumber(v[5] or 0), tonumber(v[7] or 0), tonumber(v[8] or 0)
    if added - finished - deleted ~= sum then
        bad('stats ' .. t .. ': added ' .. added .. ' - finished ' .. finished .. ' - deleted ' ..
            deleted .. ' ~= gauges ' .. sum)
    end
end
local tv = redis.call('HMGET', P .. ':totals', unpack(GAUGES))
for i, f in ipairs(GAUGES) do
    if tonumber(tv[i] or 0) ~= (states[f] or 0) then
        bad('totals: gauge ' .. f .. ' = ' .. tostring(tv[i]) .. ' but ' .. (states[f] or 0) ..
            ' jobs are ' .. f)
    end
end

local st = {}
for s, n in pairs(states) do st[#st + 1] = s; st[#st + 1] = n end
local bt = {}
for t, c in pairs(counts) do
    local row = {}
    for s, n in pairs(c) do row[#row + 1] = s; row[#row + 1] = n end
    bt[#bt + 1] = {t, row}
end
local stale_r, stale_x = nentries['r'] - live['r'], nentries['x'] - live['x']
if stale_r > 0 then bad(stale_r .. ' ready-set members name no ready job of their topic') end
if stale_x > 0 then bad(stale_x .. ' buried-set members name no buried job of their topic') end
if nindex > indexed then
    bad((nindex - indexed) .. ' per-topic index members (P:w/P:q) name no job of that ' ..
        'topic and state')
end
if nlane > live_lane then
    bad((nlane - live_lane) .. ' key-lane members (P:kr) name no ready job of their topic')
end
-- per-key counts: P:ko:<t> names reserved jobs of t; P:kc:<t> counts them by key
for _, ok in ipairs(redis.call('KEYS', P .. ':ko:*')) do
    local topic = string.sub(ok, plen + 1)
    local by_key = {}
    local h = redis.call('HGETALL', ok)
    for i = 1, #h, 2 do
        local v = redis.call('GET', P .. ':j:' .. h[i])
        local j = v and decode_job(v) or {}
        local key = string.match(h[i + 1], '^%d+:(.*)$')
        if j.s ~= 'reserved' or j.t ~= topic then
            bad(ok .. ' names ' .. h[i] .. ', not a reserved job of ' .. topic)
        end
        by_key[key] = (by_key[key] or 0) + 1
    end
    local kc = redis.call('HGETALL', P .. ':kc:' .. topic)
    local seen = {}
    for i = 1, #kc, 2 do
        seen[kc[i]] = true
        if tonumber(kc[i + 1]) ~= (by_key[kc[i]] or 0) then
            bad(P .. ':kc:' .. topic .. ' counts ' .. kc[i + 1] .. ' of key ' .. kc[i] .. ', ' ..
                (by_key[kc[i]] or 0) .. ' are reserved')
        end
    end
    for key, n in pairs(by_key) do
        if not seen[key] then bad(P .. ':kc:' .. topic .. ' lacks key ' .. key .. ' (' .. n .. ')') end
    end
end
if nheld > live_held then
    bad((nheld - live_held) .. ' hold members name no ready push job of their topic')
end
-- A hash of the timers' (P:timerlag, P:leases): it names live timers only,
-- and each value matches its pattern.
local function check_per_timer(key, value_pattern)
    local h = redis.call('HGETALL', key)
    for i = 1, #h, 2 do
        if not redis.call('ZSCORE', P .. ':timers', h[i]) then
            bad(key .. ' names ' .. h[i] .. ', which is not in ' .. P .. ':timers')
        elseif not string.match(h[i + 1], value_pattern) then
            bad(key .. ' ' .. h[i] .. ' = ' .. h[i + 1])
        end
    end
end
check_per_timer(P .. ':timerlag', '^%d+:%d+$')
local leases, horizon = P .. ':leases', tonumber(redis.call('GET', P .. ':horizon'))
check_per_timer(leases, '^%d+$')
for _, t in ipairs(redis.call('ZRANGE', P .. ':timers', 0, -1)) do
    local lease = tonumber(redis.call('HGET', leases, t))
    local needs = lease and math.floor(lease / 3) + HEAD_READ_MS or WAKE_HORIZON_MS
    if not horizon or horizon < needs then
        bad(P .. ':horizon is ' .. tostring(horizon) .. ', timer ' .. t .. ' needs ' .. needs)
    end
end
if nentries['p'] > live['p'] then
    bad((nentries['p'] - live['p']) .. ' push-set members name no ready push job')
end
local RECORD = '<Bi8i8i8i8I4B'
local OUTCOME_INDEX = {':hf:', ':hd:'}
for _, rk in ipairs(redis.call('KEYS', P .. ':h:*')) do
    local id = string.sub(rk, #P + 4)
    local v = redis.call('GET', rk)
    local o, _, _, _, ended, _, tlen, at = struct.unpack(RECORD, v)
    local t = string.sub(v, at, at + tlen - 1)
    if redis.call('PTTL', rk) <= 0 then bad('record ' .. id .. ' does not expire') end
    local ik = P .. (OUTCOME_INDEX[o] or '?') .. t
    local sc = redis.call('ZSCORE', ik, id)
    if not sc or tonumber(sc) ~= -ended then
        bad('record ' .. id .. ' (ended ' .. ended .. ') is in ' .. ik .. ' with ' .. tostring(sc))
    end
end
for _, lk in ipairs(redis.call('KEYS', P .. ':dl:*')) do
    local id = string.sub(lk, #P + 5)
    if redis.call('EXISTS', P .. ':j:' .. id) == 0 then
        if redis.call('EXISTS', P .. ':h:' .. id) == 0 then
            bad('delivery log of ' .. id .. ' belongs to no job or record')
        elseif redis.call('PTTL', lk) <= 0 then
            bad('delivery log of the record ' .. id .. ' does not expire')
        end
    end
end
return {njobs, st, bt, stats, stale_r, stale_x, bucket_entries, nproblems, problems}
"""


def _pairs(flat):
    return {(a.decode() if isinstance(a, bytes) else a): b for a, b in zip(flat[0::2], flat[1::2])}


def _s(x):
    return x.decode("utf-8", "replace") if isinstance(x, bytes) else x


def check(resp, prefix="{dq}"):
    r = resp("EVAL", SCRIPT, 0, prefix,
             job_h_int("HEAD_RECHECK_MS") + job_h_int("HEAD_READ_SPARE_MS"),
             job_h_int("WAKE_HORIZON_MS"))
    njobs, st, bt, stats, stale_r, stale_x, bentries, nproblems, problems = r
    return {
        "jobs": njobs,
        "states": _pairs(st),
        "by_topic": {_s(t): _pairs(row) for t, row in bt},
        "stats": {_s(t): _pairs(row) for t, row in stats},
        "stale_ready": stale_r,
        "stale_buried": stale_x,
        "bucket_entries": bentries,
        "nproblems": nproblems,
        "problems": [_s(p) for p in problems],
    }


def check_deployment(d):
    """check() of every shard of Deployment d, each on the Redis that holds
    it, summed: jobs, states and per-topic stats over the shards, and every
    problem prefixed with its shard's tag."""
    total = {"jobs": 0, "states": {}, "stats": {}, "nproblems": 0, "problems": []}
    for shard in range(d.shards):
        tag = d.tag(shard)
        if d.redis_mode == "cluster":
            resp = d.redis_server.client(d.redis_server.master_of(tag).port)
        elif d.redis_mode == "sentinel":
            resp = d.redis_server.primary().resp()
        else:
            resp = d.redis_server.resp()
        r = check(resp, prefix=tag)
        total["jobs"] += r["jobs"]
        total["nproblems"] += r["nproblems"]
        total["problems"] += ["%s: %s" % (tag, p) for p in r["problems"]]
        for state, n in r["states"].items():
            total["states"][state] = total["states"].get(state, 0) + int(n)
        for topic, row in r["stats"].items():
            into = total["stats"].setdefault(topic, {})
            for field, v in row.items():
                into[field] = into.get(field, 0) + int(v)
    return total
