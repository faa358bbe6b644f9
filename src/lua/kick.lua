-- kick: up to `count` buried jobs of a topic become ready, each with its
-- full retries again. ARGV: P, topic, count. Returns the number kicked.
local topic, want = ARGV[2], tonumber(ARGV[3])
local bk = buried_key(topic)
local kicked = 0
while kicked < want do
    local e = redis.call('LPOP', bk)
    if not e then break end
    local g, id = split_entry(e)
    local jk = job_key(id)
    local j = redis.call('HMGET', jk, 's', 'g', 'n')
    if j[1] == 'buried' and j[2] == g then
        redis.call('HSET', jk, 'kb', j[3])
        make_ready(id, topic)
        move_count(topic, 'buried', 'ready')
        count(topic, 'kicked', 1)
        kicked = kicked + 1
    end
end
flush()
return kicked
