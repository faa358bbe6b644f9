-- add: adds one or more jobs.
-- KEYS: P (the jobs' shard).
-- argv: allow buckets:int shards:int njobs:int
-- argv job: id topic body ttr_ms:int retries:int delay_ms:int at_ms:int? bucket:int backoff? url? timeout_ms:int key? traceparent? tracestate? replace:int
-- njobs groups `job` follow (args_job() decodes one; an optional field
-- absent is nil): at_ms the due time if any (checked against ten years by
-- the caller), backoff a JSON array of seconds, url the callback's,
-- timeout_ms the callback's, key the grouping key (the caller put the job
-- in the key's shard), traceparent and tracestate the job's trace
-- context; replace 1 for an upsert, else 0.
-- reply conflict: reason state? ended_ms? topic?
-- values reason: hidden live kept reserved topic
-- Returns one item per job: 'ok', or a `conflict` record, which writes
-- nothing: reason `live` with the job's state when the id is live; `kept`
-- with state finished or deleted and ended_ms while a record of it is
-- kept (the idempotency window); `hidden` alone when the caller may not
-- see that job's topic (or record).
-- An upsert (replace '1') answers 'replaced' when it replaced a delayed,
-- ready or buried job of its topic (replace_job), 'ok' when it created
-- the job (there was none, or only a kept record, which it drops), and a
-- conflict `reserved` (state reserved) for a reserved job, or `topic` with
-- the job's state and topic for a job of another topic.
-- Error (nothing written): DQ_LAYOUT when the deployment uses other bucket
-- or shard counts.
local call = args()
limit_topics(call.allow)
local mismatch = layout_mismatch(call.buckets, call.shards, true)
if mismatch then return mismatch end
local njobs = call.njobs
local now = clock()

local out = {}
local seq -- taken on the first job that is ready at once
local nseq = 0
for i = 0, njobs - 1 do
    local job = args_job(NARGS + 1 + i * ARG_JOB_FIELDS)
    local id, topic = job.id, job.topic
    local upsert = job.replace == 1
    local due = now + job.delay_ms
    if job.at_ms then due = math.max(job.at_ms, now) end
    local f = {topic = topic, body = job.body, ttr = job.ttr_ms, retries = job.retries, k = job.bucket,
        due = due, backoff = job.backoff, key = job.key, traceparent = job.traceparent,
        tracestate = job.tracestate}
    if job.url then f.url, f.timeout = job.url, job.timeout_ms end
    -- A plain add in a shard that keeps no history writes the job at once
    -- (SET NX): only a job already there could conflict, and then nothing
    -- is written. An upsert reads the whole job first (what it keeps lies
    -- beyond the head), and with history on a kept record is read first
    -- (its conflict writes nothing either).
    local created, live, kept
    if not upsert and not history_on() then
        if due <= now and not seq then seq = reserve_seq(njobs - i) end -- unused on a conflict
        created, live = create_job(id, f, now, seq and seq + nseq, true)
    else
        live = load_job(id, not upsert)
        kept = not live and history_on() and load_record(id)
    end
    local conflict
    if live and not allowed(live.topic) or kept and not allowed(kept.topic) then
        conflict = reply_conflict{reason = REASON.hidden}
    elseif live and not upsert then
        conflict = reply_conflict{reason = REASON.live, state = live.state}
    elseif kept and not upsert then
        conflict = reply_conflict{reason = REASON.kept, state = kept.outcome, ended_ms = kept.ended}
    elseif live and live.state == 'reserved' then
        conflict = reply_conflict{reason = REASON.reserved, state = live.state}
    elseif live and live.topic ~= topic then
        conflict = reply_conflict{reason = REASON.topic, state = live.state, topic = live.topic}
    end
    if created then
        out[#out + 1] = 'ok'
        if created == 'ready' then nseq = nseq + 1 end
    elseif conflict then
        out[#out + 1] = conflict
    else
        if due <= now and not seq then seq = reserve_seq(njobs - i) end
        local state
        if live then
            state = replace_job(id, live, f, now, seq and seq + nseq)
            out[#out + 1] = 'replaced'
        else
            if kept then drop_record(id, kept) end
            state = create_job(id, f, now, seq and seq + nseq)
            out[#out + 1] = 'ok'
        end
        if state == 'ready' then nseq = nseq + 1 end
    end
end
return out
