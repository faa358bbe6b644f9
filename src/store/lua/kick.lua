-- kick: up to `count` buried jobs of a topic become ready, oldest burial
-- first, each with its full retries again.
-- KEYS: P.
-- argv: topic count:int
-- Returns the number kicked.
local call = args()
local topic, want = call.topic, call.count
local taken = redis.call('ZPOPMIN', Key.buried(topic), num(want))
local kicked = #taken / 2
if kicked == 0 then return 0 end
local seq = reserve_seq(kicked)
for i = 1, #taken, 2 do
    local id = taken[i]
    transition(id, load_job(id), 'kick', {seq = seq + (i - 1) / 2, unlisted = true})
end
return kicked
