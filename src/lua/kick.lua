-- kick: up to `count` buried jobs of a topic become ready, oldest burial
-- first, each with its full retries again.
-- KEYS: P. ARGV: topic, count. Returns the number kicked.
local topic, want = ARGV[1], tonumber(ARGV[2])
local taken = redis.call('ZPOPMIN', buried_key(topic), num(want))
local kicked = #taken / 2
if kicked == 0 then return 0 end
local seq = reserve_seq(kicked)
for i = 1, #taken, 2 do
    local id = taken[i]
    local jk = job_key(id)
    local j = redis.call('HMGET', jk, 'n', 'u')
    redis.call('HSET', jk, 'kb', j[1], 's', 'ready', 'd', '-1', 'rt', num(clock()))
    enqueue_ready(id, topic, seq + (i - 1) / 2, j[2])
end
count(topic, 'buried', -kicked)
count(topic, 'ready', kicked)
count(topic, 'kicked', kicked)
return kicked
