"""Reading and editing a job's key the way src/store/lua/lib/10-codec.lua lays it out
(P:j:<id>: a fixed head, the topic, the optional fields, the body), for
tests that look at or set up Redis state directly. The Lua runs in Redis,
with the struct and cmsgpack libraries the functions use.

read(resp, prefix, id)  -> {field: str} like the older hash layout's
                           HGETALL (state by name, numbers as decimal
                           text), with "body" (bytes); {} when no job.
                           "s" is the state the job is in: a head that
                           says delay is ready once the job has left its
                           delay set (then "rt" is its due time and "d"
                           -1, as the functions read it); "stored_s" is
                           the head's
edit(resp, prefix, id, **fields)  sets fields (numbers as numbers)
write_legacy(resp, prefix, id, fields, body)  writes a job of the older
                           layout: a hash and a body key P:v:<id>
"""

# decode_job(v) -> {field = value, body = bytes} and encode_job(j) -> v,
# independent of src/store/lua/lib/10-codec.lua's code (docs/DESIGN.md has the layout):
# a fixed head, the topic, the optional fields as MessagePack, the body.
LUA = r"""
local HEAD = '<Bi8i8I4I4i4I4i8I2BB'
local STATE_NAME = {'delay', 'ready', 'reserved', 'buried'}
local STATE_CODE = {delay = 1, ready = 2, reserved = 3, buried = 4}
local MORE = {'bo', 'u', 'to', 'la', 'ls', 'le', 'g', 'tp', 'ts', 'du', 'fd'}
local function decode_job(v)
    local s, d, rt, n, kb, r, ttr, c, k, more, tlen, at = struct.unpack(HEAD, v)
    local j = {s = STATE_NAME[s], d = d, n = n, kb = kb, r = r, ttr = ttr, c = c, k = k}
    if rt >= 0 then j.rt = rt end
    j.t = string.sub(v, at, at + tlen - 1)
    at = at + tlen
    if more > 0 then
        local nxt, x = cmsgpack.unpack_one(v, at - 1)
        for i, f in ipairs(MORE) do if x[i] ~= false then j[f] = x[i] end end
        at = nxt < 0 and #v + 1 or nxt + 1
        if (more == 3) ~= (j.u ~= nil) then j.bad = 'its head says push ' .. more end
    end
    j.body = string.sub(v, at)
    return j
end
local function encode_job(j)
    local x, last = {}, 0
    for i, f in ipairs(MORE) do
        x[i] = j[f] == nil and false or j[f]
        if j[f] ~= nil then last = i end
    end
    for i = last + 1, #MORE do x[i] = nil end
    local more = last == 0 and 0 or (j.u and 3 or 1)
    return struct.pack(HEAD, STATE_CODE[j.s], j.d, j.rt or -1, j.n, j.kb, j.r, j.ttr, j.c, j.k, more, #j.t) ..
        j.t .. (last > 0 and cmsgpack.pack(x) or '') .. j.body
end
"""

_FIELDS = r"""
local FIELDS = {'s', 't', 'ttr', 'n', 'r', 'kb', 'c', 'k', 'd', 'rt', 'bo', 'u', 'to', 'la', 'ls', 'le', 'g', 'tp', 'ts', 'du', 'fd'}
local TEXT = {s = true, t = true, bo = true, u = true, ls = true, le = true, g = true, tp = true,
    ts = true}
"""

_READ = LUA + _FIELDS + r"""
local v = redis.call('GET', KEYS[1])
if not v then return {} end
local j = decode_job(v)
local out = {'stored_s', j.s}
if j.s == 'delay' then
    local P, id = string.match(KEYS[1], '^(.-}):j:(.*)$')
    if not redis.call('ZSCORE', P .. (j.u and ':dc:' or ':d:') .. j.t, id) then
        j.s, j.rt, j.d = 'ready', j.d, -1
    end
end
for _, f in ipairs(FIELDS) do
    if j[f] ~= nil then
        out[#out + 1] = f
        out[#out + 1] = TEXT[f] and j[f] or string.format('%d', j[f])
    end
end
out[#out + 1] = 'body'
out[#out + 1] = j.body
return out
"""

_EDIT = LUA + _FIELDS + r"""
local j = decode_job(redis.call('GET', KEYS[1]))
for i = 1, #ARGV, 2 do
    local f = ARGV[i]
    j[f] = TEXT[f] and ARGV[i + 1] or tonumber(ARGV[i + 1])
end
redis.call('SET', KEYS[1], encode_job(j))
return 1
"""


def _key(prefix, jid):
    return prefix + ":j:" + jid


def read(resp, prefix, jid):
    flat = resp("EVAL", _READ, 1, _key(prefix, jid))
    out = {}
    for k, v in zip(flat[0::2], flat[1::2]):
        out[k.decode()] = v if k == b"body" else v.decode()
    return out


def edit(resp, prefix, jid, **fields):
    args = []
    for k, v in fields.items():
        args += [k, v]
    resp("EVAL", _EDIT, 1, _key(prefix, jid), *args)


def write_legacy(resp, prefix, jid, fields, body):
    flat = []
    for k, v in fields.items():
        flat += [k, v]
    resp("HSET", _key(prefix, jid), *flat)
    resp("SET", prefix + ":v:" + jid, body)
