-- lib/85-shares.lua: limits: each shard's share of a topic's concurrency and rate.

-- This shard's place: its index and the deployment's shard count, read
-- once per library load (they never change while the data exists).
local shard_place = {}
local function shard_index_count()
    local place = shard_place[P]
    if not place then
        local k = tonumber(string.match(P, ':(%d+)}$') or '0')
        place = {k, tonumber(redis.call('GET', P .. ':shards') or '1')}
        shard_place[P] = place
    end
    return place[1], place[2]
end

-- This shard's share of a topic-wide limit: the shards split it, shard k
-- getting floor(limit / shards), plus one for the first limit mod shards
-- of them, so the shares add up to the limit exactly (the policy command
-- refuses a concurrency below the shard count, which would leave a shard
-- none).
local function shard_share(limit)
    local k, shards = shard_index_count()
    return math.floor(limit / shards) + (k < limit % shards and 1 or 0)
end

-- How many more jobs of the topic this shard may reserve now under its
-- `concurrency` (nil: no such limit): its share less the jobs reserved,
-- counting this call's changes, which flush() has not written yet.
local function concurrency_room(topic)
    local limit = policy_of(topic).concurrency
    if not limit then return nil end
    local reserved = tonumber(redis.call('HGET', Key.stats(topic), 'reserved') or '0')
    local pending = counters[topic] and counters[topic].reserved or 0
    return math.max(0, shard_share(limit) - reserved - pending)
end

-- A topic's `rate` per `period` is a token bucket too (take_tokens
-- above): up to `rate` tokens, refilled at rate/period_ms per ms, a
-- delivery spending a whole one; so in any window of one period at most
-- rate + rate deliveries pass (a full bucket, then a period's refill): the
-- contract's "plus a burst of at most rate", and over a long run exactly
-- rate per period. A sliding window would keep one entry per delivery
-- where a bucket is two numbers. peek_tokens is take_tokens' read-only
-- view: the whole tokens now and the ms until the next (0: one is there).
local function peek_tokens(bucket, rate, period_ms, now)
    local tokens = bucket_tokens(bucket, rate, period_ms, now)
    return math.floor(tokens), token_wait(tokens, rate, period_ms)
end

-- A topic's bucket for its `rate`, in each shard.
function Key.rate_bucket(topic) return P .. ':tk:' .. topic end
-- Topics with push jobs held for their `rate`, scored by when a token is
-- next due (ms): push_take puts them back then.
function Key.rate_held() return P .. ':rh' end

-- This shard's part of the topic's `rate` per `period` (nil: no rate):
-- the shards split it evenly, a fraction each if need be (a bucket takes
-- fractional rates as they are), so the parts add up to the rate
-- exactly. The policy command refuses a rate below the shard count: a
-- shard's bucket would then hold less than one token, and the shards'
-- bursts together would pass the contract's one burst of `rate`.
local function rate_share(topic)
    local pol = policy_of(topic)
    if not pol.rate then return nil end
    local _, shards = shard_index_count()
    return pol.rate / shards, pol.period_ms or 1000
end

-- How many more jobs of the topic this shard may deliver now under its
-- `rate` (nil: no such limit), and the ms until its next token. Read only:
-- spend_tokens takes what was delivered.
local function rate_room(topic, now)
    local rate, period_ms = rate_share(topic)
    if not rate then return nil end
    return peek_tokens(Key.rate_bucket(topic), rate, period_ms, now)
end

-- Spends n of the topic's tokens, for n jobs delivered (no-op without a
-- rate); returns the ms until its next token.
local function spend_tokens(topic, n, now)
    local rate, period_ms = rate_share(topic)
    if not rate or n <= 0 then return 0 end
    local _, wait = take_tokens(Key.rate_bucket(topic), rate, period_ms, n, now)
    return wait
end

-- What a topic's limits hold back in this shard now (policies, stats):
-- throttled, its ready jobs that its `concurrency` or `rate` holds back
-- (those pop could take beyond the room the shard's share leaves, or
-- beyond its tokens, and the push jobs push_take holds for them) plus the
-- jobs set aside in their key's lane; keys_waiting, the keys that have
-- such jobs; tokens, the whole tokens its share of a `rate` has now
-- (false: no rate).
local function limits_use(topic, now)
    local room = concurrency_room(topic)
    local tokens = rate_room(topic, now)
    if tokens and (not room or tokens < room) then room = tokens end
    local throttled = 0
    if room then
        throttled = math.max(0, redis.call('ZCARD', Key.ready(topic)) - room)
        if not paused(topic) then -- push jobs held for the limits
            throttled = throttled + redis.call('ZCARD', Key.hold(topic))
        end
    end
    throttled = throttled + redis.call('ZCARD', Key.lanes_index(topic))
    return {throttled = throttled, keys_waiting = redis.call('ZCARD', Key.keys_waiting(topic)),
        tokens = tokens or false}
end

-- A policy as the replies give it: every field, false where unset.
local function policy_view(pol)
    local v = {}
    for _, f in ipairs(POLICY_FIELDS) do
        if pol[f] == nil then v[f] = false else v[f] = pol[f] end
    end
    return v
end

