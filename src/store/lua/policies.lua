-- policies: the policies of one topic, or of one page of the topics that
-- have one, by name, with their use in this shard.
-- flags: no-writes
-- KEYS: P.
-- argv: topic? cursor? limit:int
-- reply: next_cursor
-- reply entry: topic [policy] reserved throttled keys_waiting tokens
-- topic is absent for a page of all topics with a policy; cursor lists
-- the topics after this one (absent: from the start); next_cursor is false on the
-- last page. An `entry` per topic that has a policy in this shard follows
-- (policy fields false where unset): reserved counts the topic's jobs
-- reserved by pops plus callbacks in flight (the shard's `reserved`
-- gauge); throttled, keys_waiting and tokens are limits_use()'s.
local call = args()
local topic, cursor, limit = call.topic, call.cursor, call.limit
local topics, next_cursor = topics_page(Key.policies(), topic, cursor, limit)
local out = reply{next_cursor = next_cursor}
local now = now_ms()
for _, t in ipairs(topics) do
    local pol = read_policy(t)
    if has_policy(pol) then
        local e = policy_view(pol)
        e.topic = t
        e.reserved = tonumber(redis.call('HGET', Key.stats(t), 'reserved') or '0')
        local use = limits_use(t, now)
        e.throttled, e.keys_waiting, e.tokens = use.throttled, use.keys_waiting, use.tokens
        reply_entry(e, out)
    end
end
return out
