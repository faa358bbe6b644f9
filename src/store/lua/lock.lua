-- lock: bucket ownership for delayq-timer.
-- KEYS: P (one shard).
-- argv: op token lease_ms:int buckets:int start:int shards:int
-- op 'maintain': registers the timer (heartbeat), renews the bucket locks it
--   holds, gives back what exceeds its fair share ceil(buckets / timers) and
--   takes free buckets up to it, scanning from `start`. Returns the held
--   bucket numbers. Error: DQ_LAYOUT when the deployment uses other bucket
--   or shard counts.
-- op 'release': drops every lock the token holds (compare-and-delete) and
--   the heartbeat. Returns the number of locks released.
-- Both publish "rebalance" on P:wake when buckets should change hands (a
-- timer joined, gave buckets back or left), so the others maintain at once.
-- Both record the shard's wake-up horizon (P:horizon, src/job/job.h): the
-- largest of the live timers' by their leases (P:leases), or the longest
-- lease's while a live timer has recorded none (a timer of a release
-- before P:leases, whose maintain does not record it); none while no timer
-- is live. P:leases is pruned to P:timers by the same step.
local call = args()
local op, token, lease = call.op, call.token, call.lease_ms
local nb, start, ns = call.buckets, call.start, call.shards
local timers, leases = P .. ':timers', P .. ':leases'
local function lock_key(k) return P .. ':lock:' .. k end

local function record_horizon()
    local live = redis.call('ZRANGE', timers, '0', '-1')
    if #live == 0 then
        redis.call('DEL', leases, P .. ':horizon')
        return
    end
    local horizon = 0
    for _, l in ipairs(redis.call('HMGET', leases, unpack(live))) do
        horizon = math.max(horizon, l and lease_horizon(tonumber(l)) or WAKE_HORIZON_MS)
    end
    redis.call('SET', P .. ':horizon', num(horizon))
    -- (the leases of timers no longer live: released, pruned as dead here
    -- or by an older release's maintain)
    if redis.call('HLEN', leases) > #live then
        for _, t in ipairs(redis.call('HKEYS', leases)) do
            if not redis.call('ZSCORE', timers, t) then redis.call('HDEL', leases, t) end
        end
    end
end

if op == 'release' then
    local released = 0
    for k = 0, nb - 1 do
        if redis.call('GET', lock_key(k)) == token then
            redis.call('DEL', lock_key(k))
            released = released + 1
        end
    end
    redis.call('ZREM', timers, token)
    redis.call('HDEL', P .. ':timerlag', token)
    record_horizon()
    redis.call('SPUBLISH', P .. ':wake', 'rebalance')
    return released
end

local mismatch = layout_mismatch(nb, ns)
if mismatch then return mismatch end
local now = now_ms()
local joined = redis.call('ZADD', timers, num(now + lease), token) == 1
local dead = redis.call('ZRANGEBYSCORE', timers, '-inf', num(now))
if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', timers, '-inf', num(now))
    redis.call('HDEL', P .. ':timerlag', unpack(dead))
end
redis.call('HSET', leases, token, num(lease))
record_horizon()
local fair = math.ceil(nb / redis.call('ZCARD', timers))

local held = {}
local gave_back = false
for i = 0, nb - 1 do
    local k = (start + i) % nb
    if redis.call('GET', lock_key(k)) == token then
        if #held < fair then
            redis.call('PEXPIRE', lock_key(k), num(lease))
            held[#held + 1] = k
        else
            redis.call('DEL', lock_key(k))
            gave_back = true
        end
    end
end
for i = 0, nb - 1 do
    if #held >= fair then break end
    local k = (start + i) % nb
    if redis.call('SET', lock_key(k), token, 'NX', 'PX', num(lease)) then
        held[#held + 1] = k
    end
end
if joined or gave_back then
    redis.call('SPUBLISH', P .. ':wake', 'rebalance')
end
return held
