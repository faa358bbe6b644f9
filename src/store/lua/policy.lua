-- policy: sets a topic's flow-control policy in this shard (delayq-fcgi
-- calls every shard in one round: each shard keeps a copy, so that a pop,
-- which runs in one shard, reads its topic's limits in its own atomic
-- call), and answers the policy as it now stands.
-- KEYS: P.
-- argv: topic [policy]
-- [policy] is the policy's fields (src/job/job.h, DQ_POLICY_FIELDS, which
-- embed.sh makes POLICY_FIELDS of). Each is '' (keep its value), 'null' (remove
-- that limit) or its value: counts as they are, periods and keep in ms. The policy is
-- the hash P:pol:<topic>, with those field names; a topic with a policy is
-- in P:policies (scored 0, listed by name), and a policy whose last field
-- is removed is deleted (its hash stays while the topic's key lanes drain:
-- LANES_DRAINING in lib/60-limits.lua).
-- reply: [policy]
-- Each false where unset.
local topic = ARGV[ARG.topic]
local key = Key.policy(topic)
local old_policy = read_policy(topic)
for _, f in ipairs(POLICY_FIELDS) do
    local v = ARGV[ARG[f]]
    if v == 'null' then
        redis.call('HDEL', key, f)
    elseif v ~= '' then
        redis.call('HSET', key, f, v)
    end
end
-- Push jobs held back for the old limit go back to P:push (1000 at
-- most here; push_take moves the rest as it meets them), so a limit
-- raised or removed frees them now; push_take holds them again if the
-- new limit has no room. A paused topic's wait for its resume.
if not paused(topic) then
    local back = unhold_oldest(topic, 1000)
    if back > 0 then redis.call('SPUBLISH', P .. ':pushwake', num(back)) end
end
local pol = read_policy(topic)
-- Per-key counts start, stop, or lanes go back (key_limit_changed).
key_limit_changed(topic, old_policy, pol)
-- Kept history: P:keeping lists the topics that keep it; P:history stays
-- while one does, and KEEP_MAX_MS after the last one stopped (no record
-- outlives that), so that the other functions look for records only in a
-- shard that may hold some (history_on in lib/70-history.lua).
if (pol.keep_ms or 0) > 0 then
    redis.call('SADD', P .. ':keeping', topic)
    redis.call('SET', Key.history_flag(), '1')
elseif redis.call('SREM', P .. ':keeping', topic) == 1 and
    redis.call('EXISTS', P .. ':keeping') == 0 then
    redis.call('PEXPIRE', Key.history_flag(), num(KEEP_MAX_MS))
end
if has_policy(pol) then
    redis.call('ZADD', Key.policies(), '0', topic)
else
    redis.call('ZREM', Key.policies(), topic)
end
return reply(policy_view(pol))
