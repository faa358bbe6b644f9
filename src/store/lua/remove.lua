-- remove: finish or delete jobs, whatever their state.
-- KEYS: P.
-- argv: allow:text kind:text ids:text...
-- kind is 'finished' or 'deleted'.
-- Returns one item per id (see remove_ids).
local call = args()
limit_topics(call.allow)
return remove_ids(call.ids, call.kind)
