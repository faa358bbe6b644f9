-- stats: per-topic counters. ARGV: P, topic ('' for every topic).
-- Returns a flat list: topic, {field, value, ...}, topic, {...}, ...
local topics
if ARGV[2] ~= '' then
    topics = {ARGV[2]}
else
    topics = redis.call('SMEMBERS', P .. ':topics')
    table.sort(topics)
end
local out = {}
for _, topic in ipairs(topics) do
    out[#out + 1] = topic
    out[#out + 1] = redis.call('HGETALL', stats_key(topic))
end
return out
