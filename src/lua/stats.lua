-- stats: the counters of one topic, or one page of topics by name.
-- flags: no-writes
-- KEYS: P. ARGV: topic ('' for a page of all topics), cursor (list the
-- topics after this one; '' from the start), limit.
-- Returns {totals, next cursor or false, number of topics, topic1,
-- {field, value, ...}, topic2, {...}, ...}; totals and the counts are for
-- the whole deployment, whatever the page.
local topic, cursor, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local topics, next_cursor = {}, false
if topic ~= '' then
    topics = {topic}
else
    local from = cursor == '' and '-' or ('(' .. cursor)
    topics = redis.call('ZRANGEBYLEX', P .. ':topics', from, '+', 'LIMIT', '0', num(limit + 1))
    if #topics > limit then
        topics[#topics] = nil
        next_cursor = topics[#topics]
    end
end
local out = {redis.call('HGETALL', P .. ':totals'), next_cursor, redis.call('ZCARD', P .. ':topics')}
for _, t in ipairs(topics) do
    out[#out + 1] = t
    out[#out + 1] = redis.call('HGETALL', stats_key(t))
end
return out
