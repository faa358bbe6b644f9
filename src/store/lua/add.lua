-- add: adds one or more jobs.
-- KEYS: P (the jobs' shard). ARGV: allow, buckets, shards, njobs, then per
--       job: id, topic, body, ttr_ms, retries, delay_ms, at_ms (-1: none),
--       bucket, backoff (JSON array of seconds, '' for none), callback url
--       ('' for none), callback timeout_ms. (`at` is checked against ten years by the caller.)
-- Returns one item per job: 'ok', or 'DQ_CONFLICT <state>' when the id is
-- live ('DQ_CONFLICT' alone when the caller may not see that job's topic).
-- Error (nothing written): DQ_LAYOUT when the deployment uses other bucket
-- or shard counts.
limit_topics(ARGV[1])
local mismatch = layout_mismatch(ARGV[2], ARGV[3])
if mismatch then return mismatch end
local njobs = tonumber(ARGV[4])
local now = now_ms()
local FIELDS = 11

local out = {}
local seq -- taken on the first job that is ready at once
local nseq = 0
for i = 0, njobs - 1 do
    local a = 5 + i * FIELDS
    local id, topic, body = ARGV[a], ARGV[a + 1], ARGV[a + 2]
    local ttr, retries, delay, at, k = ARGV[a + 3], ARGV[a + 4], tonumber(ARGV[a + 5]),
        tonumber(ARGV[a + 6]), ARGV[a + 7]
    local live = load_job(id, true)
    if live then
        out[#out + 1] = allowed(live.t) and ('DQ_CONFLICT ' .. live.s) or 'DQ_CONFLICT'
    else
        local due = now + delay
        if at >= 0 then due = math.max(at, now) end
        if due <= now and not seq then seq = reserve_seq(njobs - i) end
        local f = {topic = topic, body = body, ttr = ttr, retries = retries, k = k, due = due}
        if ARGV[a + 8] ~= '' then f.backoff = ARGV[a + 8] end
        if ARGV[a + 9] ~= '' then f.url, f.timeout = ARGV[a + 9], ARGV[a + 10] end
        if create_job(id, f, now, seq and seq + nseq) == 'ready' then nseq = nseq + 1 end
        out[#out + 1] = 'ok'
    end
end
return out
