-- lib/45-key-lanes.lua: per-key limits: their keys, and key lanes.

-- Per-key limits (key_concurrency, key_rate; docs/DESIGN.md, "Per-key
-- limits"). Only a topic whose policy has one (or whose lanes are still
-- being drained after it was changed or removed) has these keys:
--   P:klim            the shard's topics with key limits or lanes left
--                     (exists while any does: keys_on())
--   P:kc:<topic>      hash: key -> its jobs reserved now
--   P:ko:<topic>      hash: id -> '<seq>:<key>' for each counted reserved
--                     job: its key and its place in the due order (the
--                     sequence number it was taken at, 0 if unknown)
--   P:kl:<n>:<topic>:<key>  the key's lane (n: the topic's length, so no
--                     two topics' lanes share a name): its ready jobs that
--                     a pop or push_take met while the key was at a
--                     limit, by sequence number
--   P:kt:<n>:<topic>:<key>  the key's token bucket under key_rate
--                     (take_tokens); absent when full
--   P:krt             '<n>:<topic>:<key>' of the keys whose lane waits for
--                     key_rate's next token, scored by when it comes (ms):
--                     the move of bucket 0 and every pop and push_take
--                     move one job of each due lane back
--   P:kr:<topic>      every lane job of the topic, by sequence number
--                     (`jobs` and purge list them, stats count them)
--   P:kw:<topic>      keys with a non-empty lane (scored 0)
--   P:kdrain          topics whose lanes go back to their queue (a
--                     changed or removed limit), a bounded step per call
-- A job in a lane is still `ready` (its head, the ready gauge); it is in
-- neither P:r nor P:push nor P:q.
function Key.key_limited() return P .. ':klim' end
function Key.key_count(topic) return P .. ':kc:' .. topic end
function Key.key_owner(topic) return P .. ':ko:' .. topic end
function Key.keys_waiting(topic) return P .. ':kw:' .. topic end
function Key.lanes_drain() return P .. ':kdrain' end
-- A key of a topic, as one string ('<n>:<topic>:<key>', n the topic's
-- length): a member of P:krt, a part of a lane's or token bucket's name.
local function topic_key(topic, key) return num(#topic) .. ':' .. topic .. ':' .. key end
local function split_topic_key(m)
    local n, rest = string.match(m, '^(%d+):(.*)$')
    n = tonumber(n)
    return string.sub(rest, 1, n), string.sub(rest, n + 2)
end
-- The token bucket of a key under key_rate (take_tokens).
function Key.key_tokens(topic, key) return P .. ':kt:' .. topic_key(topic, key) end
-- Keys whose lane waits for key_rate's next token: topic_key -> when (ms).
function Key.rate_lanes() return P .. ':krt' end
function Key.lane(topic, key) return P .. ':kl:' .. topic_key(topic, key) end
-- How many jobs one call may set aside into lanes or move back from them,
-- beyond what it takes: a pop over a big key's backlog costs at most this.
local LANE_STEP = 1000

-- Does any topic of the shard have key limits (or lanes left)? Without,
-- no function looks at the structures above: one EXISTS per call.
local function keys_on()
    if keys_cache == nil then keys_cache = redis.call('EXISTS', Key.key_limited()) == 1 end
    return keys_cache
end

-- Takes a ready job out of its key's lane if it is in one (job j as
-- load_job answered it); returns whether it was.
local function lane_remove(id, j)
    if not keys_on() or redis.call('ZREM', Key.lanes_index(j.topic), id) == 0 then return false end
    if j.head_only then j = load_job(id) end -- the key is among the fields some jobs have
    local lk = Key.lane(j.topic, j.key)
    redis.call('ZREM', lk, id)
    if redis.call('EXISTS', lk) == 0 then redis.call('ZREM', Key.keys_waiting(j.topic), j.key) end
    return true
end

