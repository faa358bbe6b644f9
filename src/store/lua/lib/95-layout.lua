-- lib/95-layout.lua: the stored layout, and migrations between layouts.

-- The stored layout: which keys exist and of what type, numbered; every
-- change of it since the first release is a row of the table in
-- docs/OPERATIONS.md ("Upgrading without losing jobs"). P:layout records
-- it, written by the first process of a deployment or by the migration
-- (migrate.lua); before it existed nothing recorded it and stored_layout()
-- tells it from the data. These functions read and write LAYOUT only: a
-- shard of another layout is refused whole (DQ_LAYOUT_OLD, DQ_LAYOUT_NEW)
-- before a function touches it, so no function half-reads a structure.
local LAYOUT = 9
function Key.layout() return P .. ':layout' end
-- The layout a migration of the shard began from, set by its first step
-- and removed by its last (migrate.lua): a shard migrated partway is in
-- that layout for every process, whatever its data looks like meanwhile.
function Key.migrating() return P .. ':migrate:from' end

-- Does every delayed, reserved and ready push job of the shard stand in
-- its topic's index (layouts 6 to 8)? Looks at each bucket's and P:push's
-- first entry: layouts before 6 indexed none, 6 to 8 every one (delayed
-- jobs of every kind in P:d:<topic>, beside their bucket entry).
-- Second answer: whether any bucket holds an entry (without one, such
-- data is layout 9 already: what 9 changed is where delayed jobs wait).
local function indexed(nb)
    local entries = false
    local function head_indexed(key, index_of)
        local first = redis.call('ZRANGE', key, 0, 0)
        if not first[1] then return true end
        if key ~= Key.push() then entries = true end
        local j = read_job(first[1], true)
        local ik = j and index_of(j)
        return not ik or redis.call('ZSCORE', ik, first[1]) ~= false
    end
    local function bucket_index(j)
        if j.state == 'delay' then return Key.delay(j.topic, false) end -- (callbacks too, up to 8)
        return j.state == 'reserved' and Key.reserved_index(j.topic)
    end
    for k = 0, nb - 1 do
        if not head_indexed(Key.bucket(k), bucket_index) then return false end
    end
    return head_indexed(Key.push(), function(j) return Key.push_index(j.topic) end), entries
end

-- The layout the shard's data is in: P:layout, or for data written before
-- that key existed (layouts 1 to 8), the oldest layout whose structures it
-- matches (1: lists and a set of topics; 2-5: sorted sets without
-- per-topic indexes, told apart by the keys each added; 6-8, which differ
-- in nothing the functions of 8 could not read, count as 8, or as
-- LAYOUT when no bucket holds an entry), or nil for a shard that holds
-- nothing yet. Every process from layout 9 on records its layout when it
-- starts. A shard being migrated is in the layout its migration began
-- from, until the migration records LAYOUT.
local function stored_layout()
    local v = redis.call('GET', Key.layout()) or redis.call('GET', Key.migrating())
    if v then return tonumber(v) end
    local nb = redis.call('GET', P .. ':buckets')
    if not nb then return nil end
    if redis.call('TYPE', P .. ':topics').ok == 'set' then return 1 end
    local indexes, entries = indexed(tonumber(nb))
    if indexes then return entries and 8 or LAYOUT end
    if redis.call('EXISTS', P .. ':sched:ids') > 0 then return 5 end
    if redis.call('EXISTS', Key.push()) > 0 then return 4 end
    if redis.call('EXISTS', P .. ':shards') > 0 then return 3 end
    return 2
end

-- Shards this library's Lua state saw at LAYOUT. A shard's layout only
-- moves forward while Redis runs (the migration is its only writer), so
-- each is read once per library load, not once per call.
local layout_seen = {}

-- nil when the shard may be used (it is at LAYOUT, or holds nothing
-- yet), else the error every function answers instead of running.
local function layout_refused()
    if layout_seen[P] then return nil end
    local v = stored_layout()
    if v == LAYOUT then
        if redis.call('EXISTS', Key.layout()) == 1 then layout_seen[P] = true end
        return nil
    end
    if not v then return nil end
    return redis.error_reply((v < LAYOUT and 'DQ_LAYOUT_OLD ' or 'DQ_LAYOUT_NEW ') .. num(v) ..
        ' ' .. num(LAYOUT))
end

-- Every process of a deployment must split jobs into the same number of
-- shards and buckets, or jobs would land where no process looks. The first
-- process records both in each shard, with the layout; a process configured
-- differently is refused. Returns nil when they match, else the error to
-- answer.
-- The counts a shard recorded change only after its keys were removed (a
-- deployment that starts again), so a match is remembered, per shard and
-- counts, for as long as this library's Lua state lives (as layout_seen),
-- and an add checks once (`once`), not on every call.
-- Recording counts (the shard's keys were removed) forgets every match
-- remembered, so a process of other counts is read again and refused, and
-- the counts topic_bucket and shard_index_count remembered of the shard.
local layout_matched = {} -- P -> '<buckets>:<shards>' known to match
local function layout_mismatch(nb, ns, once)
    if once and layout_matched[P] == nb .. ':' .. ns then return nil end
    local known = redis.call('MGET', P .. ':buckets', P .. ':shards')
    if not known[1] then
        redis.call('MSET', P .. ':buckets', nb, P .. ':shards', ns, Key.layout(), num(LAYOUT))
        layout_matched = {[P] = nb .. ':' .. ns}
        bucket_counts[P], shard_place[P] = nil, nil -- read of the deployment before
        return nil
    end
    local known_shards = known[2] or '1' -- recorded before shards existed
    if tonumber(known[1]) == tonumber(nb) and tonumber(known_shards) == tonumber(ns) then
        layout_matched[P] = nb .. ':' .. ns
        return nil
    end
    return redis.error_reply('DQ_LAYOUT buckets ' .. known[1] .. ' shards ' .. known_shards)
end

